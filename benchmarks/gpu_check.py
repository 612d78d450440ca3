"""The GPU check: what one GPU machine does with this project, in under 8 minutes.

    make bench-gpu            (or: python3 benchmarks/gpu_check.py, with the machine's own torch)
    make bench-gpu QUICK=1    (the CPU mode CI runs: tiny sizes, the workflow only dry-run)

Steps, each in its own process with its own time limit (a step that fails or runs out of time
is reported and the others go on):

1. the machine: Python, torch, CUDA, the GPU; the Python packages the workflow needs that are
   missing (with the command that installs them) — the benchmarks need only torch, numpy,
   pandas and PyYAML;
2. B1 (a training step against nn.TransformerEncoderLayer) and B7 (K = 8, 32, 128 members as
   one ensemble against one after another) on the GPU;
3. B9 (`bench_gpu_step.py`): a paper arm at depths 16 and 128, K = 32, per engine (eager,
   CUDA graph, compiled) and precision (float32, tf32, bf16), as a fraction of the device's
   matrix rate;
4. the CI config through Snakemake with `device: cuda` and train.gpu 1, in a scratch copy of
   the project (`--cores 16 --resources gpu_mb=<the GPU's memory>`, report.pdf off), timed
   (target: 2 minutes);

then prints the Markdown rows for benchmarks/README.md with the machine's name, and B6's
projection of paper.yaml's training on one GPU per experiment (gpu_projection.py, fitted to this
run's B9 rows when it ran on a GPU). Results go to
results/gpu_check/ (results.json, the workflow's log, table.md), never to the CPU table's
benchmarks/results.json.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = ROOT / "results/gpu_check"
QUICK = os.environ.get("QUICK", "0") not in ("", "0")
BUDGET_S = float(os.environ.get("GPU_CHECK_BUDGET_S", 480))  # the whole check: 8 minutes
# QUICK mode's steps take about a minute of CPU in all (2026-12-05), but CI runs them beside
# the suite's background workflow runs, which can triple their wall time: each step gets 4
# minutes there, so that a loaded machine does not read as a broken check.
QUICK_LIMIT_S = 240.0
# The workflow's Python packages beyond the benchmarks' (module name: pip name).
WORKFLOW_MODULES = {"snakemake": "snakemake", "papermill": "papermill", "nbformat": "nbformat",
                    "nbconvert": "nbconvert", "ipykernel": "ipykernel",
                    "jsonschema": "jsonschema", "jinja2": "Jinja2", "matplotlib": "matplotlib",
                    "seaborn": "seaborn", "sklearn": "scikit-learn", "scipy": "scipy",
                    "pyarrow": "pyarrow", "transformers": "transformers",
                    "jupytext": "jupytext"}
BENCH_MODULES = {"torch": "torch", "numpy": "numpy", "pandas": "pandas", "yaml": "PyYAML"}


def missing(modules: dict[str, str]) -> list[str]:
    return [pip for name, pip in modules.items() if importlib.util.find_spec(name) is None]


def machine() -> dict:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "cuda_available": torch.cuda.is_available(), "cpus": os.cpu_count(),
            "host": platform.node()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_mb=props.total_memory // 2**20,
                    gpus=torch.cuda.device_count(), cuda=torch.version.cuda)
    return info


def step(name: str, command: list[str], env: dict, limit_s: float, log: Path) -> dict:
    """Run one step in its own process; its output goes to `log`."""
    start = time.monotonic()
    limit_s = max(1.0, limit_s)
    with log.open("w") as out:
        try:
            proc = subprocess.run(command, cwd=env.get("CWD", ROOT), env=env, stdout=out,
                                  stderr=subprocess.STDOUT, timeout=limit_s)
            status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
        except subprocess.TimeoutExpired:
            status = f"stopped after its limit of {limit_s:.0f} s"
    took = time.monotonic() - start
    print(f"gpu-check: {name}: {status} in {took:.0f} s (log {log.relative_to(ROOT)})",
          flush=True)
    return {"step": name, "status": status, "seconds": took, "log": str(log)}


def workflow_command(gpu: bool, folder: Path, gpu_mb: int) -> list[str]:
    extra = folder / "gpu_check.yaml"
    extra.write_text("device: cuda\ntrain: {gpu: 1}\nreport: {pdf: false}\n" if gpu else
                     "device: cpu\nreport: {pdf: false}\n")
    command = [sys.executable, "-m", "snakemake", "--cores", str(os.cpu_count() or 2),
               "--configfile", "workflow/config/ci.yaml", str(extra)]
    if gpu:
        command += ["--resources", f"gpu_mb={gpu_mb}"]
    return command + (["-n"] if not gpu else [])


def scratch_copy() -> Path:
    """The tracked (and untracked, not ignored) files of the project in a scratch folder."""
    folder = Path(tempfile.mkdtemp(prefix="rankcollapse-gpu-check-"))
    try:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # no git: everything but results/
        files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()
                 and p.relative_to(ROOT).parts[0] not in ("results", ".venv", ".snakemake")]
    for name in files:
        source = ROOT / name
        if source.is_file():
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return folder


def table(results: dict, info: dict, steps: list[dict]) -> str:
    """The Markdown for benchmarks/README.md: the machine, then one row per benchmark."""
    sys.path[:0] = [str(ROOT / "src"), str(HERE)]  # B9's table imports rankcollapse
    name = info.get("gpu", "no GPU (CPU quick mode)")
    lines = [f"Machine: {name}, {info['cpus']} CPU cores, torch {info['torch']}"
             + (f" (CUDA {info['cuda']})" if info.get("cuda") else "")
             + f", Python {info['python']}; measured {time.strftime('%Y-%m-%d')}"
             + (" (QUICK=1: tiny sizes, not figures to quote)" if QUICK else "") + ".", "",
             "| id | what | measured | target |", "|---|---|---|---|"]
    if "B1_training_step" in results:
        r = results["B1_training_step"]
        lines.append(f"| B1 | {r['what']} | **{r['ratio']:.2f}×** "
                     f"({r['ours_tokens_per_s']:.0f} vs {r['reference_tokens_per_s']:.0f} "
                     f"tok/s) | ≥ 0.9× |")
    if "B7_ensemble" in results:
        r = results["B7_ensemble"]
        cells = "; ".join(f"K = {v['members']}: **{v['ratio']:.1f}×** "
                          f"({v['ensemble_member_steps_per_s']:.0f} vs "
                          f"{v['sequential_member_steps_per_s']:.0f} member-steps/s, "
                          f"{100 * v['ensemble_fraction_of_matmul_rate']:.1f}% of float32)"
                          for v in r["results"].values())
        lines.append(f"| B7 | ensemble vs one after another, {r['device']} | {cells} | "
                     "≥ 4× at K = 8 |")
    from bench_gpu_step import table as b9_table

    for key in sorted(k for k in results if k.startswith("B9_gpu_step")):
        r = results[key]
        lines += ["", f"B9 ({key}; matrix rates, TFLOP/s: "
                  + ", ".join(f"{p} {v / 1e12:.1f}" for p, v in r["matmul_flops_per_s"].items())
                  + f"; target {r['target']})", "", b9_table(r)]
    lines += ["", "| step | status | seconds |", "|---|---|---|"]
    lines += [f"| {s['step']} | {s['status']} | {s['seconds']:.0f} |" for s in steps]
    return "\n".join(lines)


def paper_projection() -> str:
    """B6's projection of paper.yaml's training on one GPU, per experiment, from the step-time
    models of gpu_projection (this run's B9 rows when it ran on a GPU, else the reference)."""
    sys.path[:0] = [str(ROOT / "src"), str(HERE)]
    import gpu_projection

    p = gpu_projection.projections(gpu_projection.load_config("paper"))
    experiments = sorted({e for s in p["scenarios"].values() for e in s["per_experiment_h"]})
    lines = [f"B6, paper.yaml's training on one GPU (projected: {p['ensembles']} ensembles, "
             f"{p['flops']:.3g} FLOPs; hours per experiment):", "",
             "| step model | " + " | ".join(experiments) + " | total | fitted to |",
             "|---|" + "---|" * (len(experiments) + 2)]
    for name, s in p["scenarios"].items():
        cells = " | ".join(f"{s['per_experiment_h'].get(e, 0):.2f}" for e in experiments)
        lines.append(f"| {name} | {cells} | **{s['total_h']:.1f} h** | "
                     f"{s['model']['source']} |")
    return "\n".join(lines)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    lacking = missing(BENCH_MODULES)
    if lacking:
        print("gpu-check: cannot run: missing " + ", ".join(lacking)
              + " (pip install " + " ".join(lacking) + ")")
        return 2
    info = machine()
    gpu = bool(info["cuda_available"])
    print(f"gpu-check: {json.dumps(info)}", flush=True)
    if not gpu and not QUICK:
        print("gpu-check: no GPU is visible to torch: nothing to measure (QUICK=1 runs the "
              "CPU quick mode)")
        return 2
    workflow_lacking = missing(WORKFLOW_MODULES)
    if workflow_lacking:
        print("gpu-check: the workflow step needs " + ", ".join(workflow_lacking) + ", which "
              "this Python lacks; install them (pip install " + " ".join(workflow_lacking)
              + ", or carry wheels: ../shared/notes/gpu-h200.md) or the step is skipped")
    results_file = OUT / "results.json"
    results_file.unlink(missing_ok=True)
    env = {**os.environ, "BENCH_RESULTS": str(results_file), "PYTHONPATH":
           os.pathsep.join([str(ROOT / "src"), str(HERE), os.environ.get("PYTHONPATH", "")]),
           "BENCH_DEVICE": "cuda" if gpu else "cpu", "MPLBACKEND": "Agg"}
    if not gpu:
        env.update(BENCH_THREADS="1", B7_STEPS="4", B7_SIZES="8")
    else:
        env.update(B7_SIZES="8,32,128")

    def left() -> float:
        return BUDGET_S - (time.monotonic() - start)

    def limit(gpu_limit_s: float) -> float:
        return QUICK_LIMIT_S if not gpu else min(gpu_limit_s, left())

    python = [sys.executable, str(HERE / "run.py")]
    steps = [step("B1", [*python, "B1_training_step"], env, limit(60), OUT / "b1.log"),
             step("B7", [*python, "B7_ensemble"], env, limit(120), OUT / "b7.log")]
    b9 = [("B9 eager and graph", {"B9_TAG": "", "B9_ENGINES": "eager,graph"}, 170, "b9.log")]
    if gpu:  # compilation of a depth-128 stack may take minutes: last, with what time is left
        b9.append(("B9 compile", {"B9_TAG": "_compile", "B9_ENGINES": "compile",
                                  "B9_PRECISIONS": "float32,bf16"}, 90, "b9_compile.log"))
    else:
        b9 = [("B9", {"B9_TAG": ""}, 120, "b9.log")]
    for name, extra, limit_s, log in b9:  # 2 minutes are kept for the workflow on a GPU
        steps.append(step(name, [*python, "B9_gpu_step"], {**env, **extra},
                          limit(min(limit_s, left() - 120)), OUT / log))
    if workflow_lacking:
        steps.append({"step": "workflow (CI config)", "status": "skipped: missing "
                      + ", ".join(workflow_lacking), "seconds": 0.0, "log": ""})
    else:
        folder = scratch_copy()
        gpu_mb = int(info.get("gpu_memory_mb", 0)) * int(info.get("gpus", 1))
        name = "workflow (CI config, device cuda)" if gpu else "workflow (CI config, dry-run)"
        steps.append(step(name, workflow_command(gpu, folder, gpu_mb),
                          {**env, "CWD": str(folder)},
                          QUICK_LIMIT_S if not gpu else max(60.0, left()),
                          OUT / "workflow.log"))
        shutil.rmtree(folder, ignore_errors=True)
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    text = table(results, info, steps) + "\n\n" + paper_projection()
    (OUT / "table.md").write_text(text + "\n")
    print(text)
    print(f"gpu-check: finished in {time.monotonic() - start:.0f} s; table in "
          f"{(OUT / 'table.md').relative_to(ROOT)}")
    return 0 if all(s["status"] == "ok" or s["status"].startswith("skipped")
                    for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
