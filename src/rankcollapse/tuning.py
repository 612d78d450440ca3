"""Per-arm tuning: choose each architecture's optimiser settings on a validation split, then
train fresh seeds at the chosen setting (E5).

One job per (task, variant, depth), two ensembles (`rankcollapse.ensemble`):

1. the **sweep**: every setting of the grid (lr x warmup x weight_decay) on the tuning seed(s),
   evaluated on the validation split carved from the training set (`TaskData.x_val`);
2. the **selection**: the setting with the best mean over tuning seeds of the validation
   metric: accuracy for classification, cross-entropy (bits per character) for language
   modelling. A diverged member counts as the worst value; ties go to the lower loss;
3. the **final** ensemble: `final_seeds` fresh seeds (never a tuning seed) at that setting,
   evaluated on the test split, as every other training job is.

Outputs: the final members as `ensemble.run_job` writes them (so `ensemble.measure_job` reads
them unchanged), their histories, and one table row per member of both ensembles with its role
(`sweep` or `final`), its validation and test numbers and whether its setting was selected.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd

from . import io, runtime
from .ensemble import (
    MEMBER_FIELDS,
    Ensemble,
    Member,
    evaluate_members,
    member_settings,
    members_from,
    train_ensemble,
    write_members,
)
from .tasks import TaskData, make_task
from .train import new_model

log = logging.getLogger(__name__)

ROLES = ("sweep", "final")
TUNING_COLUMNS = ["role", "seed", "peak_lr", "warmup", "weight_decay", "selected", "diverged",
                  "diverged_step", "val_loss", "val_accuracy", "test_loss", "test_accuracy",
                  "config_hash"]


def grid(sweep: dict) -> list[dict]:
    """Every setting {lr, warmup, weight_decay} of a sweep whose values are numbers or lists."""
    values = [v if isinstance(v, list | tuple) else [v] for v in (sweep[k] for k in MEMBER_FIELDS)]
    return [dict(zip(MEMBER_FIELDS, combo, strict=True)) for combo in itertools.product(*values)]


def selection_metric(data: TaskData) -> str:
    """What the selection maximises: validation accuracy, or minus the validation loss for a
    language model (whose reported metric is bits per character)."""
    return "loss" if data.spec.causal else "accuracy"


def select(rows: pd.DataFrame, metric: str) -> dict:
    """The setting {lr, warmup, weight_decay} with the best mean validation `metric` over the
    tuning seeds. rows: the sweep's members (peak_lr, warmup, weight_decay, val_loss,
    val_accuracy, diverged). Diverged members count as the worst value (loss +inf, accuracy 0);
    ties are broken by the lower mean validation loss, then the smaller learning rate."""
    r = rows.copy()
    r["val_loss"] = r.val_loss.where(~r.diverged & r.val_loss.notna(), math.inf)
    r["val_accuracy"] = r.val_accuracy.where(~r.diverged & r.val_accuracy.notna(), 0.0)
    means = r.groupby(["peak_lr", "warmup", "weight_decay"], as_index=False)[
        ["val_loss", "val_accuracy"]].mean()
    key = ["val_accuracy", "val_loss"] if metric == "accuracy" else ["val_loss"]
    ascending = [False, True] if metric == "accuracy" else [True]
    best = means.sort_values([*key, "peak_lr"], ascending=[*ascending, True],
                             kind="stable").iloc[0]
    return {"lr": float(best.peak_lr), "warmup": int(best.warmup),
            "weight_decay": float(best.weight_decay)}


def validation_data(data: TaskData) -> TaskData:
    """The task with its validation split in the place of the test split (what the sweep is
    evaluated on); a task without one is an error, since selecting on test would leak it."""
    if data.x_val is None:
        raise ValueError(f"task {data.spec.name!r} has no validation split to tune on")
    return replace(data, x_test=data.x_val, y_test=data.y_val)


def _member_rows(role: str, team: Sequence[Member], results, val, test, hashes) -> list[dict]:
    rows = []
    for m, result, (vl, va), (tl, ta), h in zip(team, results, val, test, hashes, strict=True):
        rows.append({"role": role, **m.identity(), "diverged": bool(result.diverged),
                     "diverged_step": int(result.diverged_step or 0), "val_loss": vl,
                     "val_accuracy": va, "test_loss": tl, "test_accuracy": ta,
                     "config_hash": h})
    return rows


def _evaluate_finals(models: list, results, x, y) -> list[tuple[float, float]]:
    """(loss, accuracy) on (x, y) of every member's final weights (models: one TaskModel per
    member, weights loaded); NaN for diverged members."""
    out = [(math.nan, math.nan)] * len(results)
    kept = [k for k, r in enumerate(results) if not r.diverged]
    if kept:
        losses, accs = evaluate_members(Ensemble([models[k] for k in kept]), x, y)
        for k, lo, acc in zip(kept, losses, accs, strict=True):
            out[k] = (lo, acc)
    return out


def run_tuned_job(task: str, task_options: dict, variant: dict, model_options: dict,
                  train_options: dict, sweep: dict, tuning_seeds: Sequence[int],
                  final_seeds: Sequence[int], ensemble_path: str | Path,
                  history_path: str | Path, tuning_path: str | Path, device: str = "cpu",
                  threads: int = 1, extra_columns: dict | None = None) -> dict:
    """One tuned job of the workflow (see the module docstring). train_options: the shared
    TrainConfig fields; sweep: {lr, warmup, weight_decay}, each a number or a list.
    Returns the selected setting."""
    if set(tuning_seeds) & set(final_seeds):
        raise ValueError(f"final seeds {sorted(final_seeds)} must be fresh: none may be a "
                         f"tuning seed {sorted(tuning_seeds)}")
    runtime.setup(threads, int(final_seeds[0]))
    dev = runtime.job_device(device)
    data = make_task(task, **task_options)
    val = validation_data(data)
    metric = selection_metric(data)
    extra = dict(extra_columns or {})
    out_dir = Path(ensemble_path).parent

    def train_team(team: list[Member], name: str, evaluate_on: TaskData):
        settings = [member_settings(task, task_options, variant, model_options, m) for m in team]
        hashes = [io.config_hash(s) for s in settings]
        fingerprint = io.config_hash([name, *hashes])
        ensemble = Ensemble([new_model(data.spec, variant, model_options, m.seed).to(dev)
                             for m in team])
        checkpoint = out_dir / f"checkpoint_{name}.pt"
        results = train_ensemble(ensemble, evaluate_on, team, checkpoint, fingerprint)
        checkpoint.unlink(missing_ok=True)
        return ensemble, results, settings, hashes

    # 1. The sweep, evaluated on the validation split (its history's test_* are validation).
    sweep_team = members_from(train_options, [{"seed": int(s), **g} for s in tuning_seeds
                                              for g in grid(sweep)])
    log.info("sweep: %d members (%d settings x %d tuning seeds), selecting on validation %s",
             len(sweep_team), len(grid(sweep)), len(tuning_seeds), metric)
    ens, results, _, hashes = train_team(sweep_team, "sweep", val)
    sweep_val = [(r.test_loss, r.test_accuracy) for r in results]
    sweep_rows = _member_rows("sweep", sweep_team, results, sweep_val,
                              [(math.nan, math.nan)] * len(results), hashes)
    chosen = select(pd.DataFrame(sweep_rows), metric)
    log.info("selected %s", chosen)

    # 2. Fresh seeds at the selected setting, evaluated on test; then on validation too.
    final_team = members_from(train_options, [{"seed": int(s), **chosen} for s in final_seeds])
    ens, results, settings, hashes = train_team(final_team, "final", data)
    trained = []
    for m, state in zip(final_team, ens.finals, strict=True):
        model = new_model(data.spec, variant, model_options, m.seed)
        model.load_state_dict(state)
        trained.append(model.to(dev))
    final_val = _evaluate_finals(trained, results, data.x_val, data.y_val)
    final_test = [(r.test_loss, r.test_accuracy) for r in results]
    final_rows = _member_rows("final", final_team, results, final_val, final_test, hashes)

    table = pd.DataFrame(sweep_rows + final_rows, columns=TUNING_COLUMNS)
    table["selected"] = ((table.peak_lr == chosen["lr"]) & (table.warmup == chosen["warmup"])
                         & (table.weight_decay == chosen["weight_decay"]))
    table["metric"] = metric
    for key, value in extra.items():
        table.insert(0, key, value)
    table["code_version"] = io.code_version()

    write_members(final_team, results, ens.finals, settings, hashes, data.spec, extra,
                  io.config_hash(hashes), ensemble_path, history_path)
    io.write_parquet(table, tuning_path)
    return chosen
