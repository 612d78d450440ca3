"""Model and training configurations as plain data, without torch: `ModelConfig` (the model's
switches), the variant presets, `TrainConfig` and what may differ between ensemble members. The
model, the training engine and the parse-time plan (rankcollapse.plan) all read them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Literal

Norm = Literal["none", "pre", "post"]
Placement = Literal["branch", "output"]


def from_fields(cls, values: dict, what: str):
    """cls(**values) for a dataclass, failing fast with the unknown keys and the allowed ones."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise KeyError(f"unknown {what} option(s) {unknown}; allowed: {sorted(known)}")
    return cls(**values)


# The named variants: presets of the model's switches. Every config has them; a config's
# `variants` block adds its own (or overrides one by name): `with_presets`.
PRESETS: dict[str, dict] = {
    "san": dict(skip=False, mlp=False, norm="none"),  # pure self-attention
    "san_skip": dict(skip=True, mlp=False, norm="none"),
    "san_mlp": dict(skip=False, mlp=True, norm="none"),
    "san_skip_mlp": dict(skip=True, mlp=True, norm="none"),
    "san_ln": dict(skip=False, mlp=False, norm="post"),
    "post_ln": dict(skip=True, mlp=True, norm="post"),  # the classic transformer
    "pre_ln": dict(skip=True, mlp=True, norm="pre"),
    "post_ln_deesc": dict(skip=True, mlp=True, norm="post", deescalate=1.0),
    # E4's diagnostic: de-escalation without MLPs (is the MLP what lifts t_sim after training?)
    "post_ln_deesc_nomlp": dict(skip=True, mlp=False, norm="post", deescalate=1.0),
    "post_ln_deesc_mlp": dict(skip=True, mlp=True, norm="post", deescalate=1.0,
                              deescalate_mlp=True),  # the MLP output centred too
    "post_ln_deesc_out": dict(skip=True, mlp=True, norm="post", deescalate=1.0,
                              deescalate_at="output", deescalate_mlp=True),  # after each post-LN
    "post_ln_center": dict(skip=True, mlp=True, norm="post", center_attention=True),
    "post_ln_scaled": dict(skip=True, mlp=True, norm="post", branch_scale="inv_sqrt_depth"),
    # Dong et al.'s path-experiment network: attention + skip + post-LN, biases, no MLP.
    "san_skip_ln_bias": dict(skip=True, mlp=False, norm="post", bias=True),
    # DeepNet (Wang et al. 2022, "DeepNet: scaling transformers to 1,000 layers"): post-LN with
    # the residual scaled by (2L)^(1/4) and v, W_O and the MLP initialised (8L)^(1/4) smaller.
    "post_ln_deepnorm": dict(skip=True, mlp=True, norm="post", deepnorm=True),
}


def with_presets(variants: dict | None) -> dict:
    """The presets, then a config's own variants (which may override a preset by name)."""
    return {**PRESETS, **(variants or {})}


