"""Shared helpers of the benchmark suite: timing with warm-up and repeats, the results file.

Each benchmark compares our implementation with a reference *in the same process run*, because
these machines are noisy: absolute times vary between runs, ratios much less.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from rankcollapse import runtime

HERE = Path(__file__).resolve().parent
# Where entries are merged: benchmarks/results.json, or BENCH_RESULTS (the GPU check keeps its
# own file, so that a GPU run never overwrites the CPU table's entries).
RESULTS = Path(os.environ.get("BENCH_RESULTS") or HERE / "results.json")
# QUICK=1: the GPU check's CPU mode (what CI runs): tiny sizes and few repeats, so that every
# benchmark it calls runs in seconds. It checks that they run, not their figures.
QUICK = os.environ.get("QUICK", "0") not in ("", "0")


def bench_device() -> torch.device:
    """BENCH_DEVICE (cpu, cuda or auto; default cpu): where the benchmarks that can run on a
    GPU run. cuda without a visible GPU is an error, said before anything is timed."""
    wanted = os.environ.get("BENCH_DEVICE", "cpu")
    if wanted == "auto":
        wanted = "cuda" if torch.cuda.is_available() else "cpu"
    if wanted == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("BENCH_DEVICE=cuda but no GPU is visible to torch")
    if wanted not in ("cpu", "cuda"):
        raise ValueError(f"BENCH_DEVICE={wanted!r}: allowed values are cpu, cuda, auto")
    return torch.device(wanted)


def synced(fn: Callable[[], object], device: torch.device) -> Callable[[], object]:
    """fn followed by a device synchronisation, so that a timer sees the GPU's work finished
    (kernel launches return before the kernels run)."""
    if device.type != "cuda":
        return fn

    def call():
        out = fn()
        torch.cuda.synchronize(device)
        return out

    return call


def matmul_rate(device: torch.device, dtype: torch.dtype = torch.float32, tf32: bool = False,
                n: int | None = None, repeats: int = 10) -> float:
    """The device's matrix-product rate (FLOP/s), rankcollapse.runtime.matmul_rate at the
    benchmarks' sizes: n x n products, 8192 on a GPU, 1024 on a CPU, 256 in QUICK mode (a CPU
    without bfloat16 units takes minutes for 1024^3 in bfloat16)."""
    n = n or (8192 if device.type == "cuda" else 256 if QUICK else 1024)
    repeats = min(repeats, 3) if QUICK else repeats
    return runtime.matmul_rate(device, dtype, tf32=tf32, n=n, repeats=repeats)


def median_time(fn: Callable[[], object], repeats: int = 7, warmup: int = 2,
                min_time: float = 0.2) -> float:
    """Median seconds per call of fn over `repeats` measurements, after `warmup` calls.

    Each measurement runs fn enough times to last at least `min_time` seconds.
    """
    for _ in range(warmup):
        fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-9)
    number = max(1, int(min_time / once))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


def interleaved_times(ours: Callable[[], object], reference: Callable[[], object],
                      repeats: int = 7, warmup: int = 2) -> tuple[float, float]:
    """Median seconds per call of both, measured alternately so drift hits both alike."""
    if QUICK:
        repeats, warmup = 1, 1
    for _ in range(warmup):
        ours()
        reference()
    a, b = [], []
    for _ in range(repeats):
        a.append(median_time(ours, repeats=1, warmup=0))
        b.append(median_time(reference, repeats=1, warmup=0))
    return statistics.median(a), statistics.median(b)


def machine() -> dict:
    out = {
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out["gpu"] = f"{props.name} ({props.total_memory // 2**20} MiB)"
        out["cuda"] = torch.version.cuda
    return out


def record(name: str, entry: dict) -> dict:
    """Merge one benchmark's entry into benchmarks/results.json (keyed by benchmark name)."""
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[name] = {**entry, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M")}
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    return data[name]
