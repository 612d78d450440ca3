"""E3: one attention layer applied recurrently to 2-D points on a circle (Dong et al. 2021, §4).

`points` points lie on a circle of radius `radius`; a sample is two tokens on opposite arcs (the
first from the upper half-turn, the second from the lower), the target is the next point of each.
The model maps the pair to the predicted next pair: Linear(2 -> d) (+ LayerNorm), one transformer
layer, Linear(d -> 2). "skip" is a residual in the recurrence, x_{t+1} = x_t + f(x_t); without
it x_{t+1} = f(x_t). Trained with MSE by the shared training loop (`train.train`), then rolled
out from a start pair for many steps.

Setups (`SETUPS`): the original code keeps the layer's internal residual and LayerNorm in every
variant ("ln*": post-LN block, input LayerNorm); ours, "attn*", is truly attention-only (no
internal residual, no LayerNorm anywhere, no MLP), so only the recurrence's skip remains.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import io, runtime
from .metrics import relative_residual
from .model import Block, ModelConfig
from .tasks import TaskData, TaskSpec
from .train import TrainConfig, train

# name -> (layer protocol, residual in the recurrence, MLP in the layer)
SETUPS: dict[str, dict] = {
    "ln": dict(protocol="original", skip=False, mlp=False),
    "ln_skip": dict(protocol="original", skip=True, mlp=False),
    "ln_mlp": dict(protocol="original", skip=False, mlp=True),
    "ln_skip_mlp": dict(protocol="original", skip=True, mlp=True),
    "attn": dict(protocol="attention_only", skip=False, mlp=False),  # ours
    "attn_skip": dict(protocol="attention_only", skip=True, mlp=False),  # ours
}


def circle_points(points: int = 1000, radius: float = 0.3) -> Tensor:
    """The circle, (points, 2), counter-clockwise from angle 0."""
    angle = 2 * math.pi * torch.arange(points, dtype=torch.float64) / points
    return (radius * torch.stack([angle.cos(), angle.sin()], dim=-1)).float()


def circle_task(points: int = 1000, radius: float = 0.3, train_size: int = 4000,
                test_size: int = 500, data_seed: int = 0) -> TaskData:
    """Pairs (i, j) with i on the first half-turn and j on the second, x = (p_i, p_j) (N, 2, 2),
    y = (p_{i+1}, p_{j+1}) (N, 2, 2). Drawn once from `data_seed`."""
    circle = circle_points(points, radius)
    gen = torch.Generator().manual_seed(data_seed)
    half = points // 2
    i = torch.randint(0, half, (train_size + test_size,), generator=gen)
    j = torch.randint(half, points, (train_size + test_size,), generator=gen)
    idx = torch.stack([i, j], dim=-1)  # (N, 2)
    x, y = circle[idx], circle[(idx + 1) % points]
    spec = TaskSpec("circle", "features", 2, 2, 2, "per_token")  # 2 "classes" = 2 outputs
    return TaskData(spec, x[:train_size], y[:train_size], x[train_size:], y[train_size:])


class CircleModel(nn.Module):
    """One step of the recurrence: (B, 2 tokens, 2) -> next points (B, 2, 2)."""

    def __init__(self, setup: str, width: int, heads: int = 2, mlp_ratio: int = 4):
        super().__init__()
        if setup not in SETUPS:
            raise KeyError(f"unknown circle setup {setup!r}; allowed: {sorted(SETUPS)}")
        s = SETUPS[setup]
        original = s["protocol"] == "original"
        self.skip = s["skip"]
        self.embed = nn.Linear(2, width)
        self.embed_norm = nn.LayerNorm(width) if original else nn.Identity()
        # The original layer is a post-LN block (its own residual + LayerNorm); ours is bare
        # attention: no residual inside, no LayerNorm.
        cfg = ModelConfig(width=width, heads=heads, depth=1, skip=original, mlp=s["mlp"],
                          norm="post" if original else "none", mlp_ratio=mlp_ratio)
        self.layer = Block(cfg)
        self.head = nn.Linear(width, 2)

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        """x: (B, 2, 2) -> (next points (B, 2, 2), attention (B, H, 2, 2) if capture)."""
        h, attn = self.layer(self.embed_norm(self.embed(x)), capture)
        out = self.head(h)
        return (x + out if self.skip else out), attn


def mse_and_close(pred: Tensor, y: Tensor, tolerance: float = 0.01) -> tuple[Tensor, Tensor]:
    """Mean squared error, and the number of coordinates within `tolerance` of the target
    (the training loop's "accuracy"; 0.01 is a third of one step's length at 1000 points)."""
    return F.mse_loss(pred, y), ((pred - y).abs() < tolerance).sum()


@torch.no_grad()
def rollout(model: CircleModel, start: Tensor, steps: int) -> Tensor:
    """Iterate the model from start pairs (S, 2, 2): trajectory (steps + 1, S, 2, 2)."""
    model.eval()
    out = [start]
    for _ in range(steps):
        out.append(model(out[-1])[0])
    return torch.stack(out)


def run_job(setup: str, width: int, heads: int, mlp_ratio: int, task_options: dict,
            train_options: dict, rollout_steps: int, starts: int, seed: int,
            threads: int = 1) -> pd.DataFrame:
    """Train one setup at one width with `seed`, roll it out from `starts` test pairs.

    Returns one row per (start, step, token): x, y, the pair's relative residual
    ‖X − 1x̄ᵀ‖_F/‖X‖_F, the point's radius; with the run's identity and final test MSE.
    """
    runtime.setup(threads, seed)
    data = circle_task(**task_options)
    cfg = TrainConfig.from_dict(train_options)
    torch.manual_seed(seed)
    model = CircleModel(setup, width, heads, mlp_ratio)
    settings = {"setup": setup, "width": width, "heads": heads, "mlp_ratio": mlp_ratio,
                "task_options": task_options, "train": asdict(cfg), "seed": seed}
    result = train(model, data, cfg, seed, fingerprint=io.config_hash(settings),
                   loss_fn=mse_and_close)
    trajectory = rollout(model, data.x_test[:starts], rollout_steps).double()  # (T, S, 2, 2)
    residual = relative_residual(trajectory, "fro")  # (T, S)
    T, S = residual.shape
    step = np.repeat(np.arange(T), S * 2)
    start = np.tile(np.repeat(np.arange(S), 2), T)
    token = np.tile(np.arange(2), T * S)
    xy = trajectory.reshape(-1, 2).numpy()
    table = pd.DataFrame({
        "step": step, "start": start, "token": token, "x": xy[:, 0], "y": xy[:, 1],
        "radius": np.hypot(xy[:, 0], xy[:, 1]),
        "relative_residual": np.repeat(residual.reshape(-1).numpy(), 2),
    })
    spec = SETUPS[setup]
    return table.assign(
        setup=setup, protocol=spec["protocol"], skip=spec["skip"], mlp=spec["mlp"],
        width=width, seed=seed, test_mse=result.test_loss, diverged=result.diverged,
        final_loss=float(result.history.loss.iloc[-1]),
        config_hash=io.config_hash(settings), code_version=io.code_version(),
    )