@dataclass(frozen=True)
class ModelConfig:
    width: int = 64  # d, the residual stream width
    heads: int = 2  # H; each head has width // heads dimensions
    depth: int = 6  # L, number of blocks
    skip: bool = True  # residual connections around attention (and the MLP)
    mlp: bool = True  # a feed-forward sublayer after attention
    norm: Norm = "post"  # LayerNorm placement: none, pre (x + f(LN x)) or post (LN(x + f x))
    deescalate: float = 0.0  # tau of Yu & Zhang: attention output Y <- (I - tau/n 11^T) Y
    temperature: float = 1.0  # beta: logits are beta * <q, k> / sqrt(d_head)
    center_attention: bool = False  # A <- A - (1/n) 1 1^T (Nait Saada et al., "Mind the Gap")
    bias: bool = False  # biases in attention's q, k, v and output maps (BERT; Dong et al.'s SAN)
    branch_scale: Literal["none", "inv_sqrt_depth"] = "none"  # residual branches x 1/sqrt(L)
    mlp_ratio: int = 4  # hidden width of the MLP = mlp_ratio * width
    init_std: float | None = None  # std of weight entries; None = 1/sqrt(fan_in) (unit gain)
    deescalate_at: Placement = "branch"  # centre the attention output (branch) or after post-LN
    deescalate_mlp: bool = False  # de-escalate the MLP sublayer too, at the same placement
    causal: bool = False  # lower-triangular attention (token i sees tokens 1..i); set by the task
    deepnorm: bool = False  # DeepNet: post-LN(alpha x + f x), v/W_O/MLP init / (8L)^(1/4)

    def __post_init__(self) -> None:
        if self.width % self.heads:
            raise ValueError(f"width={self.width} is not divisible by heads={self.heads}")
        if self.norm not in ("none", "pre", "post"):
            raise ValueError(f"norm={self.norm!r}: allowed values are 'none', 'pre', 'post'")
        if not 0.0 <= self.deescalate <= 1.0:
            raise ValueError(f"deescalate={self.deescalate}: tau must lie in [0, 1]")
        if self.deescalate_at not in ("branch", "output"):
            raise ValueError(f"deescalate_at={self.deescalate_at!r}: allowed values are "
                             "'branch', 'output'")
        if self.depth < 1:
            raise ValueError(f"depth={self.depth}: need at least one block")
        if self.branch_scale not in ("none", "inv_sqrt_depth"):
            raise ValueError(f"branch_scale={self.branch_scale!r}: allowed values are 'none', "
                             "'inv_sqrt_depth'")
        if self.deepnorm and (self.norm != "post" or not self.skip):
            raise ValueError(f"deepnorm=True with norm={self.norm!r}, skip={self.skip}: DeepNorm "
                             "scales a residual before a post-LN, so it needs norm='post' and "
                             "skip=True")

    @property
    def branch_factor(self) -> float:
        """What each residual branch is multiplied by (Noci et al. 2022: 1/sqrt(L))."""
        return 1.0 / math.sqrt(self.depth) if self.branch_scale == "inv_sqrt_depth" else 1.0

    @property
    def skip_factor(self) -> float:
        """What the residual (skip) path is multiplied by: 0 without skip, else 1, or DeepNorm's
        alpha = (2L)^(1/4) (Wang et al. 2022, encoder-only constants)."""
        if not self.skip:
            return 0.0
        return (2 * self.depth) ** 0.25 if self.deepnorm else 1.0

    @property
    def deepnorm_init_divisor(self) -> float:
        """What DeepNorm divides the value, output-projection and MLP weights by after the
        ordinary init: (8L)^(1/4), i.e. they are multiplied by its beta; 1 without DeepNorm."""
        return (8 * self.depth) ** 0.25 if self.deepnorm else 1.0

    @classmethod
    def from_dict(cls, values: dict) -> ModelConfig:
        """Build a config, failing fast on keys that are not fields (a typo is an error)."""
        return from_fields(cls, values, "model")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 400  # optimiser steps
    batch: int = 64  # examples per step, drawn with replacement from the training set
    lr: float = 1e-3  # peak learning rate, reached after `warmup` steps
    weight_decay: float = 0.01  # AdamW's decoupled weight decay
    warmup: int = 40  # linear warm-up steps; then the `schedule`
    schedule: str = "cosine"  # after warm-up: cosine decay to 0 at `steps`, "constant", or "wsd"
    # wsd (warmup-stable-decay): the peak rate until the last `cooldown` fraction of the steps,
    # which decays linearly to 0; a run of any shorter budget is a cool-down branched off the
    # stable phase (training.ensemble.train_ensemble's `budgets`).
    cooldown: float = 0.2
    clip: float = 1.0  # max global gradient norm
    checkpoint_every: int = 100  # steps between checkpoints (0: never)
    eval_every: int = 100  # steps between test-set evaluations (the last step always)
    precision: str = "float32"  # float32, tf32 (GPU matrix products) or bf16 (autocast)
    engine: str = "auto"  # the ensemble's step: auto, eager, graph (CUDA graph) or compile
    attention: str = "math"  # math (bit-reproducible) or fused (GPU kernels under vmap)

    def __post_init__(self) -> None:
        for name, allowed in (("schedule", SCHEDULES), ("precision", PRECISIONS),
                              ("engine", ENGINES), ("attention", ATTENTION)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r}: allowed values are "
                                 f"{list(allowed)}")
        if not 0.0 < self.cooldown <= 1.0:
            raise ValueError(f"cooldown={self.cooldown}: a fraction of the steps in (0, 1]")
        room = stable_steps(self.steps, self.cooldown)
        if self.schedule == "wsd" and self.warmup > room:
            raise ValueError(f"warmup={self.warmup} runs into the cool-down of a wsd schedule of "
                             f"{self.steps} steps (its last {self.steps - room}); allowed: "
                             f"warmup <= {room}")

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        return from_fields(cls, values, "training")


# "constant" is Dong et al.'s Adam at a fixed rate (their circle and sorting runs); "wsd" is
# E5's warmup-stable-decay, whose every shorter budget is a branch of one run.
SCHEDULES = ("cosine", "constant", "wsd")


def cooldown_steps(steps: int, fraction: float) -> int:
    """The cool-down of a wsd run of `steps` steps: its last round(fraction * steps) steps, at
    least one."""
    return max(1, round(fraction * steps))


def stable_steps(steps: int, fraction: float) -> int:
    """Where a wsd run of `steps` steps leaves its stable phase (the step its cool-down starts
    from): a run of this budget is a branch of any longer run at this step."""
    return steps - cooldown_steps(steps, fraction)
# The recorded numeric choices of a training job (rankcollapse.training.step explains each).
PRECISIONS = ("float32", "tf32", "bf16")
ENGINES = ("auto", "eager", "graph", "compile")
ATTENTION = ("math", "fused")

# What may differ between the members of one ensemble, besides the seed (ensemble.Member).
MEMBER_FIELDS = ("lr", "warmup", "weight_decay")


MODEL_KEYS = ("width", "heads", "mlp_ratio")  # the model sizes of a `train` block


def sweep(value) -> list:
    """A config value that may be a list (a sweep) or a single value, as a list."""
    return list(value) if isinstance(value, list | tuple) else [value]
