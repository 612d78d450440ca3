"""Fits and summaries of trained-model tables (E4, E5): pure functions of DataFrames."""

from __future__ import annotations

import numpy as np
import pandas as pd


def line_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least squares y = slope * x + intercept; returns (slope, intercept, R^2), NaN if < 3 points
    or constant x. R^2 = 1 - SS_res / SS_tot (1 when y is constant and fitted exactly)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 3 or np.ptp(x) == 0:
        return float("nan"), float("nan"), float("nan")
    slope, intercept = np.polyfit(x, y, 1)
    ss_res = float(np.sum((y - (slope * x + intercept)) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return float(slope), float(intercept), float(r2)


def layer_means(table: pd.DataFrame, value: str) -> pd.DataFrame:
    """Mean of `value` over the sequences of each (seed, layer): columns seed, layer, value."""
    return table.groupby(["seed", "layer"], as_index=False)[value].mean()


def escalation_fits(table: pd.DataFrame, floor: float = 1e-12) -> dict[str, float]:
    """Both readings of Yu & Zhang's "linear rate" on per-layer token similarity.

    Fits the seed-mean t_sim of every layer against the layer index: (a) log t_div = a + b l,
    the optimisation sense (t_div shrinks by the factor rho = e^b per layer); (b) t_sim = a + b l,
    a straight line in depth. Returns log_slope, rho, log_r2, lin_slope, lin_r2.
    """
    means = layer_means(table, "token_similarity")
    layer = means.layer.to_numpy(float)
    t_sim = means.token_similarity.to_numpy(float)
    t_div = 1.0 - t_sim
    ok = t_div > floor
    log_slope, _, log_r2 = line_fit(layer[ok], np.log(t_div[ok]))
    lin_slope, _, lin_r2 = line_fit(layer, t_sim)
    return {"log_slope": log_slope, "rho": float(np.exp(log_slope)), "log_r2": log_r2,
            "lin_slope": lin_slope, "lin_r2": lin_r2}


def final_accuracy(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per trained run: task, variant, depth, seed (and peak_lr, warmup, weight_decay
    when the table has them), accuracy, diverged, chance.

    A diverged run counts at chance accuracy (its weights are not finite, so it predicts nothing);
    the `diverged` column keeps it visible.
    """
    # One run per member: seed, and the optimiser settings where a sweep gives several per seed.
    member = ["seed", *(c for c in ("peak_lr", "warmup", "weight_decay") if c in metrics)]
    runs = metrics[metrics.stage == "trained"].groupby(
        ["task", "variant", "depth", *member], as_index=False, sort=False
    ).agg(test_accuracy=("test_accuracy", "first"), test_loss=("test_loss", "first"),
          diverged=("diverged", "first"), diverged_step=("diverged_step", "first"),
          chance=("chance", "first"))
    runs["accuracy"] = np.where(runs.diverged, runs.chance, runs.test_accuracy)
    return runs

