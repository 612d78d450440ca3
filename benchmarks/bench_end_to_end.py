"""B6: where the default run's time goes, and a projection of paper.yaml.

Measured: wall time of every job of the last default run in this checkout, from Snakemake's
`benchmark:` records (results/benchmarks/<stage>/...), summed per stage.
Projected (not measured): paper.yaml's cost, as (paper's job count per rule, from a dry-run) x
(mean measured cost of that rule's jobs in the default run) x (a work factor: how much more
arithmetic one paper job does than one default job, from the two configs; 1 where no simple
model exists). Then spread over one 16-core GPU workstation and N-node clusters, assuming
perfect packing of independent jobs; GPU speed-ups are an assumption, stated in the entry.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import yaml

try:
    from common import record
except ImportError:
    from .common import record

ROOT = Path(__file__).resolve().parents[1]
# Stage folder under results/benchmarks -> rule name
STAGE_RULE = {"init": "init_sweep", "train": "train", "metrics": "train_metrics",
              "particles": "particles", "realarch": "realarch", "paths": "path_accuracy",
              "circle": "circle", "notebooks": "notebook", "collect": "collect"}
GPU_SPEEDUP = 20.0  # assumed: one GPU vs this 2-core CPU on the training jobs (not measured)
CORES_PER_NODE = 16


def measured() -> dict[str, list[float]]:
    per_stage: dict[str, list[float]] = defaultdict(list)
    for path in sorted((ROOT / "results/benchmarks").rglob("*.tsv")):
        stage = path.relative_to(ROOT / "results/benchmarks").parts[0]
        stage = Path(stage).stem
        lines = path.read_text().splitlines()
        per_stage[stage].append(float(lines[1].split("\t")[0]))
    return per_stage


def config(name: str) -> dict:
    base = yaml.safe_load((ROOT / "workflow/config/default.yaml").read_text())
    if name != "default":
        base.update(yaml.safe_load((ROOT / f"workflow/config/{name}.yaml").read_text()))
    return base


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
    times = measured()
    if not times:
        return record("B6_end_to_end", {"what": "no finished default run in results/ "
                                        "(run `make reproduce` first)", "met": None})
    stages = {stage: {"jobs": len(v), "total_s": sum(v), "mean_s": statistics.mean(v),
                      "max_s": max(v)} for stage, v in sorted(times.items())}
    default, paper = config("default"), config("paper")
    jobs = paper_jobs()
    projection = {}
    for stage, stats in stages.items():
        rule = STAGE_RULE.get(stage, stage)
        count = sum(n for r, n in jobs.items() if r == rule or (stage == "collect" and
                                                                 r.startswith("collect")))
        factor = work_factor(rule, default, paper)
        projection[stage] = {"paper_jobs": count, "work_factor": factor,
                             "cpu_s": count * stats["mean_s"] * factor}
    cpu_total = sum(p["cpu_s"] for p in projection.values())
    train_cpu = projection.get("train", {}).get("cpu_s", 0.0)
    gpu_box = (train_cpu / GPU_SPEEDUP + (cpu_total - train_cpu) / (CORES_PER_NODE / 2))
    entry = {
        "what": "default run per stage (measured) and paper.yaml (projected)",
        "stages": stages,
        "total_s": sum(s["total_s"] for s in stages.values()),
        "projection": projection,
        "paper_cpu_hours_on_2_cores": cpu_total / 3600,
        "paper_hours_one_gpu_workstation": gpu_box / 3600,
        "paper_hours_on_nodes": {n: cpu_total / 3600 / (n * CORES_PER_NODE / 2)
                                 for n in (1, 4, 16)},
        "assumptions": f"GPU = {GPU_SPEEDUP:g}x a 2-core CPU on training jobs; "
                       f"{CORES_PER_NODE}-core nodes run {CORES_PER_NODE // 2} 2-core jobs at "
                       "once; perfect packing; work factors from the configs",
        "met": None,
    }
    return record("B6_end_to_end", entry)


if __name__ == "__main__":
    r = run()
    for stage, s in r.get("stages", {}).items():
        p = r["projection"][stage]
        print(f"{stage:10s} {s['jobs']:4d} jobs {s['total_s']:8.1f} s   paper: "
              f"{p['paper_jobs']:5d} jobs x{p['work_factor']:.3g} work -> "
              f"{p['cpu_s'] / 3600:.2f} h")
    if "stages" in r:
        print(f"paper.yaml projection: {r['paper_cpu_hours_on_2_cores']:.1f} h on 2 cores, "
              f"{r['paper_hours_one_gpu_workstation']:.1f} h on one GPU workstation, "
              + ", ".join(f"{h:.2f} h on {n} nodes" for n, h in r["paper_hours_on_nodes"].items())
              + f" ({r['assumptions']})")
