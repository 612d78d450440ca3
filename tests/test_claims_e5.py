"""E5's claim statistics on synthetic tuned runs built to land in each verdict."""

import math

import numpy as np
import pandas as pd
import pytest

from rankcollapse.claims import e5, judge, load_registry

from conftest import ROOT

REGISTRY = load_registry(ROOT / "workflow/claims.yaml")
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
