"""B9: the ensemble's training step at paper scale, per engine and precision, as a fraction of
the device's measured matrix rate.

A paper arm (paper.yaml's `train` sizes: width 64, 4 heads, MLP x4, batch 128, digits, the
first depth_grid variant) at depths 16 and 128 with K = 32 members: member-steps per second of
`rankcollapse.training.step.DeviceStep` for each engine (eager; graph, the step captured in one CUDA
graph; compile, torch.compile fusion, captured too) and each precision (float32, tf32, bf16),
steps timed after the engine is prepared (its capture or compilation time reported apart).
The FLOPs of a member step are torch's count (FlopCounterMode: matrix products and attention)
of one model's forward and backward, so the fraction of the float32 matrix rate (an 8192^3
product on a GPU, measured in the same run) is the share of the device's arithmetic the step
uses; each precision's own rate is reported beside it. Target: at depth 128, K = 32,
>= 30% of the float32 matrix rate, whatever precision gets there (judged on a GPU only).
Also reported: the largest difference of a float32 engine's losses from the eager ones'.

QUICK=1 (what CI runs, on the CPU): tiny sizes (width 16, depth 2, K = 4, batch 16), eager and
compile (no CUDA graphs on a CPU; compile traced with the aot_eager backend, since
inductor's C++ code generation takes minutes on 2 cores, and in float32 only), float32 and bf16:
it checks that the benchmark runs, not the numbers. B9_DEPTHS, B9_K, B9_ENGINES,
B9_PRECISIONS, B9_STEPS override; B9_CONFIG=default measures the default config's arm.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import replace

import torch

from rankcollapse.core.tasks import make_task
from rankcollapse.plan.config import load_config
from rankcollapse.training import step as S
from rankcollapse.training.ensemble import Ensemble, Member
from rankcollapse.training.train import TrainConfig, loss_and_correct, new_model, schedule

try:
    from bench_ensemble import flops_per_member_step

    from common import HERE, QUICK, bench_device, matmul_rate, record
except ImportError:
    from .bench_ensemble import flops_per_member_step
    from .common import HERE, QUICK, bench_device, matmul_rate, record

TARGET = 0.30  # of the float32 matrix rate, at depth 128 and K = 32
REPEATS = 1 if QUICK else 3  # timed windows per engine and precision


def _env_list(name: str, default: str) -> list[str]:
    return [v for v in os.environ.get(name, default).split(",") if v]


def paper_arm() -> tuple[dict, dict, str, dict]:
    """(model sizes, train options, variant, switches) of a paper.yaml arm (QUICK: tiny);
    B9_CONFIG=default: the default config's arm instead (width 32, batch 32: the CPU's deep arm,
    benchmarks/README.md)."""
    files = [HERE.parent / "workflow/config/default.yaml"]
    if os.environ.get("B9_CONFIG", "paper") == "paper":
        files.append(HERE.parent / "workflow/config/paper.yaml")
    config = load_config(*files)
    t, grid = config["train"], config["depth_grid"]
    variant = grid["variants"][0]
    model = {"width": t["width"], "heads": t["heads"], "mlp_ratio": t["mlp_ratio"]}
    batch = grid["batch"]
    if QUICK:
        model, batch = {"width": 16, "heads": 2, "mlp_ratio": 2}, 16
    return model, {"batch": batch}, variant, config["variants"][variant]


def time_engine(data, switches: dict, model: dict, k: int, cfg: TrainConfig,
                device: torch.device, steps: int, repeats: int = 3) -> tuple[dict, torch.Tensor]:
    """Member-steps/s of one engine and precision: `repeats` windows of `steps` steps, timed
    after preparation (capture, compilation and one untimed window), the median; and the
    losses of the first timed window."""
    members = [Member(seed, cfg) for seed in range(k)]
    ensemble = Ensemble([new_model(data.spec, switches, model, m.seed).to(device)
                         for m in members])
    runner = S.DeviceStep(ensemble, data.x_train, data.y_train, members, cfg,
                          [schedule(m.train) for m in members], loss_and_correct, window=steps)
    gen = torch.Generator().manual_seed(0)
    batches = torch.randint(len(data.y_train), (steps, k, cfg.batch), generator=gen)
    start = time.perf_counter()
    runner.prepare()  # capture (graph); compilation happens at the first call: one window
    runner.run(batches)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    prepare_s = time.perf_counter() - start
    times, first = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        runner.run(batches)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
        if first is None:
            first = runner.loss_log[steps:2 * steps].detach().double().cpu()
    seconds = statistics.median(times)
    out = {"engine": runner.engine_label, "engine_note": runner.engine_note,
           "precision": runner.precision, "members": k, "steps": steps,
           "prepare_s": prepare_s, "step_s": seconds / steps,
           "member_steps_per_s": k * steps / seconds}
    if device.type == "cuda":
        out["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        torch.cuda.reset_peak_memory_stats(device)
    del runner, ensemble
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out, first


def run() -> dict:
    device = bench_device()
    gpu = device.type == "cuda"
    model, options, variant, switches = paper_arm()
    depths = [int(d) for d in _env_list("B9_DEPTHS", "2" if QUICK else "16,128")]
    k = int(os.environ.get("B9_K", 4 if QUICK else 32))
    steps = int(os.environ.get("B9_STEPS", 3 if QUICK else 20))
    engines = _env_list("B9_ENGINES", "eager,graph,compile" if gpu else "eager,compile")
    precisions = _env_list("B9_PRECISIONS", "float32,tf32,bf16" if gpu else "float32,bf16")
    data = make_task("digits")
    if QUICK and not gpu:  # inductor's C++ code generation takes minutes on 2 cores
        S.COMPILE_OPTIONS["backend"] = "aot_eager"
    rates = {"float32": matmul_rate(device)}
    if gpu:
        rates["tf32"] = matmul_rate(device, tf32=True)
        rates["bf16"] = matmul_rate(device, torch.bfloat16)
    else:  # a CPU has no TF32; its bfloat16 products are what autocast runs
        rates["bf16"] = matmul_rate(device, torch.bfloat16)
    results, problems = [], []
    for depth in depths:
        sizes = {**model, "depth": depth}
        flops = flops_per_member_step(data, switches, sizes, options["batch"])
        reference = None
        for precision in precisions:
            for engine in engines:
                if QUICK and engine != "eager" and precision != "float32":
                    continue  # one compilation checks the path; each costs ~30 s of CPU here
                cfg = replace(TrainConfig(steps=steps * (REPEATS + 1), batch=options["batch"],
                                          warmup=1, checkpoint_every=0, eval_every=steps),
                              engine=engine, precision=precision)
                try:
                    r, losses = time_engine(data, switches, sizes, k, cfg, device, steps,
                                            REPEATS)
                except Exception as err:  # noqa: BLE001 - report it and go on with the others
                    problems.append(f"depth {depth} {engine} {precision}: "
                                    f"{type(err).__name__}: {err}")
                    continue
                r.update(depth=depth, asked_engine=engine, flops_per_member_step=flops)
                rate = r["member_steps_per_s"] * flops
                r["tflops"] = rate / 1e12
                r["fraction_of_float32_rate"] = rate / rates["float32"]
                r["fraction_of_own_rate"] = rate / rates.get(r["precision"], rates["float32"])
                if precision == "float32":
                    if reference is None and r["engine"] == "eager":
                        reference = losses
                    if reference is not None:
                        diff = (losses - reference).abs()
                        r["max_loss_difference_vs_eager"] = float(diff.max())
                results.append(r)
    deep = [r for r in results if r["depth"] == max(depths) and r["members"] == 32]
    best = max((r["fraction_of_float32_rate"] for r in deep), default=math.nan)
    entry = {
        "what": "ensemble step of a paper arm per engine and precision: member-steps/s and "
                "the fraction of the device's float32 matrix rate",
        "device": device.type, "quick": QUICK, "variant": variant, "model": model,
        "batch": options["batch"], "members": k, "depths": depths,
        "matmul_flops_per_s": rates, "results": results, "problems": problems,
        "compile_backend": S.COMPILE_OPTIONS.get("backend", "inductor"),
        "best_fraction": best,
        "target": f">= {TARGET:.0%} of float32 at depth 128, K = 32 (GPU)",
        "met": (best >= TARGET) if gpu and deep else None,
    }
    return record("B9_gpu_step" + os.environ.get("B9_TAG", ""), entry)


def table(entry: dict) -> str:
    lines = ["| depth | engine | precision | K | member-steps/s | TFLOP/s | of float32 rate | "
             "of own rate | prepare (s) | note |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in entry["results"]:
        lines.append(
            f"| {r['depth']} | {r['engine']} | {r['precision']} | {r['members']} | "
            f"{r['member_steps_per_s']:.1f} | {r['tflops']:.2f} | "
            f"**{100 * r['fraction_of_float32_rate']:.1f}%** | "
            f"{100 * r['fraction_of_own_rate']:.1f}% | {r['prepare_s']:.1f} | "
            f"{r.get('engine_note', '')} |")
    for problem in entry["problems"]:
        lines.append(f"| — | failed | | | | | | | | {problem} |")
    return "\n".join(lines)


if __name__ == "__main__":
    r = run()
    print(table(r))
    print("matrix rates (TFLOP/s): " + ", ".join(f"{k} {v / 1e12:.2f}" for k, v in
                                                  r["matmul_flops_per_s"].items()))
