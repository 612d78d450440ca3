"""The claims registry, the verdict rule, intervals, and prose that follows the verdicts."""

import importlib
import math
import pkgutil
import re

import numpy as np
import pytest
import yaml

import rankcollapse.claims as claims
from rankcollapse import report
from rankcollapse.claims import (
    PHRASES,
    Measurement,
    RegistryError,
    exact,
    judge,
    judge_sections,
    load_registry,
    not_testable,
    over_runs,
    parse_registry,
    sentence,
    verdict,
)

from conftest import ROOT

REGISTRY_PATH = ROOT / "src/rankcollapse/claims/claims.yaml"
REGISTRY = load_registry(REGISTRY_PATH)


def experiment_modules() -> dict[str, object]:
    """{experiment id: its claims module} for every rankcollapse.claims.<experiment> module."""
    out = {}
    for info in pkgutil.iter_modules(claims.__path__):
        if re.fullmatch(r"e\d+[a-z]?", info.name):
            out["E" + info.name[1:]] = importlib.import_module(f"rankcollapse.claims.{info.name}")
    return out


# --- the registry ----------------------------------------------------------------------------

def test_every_registered_claim_is_measured_by_an_experiment_and_vice_versa():
    modules = experiment_modules()
    registered = {s.experiment for s in REGISTRY.values()}
    assert registered <= set(modules), f"no claims module for {registered - set(modules)}"
    for experiment, module in modules.items():
        ids = {cid for cid, s in REGISTRY.items() if s.experiment == experiment}
        assert set(module.IDS) == ids, f"{experiment}: module and registry differ"


def test_identities_are_checks_and_every_claim_has_a_basis():
    for spec in REGISTRY.values():
        assert spec.basis.strip() and spec.source.strip() and spec.quantity.strip()
        if spec.basis_type == "identity":
            assert spec.kind == "check", spec.id
    assert {s.kind for s in REGISTRY.values()} >= {"paper", "check", "ours"}


def entry(**overrides) -> dict:
    base = {"experiment": "E1", "paper": "D21", "kind": "paper", "statement": "s.",
            "source": "src", "quantity": "q", "range": [1, None],
            "basis": {"type": "convention", "why": "because"}}
    return {**base, **overrides}


@pytest.mark.parametrize(("fields", "message"), [
    (entry(kind="finding"), "E1.x.kind"),
    (entry(paper="D99"), "E1.x.paper"),
    (entry(range=[2, 1]), "low 2.0 exceeds high 1.0"),
    (entry(range=[1]), "E1.x.range"),
    (entry(basis="because"), "E1.x.basis"),
    (entry(basis={"type": "identity", "why": "algebra"}), "an identity is a check"),
    (entry(kind="check", basis={"type": "theorem", "why": "t"}), "a check's basis"),
    (entry(experiment="E2"), "must start with its experiment"),
    ({**entry(), "colour": "red"}, "unknown field(s) ['colour']"),
    ({k: v for k, v in entry().items() if k != "quantity"}, "missing field(s) ['quantity']"),
    (entry(any_model={"ablation": "san", "statistic": "collapse_exponent"}), "E1.x.any_model"),
    (entry(any_model={"ablation": "san", "statistic": "collapse_exponent",
                      "weights": ["trained"]}), "E1.x.any_model"),
    (entry(any_model={"ablation": "san", "statistic": "collapse_exponent", "weights": []}),
     "E1.x.any_model"),
])
def test_malformed_registry_entries_are_named(fields, message):
    with pytest.raises(RegistryError, match=re.escape(message)):
        parse_registry({"claims": {"E1.x": fields}})


def test_the_registry_file_parses_and_keeps_its_order():
    data = yaml.safe_load(REGISTRY_PATH.read_text())
    assert list(REGISTRY) == list(data["claims"])


# --- intervals and verdicts ------------------------------------------------------------------

@pytest.mark.parametrize(
    ("measured", "interval", "low", "high", "expected"),
    [
        (3.0, (2.8, 3.2), 2.5, 3.5, "reproduced"),
        (3.4, (3.2, 3.7), 2.5, 3.5, "partly"),
        (3.6, (3.2, 3.9), 2.5, 3.5, "not reproduced"),
        (None, None, 2.5, 3.5, "not testable"),
        (float("nan"), None, 0, 1, "not testable"),
        (2.0, (1.6, 2.5), 1.5, math.inf, "reproduced"),
        (2.0, None, -math.inf, 1.0, "not reproduced"),
    ],
)
def test_verdict_rule(measured, interval, low, high, expected):
    assert verdict(measured, interval, low, high) == expected


