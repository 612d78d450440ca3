"""E7's claim statistics on synthetic runs built to land in each verdict."""

import numpy as np
import pandas as pd
import pytest

from rankcollapse.claims import e7, judge, load_registry

from conftest import ROOT

REGISTRY = load_registry(ROOT / "src/rankcollapse/claims/claims.yaml")
EPS = float(np.finfo(np.float64).eps)


def runs(noise: list[float], variants: int = 4, layers: int = 6, samples: int = 3,
         rng_seed: int = 0) -> pd.DataFrame:
    """Per seed, the three statistics follow one collapse curve per variant; `noise[seed]`
    scrambles Dong's residual of that seed only (so the orderings disagree)."""
    rng = np.random.default_rng(rng_seed)
    rows = []
    for seed, scale in enumerate(noise):
        for v in range(variants):
            for layer in range(layers + 1):
                base = 1 - 0.9 * (1 - 0.25 * (v + 1) / variants) ** layer  # t_sim rises
                for sample in range(samples):
                    t_sim = base
                    rows.append({"variant": f"v{v}", "seed": seed, "sample": sample,
                                 "layer": layer, "token_similarity": t_sim,
                                 "relative_residual": np.sqrt(1 - t_sim),
                                 "relative_residual_comp": np.sqrt(1 - t_sim)
                                 + scale * rng.standard_normal(),
                                 "mean_cosine": t_sim})
    return pd.DataFrame(rows)


def measure(init, trained=None, particles=None, sets=None):
    trained = init.iloc[:0] if trained is None else trained
    sets = sets or {"init": (init, EPS)}
    return {m.id: judge(REGISTRY[m.id], m)
            for m in e7.measure(sets, init, trained, particles, resamples=200)}


def test_ids_match_the_registry():
    assert set(e7.IDS) == {cid for cid, s in REGISTRY.items() if s.experiment == "E7"}


AGREEMENT = {  # noise on Dong's residual, per seed
    "reproduced": [0.0] * 6,
    "partly": [0.0, 0.0, 0.0, 0.0, 1.0, 1.0],  # the median hides two scrambled seeds
    "not reproduced": [2.0] * 6,
}


@pytest.mark.parametrize("expected", sorted(AGREEMENT))
def test_agreement_lands_in_each_verdict(expected):
    table = runs(AGREEMENT[expected])
    got = measure(table, trained=table)
    assert got["E7.agree_at_init"].verdict == expected
    assert got["E7.agree_trained"].verdict == expected


def test_agreement_without_runs_is_not_testable():
    table = runs([0.0] * 6)
    got = measure(table[table.variant == "v0"])  # one variant: no ordering to compare
    assert got["E7.agree_at_init"].verdict == "not testable"
    assert got["E7.agree_trained"].verdict == "not testable"


def test_identity_check_passes_at_round_off_and_fails_beyond():
    """Exact measurements have no interval, so 'partly' cannot occur for the identities."""
    good = runs([0.0] * 2)
    assert measure(good)["E7.residual_equals_similarity"].verdict == "reproduced"
    bad = good.assign(relative_residual=good.relative_residual + 1e-9)
    assert measure(bad)["E7.residual_equals_similarity"].verdict == "not reproduced"


def particles(error: float) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for layer in range(5):
        x = rng.standard_normal((8, 3))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        gram = x @ x.T
        inner = (gram.sum() - 8) / (8 * 7)
        rows.append({"layer": layer, "n": 8, "token_similarity": float(gram.mean()) + error,
                     "mean_cosine": inner})
    return pd.DataFrame(rows)


@pytest.mark.parametrize(("error", "expected"), [(0.0, "reproduced"), (1e-3, "not reproduced")])
def test_sphere_identity(error, expected):
    got = measure(runs([0.0] * 2), particles=particles(error))
    assert got["E7.sphere_clustering_is_similarity"].verdict == expected


def test_sphere_identity_without_particles_is_not_testable():
    assert measure(runs([0.0] * 2))["E7.sphere_clustering_is_similarity"].verdict == \
        "not testable"
