"""Where and how a job computes: device choice, thread count and seeding."""

from __future__ import annotations

import math
import os
import random
import statistics
import sys
import time

import numpy as np
import torch


def select_device(prefer: str = "auto") -> torch.device:
    """'auto' picks CUDA when a GPU is visible, else the CPU; 'cpu' or 'cuda' force one."""
    if prefer == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if prefer == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was requested but no GPU is visible")
    return torch.device(prefer)


def setup(threads: int, seed: int, deterministic: bool = True) -> None:
    """Fix the thread count (it changes floating-point reduction order) and seed every RNG.
    Deterministic algorithms also need cuBLAS's fixed workspace on a GPU (read when cuBLAS
    starts, so set here, before any CUDA work)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(max(1, int(threads)))
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeds libraries that use the global RNG
    torch.manual_seed(seed)
    if deterministic:
        set_deterministic(True)


def set_deterministic(mode: bool = True) -> None:
    """torch.use_deterministic_algorithms(mode, warn_only=True) without its start-up cost.

    The public call also sets Inductor's `deterministic` flag, and importing torch._inductor
    for that takes 2-4 s, in every job of the workflow (about a third of a small job's run
    time on 2 cores). The flag matters only to code torch.compile generates: it is set here
    when Inductor is already loaded, and `inductor_deterministic()` sets it before compiling."""
    torch._C._set_deterministic_algorithms(mode, warn_only=True)  # noqa: SLF001 - see above
    if "torch._inductor.config" in sys.modules:
        sys.modules["torch._inductor.config"].deterministic = mode


def inductor_deterministic() -> None:
    """Before torch.compile: give Inductor the deterministic setting the job runs with."""
    import torch._inductor.config as inductor_config  # noqa: PLC0415 - seconds to import

    inductor_config.deterministic = torch.are_deterministic_algorithms_enabled()


_HELD_GPU_LOCKS: list = []  # open lock files: the OS releases them when the process ends
SLOT_MB = 1024  # the unit in which jobs share a GPU's memory


def gpu_capacity_mb(index: int) -> int:
    """Total memory (MB) of visible GPU `index`."""
    return int(torch.cuda.get_device_properties(index).total_memory // 2**20)


def slots_needed(memory_mb: float | None, capacity_mb: int) -> tuple[int, int]:
    """(slots a job needs, slots the GPU has) in units of SLOT_MB: the sharing rule. A job
    needs ceil(memory / SLOT_MB) slots (at least one); one without an estimate, or whose
    estimate exceeds the whole GPU, needs all of them (it runs alone there)."""
    total = max(1, capacity_mb // SLOT_MB)
    if memory_mb is None:
        return total, total
    return min(total, max(1, math.ceil(memory_mb / SLOT_MB))), total


def claim_gpu(memory_mb: float | None = None, lock_dir: str | None = None, poll_s: float = 1.0,
              timeout_s: float = 3600, capacities: list[int] | None = None) -> int:
    """Claim room for `memory_mb` (MB; None: the whole GPU) on a local GPU for this process
    and return its index (among visible GPUs).

    Snakemake counts resources but assigns no device, so N concurrent jobs would all land on
    GPU 0. Each GPU's memory is a row of SLOT_MB slots, one lock file each; a job takes as many
    free slots of one GPU as its estimate needs (`slots_needed`), so several small jobs share a
    GPU while their sum fits, and a large one waits for room. The locks live as long as the
    process (released by the OS even after SIGKILL). Waits while no GPU has room.
    capacities: the GPUs' memory in MB (default: measured).
    """
    import fcntl
    import os
    import tempfile
    import time
    from pathlib import Path

    count = torch.cuda.device_count() if capacities is None else len(capacities)
    if count == 0:
        raise RuntimeError("claim_gpu: no GPU is visible")
    capacities = capacities or [gpu_capacity_mb(i) for i in range(count)]
    folder = Path(lock_dir or Path(tempfile.gettempdir()) / f"rankcollapse-gpus-{os.getuid()}")
    folder.mkdir(parents=True, exist_ok=True)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "_")
    deadline = time.monotonic() + timeout_s
    while True:
        for index in range(count):
            need, total = slots_needed(memory_mb, capacities[index])
            # One claimant at a time per GPU, so that two jobs never hold half of what each
            # needs; the mutex is held only while slots are tried.
            with open(folder / f"gpu{visible}-{index}.mutex", "w") as mutex:  # noqa: PTH123
                fcntl.flock(mutex, fcntl.LOCK_EX)
                taken = []
                for slot in range(total):
                    handle = open(folder / f"gpu{visible}-{index}-slot{slot}.lock", "w")  # noqa: SIM115, PTH123
                    try:
                        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:
                        handle.close()
                        continue
                    taken.append(handle)
                    if len(taken) == need:
                        break
                if len(taken) == need:
                    _HELD_GPU_LOCKS.extend(taken)
                    return index
                for handle in taken:  # not enough room here: give back what was taken
                    handle.close()
        if time.monotonic() > deadline:
            raise TimeoutError(f"claim_gpu: no GPU of {count} had room for "
                               f"{memory_mb or 'a whole GPU'} MB for {timeout_s} s")
        time.sleep(poll_s)


def job_device(prefer: str = "auto", memory_mb: float | None = None) -> torch.device:
    """select_device, and on CUDA room on a GPU for this job (claim_gpu: `memory_mb`, the
    job's estimate; None claims a whole GPU)."""
    device = select_device(prefer)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", claim_gpu(memory_mb))
        torch.cuda.set_device(device)
    return device


def matmul_rate(device: torch.device, dtype: torch.dtype = torch.float32, tf32: bool = False,
                n: int = 1024, repeats: int = 10) -> float:
    """The device's matrix-product rate (FLOP/s): n x n products, median of `repeats` after 3
    warm-ups, each timed to the end of the device's work; tf32 allows TensorFloat-32 for
    float32 on a GPU. On a CPU it uses torch's current thread count."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        def product():
            out = a @ b
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return out

        for _ in range(3):
            product()
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            product()
            samples.append(time.perf_counter() - start)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return 2 * n**3 / statistics.median(samples)


def speed_reference() -> float:
    """This machine's float32 matrix-product rate on one CPU thread, in GFLOP/s (1024 x 1024
    products, about a second): printed beside wall times, so that times measured on machines of
    different speed can be compared (the same 2 cores have measured 30 and 114 GFLOP/s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return matmul_rate(torch.device("cpu"), repeats=5) / 1e9
    finally:
        torch.set_num_threads(threads)
