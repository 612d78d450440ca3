"""The claims ledger: claims registered before they are measured, measurements, and verdicts.

Three parts, kept apart on purpose:

- the **registry** (`claims.yaml` beside this file, package data: `REGISTRY_PATH`, loaded by
  `load_registry`) states every claim before any run: its statement, source, kind (`paper`,
  `check`, `ours`), the measured quantity, the range [low, high] the quantity must lie in for
  the claim to hold, and the range's basis;
- **measurements** (`Measurement`) come from each experiment's claim functions
  (`rankcollapse.claims.e1`, ...): a value, an interval or the samples it is computed from, the
  interval's method and the number of independent runs it rests on. Code that measures never
  sets a statement, a range or a kind;
- the **verdict** (`judge`) joins the two by the rule in `VERDICT_RULE`, and `sentence` turns a
  verdict into the only prose that states a conclusion: a fixed phrase per verdict.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np

# The registry ships with the package, so an installed `rankcollapse probe` can judge its claims.
REGISTRY_PATH = Path(__file__).with_name("claims.yaml")
VERDICTS = ("reproduced", "partly", "not reproduced", "not testable")
KINDS = ("paper", "check", "ours")
KIND_TITLES = {"paper": "the papers' claims", "check": "consistency checks",
               "ours": "beyond the papers"}
PAPERS = {
    "D21": "Dong, Cordonnier & Loukas (ICML 2021)",
    "YZ": "Yu & Zhang (arXiv 2312.06182)",
    "KGR26": "Koubbi, Geshkovski & Rigollet (arXiv 2604.01978)",
    "rivals": "Nait Saada et al. (ICML 2025); Noci et al. (NeurIPS 2022)",
    "all": "all three papers",
}
BASIS_TYPES = {
    "value": "a value printed in the paper (with the stated reading tolerance)",
    "bound": "a bound stated by the paper's theorem, tested as a bound",
    "theorem": "a limit or rate stated by the paper's theorem",
    "convention": "a stated convention for a qualitative statement",
    "identity": "an algebraic identity: holds to floating-point round-off",
}
# A diagnostic's hypothesis: what its holding says about the paper claim it diagnoses.
HYPOTHESES = {
    "setup": "the miss comes from a difference between our set-up and the paper's",
    "paper": "the paper's statement itself is contradicted (a derivation checked by a measurement)",
    "reference": "the authors' original code, run at the same settings, misses the claim too "
                 "(the miss is not our implementation's)",
}
# With fewer independent runs than this, an interval over runs is their range, not a 95% one.
MIN_RUNS_FOR_BOOTSTRAP = 5
LEVEL = 0.95

VERDICT_RULE = (
    "Every claim is registered before it is measured (claims.yaml): its statement, "
    "source, kind, the measured quantity, the range [low, high] that quantity must lie in for the "
    "claim to hold, and the range's basis. Reproduced: the measurement's whole interval lies in "
    "the range; partly: the point estimate lies in it but the interval does not; not reproduced: "
    "the point estimate lies outside; not testable: no measurement at this scale. Intervals over "
    f"independent runs (networks, seeds) are 95% percentile bootstrap intervals when they rest on "
    f"at least {MIN_RUNS_FOR_BOOTSTRAP} runs, and the plain range of the runs otherwise (labelled "
    "so); a resample or run in which the statistic is undefined counts against the claim (ranked "
    "beyond the failing end of the range), never dropped. Sequences, rollouts and layers of one "
    "network are never counted as independent runs."
)


class RegistryError(ValueError):
    """A malformed claims registry, or a run whose claims do not match it."""


# --- the registry ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ClaimSpec:
    """One registered claim (a row of src/rankcollapse/claims/claims.yaml)."""

    id: str  # "<experiment>.<name>"
    experiment: str
    paper: str  # a key of PAPERS: whose claim it is, or which paper it extends or checks
    kind: Literal["paper", "check", "ours"]
    statement: str  # the claim, one sentence (the paper's, for kind "paper")
    source: str  # paper and section, figure, theorem or equation
    quantity: str  # what is measured, with its unit
    low: float  # the claim holds when the quantity lies in [low, high]
    high: float
    basis_type: str  # a key of BASIS_TYPES
    basis: str  # one line: why this range
    paper_value: str | None = None  # what the paper reports, when it reports something
    headline: bool = False  # its sentence goes into the abstract
    # A diagnostic (kind "ours") names the paper claims whose miss it tests and its hypothesis
    # (a key of HYPOTHESES); post_hoc: the hypothesis was formed after seeing the measurement.
    diagnoses: tuple[str, ...] = ()
    hypothesis: str | None = None
    post_hoc: bool = False

    @property
    def criterion(self) -> str:
        return criterion(self.low, self.high)

    @property
    def failing_side(self) -> float:
        """Where an undefined sample is ranked: beyond the failing end of the range."""
        return -math.inf if math.isfinite(self.low) or not math.isfinite(self.high) else math.inf


def criterion(low: float, high: float) -> str:
    if math.isinf(low) and math.isinf(high):
        return "any value"
    if math.isinf(high):
        return f"≥ {low:g}"
    if math.isinf(low):
        return f"≤ {high:g}"
    return f"in [{low:g}, {high:g}]"


_FIELDS = {"experiment", "paper", "kind", "statement", "source", "quantity", "range", "basis",
           "paper_value", "headline", "diagnoses", "hypothesis", "post_hoc"}
_REQUIRED = _FIELDS - {"paper_value", "headline", "diagnoses", "hypothesis", "post_hoc"}


def _bound(value, default: float) -> float:
    return default if value is None else float(value)


def parse_registry(data: dict, where: str = "claims registry") -> dict[str, ClaimSpec]:
    """ClaimSpecs from the registry's parsed YAML ({"claims": {id: fields}}), checked field by
    field; every problem is reported in one line naming the claim and the field."""
    import yaml  # noqa: F401 - only to fail early if YAML support is missing

    if not isinstance(data, dict) or not isinstance(data.get("claims"), dict):
        raise RegistryError(f"{where}: expected a top-level mapping `claims: {{id: fields}}`")
    problems, specs = [], {}
    for cid, entry in data["claims"].items():
        if not isinstance(entry, dict):
            problems.append(f"{cid}: expected a mapping of fields")
            continue
        unknown = sorted(set(entry) - _FIELDS)
        missing = sorted(_REQUIRED - set(entry))
        if unknown:
            problems.append(f"{cid}: unknown field(s) {unknown}; allowed: {sorted(_FIELDS)}")
        if missing:
            problems.append(f"{cid}: missing field(s) {missing}")
        if unknown or missing:
            continue
        if not str(cid).startswith(f"{entry['experiment']}."):
            problems.append(f"{cid}: the id must start with its experiment "
                            f"({entry['experiment']}.)")
        if entry["kind"] not in KINDS:
            problems.append(f"{cid}.kind: {entry['kind']!r}; allowed: {list(KINDS)}")
        if entry["paper"] not in PAPERS:
            problems.append(f"{cid}.paper: {entry['paper']!r}; allowed: {sorted(PAPERS)}")
        basis = entry["basis"]
        if not (isinstance(basis, dict) and set(basis) == {"type", "why"}
                and basis["type"] in BASIS_TYPES and str(basis["why"]).strip()):
            problems.append(f"{cid}.basis: expected {{type: one of {sorted(BASIS_TYPES)}, "
                            "why: one line}")
            continue
        rng = entry["range"]
        if not (isinstance(rng, list) and len(rng) == 2
                and all(v is None or isinstance(v, int | float) for v in rng)):
            problems.append(f"{cid}.range: expected [low, high] (null for unbounded)")
            continue
        low, high = _bound(rng[0], -math.inf), _bound(rng[1], math.inf)
        if low > high:
            problems.append(f"{cid}.range: low {low} exceeds high {high}")
            continue
        if entry["kind"] == "check" and basis["type"] not in ("identity", "convention"):
            problems.append(f"{cid}: a check's basis is an identity or a convention, not "
                            f"{basis['type']!r}")
        if basis["type"] == "identity" and entry["kind"] != "check":
            problems.append(f"{cid}: an identity is a check (kind: check), not a finding")
        diagnoses = entry.get("diagnoses") or []
        if isinstance(diagnoses, str):
            diagnoses = [diagnoses]
        hypothesis = entry.get("hypothesis")
        if diagnoses or hypothesis is not None:
            if entry["kind"] != "ours":
                problems.append(f"{cid}: a diagnostic is kind `ours`, not {entry['kind']!r}")
            if not (isinstance(diagnoses, list) and diagnoses
                    and all(isinstance(d, str) for d in diagnoses)):
                problems.append(f"{cid}.diagnoses: expected a list of the paper claims' ids")
            if hypothesis not in HYPOTHESES:
                problems.append(f"{cid}.hypothesis: {hypothesis!r}; allowed: {list(HYPOTHESES)}")
        if not isinstance(entry.get("post_hoc", False), bool):
            problems.append(f"{cid}.post_hoc: expected true or false")
        specs[cid] = ClaimSpec(
            id=cid, experiment=entry["experiment"], paper=entry["paper"], kind=entry["kind"],
            statement=str(entry["statement"]).strip(), source=str(entry["source"]).strip(),
            quantity=str(entry["quantity"]).strip(), low=low, high=high,
            basis_type=basis["type"], basis=str(basis["why"]).strip(),
            paper_value=entry.get("paper_value"), headline=bool(entry.get("headline", False)),
            diagnoses=tuple(diagnoses) if isinstance(diagnoses, list) else (),
            hypothesis=hypothesis, post_hoc=bool(entry.get("post_hoc", False)))
    for cid, spec in specs.items():
        for target in spec.diagnoses:
            if target not in specs:
                problems.append(f"{cid}.diagnoses: {target!r} is not a registered claim")
            elif specs[target].kind != "paper":
                problems.append(f"{cid}.diagnoses: {target} is kind {specs[target].kind!r}; "
                                "a diagnostic diagnoses a paper claim")
    if problems:
        raise RegistryError(f"{where}:\n  - " + "\n  - ".join(problems))
    return specs


def load_registry(path: str | os.PathLike) -> dict[str, ClaimSpec]:
    """The registry at `path` (src/rankcollapse/claims/claims.yaml), in file order."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise RegistryError(f"cannot read the claims registry {path}: {err}") from err
    return parse_registry(data, str(path))