def spec(low=1.0, high=math.inf, kind="paper"):
    return parse_registry({"claims": {"E1.x": entry(
        range=[None if math.isinf(low) else low, None if math.isinf(high) else high],
        kind=kind, basis={"type": "identity" if kind == "check" else "convention",
                          "why": "w"})}})["E1.x"]


def test_five_runs_bootstrap_fewer_give_their_range():
    values = {i: v for i, v in enumerate([1.0, 2.0, 3.0, 4.0])}
    few = over_runs("E1.x", values, lambda v: float(np.mean(v)), resamples=50)
    assert few.interval_kind == "range" and few.n == 4 and few.samples == [1, 2, 3, 4]
    assert "range of 4 seeds" in few.method
    many = over_runs("E1.x", {**values, 4: 5.0}, lambda v: float(np.mean(v)), resamples=50)
    assert many.interval_kind == "bootstrap" and len(many.samples) == 50
    assert "95% percentile bootstrap over 5 seeds" in many.method


def test_same_seed_same_resamples():
    units = {i: float(i) for i in range(6)}
    a = over_runs("E1.x", units, lambda v: float(np.mean(v)), resamples=30, seed=3)
    b = over_runs("E1.x", units, lambda v: float(np.mean(v)), resamples=30, seed=3)
    assert a.samples == b.samples


@pytest.mark.parametrize(("low", "high", "lo", "hi"), [
    (1.0, math.inf, -math.inf, 2.0),  # a lower bound: undefined runs sink below it
    (-math.inf, 3.0, 1.0, math.inf),  # an upper bound: they rise above it
])
def test_undefined_runs_count_against_the_claim(low, high, lo, hi):
    m = Measurement("E1.x", 1.5, "range", 3, "range", [1.0, float("nan"), 2.0])
    row = judge(spec(low, high), m)
    assert row.interval == (lo, hi) and row.verdict == "partly"


def test_undefined_bootstrap_resamples_are_not_dropped():
    samples = [2.0] * 90 + [float("nan")] * 10  # 10 % undefined: beyond the 2.5 % tail
    row = judge(spec(1.0), Measurement("E1.x", 2.0, "b", 6, "bootstrap", samples))
    assert row.interval[0] == -math.inf and row.verdict == "partly"
    few = judge(spec(1.0), Measurement("E1.x", 2.0, "b", 6, "bootstrap",
                                       [2.0] * 99 + [float("nan")]))
    assert few.verdict == "reproduced"  # 1 % undefined stays inside the 95 % interval


def test_measurements_round_trip_through_json():
    import json

    m = Measurement("E1.x", 2.0, "b", 6, "bootstrap", [1.0, float("nan"), 3.0])
    back = Measurement.from_dict(json.loads(json.dumps(m.to_dict(), allow_nan=False)))
    assert back.samples[0] == 1.0 and math.isnan(back.samples[1])
    assert judge(spec(), back).interval == judge(spec(), m).interval


# --- prose follows the verdicts --------------------------------------------------------------

@pytest.mark.parametrize("kind", ["paper", "ours", "check"])
def test_each_verdict_has_its_own_phrase(kind):
    s = spec(1.0, kind=kind)
    rows = {
        "reproduced": judge(s, exact("E1.x", 2.0)),
        "not reproduced": judge(s, exact("E1.x", 0.5)),
        "not testable": judge(s, not_testable("E1.x", "not in this run")),
        "partly": judge(s, Measurement("E1.x", 2.0, "range of 2 seeds", 2, "range", [0.5, 3])),
    }
    for expected, row in rows.items():
        assert row.verdict == expected
        assert sentence(row).startswith(PHRASES[kind][expected] + ":")
    assert len({PHRASES[kind][v] for v in rows}) == 4


def failing(spec_, cid) -> Measurement:
    """A measurement outside the claim's range, with an interval around it."""
    value = spec_.high + 1 if math.isfinite(spec_.high) else spec_.low - 1
    return Measurement(cid, value, "range of 2 seeds", 2, "range", [value - 0.1, value + 0.1])


