"""One readable transformer whose architecture is set by orthogonal switches (`ModelConfig`),
and `PRESETS`, the named variants. Why switches, how a block is wired and where de-escalation
sits: docs/model.md.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rankcollapse.core.specs import ModelConfig

# The forward passes' precisions by name (config values, the probe's --dtype).
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def token_mean(x: Tensor, causal: bool = False) -> Tensor:
    """The mean over tokens of x (..., n, d), broadcast to every token; with causal, token i
    gets the mean of tokens 1..i (the prefix mean), which keeps a causal model causal."""
    if not causal:
        return x.mean(dim=-2, keepdim=True)
    counts = torch.arange(1, x.shape[-2] + 1, device=x.device, dtype=x.dtype)[:, None]
    return x.cumsum(dim=-2) / counts


class Centre(nn.Module):
    """x <- x - tau * token_mean(x): de-escalation as a module (placed by the switches)."""

    def __init__(self, tau: float, causal: bool):
        super().__init__()
        self.tau, self.causal = tau, causal

    def forward(self, x: Tensor) -> Tensor:
        return x - self.tau * token_mean(x, self.causal)


def _centre(cfg: ModelConfig, placement: str, mlp: bool = False) -> nn.Module:
    """Centre(tau) where the config puts de-escalation at `placement`, else Identity."""
    wanted = cfg.deescalate and cfg.deescalate_at == placement and (cfg.deescalate_mlp or not mlp)
    return Centre(cfg.deescalate, cfg.causal) if wanted else nn.Identity()


def _linear(fan_in: int, fan_out: int, std: float | None, bias: bool = True) -> nn.Linear:
    layer = nn.Linear(fan_in, fan_out, bias=bias)
    # Entries N(0, 1/fan_in) keep the norm of a random input roughly unchanged (variance-preserving
    # init); PyTorch's default uniform init has a third of that variance, which shrinks the stream.
    nn.init.normal_(layer.weight, std=std if std is not None else 1.0 / math.sqrt(fan_in))
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


@torch.no_grad()
def _shrink(layer: nn.Linear, divisor: float, rows: slice = slice(None)) -> None:
    """Divide the output rows `rows` of a Linear's weight (and bias, if any) by divisor.

    DeepNorm's init (Wang et al. 2022) in the reference code's form (microsoft/torchscale):
    the ordinary init, then divided by (8L)^(1/4); not the paper's xavier-gain formulation."""
    layer.weight[rows].div_(divisor)
    if layer.bias is not None:
        layer.bias[rows].div_(divisor)


class SelfAttention(nn.Module):
    """Multi-head softmax self-attention with optional de-escalation of its output."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads = cfg.heads
        self.scale = cfg.temperature / math.sqrt(cfg.width // cfg.heads)
        self.center = cfg.center_attention
        self.causal = cfg.causal
        self.deescalate = _centre(cfg, "branch")  # Yu & Zhang's placement, or Identity
        self.qkv = _linear(cfg.width, 3 * cfg.width, cfg.init_std, bias=cfg.bias)
        self.proj = _linear(cfg.width, cfg.width, cfg.init_std, bias=cfg.bias)
        if cfg.deepnorm:  # v and W_O shrink; q and k keep their init (qkv's rows: q, k, v)
            _shrink(self.qkv, cfg.deepnorm_init_divisor, rows=slice(2 * cfg.width, 3 * cfg.width))
            _shrink(self.proj, cfg.deepnorm_init_divisor)

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        """x: (B, n, d) -> (y: (B, n, d), attention (B, H, n, n) if capture else None)."""
        B, n, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(B, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        # q, k, v: (B, H, n, d_head)
        if capture:
            # Materialise the row-stochastic matrices only when they are measured.
            logits = self.scale * q @ k.transpose(-2, -1)  # (B, H, n, n)
            if self.causal:  # lower-triangular: token i attends to tokens 1..i
                future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
                logits = logits.masked_fill(future, float("-inf"))
            attn = torch.softmax(logits, dim=-1)
            y = attn @ v
        else:
            attn = None
            y = F.scaled_dot_product_attention(q, k, v, scale=self.scale,
                                               is_causal=self.causal)  # fused kernel
        if self.center:
            # (A - (1/n) 1 1^T) V = A V - 1 mean(V): centred attention without forming A (the
            # prefix mean when causal). The trace keeps A itself (row-stochastic), so its
            # spectrum stays comparable.
            y = y - token_mean(v, self.causal)
        y = self.proj(y.transpose(1, 2).reshape(B, n, d))  # (B, n, d)
        # Yu & Zhang: Y <- (I - tau * (1/n) 1 1^T) Y removes tau x the token mean.
        return self.deescalate(y), attn


class FeedForward(nn.Module):
    """The MLP sublayer, wired like attention: out = post(skip * x + f(pre(x)))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        hidden = cfg.mlp_ratio * cfg.width
        self.inp = nn.LayerNorm(cfg.width) if cfg.norm == "pre" else nn.Identity()
        self.out = nn.LayerNorm(cfg.width) if cfg.norm == "post" else nn.Identity()
        self.skip = cfg.skip_factor  # 0, 1 or DeepNorm's alpha
        self.scale = cfg.branch_factor
        self.f = nn.Sequential(
            _linear(cfg.width, hidden, cfg.init_std),
            nn.GELU(),
            _linear(hidden, cfg.width, cfg.init_std),
        )
        if cfg.deepnorm:  # DeepNorm shrinks both feed-forward matrices (and biases)
            _shrink(self.f[0], cfg.deepnorm_init_divisor)
            _shrink(self.f[2], cfg.deepnorm_init_divisor)
        self.centre_branch = _centre(cfg, "branch", mlp=True)  # de-escalated MLP output
        self.centre_out = _centre(cfg, "output", mlp=True)  # or centred after the post-LN

    def forward(self, x: Tensor) -> Tensor:
        h = self.centre_branch(self.f(self.inp(x)))
        return self.centre_out(self.out(self.skip * x + self.scale * h))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_in = nn.LayerNorm(cfg.width) if cfg.norm == "pre" else nn.Identity()
        self.attn = SelfAttention(cfg)
        self.attn_out = nn.LayerNorm(cfg.width) if cfg.norm == "post" else nn.Identity()
        # 1.0 keeps the residual, 0.0 drops it; DeepNorm scales it by alpha = (2L)^(1/4)
        self.skip = cfg.skip_factor
        self.scale = cfg.branch_factor  # 1, or 1/sqrt(depth) for scaled residual branches
        self.centre_out = _centre(cfg, "output")  # de-escalation after the post-LN
        self.ffn = FeedForward(cfg) if cfg.mlp else nn.Identity()

    def forward(self, x: Tensor, capture: bool = False
                ) -> tuple[Tensor, Tensor, Tensor | None]:
        """-> (block output, the attention sublayer's output, attention if capture)."""
        h, attn = self.attn(self.attn_in(x), capture)
        x = self.centre_out(self.attn_out(self.skip * x + self.scale * h))
        return self.ffn(x), x, attn


