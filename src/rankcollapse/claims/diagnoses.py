"""Diagnoses: the reading of a paper claim that is not reproduced (or only partly), generated
from the verdicts of the diagnostics registered for it by the rule in `DIAGNOSIS_RULE`."""

from __future__ import annotations

from dataclasses import dataclass

from rankcollapse.claims.registry import HYPOTHESES
from rankcollapse.claims.verdicts import Judged

DIAGNOSED = ("not reproduced", "partly")
READINGS = ("differs with our set-up", "contradicted by a derivation and a measurement",
            "the original code misses it too", "open")
DIAGNOSIS_RULE = (
    "A paper claim that is not reproduced, or only partly, is read from the verdicts of the "
    "diagnostics registered for it (kind ours, each registered before it is measured and naming "
    "the claim it diagnoses and its hypothesis: set-up, the miss comes from a difference between "
    "our set-up and the paper's; paper, the paper's statement is contradicted by a derivation "
    "checked by a measurement; reference, the authors' original code run at the same settings "
    "misses the claim as well). A diagnostic counts when it holds (its verdict is reproduced). "
    "Differs with our set-up: a set-up diagnostic holds and no paper diagnostic does. "
    "Contradicted by a derivation and a measurement: a paper diagnostic holds and no set-up "
    "diagnostic does. The original code misses it too: a reference diagnostic holds and neither "
    "a set-up nor a paper diagnostic does; the miss is then not our implementation's, and the "
    "paper's claim is not borne out by its authors' code at those settings. A reference "
    "diagnostic that holds beside a set-up or paper one is cited with it (it clears our "
    "implementation, which both readings assume). Open: no diagnostic holds, a set-up and a "
    "paper diagnostic both hold (conflicting), or none is registered. A post-hoc diagnostic (its "
    "hypothesis formed after the measurement was seen) is named as such wherever it is cited."
)


@dataclass
class Diagnosis:
    """The generated reading of one paper claim's miss from its diagnostics' verdicts."""

    claim: str
    reading: str  # one of READINGS
    evidence: list[str]  # the diagnostics that decided the reading (ids)
    diagnostics: list[dict]  # every diagnostic of the claim: id, hypothesis, verdict, post_hoc

    @property
    def text(self) -> str:
        """The reading with its evidence, e.g. "differs with our set-up (evidence: E2.x)"."""
        cited = {d["id"]: d for d in self.diagnostics}

        def cite(cid: str) -> str:
            d = cited[cid]
            return f"{cid}, {d['verdict']}" + (", post hoc" if d["post_hoc"] else "")

        if not self.diagnostics:
            return "open (no diagnostic registered)"
        if self.reading == "open":
            if self.evidence:
                return "open (conflicting diagnostics: " + "; ".join(map(cite, self.evidence)) + ")"
            return "open (no diagnostic holds: " + "; ".join(map(cite, cited)) + ")"
        return f"{self.reading} (evidence: " + "; ".join(map(cite, self.evidence)) + ")"

    def to_dict(self) -> dict:
        return {"claim": self.claim, "reading": self.reading, "evidence": self.evidence,
                "diagnostics": self.diagnostics, "text": self.text}


def diagnose(rows: list[Judged]) -> dict[str, Diagnosis]:
    """{paper claim id: its Diagnosis} for every paper claim among `rows` whose verdict is in
    DIAGNOSED, by DIAGNOSIS_RULE, from the verdicts of the diagnostics among `rows`. A diagnostic
    that this run did not measure is listed as not testable."""
    diagnostics: dict[str, list[Judged]] = {}
    for row in rows:
        for target in row.spec.diagnoses:
            diagnostics.setdefault(target, []).append(row)
    out = {}
    for row in rows:
        if row.spec.kind != "paper" or row.verdict not in DIAGNOSED:
            continue
        found = diagnostics.get(row.spec.id, [])
        held = {h: [d.spec.id for d in found if d.spec.hypothesis == h
                    and d.verdict == "reproduced"] for h in HYPOTHESES}
        setup, paper, reference = held["setup"], held["paper"], held["reference"]
        if setup and not paper:
            reading, evidence = READINGS[0], setup + reference
        elif paper and not setup:
            reading, evidence = READINGS[1], paper + reference
        elif reference and not (setup or paper):
            reading, evidence = READINGS[2], reference
        else:
            reading, evidence = "open", setup + paper
        out[row.spec.id] = Diagnosis(row.spec.id, reading, evidence, [
            {"id": d.spec.id, "hypothesis": d.spec.hypothesis, "verdict": d.verdict,
             "post_hoc": d.spec.post_hoc} for d in found])
    return out
