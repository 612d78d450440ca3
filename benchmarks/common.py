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

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results.json"


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
    for _ in range(warmup):
        ours()
        reference()
    a, b = [], []
    for _ in range(repeats):
        a.append(median_time(ours, repeats=1, warmup=0))
        b.append(median_time(reference, repeats=1, warmup=0))
    return statistics.median(a), statistics.median(b)


def machine() -> dict:
    return {
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def record(name: str, entry: dict) -> dict:
    """Merge one benchmark's entry into benchmarks/results.json (keyed by benchmark name)."""
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[name] = {**entry, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M")}
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    return data[name]
