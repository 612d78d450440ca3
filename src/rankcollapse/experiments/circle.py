"""E3: one attention layer applied recurrently to 2-D points on a circle (Dong et al. 2021, §4):
the original set-up, our attention-only setups (`SETUPS`) and the collapse test. The set-up, where
it differs from the original code and what counts as collapse: docs/experiments.md.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rankcollapse import io, runtime
from rankcollapse.core.metrics import relative_residual
from rankcollapse.core.model import Block, ModelConfig
from rankcollapse.core.tasks import TaskData, TaskSpec
from rankcollapse.training.train import TrainConfig

# name -> (layer protocol, residual in the recurrence, MLP in the layer)
SETUPS: dict[str, dict] = {
    "ln": dict(protocol="original", skip=False, mlp=False),
    "ln_skip": dict(protocol="original", skip=True, mlp=False),
    "ln_mlp": dict(protocol="original", skip=False, mlp=True),
    "ln_skip_mlp": dict(protocol="original", skip=True, mlp=True),
    "attn": dict(protocol="attention_only", skip=False, mlp=False),  # ours
    "attn_skip": dict(protocol="attention_only", skip=True, mlp=False),  # ours
}
# Two tokens closer than this share of the data's pair distance 2r count as one point. At the
# scale of the paper's panels (axes +-0.56 for r = 0.3) 5% of 2r is 0.03, about 3% of a panel's
# width: points that close are drawn as one; the data's pairs are 2r apart at every step.
COLLAPSE_FRACTION = 0.05
BERT_INIT_STD = 0.02  # BERT's initializer_range, which the original code keeps


def circle_points(points: int = 1000, radius: float = 0.3) -> Tensor:
    """The circle, (points, 2), counter-clockwise from angle 0."""
    angle = 2 * math.pi * torch.arange(points, dtype=torch.float64) / points
    return (radius * torch.stack([angle.cos(), angle.sin()], dim=-1)).float()


def circle_task(points: int = 1000, radius: float = 0.3) -> TaskData:
    """The original data: pairs (p_i, p_{i+m}), m = points // 2 - 1, i = 0..m-1, x (m, 2, 2),
    targets the next pairs y (m, 2, 2). The test split is the same pairs (the original judges
    the model by its roll-out, not by held-out pairs)."""
    if points < 6:
        raise ValueError(f"circle.points={points}: need at least 6 points")
    circle = circle_points(points, radius)
    m = points // 2 - 1
    i = torch.arange(m)
    idx = torch.stack([i, i + m], dim=-1)  # (m, 2)
    x, y = circle[idx], circle[idx + 1]
    spec = TaskSpec("circle", "features", 2, 2, 2, "per_token")  # 2 "classes" = 2 outputs
    return TaskData(spec, x, y, x, y)


def start_pairs(data: TaskData, starts: int) -> Tensor:
    """`starts` pairs of the data, evenly spaced along the arcs, the first being the original
    code's start (pair 0): (starts, 2, 2)."""
    m = len(data.x_train)
    return data.x_train[torch.arange(starts) * m // starts]


class CircleModel(nn.Module):
    """One step of the recurrence: (B, 2 tokens, 2) -> next points (B, 2, 2)."""

    def __init__(self, setup: str, width: int, heads: int = 2, mlp_ratio: int = 1):
        super().__init__()
        if setup not in SETUPS:
            raise KeyError(f"unknown circle setup {setup!r}; allowed: {sorted(SETUPS)}")
        s = SETUPS[setup]
        original = s["protocol"] == "original"
        self.skip = s["skip"]
        self.embed = nn.Linear(2, width)
        self.embed_norm = nn.LayerNorm(width) if original else nn.Identity()
        # The original layer is a post-LN block with biases (its own residual + LayerNorm); ours
        # is bare attention: no residual inside, no LayerNorm.
        cfg = ModelConfig(width=width, heads=heads, depth=1, skip=original, mlp=s["mlp"],
                          norm="post" if original else "none", bias=original,
                          mlp_ratio=mlp_ratio)
        self.layer = Block(cfg)
        self.head = nn.Linear(width, 2)
        if original:
            self._bert_init()

    @torch.no_grad()
    def _bert_init(self) -> None:
        """The original code's initialisation: N(0, 0.02) weights and zero biases for every
        Linear, but Kaiming-uniform value and output maps (its path-ready attention)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=BERT_INIT_STD)
                nn.init.zeros_(module.bias)
        attn, d = self.layer.attn, self.layer.attn.proj.weight.shape[0]
        for weight in (attn.qkv.weight[2 * d:], attn.proj.weight):  # value rows, output map
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        """x: (B, 2, 2) -> (next points (B, 2, 2), attention (B, H, 2, 2) if capture)."""
        h, _, attn = self.layer(self.embed_norm(self.embed(x)), capture)
        out = self.head(h)
        return (x + out if self.skip else out), attn


def mse_and_close(pred: Tensor, y: Tensor, tolerance: float = 0.01) -> tuple[Tensor, Tensor]:
    """Mean squared error, and the number of coordinates within `tolerance` of the target
    (the training loop's "accuracy"; 0.01 is about five steps' length at 1000 points)."""
    return F.mse_loss(pred, y), ((pred - y).abs() < tolerance).sum()


@torch.no_grad()
def rollout(model: CircleModel, start: Tensor, steps: int) -> Tensor:
    """Iterate the model from start pairs (S, 2, 2): trajectory (steps + 1, S, 2, 2)."""
    model.eval()
    out = [start]
    for _ in range(steps):
        out.append(model(out[-1])[0])
    return torch.stack(out)


def _settles(gap: np.ndarray, threshold: float) -> int | None:
    """The first index from which `gap` (T + 1,) stays below `threshold` to its end (NaN counts
    as above); None when its last entry is not below."""
    above = np.flatnonzero(~(gap < threshold))
    if len(above) == 0:
        return 0
    return int(above[-1]) + 1 if above[-1] + 1 < len(gap) else None


def collapse_step(trajectory: np.ndarray, threshold: float, min_stall: int) -> dict:
    """When one roll-out collapses, in either way the paper's trajectory figure shows it.

    trajectory: (T + 1, 2 tokens, 2). "merge": the first step from which the two tokens stay
    within `threshold` of each other to the end; "stall": the first step from which each
    token stays within `threshold` of its own last position (its trajectory has shrunk to a
    point), counted only when that lasts at least `min_stall` steps (the last steps of any
    trajectory are near its end). "collapse" is the earlier of the two; NaN: not within the
    roll-out."""
    distance = np.linalg.norm(trajectory[:, 0] - trajectory[:, 1], axis=-1)  # (T + 1,)
    merge = _settles(distance, threshold)
    drift = np.linalg.norm(trajectory - trajectory[-1], axis=-1).max(axis=-1)  # (T + 1,)
    stall = _settles(drift, threshold)
    if stall is not None and len(drift) - 1 - stall < min_stall:
        stall = None
    times = [t for t in (merge, stall) if t is not None]
    as_float = lambda t: math.nan if t is None else float(t)  # noqa: E731
    return {"merge_step": as_float(merge), "stall_step": as_float(stall),
            "collapse_step": float(min(times)) if times else math.nan}


def collapse_steps(table: pd.DataFrame) -> pd.DataFrame:
    """Per roll-out of a circle table (run_job's rows): `collapse_step` at COLLAPSE_FRACTION of
    the data's pair distance 2r, a stall counted when it lasts three times the steps the data's
    motion takes to cover that distance. One row per (setup, width, seed, start) with protocol,
    skip, mlp, merge_step, stall_step, collapse_step (NaN: not within the roll-out), last_step."""
    keys = ["setup", "width", "seed", "start"]
    rows = []
    for key, t in table.groupby(keys, sort=True):
        t = t.sort_values(["step", "token"])
        radius, points = float(t.data_radius.iloc[0]), int(t.data_points.iloc[0])
        threshold = COLLAPSE_FRACTION * 2 * radius
        data_step = 2 * radius * math.sin(math.pi / points)  # chord of one step on the circle
        trajectory = t[["x", "y"]].to_numpy().reshape(-1, 2, 2)
        rows.append({**dict(zip(keys, key, strict=True)), "protocol": t.protocol.iloc[0],
                     "skip": bool(t.skip.iloc[0]), "mlp": bool(t.mlp.iloc[0]),
                     **collapse_step(trajectory, threshold,
                                     min_stall=math.ceil(3 * threshold / data_step)),
                     "last_step": int(t.step.max())})
    return pd.DataFrame(rows)


def run_job(setups: list[str], width: int, heads: int, mlp_ratio: int, task_options: dict,
            train_options: dict, rollout_steps: int, starts: int, seeds: list[int],
            threads: int = 1) -> pd.DataFrame:
    """One workflow job: `run_setup` for every setup at one width, one table."""
    runtime.setup(threads, seeds[0])
    return pd.concat([run_setup(setup, width, heads, mlp_ratio, task_options, train_options,
                                rollout_steps, starts, seeds) for setup in setups],
                     ignore_index=True)


def run_setup(setup: str, width: int, heads: int, mlp_ratio: int, task_options: dict,
              train_options: dict, rollout_steps: int, starts: int,
              seeds: list[int]) -> pd.DataFrame:
    """Train one setup at one width once per seed (all seeds as one ensemble), roll each out
    from `starts` start pairs.

    train_options: TrainConfig fields; "clip": None clips nothing (the original's Adam).
    Returns one row per (seed, start, step, token): x, y, the point's radius, the pair's
    distance and relative residual ‖X − 1x̄ᵀ‖_F/‖X‖_F; with the run's identity and its final
    training MSE.
    """
    from rankcollapse.training.ensemble import Ensemble, Member, train_ensemble

    data = circle_task(**task_options)
    if "clip" in train_options and train_options["clip"] is None:
        train_options = {**train_options, "clip": math.inf}
    cfg = TrainConfig.from_dict(train_options)
    members = [Member(int(seed), cfg) for seed in seeds]
    models = []
    for m in members:
        torch.manual_seed(m.seed)
        models.append(CircleModel(setup, width, heads, mlp_ratio))
    settings = {"setup": setup, "width": width, "heads": heads, "mlp_ratio": mlp_ratio,
                "task_options": task_options, "train": asdict(cfg), "seeds": list(seeds)}
    ensemble = Ensemble(models)
    results = train_ensemble(ensemble, data, members, loss_fn=mse_and_close,
                             fingerprint=io.config_hash(settings))
    frames = []
    start = start_pairs(data, starts)
    spec = SETUPS[setup]
    for m, result, model, weights in zip(members, results, models, ensemble.finals,
                                         strict=True):
        model.load_state_dict(weights)
        trajectory = rollout(model, start, rollout_steps).double()  # (T + 1, S, 2, 2)
        residual = relative_residual(trajectory, "fro")  # (T + 1, S)
        distance = (trajectory[:, :, 0] - trajectory[:, :, 1]).norm(dim=-1)  # (T + 1, S)
        T, S = residual.shape
        xy = trajectory.reshape(-1, 2).numpy()
        frames.append(pd.DataFrame({
            "step": np.repeat(np.arange(T), S * 2),
            "start": np.tile(np.repeat(np.arange(S), 2), T),
            "token": np.tile(np.arange(2), T * S),
            "x": xy[:, 0], "y": xy[:, 1], "radius": np.hypot(xy[:, 0], xy[:, 1]),
            "pair_distance": np.repeat(distance.reshape(-1).numpy(), 2),
            "relative_residual": np.repeat(residual.reshape(-1).numpy(), 2),
        }).assign(seed=m.seed, train_mse=result.test_loss, diverged=result.diverged,
                  final_loss=float(result.history.loss.iloc[-1])))
    table = pd.concat(frames, ignore_index=True)
    return table.assign(
        setup=setup, protocol=spec["protocol"], skip=spec["skip"], mlp=spec["mlp"],
        width=width, data_radius=float(task_options.get("radius", 0.3)),
        data_points=int(task_options.get("points", 1000)),
        config_hash=io.config_hash(settings), code_version=io.code_version(),
    )
