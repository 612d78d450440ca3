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
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
