"""Per-arm tuning (E5): choose each architecture's optimiser settings on a validation split (a
sweep, by grid or successive halving), then train fresh seeds at the chosen setting. The
protocol and its outputs: docs/training.md.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import torch

from rankcollapse import io, runtime
from rankcollapse.core.specs import stable_steps
from rankcollapse.core.tasks import TaskData, make_task
from rankcollapse.plan.memory import split
from rankcollapse.plan.tuned import HALVING, grid, rung_plan, rung_steps
from rankcollapse.training.ensemble import (
    NUMERICS_COLUMNS,
    Ensemble,
    Member,
    evaluate_members,
    member_settings,
    members_from,
    train_ensemble,
    write_members,
    write_metrics,
)
from rankcollapse.training.selection import rank
from rankcollapse.training.step import autocast
from rankcollapse.training.train import load_saved, new_model

log = logging.getLogger(__name__)

# What a finished arm of run_tuned_arms leaves in its folder.
ARM_FILES = ("ensemble.pt", "history.parquet", "tuning.parquet", "metrics.parquet")
TUNING_COLUMNS = ["role", "seed", "peak_lr", "warmup", "weight_decay", "selected", "diverged",
                  "diverged_step", "val_loss", "val_accuracy", "test_loss", "test_accuracy",
                  "config_hash"]


def select(rows: pd.DataFrame, by: str = "loss") -> dict:
    """The best setting of `rows` by `selection.rank`."""
    return rank(rows, by)[0]


def validation_data(data: TaskData) -> TaskData:
    """The task with its validation split in the place of the test split (what the sweep is
    evaluated on); a task without one is an error, since selecting on test would leak it."""
    if data.x_val is None:
        raise ValueError(f"task {data.spec.name!r} has no validation split to tune on")
    return replace(data, x_test=data.x_val, y_test=data.y_val)


def _member_rows(role: str, team: Sequence[Member], results, val, test, hashes,
                 settings: Sequence[dict] | None = None) -> list[dict]:
    """One tuning row per member; `settings` (a sweep's nominal {lr, warmup, weight_decay} per
    member) replaces the member's own where a rung trains a shortened schedule."""
    rows = []
    for i, (m, result, (vl, va), (tl, ta), h) in enumerate(zip(team, results, val, test, hashes,
                                                                strict=True)):
        identity = m.identity()
        if settings is not None:
            identity.update(peak_lr=settings[i]["lr"], warmup=settings[i]["warmup"],
                            weight_decay=settings[i]["weight_decay"])
        rows.append({"role": role, **identity, "diverged": bool(result.diverged),
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


def rung_members(train_options: dict, settings: Sequence[dict], tuning_seeds: Sequence[int],
                 steps: int) -> tuple[list[Member], list[dict]]:
    """(members, their nominal settings) of one rung: every setting on every tuning seed,
    trained for `steps` of the full budget with its warm-up shortened in proportion, so that a
    rung's schedule is the full one compressed in time (the last rung trains the setting
    itself)."""
    full = int(train_options["steps"])
    team, nominal = [], []
    for seed in tuning_seeds:
        for g in settings:
            warmup = g["warmup"] if steps == full else max(1, round(g["warmup"] * steps / full))
            if train_options.get("schedule") == "wsd":  # the compressed warm-up before its
                warmup = min(warmup, stable_steps(steps, train_options["cooldown"]))  # cool-down
            team += members_from({**train_options, "steps": steps},
                                 [{"seed": int(seed), **g, "warmup": int(warmup)}])
            nominal.append(dict(g))
    return team, nominal


def run_tuned_job(task: str, task_options: dict, variant: dict, model_options: dict,
                  train_options: dict, sweep: dict, tuning_seeds: Sequence[int],
                  final_seeds: Sequence[int], ensemble_path: str | Path,
                  history_path: str | Path, tuning_path: str | Path, device: str = "cpu",
                  threads: int = 1, extra_columns: dict | None = None,
                  tuning: dict | None = None, memory: dict | None = None,
                  budgets: Sequence[int] = ()) -> dict:
    """One tuned job of the workflow (the protocol: docs/training.md). train_options: the shared
    TrainConfig fields; sweep: {lr, warmup, weight_decay}, each a number or a list; tuning:
    {method: grid | halving, eta, rungs, select_by: loss | accuracy} (defaults: the grid,
    plan.tuned.HALVING, loss); memory: {member_mb, budget_mb, gpu_mb} (tunedplan.tuned_memory):
    an ensemble larger than budget_mb trains in parts, one after another, and the job claims
    gpu_mb on a GPU. budgets (a wsd schedule): the final seeds are also evaluated on test at
    these training budgets, each a complete run of that many steps (a cool-down branched off
    one trunk, which runs to the largest of them): the `budget` rows of the tuning table. The
    final networks themselves are those of train_options' steps. Returns the selected setting."""
    if set(tuning_seeds) & set(final_seeds):
        raise ValueError(f"final seeds {sorted(final_seeds)} must be fresh: none may be a "
                         f"tuning seed {sorted(tuning_seeds)}")
    tuning = {"method": "grid", **HALVING, "select_by": "loss", **(tuning or {})}
    steps = int(train_options["steps"])
    rung_budgets = rung_steps(steps, tuning["method"], tuning["eta"], tuning["rungs"])
    rungs = rung_plan(len(grid(sweep)), steps, tuning, len(tuning_seeds))
    memory = memory or {}
    runtime.setup(threads, int(final_seeds[0]))
    dev = runtime.job_device(device, memory.get("gpu_mb") or None)
    data = make_task(task, **task_options)
    val = validation_data(data)
    by = tuning["select_by"]
    extra = dict(extra_columns or {})
    out_dir = Path(ensemble_path).parent

    def train_team(team: list[Member], name: str, evaluate_on: TaskData,
                   trunk: int | None = None, curve: Sequence[int] = ()):
        """Train `team` as one ensemble, or in parts when it exceeds the memory budget; with
        `trunk`, the members train a trunk of that many steps and `curve`'s budgets branch off
        it (their own steps are the kept budget)."""
        settings = [member_settings(task, task_options, variant, model_options, m) for m in team]
        hashes = [io.config_hash(s) for s in settings]
        rows = list(range(len(team)))
        parts = (split(rows, memory["member_mb"], memory["budget_mb"])
                 if memory.get("member_mb") else [rows])
        trained = SimpleNamespace(finals=[], numerics={}, budgets={})
        results = []
        for p, part in enumerate(parts):
            label = name if len(parts) == 1 else f"{name}_part{p}"
            fingerprint = io.config_hash([label, trunk, sorted(curve),
                                          *(hashes[i] for i in part)])
            ensemble = Ensemble([new_model(data.spec, variant, model_options,
                                           team[i].seed).to(dev) for i in part])
            members = [team[i] for i in part]
            if trunk is not None:
                members = [replace(m, train=replace(m.train, steps=trunk)) for m in members]
            checkpoint = out_dir / f"checkpoint_{label}.pt"
            results += train_ensemble(ensemble, evaluate_on, members, checkpoint, fingerprint,
                                      budgets=curve, keep=team[0].train.steps)
            checkpoint.unlink(missing_ok=True)
            trained.finals += ensemble.finals
            trained.numerics = ensemble.numerics
            for b, values in ensemble.budget_results.items():
                trained.budgets.setdefault(b, []).extend(values)
        if len(parts) > 1:
            log.info("%s: %d members trained in %d parts of at most %.0f MB", name, len(team),
                     len(parts), memory["budget_mb"])
        return trained, results, settings, hashes

    # 1. The sweep, evaluated on the validation split (its history's test_* are validation):
    # the grid trains every setting to the full budget; successive halving trains every setting
    # a short budget, keeps the best 1/eta on validation, and so on up to the full budget. A
    # rung that would train a single setting is not trained: that setting is the selection, and
    # its full budget is the fresh seeds' (step 2). The screening rungs may train on fewer
    # tuning seeds than the deciding one (plan.tuned.rung_plan).
    survivors, sweep_rows, deciding = grid(sweep), [], 0
    for rung, planned in enumerate(rungs):
        rung_budget, seeds = planned["budget"], list(tuning_seeds)[:planned["seeds"]]
        team, nominal = rung_members(train_options, survivors, seeds, rung_budget)
        log.info("sweep rung %d of %d (%s): %d members (%d settings x %d tuning seeds), %d "
                 "steps, selecting on validation %s", rung + 1, len(rung_budgets),
                 tuning["method"], len(team), len(survivors), len(seeds), rung_budget, by)
        name = "sweep" if len(rung_budgets) == 1 else f"sweep_rung{rung}"
        ens, results, _, hashes = train_team(team, name, val)
        rows = _member_rows("sweep", team, results, [(r.test_loss, r.test_accuracy)
                                                     for r in results],
                            [(math.nan, math.nan)] * len(results), hashes, nominal)
        for row in rows:
            row.update(rung=rung, rung_steps=rung_budget, **ens.numerics)
        sweep_rows += rows
        ranked = rank(pd.DataFrame(rows), by)
        keep = 1 if rung == len(rung_budgets) - 1 else math.ceil(len(survivors) / tuning["eta"])
        survivors, deciding = ranked[:keep], rung
    chosen = survivors[0]
    log.info("selected %s", chosen)

    # 2. Fresh seeds at the selected setting, evaluated on test (at every budget of the curve
    # too); then on validation.
    final_team = members_from(train_options, [{"seed": int(s), **chosen} for s in final_seeds])
    trunk = max([steps, *budgets])
    ens, results, settings, hashes = train_team(
        final_team, "final", data, trunk=trunk if trunk > steps else None,
        curve=sorted({*budgets, steps} - {trunk}))
    trained = []
    for m, state in zip(final_team, ens.finals, strict=True):
        model = new_model(data.spec, variant, model_options, m.seed)
        model.load_state_dict(state)
        trained.append(model.to(dev))
    with autocast(ens.numerics["precision"], dev):
        final_val = _evaluate_finals(trained, results, data.x_val, data.y_val)
    final_test = [(r.test_loss, r.test_accuracy) for r in results]
    final_rows = _member_rows("final", final_team, results, final_val, final_test, hashes)
    for row in final_rows:
        row.update(rung=None, rung_steps=steps, **ens.numerics)
    budget_rows = []
    for b in sorted(set(budgets) - {steps}):
        for row, (loss, acc, diverged) in zip(final_rows, ens.budgets[b], strict=True):
            budget_rows.append({**row, "role": "budget", "rung_steps": b,
                                "diverged": bool(diverged), "diverged_step": int(diverged),
                                "val_loss": math.nan, "val_accuracy": math.nan,
                                "test_loss": loss, "test_accuracy": acc})

    table = pd.DataFrame(sweep_rows + final_rows + budget_rows,
                         columns=[*TUNING_COLUMNS, "rung", "rung_steps", *NUMERICS_COLUMNS])
    table["rung"] = table.rung.astype("Int64")  # <NA> for the final members
    # selected: the member's setting was chosen; in the sweep, only the rung that chose it.
    last = table.role.isin(["final", "budget"]) | table.rung.eq(deciding)
    table["selected"] = ((table.peak_lr == chosen["lr"]) & (table.warmup == chosen["warmup"])
                         & (table.weight_decay == chosen["weight_decay"]) & last)
    table["metric"] = by
    table["tuning"] = (tuning["method"] if tuning["method"] == "grid" else
                       f"halving (eta {tuning['eta']}, {len(rung_budgets)} rungs)")
    for key, value in extra.items():
        table.insert(0, key, value)
    table["code_version"] = io.code_version()

    write_members(final_team, results, ens.finals, settings, hashes, data.spec, extra,
                  io.config_hash(hashes), ensemble_path, history_path, ens.numerics)
    io.write_parquet(table, tuning_path)
    return chosen


def run_tuned_arms(arms: Sequence[dict], ensemble_path: str | Path, history_path: str | Path,
                   tuning_path: str | Path, metrics_path: str | Path, eval_size: int,
                   identity: dict, device: str = "cpu", threads: int = 1) -> list[dict]:
    """One E5 job of the workflow: its arms (tunedplan.tuned_params of one (task, variant) at
    one or several depths) tuned one after another in this process, each exactly as
    `run_tuned_job` alone (it reseeds everything), then its final members' per-layer metrics
    (`ensemble.write_metrics`). identity: {task, variant}, the tables' first columns.

    Each arm works in its own folder beside the outputs (arm_L{depth}/: checkpoints, outputs,
    and its settings' fingerprint once finished), so a killed job resumes inside the arm it was
    in and keeps the arms it had finished; a folder left by other settings is discarded. The
    outputs concatenate the arms' tables (ensemble_path holds every arm's final members, each
    with its settings) and the folders are then removed. The job claims GPU room once, for its
    largest arm. Returns each arm's selected setting."""
    out = Path(ensemble_path).parent
    gpu_mb = max((arm.get("memory") or {}).get("gpu_mb") or 0 for arm in arms)
    runtime.setup(threads, int(arms[0]["final_seeds"][0]))  # before any CUDA work
    dev = runtime.job_device(device, gpu_mb or None)
    claimed = str(dev) if dev.type == "cuda" else device
    chosen, folders = [], []
    for arm in arms:
        depth = int(arm["model_options"]["depth"])
        folder = out / f"arm_L{depth}"
        folders.append(folder)
        fingerprint = io.config_hash(arm)
        done, stamp = folder / "done.json", folder / "settings.json"
        record = json.loads(done.read_text()) if done.exists() else {}
        if record.get("fingerprint") == fingerprint and all((folder / n).exists()
                                                            for n in ARM_FILES):
            log.info("arm at depth %d: finished by an earlier run (%s), kept", depth, folder)
            chosen.append(record["chosen"])
            continue
        started = json.loads(stamp.read_text()).get("fingerprint") if stamp.exists() else None
        if folder.exists() and (done.exists() or started != fingerprint):
            log.warning("discarding %s: written with other settings, or incomplete", folder)
            shutil.rmtree(folder)
        io.write_json({"fingerprint": fingerprint}, stamp)
        log.info("arm at depth %d (%d of %d in this job)", depth, len(folders), len(arms))
        selected = run_tuned_job(**arm, ensemble_path=folder / "ensemble.pt",
                                 history_path=folder / "history.parquet",
                                 tuning_path=folder / "tuning.parquet", device=claimed,
                                 threads=threads, extra_columns={**identity, "depth": depth})
        write_metrics(folder / "ensemble.pt", folder / "metrics.parquet", eval_size=eval_size,
                      identity=identity, threads=threads)
        io.write_json({"fingerprint": fingerprint, "chosen": selected}, done)
        chosen.append(selected)
    if len(folders) == 1:
        paths = (ensemble_path, history_path, tuning_path, metrics_path)
        for name, path in zip(ARM_FILES, paths, strict=True):
            (folders[0] / name).replace(path)
    else:
        saved = [load_saved(f / "ensemble.pt") for f in folders]
        members = [m for s in saved for m in s["members"]]
        fingerprint = io.config_hash([s["fingerprint"] for s in saved])
        io.atomic_write(ensemble_path, lambda tmp: torch.save(
            {"members": members, "fingerprint": fingerprint}, tmp))
        for name, path in (("history.parquet", history_path), ("tuning.parquet", tuning_path),
                           ("metrics.parquet", metrics_path)):
            io.write_parquet(pd.concat([io.read_parquet(f / name) for f in folders],
                                       ignore_index=True), path)
    for folder in folders:
        shutil.rmtree(folder)
    return chosen
