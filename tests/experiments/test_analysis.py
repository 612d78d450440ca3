import math

import numpy as np
import pandas as pd
import pytest

from rankcollapse.claims import verdict
from rankcollapse.experiments.init_fits import (
    bootstrap_over_seeds,
    collapse_summary,
    exponent_pairs,
    fit_exponent,
    fit_log_rate,
)


def synthetic(k: float, c: float, r0: float, layers: int, seeds: int = 4, samples: int = 3,
              noise: float = 0.0) -> pd.DataFrame:
    """Residual sequences r_{l+1} = e^c r_l^k (times optional log-normal noise)."""
    rng = np.random.default_rng(0)
    rows = []
    for seed in range(seeds):
        for sample in range(samples):
            r = r0 * (1 + 0.1 * rng.random())
            for layer in range(layers + 1):
                rows.append({"variant": "v", "seed": seed, "sample": sample, "layer": layer,
                             "r": max(r, 1e-300)})
                r = math.exp(c) * r**k * math.exp(noise * rng.standard_normal())
    return pd.DataFrame(rows)


@pytest.mark.parametrize("k", [1.0, 2.0, 3.0])
def test_fit_exponent_recovers_k(k):
    t = synthetic(k, c=0.5 if k > 1 else -0.2, r0=0.3, layers=6)
    k_hat, c_hat = fit_exponent(exponent_pairs(t, "r", floor=1e-13, max_residual=0.9))
    assert k_hat == pytest.approx(k, rel=1e-6)


def test_pairs_respect_floor_and_range():
    t = synthetic(3.0, 0.0, 0.5, layers=8)
    pairs = exponent_pairs(t, "r", floor=1e-13, max_residual=0.9)
    assert (pairs.r_next >= 1e-13).all() and (pairs.r <= 0.9).all()
    # 0.5 -> 0.125 -> 2e-3 -> 7.5e-9 -> 4e-25: three pairs above the floor per sequence
    assert len(pairs) == 3 * 4 * 3


def test_fit_log_rate_is_the_per_layer_factor():
    t = synthetic(1.0, math.log(0.8), 0.9, layers=20)
    assert fit_log_rate(t, "r", floor=1e-13) == pytest.approx(0.8, rel=1e-6)


def test_bootstrap_keeps_resampled_seeds_apart():
    """A seed drawn twice must not merge into one sequence (that broke the pairs once)."""
    t = synthetic(3.0, 0.0, 0.5, layers=5, noise=0.05)
    stat = lambda d: fit_exponent(exponent_pairs(d, "r", 1e-13, 0.9))[0]  # noqa: E731
    est, (lo, hi) = bootstrap_over_seeds(t, stat, resamples=50)
    assert lo <= est <= hi
    assert 2.8 < lo and hi < 3.2


def test_collapse_summary_columns():
    t = synthetic(3.0, 0.0, 0.5, layers=6)
    s = collapse_summary(t, "r", 1e-13, 0.9, resamples=20)
    assert list(s.variant) == ["v"]
    assert s.k.iloc[0] == pytest.approx(3.0)
    assert {"k_lo", "k_hi", "rho", "final", "collapse_layer", "pairs"} <= set(s.columns)


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
