"""B6's GPU projection: how long a config's training takes on one GPU, per experiment.

    python benchmarks/gpu_projection.py [paper|default|ci|<config file>]

Every ensemble a config trains (rankcollapse.plan.training: the train rule's jobs for E2, E4; the
tuned jobs of E5 and of E5b's rival fixes: each sweep rung, split into parts by
train.ensemble_memory_mb, then the final seeds) is priced by a step-time model fitted to GPU
measurements:

    step time = ((per_layer_s x depth)^q + (K x flops per member step / rate)^q)^(1/q)

the first term the launch and dispatch cost of a step (it grows with depth, not with K), the
second its arithmetic at the rate the step reaches when compute-bound, q how the two overlap
(fitted: 1.7 on the H200's eager points). The model is fitted to B9's rows when a B9 run on a
GPU is in benchmarks/results.json or results/gpu_check/results.json (per engine and
precision), else to benchmarks/gpu_reference.yaml (the H200 measurements of the previous engine:
its eager step, and its forward + backward captured in a CUDA graph). Start-up of
jobs and evaluation are left out. A projection, not a measurement.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REFERENCE = HERE / "gpu_reference.yaml"
RESULTS = [HERE / "results.json", ROOT / "results/gpu_check/results.json"]
TARGET_H = 2.0  # the engine's target: paper.yaml's training on one GPU


def load_config(name: str) -> dict:
    """default.yaml with a named config (paper, ci, diagnostics) or a file merged over it, as
    Snakemake merges a --configfile (nested mappings key by key)."""
    from rankcollapse.plan.config import load_config

    default = ROOT / "workflow/config/default.yaml"
    if name == "default":
        return load_config(default)
    return load_config(default, Path(name) if Path(name).suffix else
                       ROOT / f"workflow/config/{name}.yaml")


def member_step_flops(config: dict, task: str, task_options: dict, variant: str,
                      model_options: dict, batch: int) -> float:
    """FLOPs of one training step of one member (forward + backward ~ 3x forward): the
    matrix products of every block, attention scores and mixing, embedding and read-out."""
    from rankcollapse.core.tasks import task_spec

    spec = task_spec(task, **task_options)
    switches = config["variants"][variant]
    m = model_options
    d, n = m["width"], spec.tokens + (spec.readout == "class_token")
    block = 2 * 4 * d * d + 2 * 2 * n * d  # qkv + proj; scores + mixing, per token
    if switches["mlp"]:
        block += 2 * 2 * d * m["mlp_ratio"] * d
    around = 2 * spec.input_dim * d + 2 * d * spec.classes
    return 3 * batch * n * (m["depth"] * block + around)


def ensembles(config: dict) -> list[dict]:
    """Every ensemble a config trains: experiment, task, depth, members K, steps, FLOPs per
    member step, and what it is (train, sweep rung r, final)."""
    from rankcollapse.plan import experiments, memory, tuned
    from rankcollapse.plan import training as trainplan

    out = []
    groups = trainplan.groups(config)
    owners = {}
    for experiment in experiments.ensemble_trained():
        if experiment in config["report"]["experiments"]:
            for key in trainplan.experiment_groups(config, experiment):
                owners.setdefault(key, experiment)  # shared architectures train once
    for job in trainplan.ensembles(config):
        if job.key not in owners:
            continue
        g = groups[job.key]
        flops = member_step_flops(config, job.task, g.task_options, job.variant,
                                  g.model_options, g.train_options["batch"])
        out.append({"experiment": owners[job.key], "task": job.task, "depth": job.depth,
                    "members": len(job.members), "steps": g.train_options["steps"],
                    "flops": flops, "what": "train"})
    if not {"E5", "E5b"} & set(config["report"]["experiments"]):
        return out
    grid = config["depth_grid"]
    e5 = {*grid["variants"], *grid.get("placements", [])}
    for task, variant, depth in experiments.tuned_runs(config):
        experiment = "E5" if variant in e5 else "E5b"  # E5b's rival fixes are tuned arms too
        p = tuned.tuned_params(config, task, variant, depth)
        flops = member_step_flops(config, task, p["task_options"], variant, p["model_options"],
                                  p["train_options"]["batch"])
        fit = max(1, math.floor(p["memory"]["budget_mb"] / p["memory"]["member_mb"]))
        for work in tuned.arm_work(p):
            # a sweep larger than one ensemble's memory trains in parts, one after another
            parts = (memory.split(list(range(work["members"])), 1.0, float(fit))
                     if work["what"] != "final" else [range(work["members"])])
            out += [{"experiment": experiment, "task": task, "depth": depth,
                     "members": len(part), "steps": work["steps"], "flops": flops,
                     "what": work["what"]} for part in parts]
    return out


@dataclass
class StepModel:
    """Seconds per step of K members: see the module docstring."""

    per_layer_s: float
    rate: float  # FLOP/s when compute-bound
    q: float
    source: str

    def step_s(self, depth: int, members: int, flops: float) -> float:
        x, y = self.per_layer_s * depth, members * flops / self.rate
        return (x**self.q + y**self.q) ** (1 / self.q)


def _solve_q(x: float, y: float, t: float) -> float:
    """q with (x^q + y^q)^(1/q) = t (max(x, y) < t < x + y), by bisection."""
    lo, hi = 1.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        value = (x**mid + y**mid) ** (1 / mid)
        lo, hi = (mid, hi) if value > t else (lo, mid)
    return (lo + hi) / 2


def _digits_flops(depth: int) -> float:
    """FLOPs per member step of the reference's arm (paper sizes, post-LN, digits)."""
    config = load_config("paper")
    model = {k: config["train"][k] for k in ("width", "heads", "mlp_ratio")}
    return member_step_flops(config, "digits", config["tasks"]["digits"], "post_ln",
                             {**model, "depth": depth}, config["depth_grid"]["batch"])


