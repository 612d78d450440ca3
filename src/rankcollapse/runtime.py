"""Where and how a job computes: device choice, thread count and seeding."""

from __future__ import annotations

import random

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
    """Fix the thread count (it changes floating-point reduction order) and seed every RNG."""
    torch.set_num_threads(max(1, int(threads)))
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeds libraries that use the global RNG
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


_HELD_GPU_LOCKS: list = []  # open lock files: the OS releases them when the process ends


def claim_gpu(lock_dir: str | None = None, poll_s: float = 1.0, timeout_s: float = 3600) -> int:
    """Claim a free local GPU for this process and return its index (among visible GPUs).

    Snakemake counts `--resources gpu=N` but assigns no device, so N concurrent jobs would all
    land on GPU 0. Each job takes an exclusive lock on one file per GPU instead; the lock lives
    as long as the process (released by the OS even after SIGKILL). Waits while all are taken.
    """
    import fcntl
    import os
    import tempfile
    import time
    from pathlib import Path

    count = torch.cuda.device_count()
    if count == 0:
        raise RuntimeError("claim_gpu: no GPU is visible")
    folder = Path(lock_dir or Path(tempfile.gettempdir()) / f"rankcollapse-gpus-{os.getuid()}")
    folder.mkdir(parents=True, exist_ok=True)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "_")
    deadline = time.monotonic() + timeout_s
    while True:
        for index in range(count):
            handle = open(folder / f"gpu{visible}-{index}.lock", "w")  # noqa: SIM115
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            _HELD_GPU_LOCKS.append(handle)
            return index
        if time.monotonic() > deadline:
            raise TimeoutError(f"claim_gpu: all {count} GPUs stayed busy for {timeout_s} s")
        time.sleep(poll_s)


def job_device(prefer: str = "auto") -> torch.device:
    """select_device, and on CUDA a GPU of its own for this job (claim_gpu)."""
    device = select_device(prefer)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", claim_gpu())
        torch.cuda.set_device(device)
    return device
