"""E7's claims: the three papers' collapse statistics on the same runs.

Two identities (checks of our code: r_F² = 1 − t_sim; t_sim against the mean inner product of
unit tokens) and the agreement of the statistics' orderings across variants and layers (ours).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from rankcollapse.claims.measurement import Measurement, exact, not_testable, over_runs

IDS = ("E7.residual_equals_similarity", "E7.sphere_clustering_is_similarity",
       "E7.agree_at_init", "E7.agree_trained")
STATS = ["relative_residual", "relative_residual_comp", "token_similarity", "mean_cosine"]


def medians(t: pd.DataFrame) -> pd.DataFrame:
    """Median of each statistic per (variant, layer)."""
    return t.groupby(["variant", "layer"])[STATS].median()


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation over the finite pairs; NaN with < 3 of them or a constant."""
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3 or np.ptp(a[ok]) == 0 or np.ptp(b[ok]) == 0:
        return math.nan
    return float(spearmanr(a[ok], b[ok]).statistic)


def min_agreement(t: pd.DataFrame) -> float:
    """Smallest pairwise Spearman correlation of r_comp, 1 − t_sim and 1 − mean cosine over the
    per-(variant, layer) medians."""
    m = medians(t)
    pairs = [(m.relative_residual_comp, 1 - m.token_similarity),
             (m.relative_residual_comp, 1 - m.mean_cosine),
             (1 - m.token_similarity, 1 - m.mean_cosine)]
    return min(spearman(a.to_numpy(), b.to_numpy()) for a, b in pairs)


def _agreement(cid: str, t: pd.DataFrame, resamples: int, what: str) -> Measurement:
    if t.empty or t.variant.nunique() < 2:
        return not_testable(cid, f"no {what} with at least two variants in this run")
    # A seed resampled twice is a second replicate: relabel so its sequences stay apart.
    units = {seed: g for seed, g in t.groupby("seed")}

    def statistic(frames: list[pd.DataFrame]) -> float:
        return min_agreement(pd.concat([f.assign(seed=i) for i, f in enumerate(frames)]))

    points = t.groupby(["variant", "layer"]).ngroups
    return over_runs(cid, units, statistic, resamples,
                     note=f"{what}: {points} variant × layer points")


def measure(sets: dict[str, tuple[pd.DataFrame, float]], init: pd.DataFrame,
            trained: pd.DataFrame, particles: pd.DataFrame | None,
            resamples: int = 1000) -> list[Measurement]:
    """sets: {name: (table, machine epsilon of its precision)} of every run set checked for
    r_F² = 1 − t_sim; init: E1's random-init rows; trained: E4/E5's trained rows (may be
    empty); particles: E6's unit-sphere trajectories with n, token_similarity, mean_cosine
    (None when E6 is not in the run)."""
    rows = sum(len(t) for t, _ in sets.values())
    worst = max(float((t.relative_residual**2 - (1 - t.token_similarity)).abs().max() / eps)
                for t, eps in sets.values())
    out = [exact(IDS[0], worst, f"largest deviation over {rows} rows of {len(sets)} run sets",
                 n=1)]
    if particles is None or particles.empty:
        out.append(not_testable(IDS[1], "E6's particle model is not in this run"))
    else:
        n = particles.n.to_numpy(float)
        gap = float((particles.token_similarity
                     - (1 / n + (1 - 1 / n) * particles.mean_cosine)).abs().max())
        out.append(exact(IDS[1], gap, f"largest deviation over {len(particles)} particle states",
                         n=1))
    out.append(_agreement(IDS[2], init, resamples, "random-init networks (E1)"))
    out.append(_agreement(IDS[3], trained, resamples, "trained networks (E4/E5)"))
    return out
