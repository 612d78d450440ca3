"""E5's claim statistics on synthetic tuned runs built to land in each verdict."""

import math

import numpy as np
import pandas as pd
import pytest

from rankcollapse.claims import e5, judge, load_registry

from conftest import ROOT

REGISTRY = load_registry(ROOT / "src/rankcollapse/claims/claims.yaml")
SEEDS = 6
DEPTHS = (2, 4, 8)


def runs(task: str, values: dict) -> pd.DataFrame:
    """values: {(variant, depth): per-seed list or one number} of the task's metric."""
    metric = e5.METRIC[task][0]
    rows = []
    for (variant, depth), v in values.items():
        per_seed = v if isinstance(v, list) else [v] * SEEDS
        for seed, x in enumerate(per_seed):
            rows.append({"task": task, "variant": variant, "depth": depth, "seed": seed,
                         "accuracy": math.nan, "bpc": math.nan, metric: x})
    return pd.DataFrame(rows)


def judged(cid: str, table: pd.DataFrame):
    m = next(m for m in e5.measure(table, resamples=400) if m.id == cid)
    return judge(REGISTRY[m.id], m)


def test_ids_match_the_registry():
    assert set(e5.IDS) == {cid for cid, s in REGISTRY.items() if s.experiment == "E5"}


def flat(task, variant, shallow, deep_seeds):
    """variant at every depth: `shallow` at depths 2 and 4, `deep_seeds` at depth 8."""
    return {(variant, 2): shallow, (variant, 4): shallow, (variant, 8): deep_seeds}


# Per task: the shallow value and, per verdict, the deepest depth's per-seed values of an arm
# whose claim says it trains deep (loss within 0.05) or that it degrades (loss >= 0.05).
GOOD = {"digits": 0.9, "text": 2.0}
SIGN = {"digits": 1.0, "text": -1.0}


def deep(task, losses):
    """Deep per-seed values whose loss against the shallow value is `losses`."""
    return [GOOD[task] - SIGN[task] * x for x in losses]


TRAINS = {  # the arm's loss at the deepest depth per seed
    "reproduced": [0.0] * SEEDS,
    "partly": [0.0, 0.0, 0.0, 0.0, 0.2, 0.0],  # mean 0.033, some resamples above 0.05
    "not reproduced": [0.3] * SEEDS,
}
DEGRADES = {
    "reproduced": [0.5] * SEEDS,
    "partly": [0.0, 0.0, 0.0, 0.0, 0.6, 0.0],  # mean 0.1, some resamples below 0.05
    "not reproduced": [0.0] * SEEDS,
}


@pytest.mark.parametrize("task", e5.TASKS)
@pytest.mark.parametrize("expected", ["reproduced", "partly", "not reproduced"])
def test_grid_claims_land_in_each_verdict(task, expected):
    for name, variant in e5.ARM.items():
        table = DEGRADES if name == "post_ln_degrades" else TRAINS
        values = flat(task, variant, GOOD[task], deep(task, table[expected]))
        assert judged(f"E5.{task}.{name}", runs(task, values)).verdict == expected, name


@pytest.mark.parametrize("task", e5.TASKS)
@pytest.mark.parametrize("expected", ["reproduced", "partly", "not reproduced"])
def test_recovered_share_lands_in_each_verdict(task, expected):
    # post-LN 0.5 below pre-LN at depth 8 (no gap elsewhere); de-escalation's share per seed.
    shares = {"reproduced": [0.9] * SEEDS, "partly": [1.0, 1.0, 1.0, 0.0, 0.0, 1.0],
              "not reproduced": [0.1] * SEEDS}[expected]
    post = GOOD[task] - SIGN[task] * 0.5
    values = {**flat(task, "pre_ln", GOOD[task], GOOD[task]),
              **flat(task, "post_ln", GOOD[task], post),
              **flat(task, "post_ln_deesc", GOOD[task],
                     [post + s * (GOOD[task] - post) for s in shares])}
    assert judged(f"E5.{task}.deescalation_recovers", runs(task, values)).verdict == expected


def test_recovered_share_is_taken_at_the_worst_depth_with_a_gap():
    values = {("pre_ln", 2): 0.9, ("post_ln", 2): 0.5, ("post_ln_deesc", 2): 0.9,  # share 1
              ("pre_ln", 8): 0.9, ("post_ln", 8): 0.1, ("post_ln_deesc", 8): 0.5,  # share 0.5
              ("pre_ln", 4): 0.9, ("post_ln", 4): 0.88, ("post_ln_deesc", 4): 0.1}  # no gap
    m = next(m for m in e5.measure(runs("digits", values), 100)
             if m.id == "E5.digits.deescalation_recovers")
    assert m.value == pytest.approx(0.5)