def reference_models() -> dict[str, StepModel]:
    """{eager, graph}: the model fitted to gpu_reference.yaml (the H200, the previous engine)."""
    ref = yaml.safe_load(REFERENCE.read_text())
    eager = {(r["depth"], r["members"]): r["member_steps_per_s"] for r in ref["eager"]
             if "task" not in r}
    deep, shallow = max(d for d, _ in eager), min(d for d, _ in eager)
    per_layer = 1 / eager[(deep, 1)] / deep  # one member: the launch-bound step
    k_max = max(k for d, k in eager if d == shallow)
    rate = eager[(shallow, k_max)] * _digits_flops(shallow)  # compute-bound
    k_deep = max(k for d, k in eager if d == deep)
    q = _solve_q(per_layer * deep, k_deep * _digits_flops(deep) / rate,
                 k_deep / eager[(deep, k_deep)])
    models = {"eager": StepModel(per_layer, rate, q, f"eager, {ref['source']}")}
    graph = {(r["depth"], r["members"]): r["ms"] / 1e3 for r in ref["graph_forward_backward_ms"]}
    g_rate = k_max * _digits_flops(shallow) / graph[(shallow, k_max)]
    k_small = min(k for d, k in graph if d == deep)
    y = k_small * _digits_flops(deep) / g_rate
    x = max(graph[(deep, k_small)] ** q - y**q, 1e-12) ** (1 / q)
    models["graph"] = StepModel(x / deep, g_rate, q, "CUDA graph of forward + backward "
                                f"(no optimiser), {ref['source']}")
    models["target"] = StepModel(x / deep, 0.30 * ref["float32_matmul_tflops"] * 1e12, q,
                                 "the engine's target: the graph's launch cost, arithmetic at "
                                 "30% of the float32 matrix rate")
    return models


def measured_models() -> dict[str, StepModel]:
    """{engine precision: model} fitted to B9 rows measured on a GPU, if any: per-layer cost
    and rate solved from its two depths at one K (q as in the reference)."""
    q = reference_models()["eager"].q
    rows = []
    for path in RESULTS:
        if path.exists():
            data = json.loads(path.read_text())
            for key, entry in data.items():
                if key.startswith("B9_gpu_step") and entry.get("device") == "cuda":
                    rows += [dict(r, date=entry["date"], machine=entry["machine"])
                             for r in entry["results"]]
    models = {}
    for name in sorted({f"{r['engine']} {r['precision']}" for r in rows}):
        mine = sorted((r for r in rows if f"{r['engine']} {r['precision']}" == name),
                      key=lambda r: r["depth"])
        if len(mine) < 2:
            continue
        a, b = mine[0], mine[-1]
        best = None
        for i in range(-60, 61):  # a grid over per-layer cost, the rate solved from the shallow
            per_layer = 10 ** (i / 20) * 1e-4
            x = per_layer * a["depth"]
            if x >= a["step_s"]:
                continue
            rate = a["members"] * a["flops_per_member_step"] / (a["step_s"] ** q - x**q) ** (1 / q)
            model = StepModel(per_layer, rate, q, "")
            error = abs(math.log(model.step_s(b["depth"], b["members"],
                                              b["flops_per_member_step"]) / b["step_s"]))
            if best is None or error < best[0]:
                best = (error, model)
        if best is not None:
            best[1].source = f"B9 {name}, {a['machine'].get('gpu', '?')} ({a['date']})"
            models[name] = best[1]
    return models


def project(config: dict, model: StepModel) -> dict:
    """{experiment: GPU-hours of training} and the total, for one step model."""
    hours: dict[str, float] = {}
    for e in ensembles(config):
        seconds = e["steps"] * model.step_s(e["depth"], e["members"], e["flops"])
        hours[e["experiment"]] = hours.get(e["experiment"], 0.0) + seconds / 3600
    return {"per_experiment_h": dict(sorted(hours.items())), "total_h": sum(hours.values()),
            "model": model.__dict__}


def projections(config: dict) -> dict:
    models = {**reference_models(), **measured_models()}
    work = ensembles(config)
    return {"ensembles": len(work), "members": sum(e["members"] for e in work),
            "member_steps": sum(e["members"] * e["steps"] for e in work),
            "flops": sum(e["members"] * e["steps"] * e["flops"] for e in work),
            "scenarios": {name: project(config, m) for name, m in models.items()}}


def main(name: str = "paper") -> None:
    sys.path.insert(0, str(ROOT / "src"))
    p = projections(load_config(name))
    print(f"{name}: {p['ensembles']} ensembles, {p['members']} members, "
          f"{p['member_steps']:.3g} member-steps, {p['flops']:.3g} FLOPs")
    experiments = sorted({e for s in p["scenarios"].values() for e in s["per_experiment_h"]})
    print("| step model | " + " | ".join(experiments) + " | total |")
    print("|---|" + "---|" * (len(experiments) + 1))
    for scenario, s in p["scenarios"].items():
        cells = " | ".join(f"{s['per_experiment_h'].get(e, 0):.2f}" for e in experiments)
        print(f"| {scenario} | {cells} | **{s['total_h']:.1f} h** |")
    for scenario, s in p["scenarios"].items():
        m = s["model"]
        print(f"  {scenario}: {m['per_layer_s'] * 1e3:.2f} ms per layer and step, "
              f"{m['rate'] / 1e12:.1f} TFLOP/s compute-bound, q = {m['q']:.2f} ({m['source']})")


if __name__ == "__main__":
    main(*sys.argv[1:2])