def registry_hash(path: str | os.PathLike) -> str:
    """Content hash of the registry file, shown in the report next to the code version."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


# --- measurements ----------------------------------------------------------------------------

IntervalKind = Literal["bootstrap", "range", "given", "none"]


@dataclass
class Measurement:
    """What an experiment measured for one registered claim.

    interval_kind: "bootstrap" (samples are the statistic on resampled runs), "range" (samples are
    the statistic on each run alone: fewer than MIN_RUNS_FOR_BOOTSTRAP runs), "given" (an
    interval computed another way, named by `method`), "none" (a single exact computation).
    Undefined samples are kept as NaN; `judge` ranks them beyond the failing end of the range.
    """

    id: str
    value: float | None  # the point estimate; None/NaN: not measurable at this scale
    method: str  # how the interval was obtained, for the ledger
    n: int  # independent runs (networks, seeds) the interval rests on; 1 for an exact value
    interval_kind: IntervalKind = "none"
    samples: list[float] | None = None
    interval: tuple[float, float] | None = None  # for interval_kind "given"
    note: str = ""  # neutral context (what it was measured on); never a conclusion

    def to_dict(self) -> dict:
        out = asdict(self)
        out["value"] = _finite_or_none(self.value)
        if self.samples is not None:
            out["samples"] = [_finite_or_none(v) for v in self.samples]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Measurement:
        data = dict(data)
        if data.get("samples") is not None:
            data["samples"] = [math.nan if v is None else float(v) for v in data["samples"]]
        if data.get("interval") is not None:
            data["interval"] = tuple(data["interval"])
        return cls(**data)


def _finite_or_none(value):
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def not_testable(cid: str, note: str) -> Measurement:
    """A registered claim that this run cannot measure (say why in `note`)."""
    return Measurement(cid, None, "not measured", 0, note=note)


def exact(cid: str, value: float, method: str = "exact computation", n: int = 1,
          note: str = "") -> Measurement:
    """A value without sampling error (an identity's largest deviation, a deterministic fit)."""
    return Measurement(cid, float(value), method, n, note=note)


def at_scale(cid: str, measured: Measurement, scale: float | None, needed: float,
             what: str) -> Measurement:
    """A diagnostic that restates a paper claim's measurement at a larger scale (longer training):
    `measured` (the paper claim's Measurement of this run) under the diagnostic's id when the
    run's `scale` (e.g. its training steps) is at least `needed`, else not testable, saying
    what run measures it."""
    if scale is None or scale < needed:
        return not_testable(cid, f"{what} is {scale} in this run; this diagnostic needs at least "
                                 f"{needed:,g} (a run of workflow/config/diagnostics.yaml)")
    note = f"{what} {scale:,g}" + (f"; {measured.note}" if measured.note else "")
    return replace(measured, id=cid, note=note)


def over_runs(cid: str, units: dict, statistic, resamples: int = 1000, seed: int = 0,
              unit: str = "seeds", note: str = "") -> Measurement:
    """statistic over independent runs, with the interval the verdict rule asks for.

    units: {run id: data of that run} (e.g. a DataFrame per seed); statistic(list of run data)
    -> float (NaN when undefined). With >= MIN_RUNS_FOR_BOOTSTRAP runs, `samples` holds the
    statistic on `resamples` bootstrap resamples of whole runs (a run drawn twice counts twice);
    with fewer, the statistic on each run alone ("range of n runs").
    """
    keys = list(units)
    data = [units[k] for k in keys]
    value = _as_float(statistic(data))
    n = len(keys)
    if n == 0:
        return not_testable(cid, note or "no runs")
    if n < MIN_RUNS_FOR_BOOTSTRAP:
        samples = [_as_float(statistic([d])) for d in data]
        return Measurement(cid, value, f"range of {n} {unit} (fewer than "
                           f"{MIN_RUNS_FOR_BOOTSTRAP}: no 95% interval)", n, "range", samples,
                           note=note)
    rng = np.random.default_rng(seed)
    samples = [_as_float(statistic([data[i] for i in rng.integers(0, n, n)]))
               for _ in range(resamples)]
    return Measurement(cid, value, f"95% percentile bootstrap over {n} {unit} "
                       f"({resamples} resamples)", n, "bootstrap", samples, note=note)


def _as_float(value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.nan
    return value


# --- verdicts --------------------------------------------------------------------------------

def verdict(measured: float | None, interval: tuple[float, float] | None,
            low: float = -math.inf, high: float = math.inf) -> str:
    """The verdict rule (VERDICT_RULE) for a point estimate and its interval."""
    if measured is None or not math.isfinite(measured):
        return "not testable"
    if not low <= measured <= high:
        return "not reproduced"
    lo, hi = interval if interval is not None else (measured, measured)
    return "reproduced" if low <= lo and hi <= high else "partly"


def interval_of(spec: ClaimSpec, m: Measurement) -> tuple[float, float] | None:
    """The measurement's interval, undefined samples ranked beyond the failing end."""
    return sample_interval(m, spec.failing_side)


def sample_interval(m: Measurement, undefined_at: float | None = None
                    ) -> tuple[float, float] | None:
    """The interval of a measurement: "given" as given; "range" the min and max of the runs;
    "bootstrap" the 95% percentile interval of the resamples. Undefined samples are placed at
    `undefined_at` (a claim's failing side); None drops them, for descriptive tables only."""
    if m.interval_kind == "given":
        return m.interval
    if m.interval_kind not in ("bootstrap", "range") or not m.samples:
        return None
    values = np.asarray(m.samples, dtype=float)
    if undefined_at is None:
        values = values[np.isfinite(values)]
        if values.size == 0:
            return None
    else:
        values = np.where(np.isfinite(values), values, undefined_at)
    if m.interval_kind == "range":
        return float(values.min()), float(values.max())
    alpha = (1 - LEVEL) / 2
    # Order statistics rather than interpolation: an infinite sample stays infinite.
    return (float(np.quantile(values, alpha, method="lower")),
            float(np.quantile(values, 1 - alpha, method="higher")))


def _fmt(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "−∞" if value == -math.inf else ("∞" if value == math.inf else "—")
    return f"{value:.3g}"


@dataclass
class Judged:
    """A registered claim with its measurement and verdict: one ledger row."""

    spec: ClaimSpec
    measurement: Measurement
    interval: tuple[float, float] | None
    verdict: str = field(init=False)

    def __post_init__(self) -> None:
        value = self.measurement.value
        self.verdict = verdict(None if value is None else float(value), self.interval,
                               self.spec.low, self.spec.high)

    @property
    def value_text(self) -> str:
        value = self.measurement.value
        if value is None or not math.isfinite(value):
            return "—"
        if self.interval is None:
            return _fmt(value)
        return f"{_fmt(value)} [{_fmt(self.interval[0])}, {_fmt(self.interval[1])}]"

    @property
    def why(self) -> str:
        """One generated line: how the numbers meet the range (never a typed reading)."""
        m, crit = self.measurement, self.spec.criterion
        if self.verdict == "not testable":
            return f"not measured in this run: {m.note}" if m.note else "not measured in this run"
        if self.verdict == "not reproduced":
            return f"the estimate {_fmt(m.value)} lies outside the range ({crit})"
        if self.verdict == "partly":
            return (f"the estimate {_fmt(m.value)} lies in the range ({crit}) but the interval "
                    f"[{_fmt(self.interval[0])}, {_fmt(self.interval[1])}] leaves it")
        if self.interval is None:
            return f"the value {_fmt(m.value)} lies in the range ({crit})"
        return f"the whole interval {self.value_text} lies in the range ({crit})"

    def to_dict(self) -> dict:
        spec = asdict(self.spec)
        spec["low"] = None if math.isinf(self.spec.low) else self.spec.low
        spec["high"] = None if math.isinf(self.spec.high) else self.spec.high
        return {**spec, "criterion": self.spec.criterion, "basis_title":
                BASIS_TYPES[self.spec.basis_type], "measured": self.measurement.value,
                "interval": list(self.interval) if self.interval else None,
                "value": self.value_text, "method": self.measurement.method,
                "n": self.measurement.n, "note": self.measurement.note,
                "verdict": self.verdict, "why": self.why, "sentence": sentence(self)}


def judge(spec: ClaimSpec, m: Measurement) -> Judged:
    if spec.id != m.id:
        raise RegistryError(f"measurement {m.id} judged against claim {spec.id}")
    return Judged(spec, m, interval_of(spec, m))


# The only words that state a conclusion: one phrase per kind and verdict.
PHRASES = {
    "paper": {"reproduced": "Reproduced", "partly": "Partly reproduced (the estimate is in "
              "range, its interval is not)", "not reproduced": "Not reproduced",
              "not testable": "Not testable at this scale"},
    "ours": {"reproduced": "Holds here", "partly": "Holds for the estimate but not its "
             "interval", "not reproduced": "Does not hold here",
             "not testable": "Not testable at this scale"},
    "check": {"reproduced": "Check passes", "partly": "Check passes for the estimate but not "
              "its interval", "not reproduced": "Check fails",
              "not testable": "Check not run at this scale"},
}
NEGATIVE = {"not reproduced", "not testable"}


def sentence(row: Judged) -> str:
    """The sentence that reports a claim's verdict: a fixed phrase for the verdict, the claim in
    quotation marks (as registered, attributed to its source), and the numbers behind it."""
    phrase = PHRASES[row.spec.kind][row.verdict]
    statement = row.spec.statement.rstrip(".")
    numbers = (f"{row.value_text}, {row.measurement.method}, n = {row.measurement.n}; holds if "
               f"{row.spec.criterion}" if row.verdict != "not testable"
               else (row.measurement.note or "no measurement"))
    return f"{phrase}: “{statement}” ({row.spec.source}; {numbers})."


# --- a run's claims against the registry -----------------------------------------------------

def judge_sections(registry: dict[str, ClaimSpec], sections: list[dict]) -> list[Judged]:
    """Judge every measurement the sections carry; the run's claims must match the registry:
    no measurement of an unregistered claim, and every registered claim of an experiment in the
    run measured (possibly as not testable). Rows come in registry order."""
    measured: dict[str, Measurement] = {}
    problems = []
    experiments = [s["experiment"] for s in sections]
    for section in sections:
        for data in section.get("measurements", []):
            m = Measurement.from_dict(data)
            if m.id not in registry:
                problems.append(f"{section['experiment']} measured {m.id!r}, which the "
                                "registry does not hold")
            elif registry[m.id].experiment != section["experiment"]:
                problems.append(f"{m.id} is registered for {registry[m.id].experiment}, but "
                                f"{section['experiment']} measured it")
            elif m.id in measured:
                problems.append(f"{m.id} was measured twice")
            measured[m.id] = m
    for cid, spec in registry.items():
        if spec.experiment in experiments and cid not in measured:
            problems.append(f"{cid} is registered but {spec.experiment} did not measure it")
    if problems:
        raise RegistryError("the run's claims do not match the registry (claims.yaml):\n  - "
                            + "\n  - ".join(problems))
    return [judge(spec, measured[cid]) for cid, spec in registry.items() if cid in measured]



# --- diagnoses of the papers' claims that are not reproduced ---------------------------------

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
