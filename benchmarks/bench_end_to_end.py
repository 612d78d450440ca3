"""B6: where the default run's time goes, and a projection of paper.yaml.

Measured: wall and CPU time of every job of the last default run in this checkout, from
Snakemake's `benchmark:` records (results/benchmarks/<stage>/...), summed per stage.
Projected (not measured): paper.yaml's cost. Training: the FLOPs of every member step of both
configs (gpu_projection's FLOP model per member step over every ensemble they train); the
default run's measured training seconds per FLOP give paper's CPU cost, and one GPU's time is
gpu_projection's step-time model (fitted to B9's rows from a GPU when any are in the results,
else to the H200 reference of benchmarks/gpu_reference.yaml), per experiment. Other stages:
(paper's job count per rule, from a dry-run) x (mean measured cost of that rule's jobs) x (a
work factor from the configs; 1 where no simple model exists), spread over 16-core nodes with
perfect packing. Every assumption is in the entry.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

try:
    from common import record
    from gpu_projection import ensembles, load_config, projections
except ImportError:
    from .common import record
    from .gpu_projection import ensembles, load_config, projections

ROOT = Path(__file__).resolve().parents[1]
# Stage folder under results/benchmarks -> rule name
STAGE_RULE = {"init": "init_sweep", "train": "train", "particles": "particles",
              "realarch": "realarch", "paths": "path_accuracy", "circle": "circle",
              "notebooks": "notebook", "collect": "collect", "tuned": "train_tuned"}
CORES_PER_NODE = 16


def measured() -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """({stage: job wall seconds}, {stage: job CPU seconds}) of the run in results/."""
    wall: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    for path in sorted((ROOT / "results/benchmarks").rglob("*.tsv")):
        stage = path.relative_to(ROOT / "results/benchmarks").parts[0]
        stage = Path(stage).stem
        header, values = (line.split("\t") for line in path.read_text().splitlines()[:2])
        row = dict(zip(header, values, strict=False))
        wall[stage].append(float(row["s"]))
        cpu[stage].append(float(row.get("cpu_time") or "nan"))
    return wall, cpu


def training_work(config: dict) -> dict:
    """FLOPs of all training of a config (every ensemble gpu_projection.ensembles lists: the
    train rule's for E2 and E4, the tuned sweep rungs and final seeds of E5 and E5b), with
    counts."""
    work = ensembles(config)
    return {"flops": sum(e["members"] * e["steps"] * e["flops"] for e in work),
            "members": sum(e["members"] for e in work), "ensembles": len(work)}


def work_factor(rule: str, default: dict, paper: dict) -> float:
    """Arithmetic per job, paper / default, from the configs (a rough cost model per rule)."""
    def per(cfg, keys):
        out = 1.0
        for key in keys:
            section, field = key.split(".")
            value = cfg.get(section, {}).get(field, 1)
            out *= value ** 2 if field == "width" else value
        return out

    models = {
        "init_sweep": ["init_sweep.depth", "init_sweep.batch", "init_sweep.tokens",
                       "init_sweep.width"],
        "train": ["train.steps", "train.batch", "train.width"],
        "realarch": ["realarch.batch", "realarch.tokens"],
        "circle": ["circle.steps", "circle.batch"],
    }
    if rule not in models:
        return 1.0
    return per(paper, models[rule]) / per(default, models[rule])


def paper_jobs() -> dict[str, int]:
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "16",
                           "--configfile", "workflow/config/paper.yaml"], cwd=ROOT,
                          capture_output=True, text=True)
    stats = proc.stdout.split("Job stats:")[1].split("Reasons:")[0] if "Job stats:" in \
        proc.stdout else ""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", stats, re.M)
            if m.group(1) != "total"}


def run() -> dict:
    wall, cpu = measured()
    if not wall:
        return record("B6_end_to_end", {"what": "no finished default run in results/ "
                                        "(run `make reproduce` first)", "met": None})
    stages = {stage: {"jobs": len(v), "total_s": sum(v), "mean_s": statistics.mean(v),
                      "max_s": max(v), "cpu_s": sum(cpu[stage])}
              for stage, v in sorted(wall.items())}
    default, paper = load_config("default"), load_config("paper")
    jobs = paper_jobs()
    projection = {}
    for stage, stats in stages.items():
        rule = STAGE_RULE.get(stage, stage)
        if rule in ("train", "train_tuned"):  # projected below, by FLOPs
            continue
        count = sum(n for r, n in jobs.items() if r == rule or (stage == "collect" and
                                                                 r.startswith("collect")))
        factor = work_factor(rule, default, paper)
        projection[stage] = {"paper_jobs": count, "work_factor": factor,
                             "cpu_s": count * stats["mean_s"] * factor}
    # Training, through the ensemble engine: seconds per FLOP measured on the default run.
    work_default, work_paper = training_work(default), training_work(paper)
    # Job wall time, not the records' CPU time: Snakemake samples a job's CPU every 30 s, so
    # a job's last seconds go uncounted; each job runs one thread on its own core, so its wall
    # time is its CPU time.
    trained = [stages[s] for s in ("train", "tuned") if s in stages]
    train_cpu = 0.0
    if trained:
        seconds = sum(s["total_s"] for s in trained)
        train_cpu = work_paper["flops"] * seconds / work_default["flops"]
        projection["train"] = {"paper_jobs": work_paper["ensembles"],
                               "work_factor": work_paper["flops"] / work_default["flops"],
                               "cpu_s": train_cpu}
    # One GPU: every ensemble priced by the step-time model fitted to GPU measurements
    # (gpu_projection: B9's rows from a GPU when there are any, else the H200 reference).
    gpu = projections(paper)
    scenarios = gpu["scenarios"]
    measured_b9 = [name for name in scenarios if name not in ("eager", "graph", "target")]
    best = min(measured_b9, key=lambda n: scenarios[n]["total_h"]) if measured_b9 else "graph"
    gpu_train = scenarios[best]["total_h"] * 3600
    cpu_total = sum(p["cpu_s"] for p in projection.values())
    gpu_box = gpu_train + (cpu_total - train_cpu) / (CORES_PER_NODE / 2)
    entry = {
        "what": "default run per stage (measured) and paper.yaml (projected)",
        "stages": stages,
        "total_s": sum(s["total_s"] for s in stages.values()),
        "total_cpu_s": sum(s["cpu_s"] for s in stages.values()),
        "projection": projection,
        "training": {"default": work_default, "paper": work_paper,
                     "paper_train_hours_one_gpu": gpu_train / 3600,
                     "paper_train_scenario": best,
                     "gpu_scenarios": scenarios,
                     "target": "<= 2 h on one H200 (projection)"},
        "paper_cpu_hours_on_2_cores": cpu_total / 3600,
        "paper_hours_one_gpu_workstation": gpu_box / 3600,
        "paper_hours_on_nodes": {n: cpu_total / 3600 / (n * CORES_PER_NODE / 2)
                                 for n in (1, 4, 16)},
        "assumptions": f"GPU training: gpu_projection's step-time model, scenario {best!r} "
                       f"({scenarios[best]['model']['source']}); job start-up and evaluation "
                       f"left out; {CORES_PER_NODE}-core nodes run {CORES_PER_NODE // 2} "
                       "2-core jobs at once; perfect packing; work factors from the configs",
        "met": None,
    }
    return record("B6_end_to_end", entry)


if __name__ == "__main__":
    r = run()
    for stage, s in r.get("stages", {}).items():
        p = r["projection"].get("train" if stage == "tuned" else stage)
        print(f"{stage:10s} {s['jobs']:4d} jobs {s['total_s']:8.1f} s wall {s['cpu_s']:8.1f} s "
              f"CPU   paper: {p['paper_jobs']:5d} jobs x{p['work_factor']:.3g} work -> "
              f"{p['cpu_s'] / 3600:.2f} h" + ("  (train and tuned together)"
                                                if stage in ("train", "tuned") else ""))
    if "stages" in r:
        t = r["training"]
        hours = t["paper_train_hours_one_gpu"]
        print(f"paper.yaml training on one GPU (projection, step model "
              f"{t['paper_train_scenario']!r}): {hours:.2f} h; " + ", ".join(
                  f"{name} {s['total_h']:.1f} h" for name, s in t["gpu_scenarios"].items())
              + "; target <= 2 h")
        print(f"paper.yaml projection: {r['paper_cpu_hours_on_2_cores']:.1f} h on 2 cores, "
              f"{r['paper_hours_one_gpu_workstation']:.1f} h on one GPU workstation, "
              + ", ".join(f"{h:.2f} h on {n} nodes" for n, h in r["paper_hours_on_nodes"].items())
              + f" ({r['assumptions']})")
