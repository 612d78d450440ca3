"""Memory estimates that plan the training jobs: what one ensemble member adds to a step, how
many members fit a budget, what a job declares on a GPU. Counted from sizes, without torch."""

from __future__ import annotations

import math

from rankcollapse.core.specs import ModelConfig
from rankcollapse.core.tasks import TaskSpec, task_spec

# Floats that one training step keeps for the backward pass, per token of the batch and block:
# fitted to the saved tensors that autograd records for the ensemble's step (tests check the
# estimate against that count): the residual stream and its norms ~ width, the attention
# scores and probabilities ~ heads x tokens, the MLP ~ width and its hidden layer.
SAVED_PER_WIDTH, SAVED_PER_ATTENTION = 4.5, 2.5
SAVED_MLP_PER_WIDTH, SAVED_MLP_PER_HIDDEN = 5.5, 2.2
MARGIN = 1.25  # allocator slack and transient buffers
STATE_COPIES = 6  # weights, gradients, two AdamW moments, two temporaries of the update


def parameter_count(spec: TaskSpec, cfg: ModelConfig) -> int:
    """Parameters of model.TaskModel(cfg) for the task `spec`, counted from the sizes (building
    the model, even on the meta device, is too slow to plan a paper-size grid)."""
    d, hidden = cfg.width, cfg.mlp_ratio * cfg.width
    norms = (cfg.norm != "none") * (1 + cfg.mlp)  # LayerNorms per block, 2d parameters each
    block = 4 * d * d + 4 * d * cfg.bias + 2 * d * norms + cfg.mlp * (2 * d * hidden + hidden + d)
    embed = spec.input_dim * d + (d if spec.inputs == "features" else 0)
    tokens = spec.tokens + (spec.readout == "class_token")
    around = embed + (d if spec.readout == "class_token" else 0) + tokens * d + 2 * d \
        + d * spec.classes + spec.classes
    return cfg.depth * block + around


def member_memory_mb(task: str, task_options: dict, variant: dict, model_options: dict,
                     batch: int, bytes_per_float: int = 4) -> float:
    """Estimated peak memory (MB) that one ensemble member adds to a training step."""
    spec = task_spec(task, **task_options)
    cfg = ModelConfig.from_dict({**variant, **model_options})
    params = parameter_count(spec, cfg)
    tokens = spec.tokens + (spec.readout == "class_token")
    per_token = SAVED_PER_WIDTH * cfg.width + SAVED_PER_ATTENTION * cfg.heads * tokens
    if cfg.mlp:
        per_token += SAVED_MLP_PER_WIDTH * cfg.width + SAVED_MLP_PER_HIDDEN * cfg.mlp_ratio \
            * cfg.width
    saved = MARGIN * cfg.depth * batch * tokens * per_token
    return (STATE_COPIES * params + saved) * bytes_per_float / 2**20


def split(members: list, per_member_mb: float, budget_mb: float) -> list[list]:
    """Members in as few contiguous, near-equal parts as fit `budget_mb` each (at least one
    member per part, however large)."""
    fit = max(1, math.floor(budget_mb / per_member_mb))
    parts = math.ceil(len(members) / fit)
    bounds = [round(i * len(members) / parts) for i in range(parts + 1)]
    return [members[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


# What a job holds on a GPU besides its ensembles: the CUDA context, cuBLAS's workspace and the
# allocator's slack (a few hundred MB each on current GPUs), rounded up.
CONTEXT_MB = 1024