def test_no_gap_anywhere_is_not_testable():
    values = {(v, d): 0.9 for v in ("pre_ln", "post_ln", "post_ln_deesc") for d in DEPTHS}
    assert judged("E5.digits.deescalation_recovers", runs("digits", values)).verdict \
        == "not testable"


@pytest.mark.parametrize("name", list(e5.PLACEMENTS))
@pytest.mark.parametrize("expected", ["reproduced", "partly", "not reproduced"])
def test_placements_land_in_each_verdict(name, expected):
    placement = e5.PLACEMENTS[name]
    differences = {"reproduced": [0.0] * SEEDS, "partly": [0.0, 0.0, 0.0, 0.0, -0.25, 0.0],
                   "not reproduced": [-0.3] * SEEDS}[expected]
    values = {("post_ln_deesc", 8): 0.8,
              (placement, 8): [0.8 + x for x in differences]}
    assert judged(f"E5.digits.{name}", runs("digits", values)).verdict == expected


def test_missing_arms_are_not_testable():
    values = {("post_ln", 8): 0.5}
    for m in e5.measure(runs("digits", values), 50):
        assert judge(REGISTRY[m.id], m).verdict == "not testable", m.id


def test_text_metric_is_lower_is_better():
    """On text a rise in bits per character is a loss: post-LN rising by 0.5 bits degrades."""
    values = flat("text", "post_ln", 2.0, 2.5)
    m = next(m for m in e5.measure(runs("text", values), 50)
             if m.id == "E5.text.post_ln_degrades")
    assert m.value == pytest.approx(0.5)
    assert np.isfinite(m.value)


# --- diagnostics of the text claims ------------------------------------------------

def judged_at(cid: str, table: pd.DataFrame, curve: pd.DataFrame | None = None):
    m = next(m for m in e5.measure(table, resamples=400, curve=curve) if m.id == cid)
    return judge(REGISTRY[m.id], m)


def curve_of(table: pd.DataFrame, budgets: dict) -> pd.DataFrame:
    """The runs of `table` as a budget curve: each network at its default budget (`default`
    True) and, per (variant, depth), at the budgets {(variant, depth): {budget: values}} (a
    value per seed or one for all)."""
    default = table.assign(budget=200, default=True)
    extra = []
    for (variant, depth), points in budgets.items():
        base = table[(table.variant == variant) & (table.depth == depth)]
        metric = e5.METRIC[base.task.iloc[0]][0]
        for budget, v in points.items():
            per_seed = v if isinstance(v, list) else [v] * len(base)
            extra.append(base.assign(budget=budget, default=False, **{metric: per_seed}))
    return pd.concat([default, *extra], ignore_index=True)


@pytest.mark.parametrize("expected", ["reproduced", "partly", "not reproduced"])
def test_recovery_where_the_gap_is_measurable_lands_in_each_verdict(expected):
    # depth 8: post-LN 0.5 bits worse than pre-LN; depth 4: a gap of 0.1 (counted by the claim,
    # not by the diagnostic), where de-escalation recovers nothing
    shares = {"reproduced": [0.9] * SEEDS, "partly": [1.0, 1.0, 1.0, 0.0, 0.0, 1.0],
              "not reproduced": [0.1] * SEEDS}[expected]
    values = {**flat("text", "pre_ln", 2.0, 2.0), **flat("text", "post_ln", 2.0, 2.5),
              **flat("text", "post_ln_deesc", 2.0, [2.5 - 0.5 * s for s in shares])}
    values[("post_ln", 4)], values[("post_ln_deesc", 4)] = 2.1, 2.1
    table = runs("text", values)
    assert judged_at("E5.text.recovery_where_gap_is_measurable", table).verdict == expected
    assert judged_at("E5.text.deescalation_recovers", table).measurement.value == 0.0


@pytest.mark.parametrize("expected", ["reproduced", "partly", "not reproduced"])
def test_deescalation_against_pre_ln_lands_in_each_verdict(expected):
    # pre-LN loses 0.1 bits at depth 8; de-escalation loses 0.1 + the excess per seed
    excess = TRAINS[expected]
    values = {**flat("text", "pre_ln", 2.0, 2.1),
              **flat("text", "post_ln_deesc", 2.0, [2.1 + x for x in excess])}
    table = runs("text", values)
    assert judged_at("E5.text.deescalation_degrades_like_pre_ln", table).verdict == expected
    assert e5.excess_loss([{("a", 2): 1.0, ("a", 8): 1.5, ("b", 2): 1.0, ("b", 8): 1.2}],
                          "a", "b", -1.0) == pytest.approx(0.3)


