"""The statistics of the claims that apply to any model (the registry's `any_model` field): the
collapse exponent of pure attention and its ablations (E1, Dong et al. 2021) and the per-layer
escalation of token similarity (E4, Yu & Zhang). E1 and E4 measure their networks with them, and
`rankcollapse probe` any model: one code for both."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rankcollapse.claims.measurement import Measurement, over_runs
from rankcollapse.experiments.init_fits import exponent_of, exponent_pairs, exponent_units
from rankcollapse.experiments.trained import fits_from_layer_means, layer_means

# The collapse exponent's fit range: layer transitions with r_l at most this (the schema's
# default of fit.max_residual, which the workflow passes; the probe, which reads no config,
# uses this).
MAX_RESIDUAL = 0.9


def measure_exponent(cid: str, table: pd.DataFrame, value: str, floor: float,
                     max_residual: float, resamples: int, what: str) -> Measurement:
    """The collapse exponent k of one network kind (`what`, named in the note) over its seeds:
    table has columns seed, sample, layer and `value`. """
    pairs = exponent_pairs(table, value, floor, max_residual)
    per_sequence = pairs.groupby(["seed", "sample"]).size()
    note = (f"{what}: {len(pairs)} layer transitions of {len(per_sequence)} sequences "
            f"(at most {per_sequence.max() if len(per_sequence) else 0} per sequence) with "
            f"{floor:g} ≤ r and r_l ≤ {max_residual:g}")
    return over_runs(cid, exponent_units(table, value, floor, max_residual), exponent_of,
                     resamples, note=note)


def seed_means(table: pd.DataFrame) -> dict:
    """Per seed, its (layer, mean t_sim) arrays: what escalation_fits fits of a pooled table, so
    a resample concatenates arrays instead of re-grouping the drawn seeds' tables (the same
    points in the same order, hence the same floats)."""
    out = {}
    for seed, t in table.groupby("seed"):
        means = layer_means(t, "token_similarity")
        out[int(seed)] = (means.layer.to_numpy(float), means.token_similarity.to_numpy(float))
    return out


def layer_fits(units: list[tuple], floor: float) -> dict[str, float]:
    return fits_from_layer_means(np.concatenate([u[0] for u in units]),
                                 np.concatenate([u[1] for u in units]), floor)


def fit_statistic(key: str, floor: float):
    return lambda units: layer_fits(units, floor)[key]


def measure_escalation(cid: str, table: pd.DataFrame, key: str, floor: float, resamples: int,
                       note: str = "") -> Measurement:
    """A fit of the seed-mean t_sim per layer (`key`: rho, log_r2, ...; trained.escalation_fits)
    over whole seeds: table has columns seed, layer, token_similarity. Also used by
    rankcollapse.probe."""
    return over_runs(cid, seed_means(table), fit_statistic(key, floor), resamples, note=note)


# statistic name (the registry's any_model.statistic) -> what it measures on a probe's table:
# (the table's residual or similarity column, the escalation fit's key or None)
STATISTICS = {"collapse_exponent": ("relative_residual_comp", None),
              "escalation_factor": ("token_similarity", "rho"),
              "escalation_log_r2": ("token_similarity", "log_r2")}


def measure_on_model(cid: str, statistic: str, table: pd.DataFrame, floor: float,
                     resamples: int, note: str) -> Measurement:
    """A claim's `statistic` (STATISTICS) on one ablation's table of a model (columns seed,
    sample, layer and the metrics), over its seeds; `floor`: the round-off floor of the
    residual or of t_div in the table's precision."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic {statistic!r}: allowed values are {sorted(STATISTICS)}")
    column, key = STATISTICS[statistic]
    if key is None:
        return measure_exponent(cid, table, column, floor, MAX_RESIDUAL, resamples, note)
    return measure_escalation(cid, table, key, floor, resamples, note=note)