def test_a_report_where_every_claim_fails_asserts_none(tmp_path):
    """Build the real report from numbers in which every registered claim is not reproduced:
    every generated sentence must say so, and no sentence may state a claim as holding."""
    experiments = sorted({s.experiment for s in REGISTRY.values()})
    sections = []
    for experiment in experiments:
        section = {"experiment": experiment, "title": f"{experiment} title", "paper": "p",
                   "description": "What was run, with its sizes.", "figures": [],
                   "tables": [], "numbers": {},
                   "measurements": [failing(s, cid).to_dict() for cid, s in REGISTRY.items()
                                    if s.experiment == experiment]}
        path = tmp_path / f"{experiment}.json"
        path.write_text(__import__("json").dumps(section))
        sections.append(path)
    rows = report.ledger(REGISTRY, [__import__("json").loads(p.read_text()) for p in sections])
    assert rows and {r["verdict"] for r in rows} == {"not reproduced"}
    negative = {PHRASES[k]["not reproduced"] for k in PHRASES}
    for row in rows:
        assert any(row["sentence"].startswith(p + ":") for p in negative), row["sentence"]
    html = report.build(sections, [], REGISTRY_PATH, ROOT / "report/templates/report.html.j2",
                        ROOT / "report/templates/report.css", "All fail",
                        {"report": {"experiments": experiments}}, tmp_path / "r.html")
    positive = [PHRASES[k][v] for k in PHRASES for v in ("reproduced", "partly")]
    for phrase in positive:  # the form of a generated sentence: phrase, colon, quoted claim
        assert f"{phrase}: “" not in html, phrase
    abstract = html.split('id="abstract"')[1].split("</section>")[0]
    assert abstract.count("Not reproduced:") + abstract.count("Does not hold here:") \
        + abstract.count("Check fails:") == sum(r["headline"] for r in rows) > 0


def test_a_run_must_measure_exactly_the_registered_claims():
    cid = next(iter(REGISTRY))
    experiment = REGISTRY[cid].experiment
    others = [c for c, s in REGISTRY.items() if s.experiment == experiment and c != cid]
    section = {"experiment": experiment,
               "measurements": [exact(c, 1.0).to_dict() for c in others]}
    with pytest.raises(RegistryError, match=f"{re.escape(cid)} is registered but"):
        judge_sections(REGISTRY, [section])
    section["measurements"] += [exact(cid, 1.0).to_dict(), exact(f"{experiment}.new", 1.0)
                                .to_dict()]
    with pytest.raises(RegistryError, match="which the registry does not hold"):
        judge_sections(REGISTRY, [section])


# --- diagnostics and the reading of a paper claim's miss -------------------------------------

def diagnostic(target="E1.p", hypothesis="setup", **overrides) -> dict:
    return entry(kind="ours", diagnoses=[target], hypothesis=hypothesis, **overrides)


@pytest.mark.parametrize(("claims_", "message"), [
    ({"E1.p": entry(), "E1.d": diagnostic(hypothesis="luck")}, "E1.d.hypothesis: 'luck'"),
    ({"E1.p": entry(), "E1.d": diagnostic(target="E1.gone")}, "'E1.gone' is not a registered"),
    ({"E1.p": entry(kind="ours"), "E1.d": diagnostic()}, "a diagnostic diagnoses a paper claim"),
    ({"E1.p": entry(), "E1.d": {**diagnostic(), "kind": "paper"}}, "a diagnostic is kind `ours`"),
    ({"E1.p": entry(), "E1.d": {**diagnostic(), "diagnoses": []}}, "E1.d.diagnoses"),
    ({"E1.p": entry(), "E1.d": diagnostic(post_hoc="yes")}, "E1.d.post_hoc"),
])
def test_malformed_diagnostics_are_named(claims_, message):
    with pytest.raises(RegistryError, match=re.escape(message)):
        parse_registry({"claims": claims_})


def judged_rows(paper_verdict: str, diagnostics: dict[str, tuple[str, str, bool]]):
    """Rows for one paper claim E1.p with `paper_verdict` and diagnostics {id: (hypothesis,
    verdict, post_hoc)}, built from synthetic measurements that land in each verdict."""
    values = {"reproduced": (2.0, "exact"), "not reproduced": (0.0, "exact"),
              "partly": (1.1, "bootstrap"), "not testable": (None, "exact")}
    entries = {"E1.p": entry()}
    for cid, (hypothesis, _, post_hoc) in diagnostics.items():
        entries[cid] = diagnostic(hypothesis=hypothesis, post_hoc=post_hoc)
    registry = parse_registry({"claims": entries})
    wanted = {"E1.p": paper_verdict, **{c: v for c, (_, v, _) in diagnostics.items()}}
    rows = []
    for cid, want in wanted.items():
        value, how = values[want]
        if value is None:
            m = not_testable(cid, "too small")
        elif how == "bootstrap":  # estimate in range, interval leaving it
            m = over_runs(cid, {i: v for i, v in enumerate([0.5, 1.1, 1.2, 1.5, 1.1])},
                          lambda v: 1.1, resamples=20)
            m.samples = [0.5, 1.1, 1.5] * 7
        else:
            m = exact(cid, value)
        rows.append(judge(registry[cid], m))
        assert rows[-1].verdict == want, (cid, rows[-1].verdict, want)
    return rows