def test_long_training_diagnostics_restate_the_claims_only_at_that_budget():
    values = {**flat("text", "pre_ln", 2.0, 2.0), **flat("text", "post_ln", 2.0, 2.5),
              **flat("text", "post_ln_deesc", 2.0, 2.05)}
    digits = {**flat("digits", "pre_ln", 0.9, 0.88), **flat("digits", "post_ln", 0.9, 0.3),
              **flat("digits", "post_ln_deesc", 0.9, 0.5)}
    table = pd.concat([runs("text", values), runs("digits", digits)], ignore_index=True)
    assert {cid.split(".")[1] for cid in e5.LONG_TRAINING} == {"text", "digits"}
    # Every network also at 1,000 steps, with the same values: the diagnostics restate the
    # claims; one network short of 1,000 steps leaves them not testable.
    def same_at_1000(t):
        part = table[table.task == t]
        return curve_of(part, {(v, d): {e5.LONG_STEPS: part[(part.variant == v) & (
            part.depth == d)][e5.METRIC[t][0]].tolist()} for v in e5.ARM.values()
            for d in DEPTHS})

    long_curve = pd.concat([same_at_1000("text"), same_at_1000("digits")], ignore_index=True)
    for cid, paper in e5.LONG_TRAINING.items():
        short = judged_at(cid, table, curve_of(table, {}))
        assert short.verdict == "not testable" and "1,000" in short.measurement.note
        long, claim = judged_at(cid, table, long_curve), judged_at(paper, table)
        assert long.verdict == claim.verdict and long.measurement.value == claim.measurement.value
        assert "every network at 1000 steps" in long.measurement.note
    missing = long_curve[~((long_curve.variant == "post_ln") & (long_curve.depth == 8)
                           & (long_curve.budget == e5.LONG_STEPS))]
    for cid in e5.LONG_TRAINING:
        assert judged_at(cid, table, missing).verdict == "not testable"


# --- the control-converged checks ------------------------------------------------

def test_a_run_without_a_budget_curve_leaves_the_checks_not_testable():
    table = runs("digits", flat("digits", "pre_ln", 0.9, 0.9))
    for cid in e5.CONVERGED:
        assert judged_at(cid, table).verdict == "not testable"
    assert "past its default budget" in judged_at("E5.digits.control_converged", table,
                                                  curve_of(table, {})).measurement.note


@pytest.mark.parametrize("task", e5.TASKS)
@pytest.mark.parametrize("expected", ["reproduced", "partly", "not reproduced"])
def test_the_control_converged_check_lands_in_each_verdict(task, expected):
    """pre-LN at the deepest depth moves from its default budget (200) to the next longer
    budget of its curve (400) by `moves` per seed, in the better direction; a longer budget
    still (800) does not count."""
    moves = {"reproduced": [0.01] * SEEDS, "partly": [0.0, 0.0, 0.0, 0.0, 0.13, 0.0],
             "not reproduced": [0.1] * SEEDS}[expected]
    table = runs(task, flat(task, "pre_ln", GOOD[task], GOOD[task]))
    curve = curve_of(table, {("pre_ln", 8): {400: [GOOD[task] + SIGN[task] * m for m in moves],
                                             800: GOOD[task] + SIGN[task] * 0.5},
                             ("pre_ln", 4): {400: GOOD[task] + SIGN[task] * 0.5}})
    row = judged_at(f"E5.{task}.control_converged", table, curve)
    assert row.verdict == expected
    assert row.measurement.value == pytest.approx(sum(moves) / SEEDS)
    assert "depth 8: 200 → 400 steps" in row.measurement.note
    assert e5.deciding_budgets(curve)[task] == {"depth": 8, "steps": 200, "longer": 400}


def test_the_abstract_names_the_deciding_budget_and_the_controls_verdict():
    table = runs("digits", {**flat("digits", "pre_ln", 0.9, 0.9),
                            **flat("digits", "post_ln", 0.9, 0.3),
                            **flat("digits", "post_ln_deesc", 0.9, 0.85)})
    curve = curve_of(table, {("pre_ln", 8): {400: 0.91}})
    rows = [judge(REGISTRY[m.id], m).to_dict()
            for m in e5.measure(table, resamples=200, curve=curve)]
    headline = next(r for r in rows if r["id"] == "E5.digits.deescalation_trains_deep")
    section = {"numbers": {"budgets": e5.deciding_budgets(curve)}}
    note = e5.headline_note(headline, rows, section)
    assert note.startswith("At digits depth 8, where it is decided, every network trained 200 "
                           "steps; the control (pre-LN) had converged there (a budget of 400 "
                           "steps moved its test accuracy by 0.01")
    failing = [dict(r, verdict="not reproduced") if r["id"] == "E5.digits.control_converged"
               else r for r in rows]
    assert "had not converged there" in e5.headline_note(headline, failing, section)
    assert e5.headline_note(headline, rows, None) == ""
