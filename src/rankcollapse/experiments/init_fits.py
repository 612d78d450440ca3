"""Fits and summaries used by the notebooks: pure functions of results tables."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rankcollapse.stats import resample_runs


def exponent_pairs(table: pd.DataFrame, value: str, floor: float, max_residual: float,
                   keys: tuple[str, ...] = ("seed", "sample")) -> pd.DataFrame:
    """Consecutive-layer pairs (r_l, r_{l+1}) of each sequence, restricted to the fit range.

    Keeps pairs with r_l <= max_residual (the small-residual regime the theorem describes) and
    r_{l+1} >= floor (above round-off). Returns columns keys + [layer, r, r_next].
    """
    t = table.sort_values([*keys, "layer"])
    nxt = t.groupby(list(keys))[value].shift(-1)
    pairs = t.assign(r=t[value], r_next=nxt).dropna(subset=["r_next"])
    keep = (pairs.r <= max_residual) & (pairs.r_next >= floor) & (pairs.r >= floor)
    return pairs.loc[keep, [*keys, "layer", "r", "r_next"]]


def fit_exponent(pairs: pd.DataFrame) -> tuple[float, float]:
    """Least-squares fit of log r_{l+1} = k log r_l + c; returns (k, c), NaN if < 2 distinct r.

    k = 3 is the cubic, doubly exponential rate of Dong et al.'s bound; k = 1 is a single
    exponential (r_{l+1} = e^c r_l); k < 1 with c ~ 0 means the residual settles.
    """
    x, y = np.log(pairs.r.to_numpy()), np.log(pairs.r_next.to_numpy())
    if len(x) < 2 or np.ptp(x) == 0:
        return float("nan"), float("nan")
    k, c = np.polyfit(x, y, 1)
    return float(k), float(c)


def fit_log_rate(table: pd.DataFrame, value: str, floor: float) -> float:
    """Mean per-layer factor rho = exp(slope of log r against layer), fitted above the floor."""
    t = table[table[value] >= floor]
    if t.layer.nunique() < 2:
        return float("nan")
    slope, _ = np.polyfit(t.layer.to_numpy(float), np.log(t[value].to_numpy()), 1)
    return float(np.exp(slope))


def bootstrap_over_seeds(table: pd.DataFrame, statistic, resamples: int, seed: int = 0,
                         level: float = 0.95) -> tuple[float, tuple[float, float]]:
    """statistic(table) and its percentile interval from resampling whole seeds with replacement.

    Seeds (independent networks) are the unit of replication; sequences (or the runs of one
    seed in a paired comparison) stay together.
    """
    estimate = float(statistic(table))
    seeds = table.seed.unique()
    groups = {s: g for s, g in table.groupby("seed")}
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        pick = rng.choice(seeds, size=len(seeds), replace=True)
        # A seed drawn twice is two replicates: relabel so their sequences stay apart.
        sample = [groups[s].assign(seed=i) for i, s in enumerate(pick)]
        values.append(statistic(pd.concat(sample, ignore_index=True)))
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return estimate, (float("nan"), float("nan"))
    alpha = (1 - level) / 2
    lo, hi = np.quantile(values, [alpha, 1 - alpha])
    return estimate, (float(lo), float(hi))


def first_layer_below(table: pd.DataFrame, value: str, threshold: float) -> float:
    """Median over sequences of the first layer whose value drops below threshold (NaN: never)."""
    below = table[table[value] < threshold].groupby(["seed", "sample"]).layer.min()
    total = table.groupby(["seed", "sample"]).ngroups
    if len(below) < total:  # some sequences never drop below: the median may be undefined
        below = below.reindex(table.groupby(["seed", "sample"]).size().index)
        if below.notna().mean() <= 0.5:
            return float("nan")
        return float(np.nanmedian(below.to_numpy(float)))
    return float(below.median())


def exponent_units(table: pd.DataFrame, value: str, floor: float, max_residual: float
                   ) -> dict:
    """Per seed (the unit of replication): (log r_l, log r_{l+1}) of every fitted layer pair of
    its sequences (`exponent_pairs`), as two arrays. Resampling then concatenates arrays."""
    pairs = exponent_pairs(table, value, floor, max_residual)
    return {seed: (np.log(g.r.to_numpy()), np.log(g.r_next.to_numpy()))
            for seed, g in pairs.groupby("seed")} | {
        seed: (np.empty(0), np.empty(0)) for seed in set(table.seed) - set(pairs.seed)}


def exponent_of(units: list) -> float:
    """Least-squares k of log r_{l+1} = k log r_l + c over the pairs of the given seeds; NaN
    with fewer than 2 distinct r (see `fit_exponent`)."""
    x = np.concatenate([u[0] for u in units]) if units else np.empty(0)
    y = np.concatenate([u[1] for u in units]) if units else np.empty(0)
    if len(x) < 2 or np.ptp(x) == 0:
        return float("nan")
    return float(np.polyfit(x, y, 1)[0])


def rate_units(table: pd.DataFrame, value: str, floor: float) -> dict:
    """Per seed: (layer, log value) of every row above the floor (see `fit_log_rate`)."""
    t = table[table[value] >= floor]
    return {seed: (g.layer.to_numpy(float), np.log(g[value].to_numpy()))
            for seed, g in t.groupby("seed")} | {
        seed: (np.empty(0), np.empty(0)) for seed in set(table.seed) - set(t.seed)}


def rate_of(units: list) -> float:
    """Per-layer factor rho = exp(slope of log r against layer) over the given seeds."""
    layer = np.concatenate([u[0] for u in units]) if units else np.empty(0)
    logv = np.concatenate([u[1] for u in units]) if units else np.empty(0)
    if len(np.unique(layer)) < 2:
        return float("nan")
    return float(np.exp(np.polyfit(layer, logv, 1)[0]))


def collapse_summary(table: pd.DataFrame, value: str, floor: float, max_residual: float,
                     resamples: int) -> pd.DataFrame:
    """Per variant: collapse exponent k and per-layer factor rho, each with its interval over
    seeds (95% bootstrap with >= 5 seeds, else the range of the seeds; `stats.resample_runs`).

    Returns one row per variant with k, k_lo, k_hi, rho, rho_lo, rho_hi, interval (its method),
    seeds, pairs (fitted layer pairs), sequences, final (median value at the last layer) and
    collapse_layer (median first layer below 1e-6).
    """
    rows = []
    for variant, t in table.groupby("variant", sort=False):
        k = resample_runs(exponent_units(t, value, floor, max_residual), exponent_of, resamples)
        rho = resample_runs(rate_units(t, value, floor), rate_of, resamples)
        (k_lo, k_hi), (rho_lo, rho_hi) = (r.interval() or (np.nan, np.nan) for r in (k, rho))
        pairs = exponent_pairs(t, value, floor, max_residual)
        last = t[t.layer == t.layer.max()][value]
        rows.append({
            "variant": variant, "k": k.value, "k_lo": k_lo, "k_hi": k_hi,
            "rho": rho.value, "rho_lo": rho_lo, "rho_hi": rho_hi, "interval": k.method,
            "seeds": t.seed.nunique(), "pairs": len(pairs),
            "sequences": pairs.groupby(["seed", "sample"]).ngroups,
            "final": float(last.median()),
            "collapse_layer": first_layer_below(t, value, 1e-6),
        })
    return pd.DataFrame(rows)