@pytest.mark.parametrize(("paper_verdict", "diagnostics", "reading", "evidence"), [
    ("not reproduced", {"E1.a": ("setup", "reproduced", False),
                        "E1.b": ("paper", "not reproduced", False)},
     "differs with our set-up", ["E1.a"]),
    ("partly", {"E1.a": ("paper", "reproduced", False)},
     "contradicted by a derivation and a measurement", ["E1.a"]),
    ("not reproduced", {"E1.a": ("setup", "partly", False),
                        "E1.b": ("paper", "not testable", False)}, "open", []),
    ("not reproduced", {"E1.a": ("setup", "reproduced", True),
                        "E1.b": ("paper", "reproduced", False)}, "open", ["E1.a", "E1.b"]),
    ("not reproduced", {}, "open", []),
    ("not reproduced", {"E1.a": ("reference", "reproduced", False),
                        "E1.b": ("setup", "not reproduced", False)},
     "the original code misses it too", ["E1.a"]),
    ("partly", {"E1.a": ("reference", "reproduced", False),
                "E1.b": ("paper", "reproduced", True)},
     "contradicted by a derivation and a measurement", ["E1.b", "E1.a"]),
    ("not reproduced", {"E1.a": ("reference", "reproduced", False),
                        "E1.b": ("setup", "reproduced", False)},
     "differs with our set-up", ["E1.b", "E1.a"]),
    ("not reproduced", {"E1.a": ("reference", "reproduced", False),
                        "E1.b": ("setup", "reproduced", False),
                        "E1.c": ("paper", "reproduced", False)}, "open", ["E1.b", "E1.c"]),
    ("partly", {"E1.a": ("reference", "not reproduced", False),
                "E1.b": ("reference", "not testable", False)}, "open", []),
])
def test_the_reading_rule_on_synthetic_verdicts(paper_verdict, diagnostics, reading, evidence):
    found = claims.diagnose(judged_rows(paper_verdict, diagnostics))
    assert set(found) == {"E1.p"}
    assert found["E1.p"].reading == reading and found["E1.p"].evidence == evidence
    text = found["E1.p"].text
    assert text.startswith(reading)
    for cid in evidence:
        assert cid in text
    if not diagnostics:
        assert text == "open (no diagnostic registered)"
    if any(post_hoc for _, _, post_hoc in diagnostics.values()):
        assert "post hoc" in text


def test_a_reproduced_paper_claim_gets_no_diagnosis():
    rows = judged_rows("reproduced", {"E1.a": ("setup", "reproduced", False)})
    assert claims.diagnose(rows) == {}


def test_the_claims_any_model_can_be_judged_on_are_the_probes_to_measure():
    """Every registered any_model field names a statistic the probe can compute and an ablation
    it runs; the claims judged on random networks are E1's four and E4's two at init, and on a
    checkpoint E1's four and the trained escalation claim."""
    from rankcollapse.claims.any_model import STATISTICS
    from rankcollapse.probe import claims_on
    from rankcollapse.probe.spec import PROBE_ABLATIONS

    ablations = {a for names in PROBE_ABLATIONS.values() for a in names}
    fields = {cid: s.any_model for cid, s in REGISTRY.items() if s.any_model}
    for cid, field in fields.items():
        assert field["statistic"] in STATISTICS, cid
        assert field["ablation"] in ablations, cid
    e1 = ["E1.san_doubly_exponential", "E1.san_cubic_rate", "E1.skip_prevents",
          "E1.mlp_does_not_prevent"]
    assert list(claims_on(checkpoint=False)) == [*e1, "E4.escalation_post_ln_init",
                                                 "E4.linear_rate_log_reading"]
    assert list(claims_on(checkpoint=True)) == [*e1, "E4.escalation_post_ln_trained"]
    assert claims_on(checkpoint=False)["E1.skip_prevents"]["ablation"] == "san_skip"
