"""Fits and summaries of trained-model tables (E4, E5): pure functions of DataFrames; and two
small measurements of the digits inputs themselves (blank patches, layer-0 t_sim at init)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rankcollapse.stats import resample_runs


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
    return fits_from_layer_means(means.layer.to_numpy(float),
                                 means.token_similarity.to_numpy(float), floor)


def fits_from_layer_means(layer: np.ndarray, t_sim: np.ndarray,
                          floor: float = 1e-12) -> dict[str, float]:
    """escalation_fits from the (seed, layer) means themselves (layer index and mean t_sim of
    each, in the order layer_means gives them)."""
    t_div = 1.0 - t_sim
    ok = t_div > floor
    log_slope, _, log_r2 = line_fit(layer[ok], np.log(t_div[ok]))
    lin_slope, _, lin_r2 = line_fit(layer, t_sim)
    return {"log_slope": log_slope, "rho": float(np.exp(log_slope)), "log_r2": log_r2,
            "lin_slope": lin_slope, "lin_r2": lin_r2}


def final_accuracy(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per trained run: task, variant, depth, seed (and peak_lr, warmup, weight_decay
    when the table has them), accuracy, bpc (test bits per label: cross-entropy / ln 2), diverged,
    chance.

    A diverged run counts at chance accuracy and at the bits of a uniform guess, log2(classes)
    (its weights are not finite, so it predicts nothing); the `diverged` column keeps it visible.
    """
    # One run per member: seed, and the optimiser settings where a sweep gives several per seed.
    member = ["seed", *(c for c in ("peak_lr", "warmup", "weight_decay") if c in metrics)]
    runs = metrics[metrics.stage == "trained"].groupby(
        ["task", "variant", "depth", *member], as_index=False, sort=False
    ).agg(test_accuracy=("test_accuracy", "first"), test_loss=("test_loss", "first"),
          diverged=("diverged", "first"), diverged_step=("diverged_step", "first"),
          chance=("chance", "first"))
    runs["accuracy"] = np.where(runs.diverged, runs.chance, runs.test_accuracy)
    runs["bpc"] = np.where(runs.diverged, -np.log2(runs.chance), runs.test_loss / np.log(2))
    return runs


