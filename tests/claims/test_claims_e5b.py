"""E5b's claim statistics on synthetic runs built to land in each verdict."""

import numpy as np
import pandas as pd
import pytest

from rankcollapse.claims import e5b, judge, load_registry

from conftest import ROOT

REGISTRY = load_registry(ROOT / "src/rankcollapse/claims/claims.yaml")
SEEDS = 6


def runs(fix: str, fix_acc: list[float], post=0.1, pre=0.9) -> pd.DataFrame:
    rows = []
    for seed in range(SEEDS):
        for variant, acc in (("post_ln", post), ("pre_ln", pre), (fix, fix_acc[seed])):
            rows.append({"variant": variant, "seed": seed, "depth": 32, "accuracy": acc})
    return pd.DataFrame(rows)


def init(fix: str, fix_tsim: list[float], post=0.8, layers=3) -> pd.DataFrame:
    rows = []
    for seed in range(SEEDS):
        for variant, t in (("post_ln", post), (fix, fix_tsim[seed])):
            for layer in range(layers + 1):
                rows.append({"variant": variant, "seed": seed, "layer": layer,
                             "token_similarity": t if layer == layers else 0.1})
    return pd.DataFrame(rows)


def judged(fix, what, table_runs, table_init):
    m = next(m for m in e5b.measure(table_runs, table_init, resamples=400)
             if m.id == f"E5b.{fix}_{what}")
    return judge(REGISTRY[m.id], m)


def test_ids_match_the_registry():
    assert set(e5b.IDS) == {cid for cid, s in REGISTRY.items() if s.experiment == "E5b"}


ACCURACY = {  # fix accuracy per seed (post-LN 0.1, pre-LN 0.9: the gap is 0.8)
    "reproduced": [0.85] * SEEDS,
    "partly": [0.9, 0.9, 0.9, 0.1, 0.1, 0.9],  # share 0.67, some resamples below one half
    "not reproduced": [0.2] * SEEDS,
}
TSIM = {  # fix t_sim at the last layer (post-LN 0.8)
    "reproduced": [0.2] * SEEDS,
    "partly": [0.1, 0.1, 0.1, 0.1, 0.75, 0.75],  # ratio 0.40, some resamples above 0.5
    "not reproduced": [0.7] * SEEDS,
}


@pytest.mark.parametrize("fix", e5b.FIXES)
@pytest.mark.parametrize("expected", ["reproduced", "partly", "not reproduced"])
def test_each_claim_lands_in_each_verdict(fix, expected):
    r, i = runs(fix, ACCURACY[expected]), init(fix, TSIM[expected])
    assert judged(fix, "trains_deep", r, i).verdict == expected
    assert judged(fix, "less_similar_at_init", r, i).verdict == expected


@pytest.mark.parametrize("fix", e5b.FIXES)
def test_missing_arms_are_not_testable(fix):
    r = runs(fix, [0.8] * SEEDS)
    i = init(fix, [0.2] * SEEDS)
    assert judged(fix, "trains_deep", r[r.variant != "pre_ln"], i).verdict == "not testable"
    assert judged(fix, "less_similar_at_init", r, i[i.variant != fix]).verdict == "not testable"


def test_resamples_without_a_gap_count_against_the_claim():
    """Seeds where pre-LN fails too: resamples drawing mostly those have no gap (undefined) and
    must pull the interval below the range rather than be dropped."""
    fix = "post_ln_deesc"
    rows = []
    for seed in range(SEEDS):
        good = seed < 2
        for variant, acc in (("post_ln", 0.1), ("pre_ln", 0.9 if good else 0.1),
                             (fix, 0.9 if good else 0.1)):
            rows.append({"variant": variant, "seed": seed, "depth": 32, "accuracy": acc})
    r = judged(fix, "trains_deep", pd.DataFrame(rows), init(fix, [0.2] * SEEDS))
    assert r.measurement.value == pytest.approx(1.0)
    assert np.isnan(r.measurement.samples).any()
    assert r.interval[0] == -np.inf and r.verdict == "partly"
