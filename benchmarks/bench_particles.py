"""Benchmark: the vectorised particle simulator against the per-token loop reference.

Both run the same inputs (same seed and ``sampling="weights"``, so the same weights and tokens;
checked equal). Reports the median times (torch.utils.benchmark, after warm-up), the speed ratio
(target >= 50x) and the simulator's achieved float64 FLOP/s as a fraction of this machine's
float64 matmul rate, measured in the same run. Also reports, for information, the workflow's
``sampling="fast"`` (same law, fewer random numbers) on the same case and at beta = 0 with
n < d, where a layer costs O(n d). Writes (merges) its entry into benchmarks/results.json.

    python benchmarks/bench_particles.py [--threads N]
"""

from __future__ import annotations

import argparse

import torch
import torch.utils.benchmark as tb

from rankcollapse.experiments.homogenized.simulate import (
    simulate_particles,
    simulate_particles_loop,
)

try:
    from common import record
except ImportError:
    from .common import record

# Small enough for the loop reference to finish in seconds, large enough to be compute-bound-ish.
CASE = dict(n=16, d=16, H=4, L=8, eta=0.3, beta=1.0, runs=8, seed=0, record_every=1)
# E6's small-temperature study: beta = 0, tokens in high dimension
ZERO_BETA = dict(n=8, d=64, H=1, L=32, eta=0.1, beta=0.0, runs=64, seed=0, record_every=32)
MATMUL_N = 1024


def layer_flops(n: int, d: int, H: int, runs: int, **_) -> float:
    """Multiply-add FLOPs (2 per MAC) of one vectorised layer: Qx, Kx, scores, A x, V a."""
    per_head = 2 * (2 * n * d * d + n * n * d + n * n * d + n * d * d)
    return float(runs * H * per_head)


def median_time(stmt, min_run_time: float) -> float:
    timer = tb.Timer(stmt="f()", globals={"f": stmt})
    timer.timeit(1)  # warm-up (allocator, kernels, first-call overheads)
    return timer.blocked_autorange(min_run_time=min_run_time).median


def matmul_rate(threads: int) -> float:
    a = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.float64)
    b = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.float64)
    seconds = median_time(lambda: a @ b, 1.0)
    return 2 * MATMUL_N**3 / seconds


def run(threads: int | None = None) -> dict:
    if threads is not None:
        torch.set_num_threads(threads)
    threads = torch.get_num_threads()
    fast = simulate_particles(**CASE, sampling="weights")
    slow = simulate_particles_loop(**CASE)
    max_diff = float((fast.final - slow.final).abs().max())
    assert max_diff < 1e-12, f"vectorised and loop results differ by {max_diff}"

    t_fast = median_time(lambda: simulate_particles(**CASE, sampling="weights"), 2.0)
    t_slow = median_time(lambda: simulate_particles_loop(**CASE), 2.0)
    t_law = median_time(lambda: simulate_particles(**CASE, sampling="fast"), 2.0)
    t_zero_weights = median_time(lambda: simulate_particles(**ZERO_BETA, sampling="weights"),
                                 1.0)
    t_zero_fast = median_time(lambda: simulate_particles(**ZERO_BETA, sampling="fast"), 1.0)
    peak = matmul_rate(threads)
    achieved = layer_flops(**CASE) * CASE["L"] / t_fast
    entry = {
        "what": "particle simulator, vectorised vs per-token loop, float64",
        "case": CASE,
        "threads": threads,
        "vectorised_median_s": t_fast,
        "loop_median_s": t_slow,
        "speedup": t_slow / t_fast,
        "target": ">= 50",
        "met": t_slow / t_fast >= 50,
        "achieved_flops": achieved,
        "matmul_flops_float64": peak,
        "fraction_of_matmul": achieved / peak,
        "max_abs_difference": max_diff,
        "same_law_fast_median_s": t_law,
        "speedup_fast_sampling": t_slow / t_law,
        "zero_beta_case": ZERO_BETA,
        "zero_beta_weights_median_s": t_zero_weights,
        "zero_beta_fast_median_s": t_zero_fast,
        "zero_beta_fast_over_weights": t_zero_weights / t_zero_fast,
    }
    return record("B3_particles", entry)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    entry = run(args.threads)
    t_fast, t_slow, peak = entry["vectorised_median_s"], entry["loop_median_s"], \
        entry["matmul_flops_float64"]
    rows = [
        ("vectorised simulator", f"{t_fast * 1e3:10.2f} ms"),
        ("per-token loop", f"{t_slow * 1e3:10.2f} ms"),
        ("speed ratio (target >= 50)", f"{entry['speedup']:10.1f} x"),
        ("achieved float64 FLOP/s", f"{entry['achieved_flops'] / 1e9:10.3f} GFLOP/s"),
        (f"float64 matmul {MATMUL_N}^3", f"{peak / 1e9:10.3f} GFLOP/s"),
        ("fraction of matmul rate", f"{entry['fraction_of_matmul']:10.3%}"),
        ("same law, fast sampling", f"{entry['speedup_fast_sampling']:10.1f} x vs loop"),
        ("beta = 0, n = 8, d = 64: fast", f"{entry['zero_beta_fast_over_weights']:10.1f} x "
                                          "vs full weights"),
    ]
    print(f"particles benchmark: {CASE}, {args.threads} thread(s)")
    for label, value in rows:
        print(f"  {label:<30}{value}")


if __name__ == "__main__":
    main()
