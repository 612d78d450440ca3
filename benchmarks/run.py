"""Run the benchmark suite: python benchmarks/run.py [NAME ...]  (or `make bench`).

Each bench_*.py module has run() -> dict (its entry, also merged into benchmarks/results.json).
Prints one line per benchmark: the ratio, the target, met or missed.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# Name -> (module, the ratio key, how to print it)
SUITE = {
    "B1_training_step": ("bench_training", "ratio", "ours/reference tokens per s"),
    "B2_depth_sweep": ("bench_depth_sweep", "speedup", "one pass vs per-depth networks"),
    "B3_particles": ("bench_particles", "speedup", "vectorised vs per-token loop"),
    "B4_paths": ("bench_paths", "speedup", "dynamic programme vs 2^L enumeration"),
    "B5_workflow": ("bench_workflow", "dry_run_s", "snakemake -n on paper.yaml (s)"),
    "B6_end_to_end": ("bench_end_to_end", "total_s", "default run, summed job wall time (s)"),
    "B7_ensemble": ("bench_ensemble", "ratio", "K=8 ensemble vs one after another"),
    "B8_run_time": ("bench_run_time", "wall_s", "default run's workflow wall time (s)"),
    "B9_gpu_step": ("bench_gpu_step", "best_fraction", "deepest arm, best share of fp32 rate"),
    "B10_probe": ("bench_probe", "wall_s", "rankcollapse probe, BERT-base, 5 ablations (s)"),
}


def main(names: list[str]) -> int:
    threads = int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1))
    torch.set_num_threads(threads)
    print(f"torch threads: {threads} (BENCH_THREADS); results -> {HERE / 'results.json'}")
    failed = []
    for name, (module, key, label) in SUITE.items():
        if names and name not in names and module not in names:
            continue
        if not (HERE / f"{module}.py").exists():
            print(f"{name:18s} not available yet ({module}.py missing)")
            continue
        start = time.perf_counter()
        try:
            entry = importlib.import_module(module).run()
        except Exception as err:  # report and go on: one broken benchmark hides no others
            failed.append(name)
            print(f"{name:18s} FAILED: {type(err).__name__}: {err}")
            continue
        met = {True: "met", False: "MISSED", None: "-"}[entry.get("met")]
        took = time.perf_counter() - start
        print(f"{name:18s} {label:40s} {entry.get(key, float('nan')):10.3g}  "
              f"target {entry.get('target', '-'):>8s}  {met:6s} ({took:.0f} s)")
    return 1 if failed else 0


def table() -> str:
    """The latest results.json as the Markdown table of benchmarks/README.md."""
    import json

    data = json.loads((HERE / "results.json").read_text())
    lines = ["| id | measured | target | met |", "|---|---|---|---|"]
    for name, (_, key, label) in SUITE.items():
        if name not in data:
            continue
        entry = data[name]
        value = entry.get(key)
        shown = f"{value:.3g}" if isinstance(value, int | float) else "—"
        met = {True: "yes", False: "**no**", None: "—"}[entry.get("met")]
        lines.append(f"| {name} | {label}: {shown} | {entry.get('target', '—')} | {met} |")
    any_entry = next(iter(data.values()))
    lines.append("")
    lines.append(f"Machine: {any_entry['machine']}; measured {any_entry['date']}.")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--table"]:
        print(table())
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