class Trace(NamedTuple):
    """Everything one captured forward pass records."""

    hidden: list[Tensor]  # L + 1 tensors (B, n, d): the input, then the output of every block
    attention: list[Tensor]  # L tensors (B, H, n, n): each block's attention matrices
    after_attention: list[Tensor]  # L tensors (B, n, d): each block's stream after attention,
    # before its MLP (the same as `hidden` when the block has no MLP)


class Transformer(nn.Module):
    """A stack of `depth` blocks acting on token embeddings (B, n, d).

    Task-specific embeddings and read-outs wrap this stack; at initialisation it is applied to
    random tokens directly. Because the first l blocks of a random depth-L stack are a random
    depth-l stack, one captured pass of depth L measures every depth <= L.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Trace | None]:
        """x: (B, n, d) -> (output (B, n, d), Trace of every layer if capture else None)."""
        trace = Trace(hidden=[x], attention=[], after_attention=[]) if capture else None
        for block in self.blocks:
            x, mid, attn = block(x, capture)
            if trace is not None:
                trace.hidden.append(x)
                trace.attention.append(attn)
                trace.after_attention.append(mid)
        return x, trace


def build(variant: dict, **overrides) -> Transformer:
    """A Transformer from a variant preset (switches) plus shared options (width, depth, ...)."""
    return Transformer(ModelConfig.from_dict({**variant, **overrides}))


class TaskModel(nn.Module):
    """The `Transformer` stack with a task's embedding, positions and read-out around it.

    inputs "features": Linear(input_dim -> d) per token (image patches); "tokens": an embedding
    table of input_dim ids. readout "class_token": a learned token is prepended and its final
    state is classified (ViT); "per_token": every token gets a label (sorting). A final
    LayerNorm before the linear head, as in ViT and GPT, for every variant alike.
    """

    def __init__(self, cfg: ModelConfig, inputs: str, input_dim: int, tokens: int, classes: int,
                 readout: str):
        super().__init__()
        if inputs not in ("features", "tokens"):
            raise ValueError(f"inputs={inputs!r}: allowed values are 'features', 'tokens'")
        if readout not in ("class_token", "per_token"):
            raise ValueError(f"readout={readout!r}: allowed values are 'class_token', 'per_token'")
        d = cfg.width
        self.readout = readout
        if inputs == "features":
            self.embed = _linear(input_dim, d, cfg.init_std)
        else:
            self.embed = nn.Embedding(input_dim, d)  # entries N(0, 1): unit-scale tokens
        n = tokens + (readout == "class_token")
        # Small positional/class vectors (ViT's 0.02) leave the content to the embedding.
        self.cls = nn.Parameter(0.02 * torch.randn(1, 1, d)) if readout == "class_token" else None
        self.pos = nn.Parameter(0.02 * torch.randn(1, n, d))
        self.stack = Transformer(cfg)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Trace | None]:
        """x: (B, n, input_dim) floats or (B, n) ids -> logits (B, classes) for "class_token",
        (B, n, classes) for "per_token"; plus the stack's Trace when capturing."""
        h = self.embed(x)  # (B, n, d)
        if self.cls is not None:
            h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], dim=1)  # (B, n + 1, d)
        h, trace = self.stack(h + self.pos, capture)
        if self.readout == "class_token":
            h = h[:, 0]  # (B, d)
        return self.head(self.norm(h)), trace


def build_task_model(variant: dict, task: dict, **overrides) -> TaskModel:
    """A TaskModel from a variant preset, a task spec (tasks.TaskSpec as a dict) and options;
    a causal task (language modelling) makes the attention causal."""
    cfg = ModelConfig.from_dict({**variant, **overrides, "causal": bool(task.get("causal"))})
    return TaskModel(cfg, task["inputs"], task["input_dim"], task["tokens"], task["classes"],
                     task["readout"])
