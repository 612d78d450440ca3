"""External reference figures: what the authors' original code gives, run outside this project
(workflow/references/*.yaml), read into the structures our claim functions use so that a
reference run's statistic is computed by the same code as ours. The file format:
docs/claims.md.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REQUIRED = ("source", "machine", "runs")
SAMPLES = 20  # the larger of the original protocol's two path counts, as claims.e2 uses
SHORT = (1, 2)


class ReferenceError(ValueError):
    """A reference file that cannot be read or lacks what a claim needs."""


def load(path: str | Path) -> dict:
    """The reference file's content, checked for its provenance and runs."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ReferenceError(f"cannot read the reference {path}: {err}") from err
    missing = [key for key in REQUIRED if not isinstance(data, dict) or key not in data]
    if missing:
        raise ReferenceError(f"reference {path}: missing {missing} (needs {list(REQUIRED)})")
    if not data["source"].get("commit"):
        raise ReferenceError(f"reference {path}: source.commit is missing (provenance)")
    for run in data["runs"]:
        for key in ("id", "experiment", "settings", "settings_match", "results"):
            if key not in run:
                raise ReferenceError(f"reference {path}: run {run.get('id', '?')} lacks {key!r}")
    return data


def provenance(data: dict) -> str:
    """One line naming the source, its commit and the machine (for captions and notes)."""
    s, m = data["source"], data["machine"]
    return (f"{s['repo']} at {str(s['commit'])[:7]}, run {m.get('date', '?')} on "
            f"{m.get('cores', '?')} CPU cores (torch {m.get('torch', '?')})")


def e2_networks(data: dict, task: str, settings_match: str) -> dict[int, dict]:
    """{seed: numbers of claims.e2.network_summary} of the reference's trained networks on
    `task` (sorting, hull) run at `settings_match` (ours, theirs); empty if there are none."""
    out = {}
    for run in data["runs"]:
        if (run["experiment"], run.get("task"), run["settings_match"]) != ("E2", task,
                                                                           settings_match):
            continue
        r = run["results"]
        paths = {int(k): float(v["mean"])
                 for k, v in r["path_accuracy"][SAMPLES].items()}
        depth = int(run["settings"]["depth"])
        full, majority = float(r["full_accuracy"]), float(r["baseline_majority"])
        out[int(run["settings"]["seed"])] = {
            "full": full, "majority": majority,
            "sampled_best_short": max(paths[k] for k in SHORT),
            "sampled_longest": paths.get(depth, math.nan)}
    return out


def e2_curves(data: dict) -> pd.DataFrame:
    """Mean over seeds of the reference's sampled-path accuracy per length: one row per (task,
    settings_match, samples, k) with accuracy, its spread over seeds (std), the mean full
    accuracy and majority rate, and the number of seeds."""
    rows = []
    for run in data["runs"]:
        if run["experiment"] != "E2":
            continue
        r = run["results"]
        for samples, per_k in r["path_accuracy"].items():
            for k, v in per_k.items():
                rows.append({"task": run["task"], "settings_match": run["settings_match"],
                             "seed": int(run["settings"]["seed"]), "samples": int(samples),
                             "k": int(k), "accuracy": float(v["mean"]),
                             "full": float(r["full_accuracy"]),
                             "majority": float(r["baseline_majority"])})
    t = pd.DataFrame(rows)
    if t.empty:
        return t
    keys = ["task", "settings_match", "samples", "k"]
    return (t.groupby(keys).agg(accuracy=("accuracy", "mean"), std=("accuracy", "std"),
                                full=("full", "mean"), majority=("majority", "mean"),
                                seeds=("seed", "nunique")).reset_index())


def e3_layers(data: dict) -> pd.DataFrame:
    """One row per reference circle layer (setup, width, seed): time_to_collapse (the upper
    median over its start pairs, no collapse = the roll-out's length + 1), collapsed, and
    share_collapsed, as claims.e3.layer_times computes them for ours."""
    rows = []
    for run in data["runs"]:
        if run["experiment"] != "E3":
            continue
        r, s = run["results"], run["settings"]
        length = int(s.get("rollout_points", 300))
        steps = r.get("four_starts_collapse_step") or [r.get("collapse_step")]
        times = np.array([length + 1 if v is None else float(v) for v in steps], float)
        time = float(np.quantile(times, 0.5, method="higher"))
        rows.append({"setup": run["setup"], "width": int(s["width"]), "seed": int(s["seed"]),
                     "time_to_collapse": time, "collapsed": time <= length,
                     "share_collapsed": float(np.mean(times <= length)),
                     "settings_match": run["settings_match"]})
    return pd.DataFrame(rows)
