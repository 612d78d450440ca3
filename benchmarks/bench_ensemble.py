"""B7: K members trained as one ensemble vs the same K trained one after another.

Same members (seeds), same steps and batches, at the default config's sizes (train block, the
digits task, the middle depth of depth_grid): `ensemble.train_ensemble` on K stacked models
against K calls of `train.train`. Reported: the ratio of members x steps per second (target
>= 4x at K = 8; K = 32 reported as well), the achieved FLOP rate of both arms as a fraction of
this machine's float32 matmul rate measured in the same run, and the largest weight difference
between a member and its single run (the equivalence the tests bound).

QUICK=1 (the GPU check's CPU mode): depth 2, width 16, 4 steps, one timed repeat.

FLOPs per member step are counted by torch's FlopCounterMode on one forward + backward of the
single model (matrix products and attention; elementwise work is not counted).
"""

from __future__ import annotations

import os
import statistics
import time
import warnings

import torch
from torch.utils.flop_counter import FlopCounterMode

from rankcollapse.core.tasks import make_task
from rankcollapse.plan.config import load_config
from rankcollapse.training.ensemble import Ensemble, Member, train_ensemble
from rankcollapse.training.train import TrainConfig, loss_and_correct, new_model, train

try:
    from common import HERE, QUICK, bench_device, matmul_rate, record, synced
except ImportError:
    from .common import HERE, QUICK, bench_device, matmul_rate, record, synced

STEPS = int(os.environ.get("B7_STEPS", 4 if QUICK else 20))
# K; the GPU check adds 128 (B7_SIZES=8,32,128). K = 8 is the target's.
SIZES = tuple(int(k) for k in os.environ.get("B7_SIZES", "8,32").split(","))
REPEATS = 1 if QUICK else 3


def default_sizes() -> tuple[dict, dict, str, dict]:
    """(model options, training options, variant name, variant switches) of the default config
    at the middle depth of its depth grid."""
    config = load_config(HERE.parent / "workflow/config/default.yaml")
    t, grid = config["train"], config["depth_grid"]
    depths = grid["depths"]
    depths = sorted(depths[grid["tasks"][0]] if isinstance(depths, dict) else depths)
    model = {"width": t["width"], "heads": t["heads"], "mlp_ratio": t["mlp_ratio"],
             "depth": depths[len(depths) // 2]}
    options = {"steps": STEPS, "batch": t["batch"], "lr": t["lr"], "warmup": t["warmup"],
               "weight_decay": t["weight_decay"], "clip": t["clip"], "checkpoint_every": 0,
               "eval_every": STEPS}
    if QUICK:
        model.update(width=16, heads=2, depth=2)
    variant = grid["variants"][0]
    return model, options, variant, config["variants"][variant]


def flops_per_member_step(data, switches: dict, model: dict, batch: int) -> float:
    net = new_model(data.spec, switches, model, 0)
    counter = FlopCounterMode(display=False)
    with counter:
        logits, _ = net(data.x_train[:batch])
        loss, _ = loss_and_correct(logits, data.y_train[:batch])
        loss.backward()
    return float(counter.get_total_flops())


def compare(k: int, data, switches: dict, model: dict, cfg: TrainConfig,
            device: torch.device) -> dict:
    members = [Member(seed, cfg) for seed in range(k)]

    def net(seed: int):
        return new_model(data.spec, switches, model, seed).to(device)

    def one_after_another():
        states = []
        for m in members:
            single = net(m.seed)
            train(single, data, m.train, m.seed)
            states.append(single.state_dict())
        return states

    def ensemble():
        ens = Ensemble([net(m.seed) for m in members])
        train_ensemble(ens, data, members)
        return ens.finals

    one_after_another, ensemble = synced(one_after_another, device), synced(ensemble, device)

    wall_seq, wall_ens, cpu_seq, cpu_ens = [], [], [], []
    warm = [Member(m.seed, TrainConfig(**{**cfg.__dict__, "steps": 2, "eval_every": 2}))
            for m in members[:2]]  # first calls build caches in both arms: not timed
    train(net(0), data, warm[0].train, 0)
    train_ensemble(Ensemble([net(m.seed) for m in warm]), data, warm)
    for _ in range(REPEATS):  # alternately, so that drift hits both arms alike
        for arm, walls, cpus in ((one_after_another, wall_seq, cpu_seq),
                                 (ensemble, wall_ens, cpu_ens)):
            w, c = time.perf_counter(), time.process_time()
            out = arm()
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
            if arm is one_after_another:
                solo = out
            else:
                ens_states = out
    diff = max(float((a[n] - b[n]).abs().max()) for a, b in zip(solo, ens_states, strict=True)
               for n in a)
    t_seq, t_ens = statistics.median(wall_seq), statistics.median(wall_ens)
    return {"members": k, "steps": cfg.steps, "sequential_s": t_seq, "ensemble_s": t_ens,
            "ratio": t_seq / t_ens,
            "ratio_cpu_time": statistics.median(cpu_seq) / statistics.median(cpu_ens),
            "ensemble_member_steps_per_s": k * cfg.steps / t_ens,
            "sequential_member_steps_per_s": k * cfg.steps / t_seq,
            "max_weight_difference": diff}


def run() -> dict:
    warnings.filterwarnings("ignore", message=".*gradient layout contract")
    model, options, variant, switches = default_sizes()
    cfg = TrainConfig(**options)
    data = make_task("digits")
    device = bench_device()
    flops = flops_per_member_step(data, switches, model, cfg.batch)
    rates = [matmul_rate(device)]
    results = {}
    for k in SIZES:
        r = compare(k, data, switches, model, cfg, device)
        rates.append(matmul_rate(device))
        results[f"K{k}"] = r
    rate = max(rates)  # the machine's rate when least disturbed by other work
    for r in results.values():
        r["ensemble_fraction_of_matmul_rate"] = r["ensemble_member_steps_per_s"] * flops / rate
        r["sequential_fraction_of_matmul_rate"] = (r["sequential_member_steps_per_s"] * flops
                                                   / rate)
    entry = {
        "what": "K members as one ensemble vs one after another, members x steps per second",
        "variant": variant, "model": model, "batch": cfg.batch, "steps": cfg.steps,
        "threads": torch.get_num_threads(), "device": device.type,
        "flops_per_member_step": flops, "matmul_flops_per_s": rate,
        "results": results,
        "ratio": results["K8"]["ratio"] if "K8" in results else float("nan"),
        "target": ">= 4 (K = 8)",
        "met": results["K8"]["ratio"] >= 4 if "K8" in results else None,
    }
    return record("B7_ensemble", entry)


if __name__ == "__main__":
    r = run()
    for key, v in r["results"].items():
        ours, theirs = (100 * v[f"{arm}_fraction_of_matmul_rate"]
                        for arm in ("ensemble", "sequential"))
        print(f"B7 {key}: ensemble {v['ensemble_member_steps_per_s']:.1f} member-steps/s vs "
              f"{v['sequential_member_steps_per_s']:.1f} one after another: {v['ratio']:.2f}x "
              f"(CPU time {v['ratio_cpu_time']:.2f}x); {ours:.1f}% of the matmul rate "
              f"(sequential {theirs:.1f}%); max weight difference "
              f"{v['max_weight_difference']:.1e}")
