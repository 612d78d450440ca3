"""One readable transformer whose architecture is set by orthogonal switches.

Every ablation studied here is a switch of `ModelConfig`, resolved once in `__init__` to either a
real module or `nn.Identity`, so that `Block.forward` stays a few readable lines:

    h, attn = self.attn(self.attn_in(x), capture)   # pre-LN or Identity, then attention
    x = self.attn_out(self.skip * x + self.scale * h)  # residual (skip 1) or not (0); post-LN
    x = self.ffn(x)                                 # the same wiring around an MLP, or Identity

Named variants (`san`, `post_ln`, ...) are presets of these switches; they live in the workflow
config (workflow/config/*.yaml), and `PRESETS` below holds the same set for library users.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

Norm = Literal["none", "pre", "post"]


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

    def __post_init__(self) -> None:
        if self.width % self.heads:
            raise ValueError(f"width={self.width} is not divisible by heads={self.heads}")
        if self.norm not in ("none", "pre", "post"):
            raise ValueError(f"norm={self.norm!r}: allowed values are 'none', 'pre', 'post'")
        if not 0.0 <= self.deescalate <= 1.0:
            raise ValueError(f"deescalate={self.deescalate}: tau must lie in [0, 1]")
        if self.depth < 1:
            raise ValueError(f"depth={self.depth}: need at least one block")
        if self.branch_scale not in ("none", "inv_sqrt_depth"):
            raise ValueError(f"branch_scale={self.branch_scale!r}: allowed values are 'none', "
                             "'inv_sqrt_depth'")

    @property
    def branch_factor(self) -> float:
        """What each residual branch is multiplied by (Noci et al. 2022: 1/sqrt(L))."""
        return 1.0 / math.sqrt(self.depth) if self.branch_scale == "inv_sqrt_depth" else 1.0

    @classmethod
    def from_dict(cls, values: dict) -> ModelConfig:
        """Build a config, failing fast on keys that are not fields (a typo is an error)."""
        from .config import from_fields

        return from_fields(cls, values, "model")

    def to_dict(self) -> dict:
        return asdict(self)


# The named variants of DESIGN.md; the workflow config carries the same presets.
PRESETS: dict[str, dict] = {
    "san": dict(skip=False, mlp=False, norm="none"),  # pure self-attention
    "san_skip": dict(skip=True, mlp=False, norm="none"),
    "san_mlp": dict(skip=False, mlp=True, norm="none"),
    "san_skip_mlp": dict(skip=True, mlp=True, norm="none"),
    "san_ln": dict(skip=False, mlp=False, norm="post"),
    "post_ln": dict(skip=True, mlp=True, norm="post"),  # the classic transformer
    "pre_ln": dict(skip=True, mlp=True, norm="pre"),
    "post_ln_deesc": dict(skip=True, mlp=True, norm="post", deescalate=1.0),
    "post_ln_center": dict(skip=True, mlp=True, norm="post", center_attention=True),
    "post_ln_scaled": dict(skip=True, mlp=True, norm="post", branch_scale="inv_sqrt_depth"),
    # Dong et al.'s path-experiment network: attention + skip + post-LN, biases, no MLP.
    "san_skip_ln_bias": dict(skip=True, mlp=False, norm="post", bias=True),
}


def _linear(fan_in: int, fan_out: int, std: float | None, bias: bool = True) -> nn.Linear:
    layer = nn.Linear(fan_in, fan_out, bias=bias)
    # Entries N(0, 1/fan_in) keep the norm of a random input roughly unchanged (variance-preserving
    # init); PyTorch's default uniform init has a third of that variance, which shrinks the stream.
    nn.init.normal_(layer.weight, std=std if std is not None else 1.0 / math.sqrt(fan_in))
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


class SelfAttention(nn.Module):
    """Multi-head softmax self-attention with optional de-escalation of its output."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads = cfg.heads
        self.scale = cfg.temperature / math.sqrt(cfg.width // cfg.heads)
        self.deescalate = cfg.deescalate
        self.center = cfg.center_attention
        self.qkv = _linear(cfg.width, 3 * cfg.width, cfg.init_std, bias=cfg.bias)
        self.proj = _linear(cfg.width, cfg.width, cfg.init_std, bias=cfg.bias)

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        """x: (B, n, d) -> (y: (B, n, d), attention (B, H, n, n) if capture else None)."""
        B, n, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(B, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        # q, k, v: (B, H, n, d_head)
        if capture:
            # Materialise the row-stochastic matrices only when they are measured.
            attn = torch.softmax(self.scale * q @ k.transpose(-2, -1), dim=-1)  # (B, H, n, n)
            y = attn @ v
        else:
            attn = None
            y = F.scaled_dot_product_attention(q, k, v, scale=self.scale)  # fused kernel
        if self.center:
            # (A - (1/n) 1 1^T) V = A V - 1 mean(V): centred attention without forming A. The
            # trace keeps A itself (row-stochastic), so its spectrum stays comparable.
            y = y - v.mean(dim=-2, keepdim=True)
        y = self.proj(y.transpose(1, 2).reshape(B, n, d))  # (B, n, d)
        if self.deescalate:
            # Yu & Zhang: Y <- (I - tau * (1/n) 1 1^T) Y removes tau x the token mean.
            y = y - self.deescalate * y.mean(dim=-2, keepdim=True)
        return y, attn


class FeedForward(nn.Module):
    """The MLP sublayer, wired like attention: out = post(skip * x + f(pre(x)))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        hidden = cfg.mlp_ratio * cfg.width
        self.inp = nn.LayerNorm(cfg.width) if cfg.norm == "pre" else nn.Identity()
        self.out = nn.LayerNorm(cfg.width) if cfg.norm == "post" else nn.Identity()
        self.skip = float(cfg.skip)
        self.scale = cfg.branch_factor
        self.f = nn.Sequential(
            _linear(cfg.width, hidden, cfg.init_std),
            nn.GELU(),
            _linear(hidden, cfg.width, cfg.init_std),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.skip * x + self.scale * self.f(self.inp(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_in = nn.LayerNorm(cfg.width) if cfg.norm == "pre" else nn.Identity()
        self.attn = SelfAttention(cfg)
        self.attn_out = nn.LayerNorm(cfg.width) if cfg.norm == "post" else nn.Identity()
        self.skip = float(cfg.skip)  # 1.0 keeps the residual, 0.0 drops it
        self.scale = cfg.branch_factor  # 1, or 1/sqrt(depth) for scaled residual branches
        self.ffn = FeedForward(cfg) if cfg.mlp else nn.Identity()

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        h, attn = self.attn(self.attn_in(x), capture)
        x = self.attn_out(self.skip * x + self.scale * h)
        return self.ffn(x), attn


class Trace(NamedTuple):
    """Everything one captured forward pass records."""

    hidden: list[Tensor]  # L + 1 tensors (B, n, d): the input, then the output of every block
    attention: list[Tensor]  # L tensors (B, H, n, n): each block's attention matrices


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
        trace = Trace(hidden=[x], attention=[]) if capture else None
        for block in self.blocks:
            x, attn = block(x, capture)
            if trace is not None:
                trace.hidden.append(x)
                trace.attention.append(attn)
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
    """A TaskModel from a variant preset, a task spec (tasks.TaskSpec as a dict) and options."""
    cfg = ModelConfig.from_dict({**variant, **overrides})
    return TaskModel(cfg, task["inputs"], task["input_dim"], task["tokens"], task["classes"],
                     task["readout"])