def budget_runs(tuning: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per (final network, training budget) of a tuned grid: its own budget (the
    tuning table's `final` rows, `default` True) and its budget curve (`budget` rows), as
    final_accuracy gives its runs: task, variant, depth, seed, peak_lr, budget, default,
    accuracy, bpc (test), diverged; a diverged network counted at chance (`chance` from
    `metrics`, per task)."""
    rows = tuning[tuning.role.isin(["final", "budget"])]
    chance = rows.task.map(metrics.groupby("task").chance.first()).astype(float)
    diverged = rows.diverged.astype(bool)
    return pd.DataFrame({
        "task": rows.task, "variant": rows.variant, "depth": rows.depth.astype(int),
        "seed": rows.seed.astype(int), "peak_lr": rows.peak_lr,
        "budget": rows.rung_steps.astype(int), "default": rows.role.eq("final"),
        "accuracy": np.where(diverged, chance, rows.test_accuracy),
        "bpc": np.where(diverged, -np.log2(chance), rows.test_loss / np.log(2)),
        "diverged": diverged}).reset_index(drop=True)


def seed_interval(values, resamples: int = 1000) -> tuple[float, float, float, str]:
    """(mean, low, high, method) of per-seed values: a 95% percentile bootstrap of the mean over
    seeds with >= 5 seeds, the range of the seeds with fewer (as the claims' intervals)."""
    values = [float(v) for v in values]
    if not values:
        return float("nan"), float("nan"), float("nan"), "no seeds"
    runs = resample_runs(dict(enumerate(values)), lambda u: float(np.mean(u)), resamples)
    lo, hi = runs.interval() or (float("nan"), float("nan"))
    return float(runs.value), lo, hi, runs.method


def selected_settings(tuning: pd.DataFrame) -> pd.DataFrame:
    """One row per tuned arm (task, variant, depth): the selected peak_lr, warmup and
    weight_decay, with the sweep's mean validation numbers at that setting (at the rung that
    selected it) and the method that selected it (`tuned_by`: grid, or successive halving
    with its rate and rungs)."""
    sel = tuning[(tuning.role == "sweep") & tuning.selected]
    sel = sel.assign(tuned_by=sel["tuning"] if "tuning" in sel else "grid")
    return sel.groupby(["task", "variant", "depth"], as_index=False, sort=False).agg(
        peak_lr=("peak_lr", "first"), warmup=("warmup", "first"),
        weight_decay=("weight_decay", "first"), val_loss=("val_loss", "mean"),
        val_accuracy=("val_accuracy", "mean"), tuned_by=("tuned_by", "first"))


def last_rungs(tuning: pd.DataFrame) -> pd.DataFrame:
    """The sweep's rows, each setting of each arm at the last rung it reached (successive
    halving trains a setting at several rungs; the grid has one). Its numbers are then the
    longest training that setting had."""
    sweep = tuning[tuning.role == "sweep"]
    if "rung" not in sweep or sweep.rung.nunique() <= 1:
        return sweep.copy()
    keys = ["task", "variant", "depth", "peak_lr", "warmup", "weight_decay"]
    top = sweep.groupby(keys).rung.transform("max")
    return sweep[sweep.rung == top].copy()


# The swept settings a selection can sit on the edge of: (tuning column, edge column, name).
EDGE_SETTINGS = (("peak_lr", "lr_edge", "lr"), ("warmup", "warmup_edge", "warm-up"),
                 ("weight_decay", "weight_decay_edge", "weight decay"))


def grid_edges(tuning: pd.DataFrame) -> pd.DataFrame:
    """One row per tuned arm (task, variant, depth, as `selected_settings`): for each swept
    setting, whether the selected value is the smallest ("low") or the largest ("high") value
    that arm's sweep tried, or neither (""). An arm selected on an edge has not been tuned in
    that setting: its optimum may lie outside the grid. The grid is the values the arm's sweep
    actually trained (every rung's rows: successive halving drops settings in later rungs, so
    the full grid is rung 0's), not the configuration; a setting swept over a single value is
    never an edge (nothing was swept). Columns: task, variant, depth, lr_edge, warmup_edge,
    weight_decay_edge."""
    keys = ["task", "variant", "depth"]
    columns = [*keys, *(edge for _, edge, _ in EDGE_SETTINGS)]
    chosen = selected_settings(tuning)
    sweep = tuning[tuning.role == "sweep"]
    rows = []
    for arm in chosen.itertuples(index=False):
        tried = sweep[(sweep.task == arm.task) & (sweep.variant == arm.variant)
                      & (sweep.depth == arm.depth)]
        row = {"task": arm.task, "variant": arm.variant, "depth": arm.depth}
        for column, edge, _ in EDGE_SETTINGS:
            values = np.unique(tried[column].dropna().to_numpy(float))
            value = float(getattr(arm, column))
            row[edge] = ("" if len(values) < 2 else
                         "low" if np.isclose(value, values[0], rtol=1e-9, atol=0) else
                         "high" if np.isclose(value, values[-1], rtol=1e-9, atol=0) else "")
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def edge_mark(edges: pd.Series | dict) -> str:
    """A short mark for a table of one row of `grid_edges`: e.g. "lr at low edge; warm-up at
    high edge", empty when every selected value lies inside its grid."""
    get = edges.get
    return "; ".join(f"{name} at {get(edge)} edge" for _, edge, name in EDGE_SETTINGS
                     if get(edge) in ("low", "high"))


def blank_patch_share(task_options: dict) -> float:
    """Share of the digits patches (train, validation and test) whose features are all zero."""
    import torch

    from rankcollapse.core.tasks import make_task

    data = make_task("digits", **task_options)
    parts = [p for p in (data.x_train, data.x_val, data.x_test) if p is not None]
    x = torch.cat(parts)  # (N, tokens, pixels)
    return float((x.abs().sum(dim=-1) == 0).float().mean())


def layer0_similarity(task_options: dict, variant: dict, model_options: dict, seeds: list[int],
                      features: list[str], eval_size: int = 256) -> pd.DataFrame:
    """t_sim of the embedded digits test images (the stack's input, layer 0) of models at init,
    one per seed, for each patch-feature option: rows (seed, features, token_similarity), the
    mean over the first `eval_size` test images."""
    import torch

    from rankcollapse.core.metrics import token_similarity
    from rankcollapse.core.tasks import make_task
    from rankcollapse.training.train import new_model

    rows = []
    for option in dict.fromkeys(features):
        data = make_task("digits", **{**task_options, "features": option})
        x = data.x_test[:eval_size]
        for seed in seeds:
            model = new_model(data.spec, variant, model_options, int(seed)).eval()
            with torch.no_grad():
                _, trace = model(x, capture=True)
            rows.append({"seed": int(seed), "features": option,
                         "token_similarity": float(token_similarity(trace.hidden[0]).mean())})
    return pd.DataFrame(rows)
