"""The probe: does *this* model collapse? Per-layer collapse metrics of a Hugging Face model, with
its paths ablated, and the papers' claims judged on it.

One implementation of the ablations and of the per-layer measurement serves two users: the
command `rankcollapse probe` (rankcollapse.cli: any local checkpoint folder, or a random-init
family) and experiment E1b (rankcollapse.experiments.realarch: BERT/ALBERT/XLNet-base as in
Dong et al.'s
Fig. 2; rules workflow/rules/realarch.smk, notebook notebooks/src/01b_real_architectures.py,
claims claims/e1b.py, config block `realarch`). The verdicts reuse claims/e1.py (collapse
exponent) and claims/e4.py (escalation of token similarity) and the registry's rule.

Models. A checkpoint folder (`config.json` + weights, written by `save_pretrained`) is loaded
with `AutoModel.from_pretrained`, offline. A family is built at random initialisation from an
explicit configuration (`base_config`, nothing is downloaded): bert, albert, xlnet (the
published base checkpoints' configs), gpt2 (GPT-2 small) and llama (a Llama-style decoder:
RMSNorm, pre-norm, rotary positions, SwiGLU, at BERT-base size; not a published checkpoint).
Attention runs as plain softmax ("eager"), so its matrices can be read.

Ablations (rankcollapse.plan.specs.PROBE_ABLATIONS says which model types take which):

    san                no attention skip, no feed-forward block: attention only
    san_mlp            no attention skip, the feed-forward block kept (its residual and norm too)
    san_skip           the attention skip kept, no feed-forward block
    transformer        the unmodified model
    transformer_deesc  the model with Yu & Zhang's de-escalation (tau = 1) of every attention
                       output before its residual add: a <- a - token mean of a
    san_skip_2021      ALBERT only: san_skip as Dong et al.'s 2021 code ablated it (see
                       AlbertLayer's ffn and ffn_output set to identities)

Conventions. Post-norm blocks (BERT, ALBERT, XLNet): removing the skip keeps the LayerNorm,
LN(h + a) becomes LN(a), as in Dong et al.'s code. Pre-norm blocks (GPT-2, Llama-style):
removing the skip turns h + attn(LN(h)) into attn(LN(h)). Removing the feed-forward block drops
the whole sublayer (its residual and norm too): h + mlp(LN2(h)) in a pre-norm block. An ablation
swaps named submodules for the small wrappers below, which read the original weights (shared,
not copied); the library's code is not edited. Any other model type that returns hidden states
and attentions is probed unmodified ("transformer") only, from its own `output_hidden_states`
(whose last entry some models return after their final norm).

Masks. Sequences are padded on the right and the padding mask is passed to the model; every
metric is computed over each sequence's real tokens only (its first `tokens` rows). Attention
|lambda_2| is that of the real-token block of each head's matrix (real queries over real keys,
row-stochastic because padded keys get zero weight). In a causal model that block is
lower-triangular, so its eigenvalues are its diagonal entries: |lambda_2| is the second-largest
weight a token gives itself, read off the diagonal (what LAPACK returns, without its cost).
De-escalation subtracts the mean over real tokens, or the prefix mean in a causal model
(rankcollapse.core.model.token_mean), so that the model stays causal.

Cost. |lambda_2| of bidirectional attention needs the eigenvalues of every head's n x n matrix
(LAPACK), the most expensive metric: `spectrum_sequences` limits it to the first sequences.
Metrics run in float64 whatever the forward pass ran in, on one thread (small LAPACK problems
run many times slower when their threads compete for cores).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from rankcollapse.core import metrics as M
from rankcollapse.core.model import token_mean
from rankcollapse.plan.specs import (
    PROBE_FAMILIES,
    PROBE_OUTPUTS,
    TOKENIZER_FILES,
    WORD_PATTERN,
    ProbeError,
    checkpoint_config,
    probe_ablations,
    read_text,  # noqa: F401 - part of the probe's API
)
from rankcollapse.plan.specs import max_positions as _max_positions

FAMILIES = PROBE_FAMILIES
ABLATIONS = {  # name: (attention skip kept, feed-forward block kept, de-escalation)
    "san": (False, False, False),
    "san_mlp": (False, True, False),
    "san_skip": (True, False, False),
    "transformer": (True, True, False),
    "transformer_deesc": (True, True, True),
    "san_skip_2021": (True, False, False),  # ALBERT only; see `ablate`
}
DTYPES = {"float32": torch.float32, "float64": torch.float64}
FIRST_ID = 1000  # input ids start here: clear of padding (zero embedding row) and special tokens
RESIDUALS = ("relative_residual_comp", "relative_residual")
METRICS = (*RESIDUALS, "token_similarity", "mean_cosine", "effective_rank", "attn_lambda2")


# ---- models ---------------------------------------------------------------------------------


def base_config(family: str, **sizes):
    """The configuration of a `family` at its base size, with `sizes` (constructor arguments)
    overriding it: BERT-base-cased, ALBERT-base-v2, XLNet-base-cased, GPT-2 small, and a
    Llama-style decoder at BERT-base size (12 layers, width 768, 12 heads, SwiGLU 2048).

    Set explicitly: transformers' default AlbertConfig is xxlarge, XLNetConfig large and
    LlamaConfig 7B. Values are those of the published checkpoints' config.json files.
    """
    import transformers

    common = {"attn_implementation": "eager"}  # plain softmax attention, whose matrices we read
    if family == "bert":
        return transformers.BertConfig(**{
            "vocab_size": 28996, "hidden_size": 768, "num_hidden_layers": 12,
            "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
            "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02,
            "layer_norm_eps": 1e-12, **common, **sizes})
    if family == "albert":
        return transformers.AlbertConfig(**{
            "vocab_size": 30000, "embedding_size": 128, "hidden_size": 768,
            "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
            "num_hidden_groups": 1, "inner_group_num": 1, "hidden_act": "gelu_new",
            "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02,
            "layer_norm_eps": 1e-12, **common, **sizes})
    if family == "xlnet":
        return transformers.XLNetConfig(**{
            "vocab_size": 32000, "d_model": 768, "n_layer": 12, "n_head": 12, "d_inner": 3072,
            "ff_activation": "gelu", "untie_r": True, "attn_type": "bi",
            "initializer_range": 0.02, "layer_norm_eps": 1e-12, "mem_len": None,
            **common, **sizes})
    if family == "gpt2":
        return transformers.GPT2Config(**{
            "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
            "n_head": 12, "n_inner": None, "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "initializer_range": 0.02, **common, **sizes})
    if family == "llama":
        return transformers.LlamaConfig(**{
            "vocab_size": 32000, "hidden_size": 768, "intermediate_size": 2048,
            "num_hidden_layers": 12, "num_attention_heads": 12, "num_key_value_heads": 12,
            "head_dim": 64, "hidden_act": "silu", "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-6, "initializer_range": 0.02, "tie_word_embeddings": False,
            **common, **sizes})
    raise ProbeError(f"family {family!r}: allowed families are {list(FAMILIES)}")


# Per family: the constructor names of (layers, width, heads, feed-forward width) and the
# feed-forward width as a multiple of the width.
_SIZE_KEYS = {
    "bert": ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", 4),
    "albert": ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
               4),
    "xlnet": ("n_layer", "d_model", "n_head", "d_inner", 4),
    "gpt2": ("n_layer", "n_embd", "n_head", None, 4),  # n_inner None: 4 x width
    "llama": ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
              8 / 3),
}


def family_sizes(family: str, layers: int | None = None, width: int | None = None,
                 heads: int | None = None) -> dict:
    """Constructor arguments that resize a family: depth, width (feed-forward width scaled with
    it, heads of 64 dimensions unless `heads` is given) and heads."""
    if family not in _SIZE_KEYS:
        raise ProbeError(f"family {family!r}: allowed families are {list(FAMILIES)}")
    depth_key, width_key, heads_key, inner_key, ratio = _SIZE_KEYS[family]
    out = {}
    if layers is not None:
        if layers < 1:
            raise ProbeError(f"--layers {layers}: a model needs at least one layer")
        out[depth_key] = layers
    if width is None and heads is None:
        return out
    width = width or 768
    if heads is None:
        if width % 64:
            raise ProbeError(f"--width {width} is not a multiple of 64: give --heads too")
        heads = width // 64
    if heads < 1 or width % heads:
        raise ProbeError(f"--width {width} is not divisible by --heads {heads}")
    out.update({width_key: width, heads_key: heads})
    if inner_key:
        out[inner_key] = int(round(ratio * width))
    if family == "xlnet":
        out["d_head"] = width // heads
    if family == "albert":
        out["embedding_size"] = min(128, width)
    if family == "llama":
        out.update(num_key_value_heads=heads, head_dim=width // heads)
    return out


def _model_class(family: str):
    import transformers

    classes = {"bert": transformers.BertModel, "albert": transformers.AlbertModel,
               "xlnet": transformers.XLNetModel, "gpt2": transformers.GPT2Model,
               "llama": transformers.LlamaModel}
    if family not in classes:
        raise ProbeError(f"family {family!r}: allowed families are {list(FAMILIES)}")
    return classes[family]


def build(family: str, seed: int = 0, config=None) -> nn.Module:
    """A `family` model at random initialisation from `seed` (torch's global RNG), in eval mode;
    `config` defaults to base_config(family)."""
    cls = _model_class(family)
    config = config if config is not None else base_config(family)
    torch.manual_seed(seed)
    return cls(config).eval()


def load(path: str | Path) -> nn.Module:
    """The base model (no task head) in a local checkpoint folder, in eval mode; nothing is
    fetched from the network. Eager attention where the architecture has it."""
    from transformers import AutoModel

    try:
        net = AutoModel.from_pretrained(str(path), local_files_only=True,
                                        attn_implementation="eager")
    except ValueError as err:  # an architecture without eager attention (or any attention)
        if "attn_implementation" not in str(err) and "eager" not in str(err):
            raise
        net = AutoModel.from_pretrained(str(path), local_files_only=True)
    return net.eval()


def model_type(net: nn.Module) -> str:
    return str(getattr(net.config, "model_type", type(net).__name__))


def max_positions(config) -> int | None:
    """The longest sequence the model accepts (None: no absolute limit, e.g. XLNet)."""
    return _max_positions(config if isinstance(config, dict) else config.to_dict())


# ---- de-escalation and the wrappers that ablate ---------------------------------------------

# The real-token mask (B, n) of the forward pass in progress, for the de-escalation wrappers
# (set by `capture`; None: no padding).
_TOKEN_MASK: contextvars.ContextVar[Tensor | None] = contextvars.ContextVar("token_mask",
                                                                            default=None)


def centre(y: Tensor, causal: bool, time_major: bool = False) -> Tensor:
    """y (B, n, d) minus its mean over real tokens (the prefix mean when causal): Yu & Zhang's
    de-escalation with tau = 1. time_major: y is (n, B, d), as inside XLNet."""
    if time_major:
        return centre(y.transpose(0, 1), causal).transpose(0, 1)
    mask = _TOKEN_MASK.get()
    if causal or mask is None:  # right padding: no prefix of a real token holds a pad
        return y - token_mean(y, causal)
    m = mask[..., None].to(y.dtype)  # (B, n, 1)
    return y - (y * m).sum(dim=-2, keepdim=True) / m.sum(dim=-2, keepdim=True)


def _branch(h: Tensor, a: Tensor, skip: bool, deesc: bool, causal: bool) -> Tensor:
    """The attention sublayer's result from its input h and attention output a."""
    a = centre(a, causal) if deesc else a
    return h + a if skip else a


class BertSelfOutputAblated(nn.Module):
    """BertSelfOutput with or without the residual, de-escalated or not:
    LN(dropout(dense(a)) + h) becomes LN(dropout(dense(a))) without the skip."""

    def __init__(self, original: nn.Module, skip: bool, deesc: bool = False):
        super().__init__()
        self.original, self.skip, self.deesc = original, skip, deesc

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        o = self.original
        a = o.dropout(o.dense(hidden_states))
        if self.deesc:
            a = centre(a, causal=False)
        return o.LayerNorm(a + input_tensor if self.skip else a)


class FeedForwardRemoved(nn.Module):
    """Stands in for BertOutput: the layer's output is the attention sublayer's output."""

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        return input_tensor


class AlbertAttentionAblated(nn.Module):
    """AlbertAttention recomputed from the original's weights, with or without the skip, and
    de-escalated or not. ALBERT adds the residual inside its attention module, so it cannot be
    dropped by swapping a smaller part; with skip=True this reproduces AlbertAttention (tested).
    """

    def __init__(self, original: nn.Module, skip: bool, deesc: bool = False):
        super().__init__()
        self.original, self.skip, self.deesc = original, skip, deesc

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None,
                **kwargs) -> tuple[Tensor, Tensor]:
        o = self.original
        B, n, _ = hidden_states.shape
        heads = lambda x: x.view(B, n, -1, o.attention_head_size).transpose(1, 2)  # noqa: E731
        q, k = heads(o.query(hidden_states)), heads(o.key(hidden_states))  # (B, H, n, head)
        v = heads(o.value(hidden_states))
        scores = (q @ k.transpose(-1, -2)) * o.scaling  # (B, H, n, n)
        if attention_mask is not None:
            if attention_mask.dtype == torch.bool:
                scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
            else:
                scores = scores + attention_mask
        probs = torch.softmax(scores, dim=-1)
        context = (probs @ v).transpose(1, 2).reshape(B, n, -1)  # (B, n, H * head)
        out = o.output_dropout(o.dense(context))
        if self.deesc:
            out = centre(out, causal=False)
        return o.LayerNorm(hidden_states + out if self.skip else out), probs


class AlbertLayerAttentionOnly(nn.Module):
    """AlbertLayer without its feed-forward block (and without that block's LayerNorm)."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.attention = original.attention  # the feed-forward weights are left behind

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None,
                **kwargs) -> Tensor:
        return self.attention(hidden_states, attention_mask, **kwargs)[0]


class XLNetAttentionAblated(nn.Module):
    """XLNetRelativeAttention's content stream with or without the residual in its
    post-attention, de-escalated or not. Only the plain encoder use (no query stream g, no
    memory) is supported. Hidden states are (tokens, batch, width) inside XLNet."""

    def __init__(self, original: nn.Module, skip: bool, deesc: bool = False):
        super().__init__()
        self.original, self.skip, self.deesc = original, skip, deesc

    def forward(self, h, g, attn_mask_h, attn_mask_g, r, seg_mat, mems=None,
                target_mapping=None, output_attentions=False):
        if g is not None or mems is not None:
            raise NotImplementedError("the ablated XLNet attention supports h only, no mems")
        o = self.original
        q = torch.einsum("ibh,hnd->ibnd", h, o.q)  # (n, B, H, head)
        k = torch.einsum("ibh,hnd->ibnd", h, o.k)
        v = torch.einsum("ibh,hnd->ibnd", h, o.v)
        k_r = torch.einsum("ibh,hnd->ibnd", r.type(o.r.dtype), o.r)
        core = o.rel_attn_core(q, k, v, k_r, seg_mat=seg_mat, attn_mask=attn_mask_h,
                               output_attentions=output_attentions)
        attn_vec, probs = core if output_attentions else (core, None)
        if self.deesc:  # post_attention with the attention output centred before the add
            out = centre(o.dropout(torch.einsum("ibnd,hnd->ibh", attn_vec, o.o)), False,
                         time_major=True)
            out = o.layer_norm(out + h if self.skip else out)
        else:
            out = o.post_attention(h, attn_vec, residual=self.skip)
        return (out, None, probs) if output_attentions else (out, None)


class GPT2BlockAblated(nn.Module):
    """GPT2Block (pre-norm) with paths removed: h + attn(ln_1(h)) becomes attn(ln_1(h))
    without the skip; without the feed-forward block, h + mlp(ln_2(h)) is dropped."""

    def __init__(self, original: nn.Module, skip: bool, ffn: bool, deesc: bool = False):
        super().__init__()
        self.original, self.skip, self.ffn, self.deesc = original, skip, ffn, deesc

    def forward(self, hidden_states: Tensor, cache=None, attention_mask=None,
                encoder_hidden_states=None, encoder_attention_mask=None, use_cache=False,
                **kwargs) -> Tensor:
        if encoder_hidden_states is not None:
            raise NotImplementedError("the ablated GPT-2 block has no cross-attention")
        o = self.original
        a, _ = o.attn(o.ln_1(hidden_states), cache=cache, attention_mask=attention_mask,
                      use_cache=use_cache, **kwargs)
        h = _branch(hidden_states, a, self.skip, self.deesc, causal=True)
        return h + o.mlp(o.ln_2(h)) if self.ffn else h


class LlamaLayerAblated(nn.Module):
    """A Llama-style decoder layer (pre-norm, RMSNorm) with paths removed, as GPT2BlockAblated:
    h + self_attn(input_layernorm(h)), then h + mlp(post_attention_layernorm(h))."""

    def __init__(self, original: nn.Module, skip: bool, ffn: bool, deesc: bool = False):
        super().__init__()
        self.original, self.skip, self.ffn, self.deesc = original, skip, ffn, deesc

    def forward(self, hidden_states: Tensor, attention_mask=None, position_ids=None,
                cache=None, use_cache=False, position_embeddings=None, **kwargs) -> Tensor:
        o = self.original
        a, _ = o.self_attn(hidden_states=o.input_layernorm(hidden_states),
                           attention_mask=attention_mask, position_ids=position_ids,
                           cache=cache, use_cache=use_cache,
                           position_embeddings=position_embeddings, **kwargs)
        h = _branch(hidden_states, a, self.skip, self.deesc, causal=True)
        return h + o.mlp(o.post_attention_layernorm(h)) if self.ffn else h


# ---- architectures: where the layers and the attention matrices are -------------------------


def _unwrapped(module: nn.Module) -> nn.Module:
    return getattr(module, "original", module)


@dataclass(frozen=True)
class Arch:
    """How the probe reads one model type: the modules applied as layers (each once; ALBERT's
    shared one is applied `depth` times), the modules whose output carries the attention
    probabilities, and where."""

    name: str
    causal: bool
    layers: Callable[[nn.Module], list[nn.Module]]
    depth: Callable[[nn.Module], int]
    attention: Callable[[nn.Module], list[nn.Module]]
    probs_at: int = 1  # position of the probabilities in the attention module's output
    time_major: bool = False  # XLNet: (tokens, batch, ...) inside the model
    call: dict = field(default_factory=dict)  # keyword arguments of every forward pass


def _albert_layers(net: nn.Module) -> list[nn.Module]:
    return [m for g in net.encoder.albert_layer_groups for m in g.albert_layers]


_LLAMA_STYLE = Arch(
    "llama", causal=True, layers=lambda net: list(net.layers), depth=lambda net: len(net.layers),
    attention=lambda net: [_unwrapped(m).self_attn for m in net.layers],
    call={"use_cache": False})
ARCHS = {
    "bert": Arch("bert", causal=False, layers=lambda net: list(net.encoder.layer),
                 depth=lambda net: len(net.encoder.layer),
                 attention=lambda net: [m.attention.self for m in net.encoder.layer]),
    "albert": Arch("albert", causal=False, layers=_albert_layers,
                   depth=lambda net: net.config.num_hidden_layers,
                   attention=lambda net: [m.attention for m in _albert_layers(net)]),
    "xlnet": Arch("xlnet", causal=False, layers=lambda net: list(net.layer),
                  depth=lambda net: len(net.layer),
                  attention=lambda net: [m.rel_attn for m in net.layer], probs_at=2,
                  time_major=True),
    "gpt2": Arch("gpt2", causal=True, layers=lambda net: list(net.h),
                 depth=lambda net: len(net.h),
                 attention=lambda net: [_unwrapped(m).attn for m in net.h],
                 call={"use_cache": False}),
    "llama": _LLAMA_STYLE,
    "mistral": _LLAMA_STYLE,
    "qwen2": _LLAMA_STYLE,
}


def ablate(net: nn.Module, kind: str, ablation: str) -> nn.Module:
    """A copy of `net` (model type `kind`) with the ablation's paths removed; the copy reads the
    original's weights (shared, not copied) and the original is left untouched."""
    allowed = probe_ablations(kind)
    if ablation not in allowed:
        raise ProbeError(f"ablation {ablation!r} cannot run on a {kind} model; the probe runs "
                         f"{list(allowed)} on it")
    skip, ffn, deesc = ABLATIONS[ablation]
    # Copy the module tree but share the weights (only read here): a deep copy of base-size
    # weights per ablation costs more than the wrappers do.
    net = copy.deepcopy(net, memo={id(t): t for t in (*net.parameters(), *net.buffers())})
    if ablation == "transformer":
        return net
    if kind == "bert":
        for layer in net.encoder.layer:
            if not skip or deesc:
                layer.attention.output = BertSelfOutputAblated(layer.attention.output, skip,
                                                               deesc)
            if not ffn:
                layer.intermediate = nn.Identity()
                layer.output = FeedForwardRemoved()
    elif kind == "albert":
        for group in net.encoder.albert_layer_groups:
            for i, layer in enumerate(group.albert_layers):  # shared across depth
                if not skip or deesc:
                    layer.attention = AlbertAttentionAblated(layer.attention, skip, deesc)
                if ablation == "san_skip_2021":
                    # As the 2021 code did: ffn and ffn_output set to Identity, so the layer
                    # still applies LN(gelu(a) + a) to the attention output a.
                    layer.ffn, layer.ffn_output = nn.Identity(), nn.Identity()
                elif not ffn:
                    group.albert_layers[i] = AlbertLayerAttentionOnly(layer)
    elif kind == "xlnet":
        for layer in net.layer:
            if not skip or deesc:
                layer.rel_attn = XLNetAttentionAblated(layer.rel_attn, skip, deesc)
            if not ffn:
                layer.ff = nn.Identity()
    elif kind == "gpt2":
        for i, block in enumerate(net.h):
            net.h[i] = GPT2BlockAblated(block, skip, ffn, deesc)
    elif ARCHS.get(kind) is _LLAMA_STYLE:
        for i, layer in enumerate(net.layers):
            net.layers[i] = LlamaLayerAblated(layer, skip, ffn, deesc)
    else:  # probe_ablations allows only "transformer" for any other model type
        raise ProbeError(f"the probe cannot ablate a {kind} model")
    return net


# ---- capture --------------------------------------------------------------------------------

# on_layer(layer, X, A): X (B, n, d) the hidden state entering layer+1 (layer 0: the embedding
# output, L: the last layer's output); A (B, H, n, n) the attention of that layer, None at 0.
OnLayer = Callable[[int, Tensor, Tensor | None], None]


@torch.no_grad()
def capture(net: nn.Module, kind: str, input_ids: Tensor, on_layer: OnLayer,
            attention_mask: Tensor | None = None, attentions: bool = True) -> int:
    """One forward pass of `net` (model type `kind`); calls on_layer for every layer in order,
    as soon as its output exists (nothing is kept). Returns the number of calls (depth + 1).

    attention_mask: (B, n), 1 on real tokens, passed to the model (None: no padding).
    attentions=False reads no attention matrices (on_layer gets A = None).
    """
    arch = ARCHS.get(kind)
    token = _TOKEN_MASK.set(None if attention_mask is None else attention_mask.bool())
    try:
        if arch is None:
            return _capture_outputs(net, kind, input_ids, on_layer, attention_mask, attentions)
        return _capture_hooks(net, arch, input_ids, on_layer, attention_mask, attentions)
    finally:
        _TOKEN_MASK.reset(token)


def _capture_hooks(net, arch: Arch, input_ids, on_layer, attention_mask, attentions) -> int:
    """Forward hooks on the layer modules, in call order (ALBERT's one shared layer gives all
    its applications), and on the attention modules; XLNet's (n, B, d) is transposed."""
    calls, pending = 0, []

    def state(x) -> Tensor:
        x = x[0] if isinstance(x, tuple) else x
        return x.transpose(0, 1) if arch.time_major else x

    def pre_hook(module, args, kwargs):
        nonlocal calls
        if calls == 0:
            on_layer(0, state(args[0] if args else next(iter(kwargs.values()))), None)
            calls = 1

    def hook(module, args, output):
        nonlocal calls
        on_layer(calls, state(output), pending.pop() if pending else None)
        calls += 1

    def attention_hook(module, args, output):
        probs = output[arch.probs_at]
        pending.append(probs.permute(2, 3, 0, 1) if arch.time_major else probs)  # (B, H, n, n)

    handles = []
    for module in dict.fromkeys(arch.layers(net)):  # unique, in order
        handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        handles.append(module.register_forward_hook(hook))
    if attentions:
        for module in dict.fromkeys(arch.attention(net)):
            handles.append(module.register_forward_hook(attention_hook))
    kwargs = dict(arch.call)
    if attentions and arch.probs_at == 2:  # XLNet returns its probabilities only when asked
        kwargs["output_attentions"] = True
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    try:
        net(input_ids=input_ids, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    depth = arch.depth(net)
    if calls != depth + 1:
        raise RuntimeError(f"captured {calls} states, expected {depth + 1}")
    return calls


def _capture_outputs(net, kind, input_ids, on_layer, attention_mask, attentions) -> int:
    """Any other model type: its own output_hidden_states and output_attentions."""
    kwargs = {"output_hidden_states": True, "output_attentions": attentions}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    try:
        out = net(input_ids=input_ids, **kwargs)
    except TypeError as err:
        raise ProbeError(f"the {kind} model does not take output_hidden_states and "
                         f"output_attentions ({err}); the probe needs both") from err
    states = getattr(out, "hidden_states", None)
    probs = getattr(out, "attentions", None) if attentions else None
    if not states:
        raise ProbeError(f"the {kind} model returns no hidden states (output_hidden_states); "
                         "the probe measures every layer's")
    if attentions and (not probs or any(p is None for p in probs)
                       or len(probs) != len(states) - 1):
        raise ProbeError(f"the {kind} model returns no attention matrices (output_attentions: "
                         f"{'none' if not probs else len(probs)} for {len(states) - 1} layers); "
                         "the probe needs one per layer for |λ₂|")
    for layer, X in enumerate(states):
        on_layer(layer, X, probs[layer - 1] if attentions and layer else None)
    return len(states)


def hidden_states(net: nn.Module, kind: str, input_ids: Tensor,
                  attention_mask: Tensor | None = None) -> list[Tensor]:
    """Every layer's hidden state, [layer 0 (input to the first layer), ..., layer L], each
    (batch, tokens, width)."""
    states: list[Tensor] = []
    capture(net, kind, input_ids, lambda layer, X, A: states.append(X), attention_mask,
            attentions=False)
    return states


def check_model(net: nn.Module, kind: str, vocab_size: int) -> int:
    """A two-token forward pass that proves the probe can read this model: every layer's hidden
    state and, where `kind` has attention, one row-stochastic matrix per layer. Returns the
    depth; raises ProbeError naming what is missing."""
    seen: list[tuple[int, tuple, tuple | None]] = []
    ids = torch.tensor([[min(FIRST_ID, vocab_size - 1), min(FIRST_ID + 1, vocab_size - 1)]],
                       device=_device_of(net))

    def record(layer, X, A):
        seen.append((layer, tuple(X.shape), None if A is None else tuple(A.shape)))
        if A is not None and not torch.allclose(A.sum(-1), torch.ones((), dtype=A.dtype,
                                                                      device=A.device),
                                                atol=1e-3):
            raise ProbeError(f"the {kind} model's attention matrices are not row-stochastic "
                             "softmax weights; the probe needs those")

    try:
        calls = capture(net, kind, ids, record)
    except ProbeError:
        raise
    except Exception as err:  # the model's own failure on a plain input_ids call
        raise ProbeError(f"the {kind} model cannot be run by the probe on input_ids alone: "
                         f"{type(err).__name__}: {err}") from err
    for layer, shape, attention in seen:
        if len(shape) != 3 or shape[:2] != (1, 2):
            raise ProbeError(f"the {kind} model's hidden state {layer} has shape {shape}, not "
                             "(batch, tokens, width)")
        if layer and (attention is None or attention[-2:] != (2, 2)):
            raise ProbeError(f"the {kind} model returns no attention matrix for layer {layer}; "
                             "the probe needs one per layer for |λ₂|")
    return calls - 1


def _device_of(net: nn.Module) -> torch.device:
    return next(iter(net.parameters())).device


# ---- per-layer metrics ----------------------------------------------------------------------


@contextlib.contextmanager
def one_thread():
    """torch and the BLAS libraries on one thread: the metrics are many small LAPACK problems,
    which run several times slower when their threads compete for busy cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # NumPy's BLAS then keeps its own thread count
        limits = contextlib.nullcontext()
    else:
        limits = threadpool_limits(1)
    try:
        with limits:
            yield
    finally:
        torch.set_num_threads(threads)


def causal_lambda2(A: Tensor) -> Tensor:
    """|lambda_2| of lower-triangular row-stochastic matrices (..., n, n): their eigenvalues are
    the diagonal entries, so the second-largest diagonal modulus. Shape (...)."""
    diagonal = torch.diagonal(A, dim1=-2, dim2=-1).abs()
    return torch.sort(diagonal, dim=-1).values[..., -2]


def _group_metrics(X: Tensor, A: Tensor | None, full: bool, causal: bool,
                   spectrum: Tensor) -> dict[str, Tensor]:
    """The metrics of sequences of one length: X (b, m, d) float64, A (b, H, m, m) or None;
    spectrum (b,) bool: which sequences get |lambda_2|. Values of shape (b,)."""
    if not full:
        r = M.relative_residuals(X)
        return {"relative_residual_comp": r["comp"], "relative_residual": r["fro"]}
    out = M.layer_metrics(X)  # the library's metrics; attn_lambda2 NaN without A
    if A is not None and X.shape[-2] >= 2 and spectrum.any():
        lam = out["attn_lambda2"].clone()
        A = A[spectrum].double()
        lam[spectrum] = (causal_lambda2(A) if causal else M.attention_spectrum(A)).mean(dim=-1)
        out["attn_lambda2"] = lam
    return out


def sequence_metrics(X: Tensor, A: Tensor | None, lengths: Tensor | None = None,
                     full: bool = True, causal: bool = False,
                     spectrum_sequences: int | None = None) -> dict[str, np.ndarray]:
    """Per-sequence metrics of one layer, over each sequence's real tokens.

    X (B, n, d) any dtype (measured in float64); A (B, H, n, n) or None; lengths (B,) real
    tokens per sequence (None: all n). full=False: the two relative residuals only.
    spectrum_sequences: |lambda_2| for the first this-many sequences (None: all; causal models
    always all: their diagonal costs nothing). Returns {metric: (B,) float64 array}.
    """
    B, n = X.shape[:2]
    X = X.double()
    lengths = torch.full((B,), n) if lengths is None else lengths.cpu()
    spectrum = torch.ones(B, dtype=torch.bool)
    if spectrum_sequences is not None and not causal:
        spectrum[spectrum_sequences:] = False
    if bool((lengths == n).all()):
        values = _group_metrics(X, A, full, causal, spectrum.to(X.device))
        return {k: v.cpu().numpy() for k, v in values.items()}
    out: dict[str, np.ndarray] = {}
    for m in sorted(set(lengths.tolist())):
        idx = (lengths == m).nonzero().squeeze(1)
        part = _group_metrics(X[idx.to(X.device), :m], None if A is None else
                              A[idx.to(A.device), :, :m, :m], full, causal,
                              spectrum[idx].to(X.device))
        for key, value in part.items():
            out.setdefault(key, np.full(B, np.nan))[idx.numpy()] = value.cpu().numpy()
    return out


def measure(net: nn.Module, kind: str, input_ids: Tensor,
            attention_mask: Tensor | None = None, ablations: Sequence[str] = ("transformer",),
            full: bool = True, spectrum_sequences: int | None = None,
            step: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Per-layer metrics of `net` (model type `kind`) under each ablation: one forward pass per
    ablation on the same inputs, then every layer's metrics.

    input_ids (B, n); attention_mask (B, n), 1 on real tokens (right padding; None: none).
    full=False measures the two relative residuals only (E1b), without attention matrices.
    Returns one row per (ablation, sample, layer): columns ablation, sample, layer, tokens (real
    tokens of the sequence), then the metrics (RESIDUALS, or METRICS when full).
    step(ablation) is called after each ablation (a progress bar).

    On the CPU the layers' metrics run on as many threads as torch had (one each: small LAPACK
    problems, independent per layer), after the forward pass, which keeps one ablation's hidden
    states and attention matrices meanwhile. Layer 0 (the embeddings' output, the same under
    every ablation) is measured once.
    """
    device = _device_of(net)
    input_ids = input_ids.to(device)
    lengths = None
    if attention_mask is not None:
        lengths = attention_mask.sum(dim=-1).cpu()
        # Without padding, the model runs exactly as without a mask.
        attention_mask = None if bool((lengths == input_ids.shape[1]).all()) else \
            attention_mask.to(device)
    causal = bool(ARCHS[kind].causal) if kind in ARCHS else False
    tokens = (lengths if lengths is not None
              else torch.full((input_ids.shape[0],), input_ids.shape[1])).numpy()
    workers = max(1, torch.get_num_threads()) if device.type == "cpu" else 1
    first: tuple[Tensor, dict] | None = None  # layer 0's state and metrics

    def layer_values(item: tuple) -> dict[str, np.ndarray]:
        layer, X, A = item
        if layer == 0 and first is not None and torch.equal(X, first[0]):
            return first[1]
        return sequence_metrics(X, A, lengths if attention_mask is not None else None, full,
                                causal, spectrum_sequences)

    frames = []
    for ablation in ablations:
        captured: list[tuple] = []
        capture(ablate(net, kind, ablation), kind, input_ids,
                lambda layer, X, A, captured=captured: captured.append((layer, X, A)),
                attention_mask, attentions=full)
        with one_thread():
            if workers > 1:
                with ThreadPoolExecutor(workers) as pool:
                    values = list(pool.map(layer_values, captured))
            else:
                values = [layer_values(item) for item in captured]
        first = (captured[0][1], values[0])
        del captured
        table = pd.concat([pd.DataFrame({"sample": range(len(tokens)), "layer": layer,
                                         "tokens": tokens, **v})
                           for layer, v in enumerate(values)], ignore_index=True)
        table.insert(0, "ablation", ablation)
        frames.append(table)
        if step is not None:
            step(ablation)
    return pd.concat(frames, ignore_index=True)


# ---- inputs ---------------------------------------------------------------------------------


def first_id(vocab_size: int) -> int:
    """The lowest id random inputs use: FIRST_ID (clear of special tokens) in a large
    vocabulary, 1 (clear of a padding id 0) in a tiny one."""
    return FIRST_ID if vocab_size > 2 * FIRST_ID else 1


def random_ids(batch: int, tokens: int, vocab_size: int, seed: int,
               low: int = FIRST_ID) -> Tensor:
    """(batch, tokens) token ids uniform in [low, vocab_size), from their own generator."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(low, vocab_size, (batch, tokens), generator=gen)


def word_ids(text: str, vocab_size: int, low: int = FIRST_ID) -> list[int]:
    """Ids of `text` split into words and punctuation, numbered by first appearance from `low`.

    For a model without its tokenizer at random initialisation: its embedding rows are i.i.d.,
    so which id a word gets does not matter, only which tokens repeat.
    """
    words = re.findall(WORD_PATTERN, text)
    vocab: dict[str, int] = {}
    ids = [vocab.setdefault(w, low + len(vocab)) for w in words]
    if low + len(vocab) > vocab_size:
        raise ProbeError(f"the text has {len(vocab)} distinct words, more than the model's "
                         f"vocabulary ({vocab_size} ids from {low}) can number apart")
    return ids


def text_windows(ids: Sequence[int], batch: int, tokens: int,
                 pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """Up to `batch` consecutive windows of `tokens` ids; a last, shorter window (at least 2
    ids) is padded on the right. Returns input_ids and attention_mask (1 on real tokens)."""
    ids = list(ids)
    windows = [ids[i:i + tokens] for i in range(0, len(ids), tokens)][:batch]
    windows = [w for w in windows if len(w) >= 2]
    if not windows:
        raise ProbeError(f"the text gives {len(ids)} token(s); the probe needs at least 2")
    input_ids = torch.full((len(windows), tokens), pad_id, dtype=torch.long)
    mask = torch.zeros((len(windows), tokens), dtype=torch.long)
    for row, window in enumerate(windows):
        input_ids[row, :len(window)] = torch.tensor(window)
        mask[row, :len(window)] = 1
    return input_ids, mask


def tokenize(tokenizer, text: str, need: int) -> list[int]:
    """The tokenizer's ids of `text`, no special tokens added; only a prefix of a long text is
    tokenised when it gives more than `need` ids."""
    chars = max(need * 12, 4096)
    ids = tokenizer(text[:chars], add_special_tokens=False, verbose=False)["input_ids"]
    if len(ids) <= need and chars < len(text):
        ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    return ids[:need]


def load_tokenizer(path: str | Path):
    """The tokenizer saved in a checkpoint folder, or None when it holds none."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def default_text() -> str:
    """The standard library's pydoc_data.topics (the Python reference manual's topics)."""
    from rankcollapse.core.tasks import text_corpus

    return text_corpus()


@dataclass
class Inputs:
    """What the model reads: ids (B, n), the real-token mask, and where they come from."""

    input_ids: Tensor
    attention_mask: Tensor  # (B, n), 1 on real tokens
    kind: str  # "text" or "random"
    description: str  # one line, for the terminal, the figure and probe.json
    source: dict


def make_inputs(kind: str, batch: int, tokens: int, vocab_size: int, tokenizer=None,
                text: str | None = None, text_name: str = "pydoc_data.topics",
                seed: int = 0) -> Inputs:
    """The probe's inputs: `batch` windows of `tokens` ids of `text` (the model's tokenizer, or
    words numbered by first appearance without one; a short text gives fewer, the last one
    padded), or random ids."""
    if kind == "random":
        low = first_id(vocab_size)
        ids = random_ids(batch, tokens, vocab_size, seed, low)
        return Inputs(ids, torch.ones_like(ids), "random",
                      f"{batch} × {tokens} random token ids", {
                          "kind": "random", "seed": seed, "low": low, "high": vocab_size})
    if kind != "text":
        raise ProbeError(f"input {kind!r}: allowed inputs are 'text', 'random'")
    text = default_text() if text is None else text
    if tokenizer is not None:
        ids = tokenize(tokenizer, text, batch * tokens)
        how = f"{type(tokenizer).__name__}"
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    else:
        ids = word_ids(text, vocab_size, first_id(vocab_size))[:batch * tokens]
        how = "words numbered by first appearance (no tokenizer)"
        pad = 0
    if ids and max(ids) >= vocab_size:
        raise ProbeError(f"the tokenizer gives id {max(ids)}, beyond the model's vocabulary "
                         f"of {vocab_size}")
    input_ids, mask = text_windows(ids, batch, tokens, pad)
    real = int(mask.sum())
    padded = int((mask.sum(-1) < tokens).sum())
    return Inputs(input_ids, mask, "text",
                  f"{len(input_ids)} × {tokens} tokens of {text_name} ({how})"
                  + (f"; {padded} sequence(s) padded, {real} real tokens" if padded else ""),
                  {"kind": "text", "text": text_name, "tokenizer": how,
                   "sequences": len(input_ids), "real_tokens": real, "padded": padded})


# ---- the whole probe ------------------------------------------------------------------------


@dataclass
class Target:
    """What is probed: a random-init family or a checkpoint folder, checked before loading."""

    name: str  # the family, or the folder as given
    family: str | None  # None for a checkpoint
    path: Path | None  # None for a family
    kind: str  # Hugging Face model type
    config: dict  # config.json's content (checkpoint) or the family's sizes
    tokenizer: bool  # a tokenizer is available


def resolve(target: str, layers: int | None = None, width: int | None = None,
            heads: int | None = None) -> Target:
    """A family name (unless a checkpoint folder of that name, with its config.json, is here)
    or a checkpoint folder, checked without loading any weights. ProbeError names what is
    wrong."""
    path = Path(target).expanduser()
    if target in FAMILIES and not (path / "config.json").is_file():
        return Target(target, target, None, target, family_sizes(target, layers, width, heads),
                      False)
    if not path.exists() and "/" not in target and not target.startswith("."):
        raise ProbeError(f"{target}: no such directory, and not a family "
                         f"({', '.join(FAMILIES)})")
    config = checkpoint_config(path)
    if layers is not None or width is not None or heads is not None:
        raise ProbeError("--layers, --width and --heads resize a random-init family; "
                         f"{target} is a checkpoint")
    return Target(str(target), None, path, str(config["model_type"]), config,
                  any((path / name).exists() for name in TOKENIZER_FILES))


@dataclass
class Result:
    table: pd.DataFrame  # one row per (seed, ablation, sample, layer)
    info: dict  # provenance and settings, written to probe.json
    verdicts: list[dict]  # the judged claims (Judged.to_dict() + "on_model")


def _progress(total: int, enabled: bool):
    """A progress bar on stderr: tqdm where installed, a minimal one otherwise; silent when
    stderr is not a terminal."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        return tqdm(total=total, file=sys.stderr, unit="pass", leave=False, disable=None)
    if not sys.stderr.isatty():
        return None

    class Bar:
        n = 0

        def update(self, k: int = 1) -> None:
            self.n += k
            done = int(30 * self.n / total)
            sys.stderr.write(f"\r[{'#' * done}{'.' * (30 - done)}] {self.n}/{total}")
            sys.stderr.flush()

        def set_description(self, text: str) -> None:
            pass

        def close(self) -> None:
            sys.stderr.write("\r" + " " * 50 + "\r")

    return Bar()


def run(target: Target, *, input_kind: str = "auto", text: str | None = None,
        text_name: str | None = None, tokens: int = 128, batch: int = 16,
        seeds: int | None = None, ablations: Sequence[str] | None = None,
        dtype: str = "float32", device: str = "cpu", spectrum_sequences: int | None = 2,
        progress: bool = False, log: Callable[[str], None] = lambda msg: None) -> Result:
    """Probe `target` (resolve()): every ablation, seed and layer, and the verdicts.

    input_kind "auto": the text (`text`, else pydoc_data.topics) where a tokenizer exists or a
    text is given, random ids otherwise. seeds: independent random initialisations of a family
    (default 5); a checkpoint is one network. Raises ProbeError before measuring anything when
    the model, the inputs or the ablations do not fit.
    """
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # its loading bars; ours says the work
    started = time.perf_counter()
    allowed = probe_ablations(target.kind)
    ablations = list(ablations or allowed)
    bad = [a for a in ablations if a not in allowed]
    if bad:
        raise ProbeError(f"ablation(s) {bad} cannot run on a {target.kind} model; the probe "
                         f"runs {list(allowed)} on it")
    if target.path is not None and seeds not in (None, 1):
        raise ProbeError(f"--seeds {seeds}: a checkpoint is one network; seeds are random "
                         "initialisations of a family")
    seeds = 1 if target.path is not None else (5 if seeds is None else seeds)
    if seeds < 1 or tokens < 2 or batch < 1:
        raise ProbeError("--seeds and --batch must be at least 1, --tokens at least 2")
    if target.path is not None:
        config = None
        tokenizer = load_tokenizer(target.path) if target.tokenizer else None
        vocab_size = int(target.config.get("vocab_size") or 0)
        limit = max_positions(target.config)
    else:
        config = base_config(target.family, **target.config)
        tokenizer = None
        vocab_size = config.vocab_size
        limit = max_positions(config)
    if limit is not None and tokens > limit:
        raise ProbeError(f"--tokens {tokens} is longer than the model's {limit} positions")
    if input_kind == "auto":
        input_kind = "text" if (tokenizer is not None or text is not None) else "random"
    if input_kind == "text" and text is not None and tokenizer is None \
            and target.path is not None:
        raise ProbeError(f"{target.name} holds no tokenizer: its ids cannot be read from a "
                         "text; add the tokenizer's files or use --random-ids")
    if not vocab_size:
        raise ProbeError(f"{target.name}: config.json gives no vocab_size")
    inputs = make_inputs(input_kind, batch, tokens, vocab_size, tokenizer, text,
                         text_name or "pydoc_data.topics")

    torch_device = torch.device(device)
    frames = []
    bar = _progress(seeds * len(ablations), progress)
    depth = None
    try:
        for seed in range(seeds):
            net = load(target.path) if target.path is not None else build(target.family, seed,
                                                                          config)
            net = net.to(device=torch_device, dtype=DTYPES[dtype])
            if depth is None:  # the model's own checks, once, before the measurements
                depth = check_model(net, target.kind, vocab_size)
                details = _model_details(net)
            if bar is not None:
                bar.set_description(f"seed {seed}")

            def step(ablation: str, seed: int = seed) -> None:
                if bar is not None:
                    bar.update(1)
                log(f"seed {seed} {ablation} done")

            table = measure(net, target.kind, inputs.input_ids, inputs.attention_mask,
                            ablations, full=True, spectrum_sequences=spectrum_sequences,
                            step=step)
            table.insert(0, "seed", seed)
            frames.append(table)
            del net
    finally:
        if bar is not None:
            bar.close()
    table = pd.concat(frames, ignore_index=True)
    weights = "checkpoint" if target.path is not None else "init"
    table.insert(0, "input", inputs.kind)
    table.insert(0, "weights", weights)
    table.insert(0, "model", target.name)

    from rankcollapse import io

    settings = {"target": target.name, "model_type": target.kind, "weights": weights,
                "sizes": target.config if target.path is None else None,
                "input": inputs.source, "tokens": tokens, "batch": batch, "seeds": seeds,
                "ablations": ablations, "dtype": dtype, "device": device,
                "spectrum_sequences": spectrum_sequences}
    model_config = (target.config if target.path is not None else config.to_dict())
    info = {
        "model": target.name, "model_type": target.kind, "weights": weights,
        "path": str(target.path.resolve()) if target.path is not None else None,
        "depth": depth, **details,
        "model_config_hash": io.config_hash(model_config),
        "config_hash": io.config_hash({"settings": settings, "model": model_config}),
        "input": inputs.description, "input_source": inputs.source,
        "settings": settings, "bands": "seeds" if seeds > 1 else "sequences",
        "spectrum": ("every sequence (causal attention is triangular: its diagonal)"
                     if target.kind in ARCHS
                     and ARCHS[target.kind].causal else
                     f"the first {spectrum_sequences} sequence(s)"
                     if spectrum_sequences is not None else "every sequence"),
        "code_version": io.code_version(),
        "versions": _versions(), "device": str(torch_device), "dtype": dtype,
        "wall_s": None,
    }
    table["config_hash"] = info["config_hash"]
    table["code_version"] = info["code_version"]
    verdicts = judge_on_model(table, info)
    info["wall_s"] = round(time.perf_counter() - started, 2)
    return Result(table, info, verdicts)


def _model_details(net: nn.Module) -> dict:
    config = net.config.to_dict()
    width = next((config[k] for k in ("hidden_size", "n_embd", "d_model") if k in config), None)
    heads = next((config[k] for k in ("num_attention_heads", "n_head") if k in config), None)
    return {"width": width, "heads": heads,
            "parameters": int(sum(p.numel() for p in net.parameters())),
            "model_class": type(net).__name__}


def _versions() -> dict:
    from importlib import metadata

    out = {}
    for name in ("torch", "transformers", "numpy", "pandas"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


# ---- verdicts on this model -----------------------------------------------------------------

# Registered claims that apply to any model, and the ablation each is measured on. E4's
# escalation claim is registered for networks at init and for trained ones: a checkpoint is
# judged against the trained one.
CLAIMS_INIT = {
    "E1.san_doubly_exponential": "san",
    "E1.san_cubic_rate": "san",
    "E1.skip_prevents": "san_skip",
    "E1.mlp_does_not_prevent": "san_mlp",
    "E4.escalation_post_ln_init": "transformer",
    "E4.linear_rate_log_reading": "transformer",
}
CLAIMS_CHECKPOINT = {**{k: v for k, v in CLAIMS_INIT.items() if k.startswith("E1.")},
                     "E4.escalation_post_ln_trained": "transformer"}
# Below these the measured quantity is round-off (E1's fit floor in float64; E4's t_div floors).
RESIDUAL_FLOOR = {"float32": 1e-5, "float64": 1e-13}
TDIV_FLOOR = {"float32": 1e-6, "float64": 1e-12}
MAX_RESIDUAL = 0.9  # E1's fit range: r_l <= 0.9 (workflow/config/default.yaml, fit)
RESAMPLES = 1000


def measure_claims(table: pd.DataFrame, checkpoint: bool, dtype: str = "float32",
                   resamples: int = RESAMPLES) -> list:
    """Measurements of the registered claims that apply to any model, on the probe's table
    (columns seed, ablation, sample, layer and the metrics), by the code that measures them in
    E1 and E4. The unit of replication is the random network (seed); a checkpoint is one
    network, so its values carry no interval over runs (said in the method)."""
    from rankcollapse.claims import Measurement, not_testable
    from rankcollapse.claims import e1 as e1_claims
    from rankcollapse.claims import e4 as e4_claims

    wanted = CLAIMS_CHECKPOINT if checkpoint else CLAIMS_INIT
    out = []
    for cid, ablation in wanted.items():
        t = table[table.ablation == ablation]
        if t.empty:
            out.append(not_testable(cid, f"the {ablation} ablation was not probed"))
            continue
        if cid.startswith("E1."):
            m = e1_claims.measure_exponent(cid, t, "relative_residual_comp",
                                           RESIDUAL_FLOOR[dtype], MAX_RESIDUAL, resamples,
                                           ablation)
        else:
            key = "log_r2" if cid == "E4.linear_rate_log_reading" else "rho"
            m = e4_claims.measure_escalation(cid, t, key, TDIV_FLOOR[dtype], resamples,
                                             note=f"{ablation}: t_sim of the unmodified model")
        if checkpoint and m.value is not None:
            m = Measurement(cid, m.value, "one network (a checkpoint): no interval over runs",
                            1, note=m.note)
        out.append(m)
    return out


def judge_on_model(table: pd.DataFrame, info: dict, registry: str | Path | None = None
                   ) -> list[dict]:
    """The registered claims that apply to any model, judged on this one by the registry's
    rule, each with its generated sentence prefixed by what it concerns."""
    from rankcollapse.claims import REGISTRY_PATH, RegistryError, judge, load_registry, sentence

    try:
        specs = load_registry(registry or REGISTRY_PATH)
    except RegistryError as err:
        return [{"id": None, "verdict": "not judged", "on_model": f"No verdicts: {err}"}]
    checkpoint = info["weights"] == "checkpoint"
    seeds = table.seed.nunique()
    scope = (f"{info['model']}, a checkpoint: one network" if checkpoint else
             f"{info['model']}, random init, {seeds} seed{'s' if seeds > 1 else ''}")
    out = []
    for m in measure_claims(table, checkpoint, info["dtype"]):
        row = judge(specs[m.id], m)
        out.append({**row.to_dict(), "on_model": f"On this model ({scope}): {sentence(row)}"})
    return out


# ---- outputs --------------------------------------------------------------------------------

LABELS = {"san": "SAN (attention only)", "san_mlp": "SAN + MLP", "san_skip": "SAN + skip",
          "transformer": "transformer (unmodified)",
          "transformer_deesc": "transformer + de-escalation (τ=1)",
          "san_skip_2021": "SAN + skip (2021 code's ablation)"}
PANELS = (  # metric, title, log scale
    ("relative_residual_comp", "relative residual, composite ℓ1,∞ norm", True),
    ("relative_residual", "relative residual, Frobenius norm", True),
    ("token_similarity", "token similarity t_sim", False),
    ("mean_cosine", "mean cosine similarity of tokens", False),
    ("effective_rank", "effective rank", True),
    ("attn_lambda2", "attention |λ₂| (mean over heads)", False),
)


def _colour(ablation: str) -> str:
    from rankcollapse import plotting

    return {"transformer": "#000000",
            "transformer_deesc": plotting.variant_color("post_ln_deesc"),
            "san_skip_2021": plotting.variant_color("san_skip_mlp")}.get(
        ablation, plotting.variant_color(ablation))


def curves(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per (ablation, layer): the line and its band. Over seeds (several random networks): the
    mean of the per-seed means over sequences, band the range of the seeds; one network: the
    mean over sequences, band their 10th to 90th percentile."""
    t = table[table[metric].notna()]
    if t.seed.nunique() > 1:
        per_seed = t.groupby(["ablation", "layer", "seed"])[metric].mean()
        g = per_seed.groupby(["ablation", "layer"])
        return pd.DataFrame({"mid": g.mean(), "low": g.min(), "high": g.max()}).reset_index()
    g = t.groupby(["ablation", "layer"])[metric]
    return pd.DataFrame({"mid": g.mean(), "low": g.quantile(0.1),
                         "high": g.quantile(0.9)}).reset_index()


def band_text(info: dict, seeds: int) -> str:
    return (f"lines: mean over sequences and seeds; bands: range of the {seeds} seeds' means"
            if seeds > 1 else
            "lines: mean over sequences; bands: their 10th–90th percentile (one network)")


def figure(result: Result):
    """One panel per metric, a line per ablation, bands over seeds or sequences (caption)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    from rankcollapse import plotting

    plotting.use_style()
    table, info = result.table, result.info
    floor = RESIDUAL_FLOOR[info["dtype"]] / 100
    fig, axes = plt.subplots(2, 3, figsize=(12.5, 7.2))
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.11, top=0.9, wspace=0.22, hspace=0.32)
    ablations = list(dict.fromkeys(table.ablation))
    limits = {"token_similarity": (-0.02, 1.02), "mean_cosine": (-0.1, 1.02),
              "attn_lambda2": (-0.02, 1.02)}
    for ax, (metric, title, log) in zip(axes.flat, PANELS, strict=True):
        c = curves(table, metric)
        for ablation in ablations:
            a = c[c.ablation == ablation]
            if a.empty:
                continue
            clip = (lambda s: s.clip(lower=floor)) if log else (lambda s: s)  # noqa: E731
            ax.plot(a.layer, clip(a.mid), color=_colour(ablation), lw=1.6, marker="o", ms=2.5,
                    label=LABELS.get(ablation, ablation))
            ax.fill_between(a.layer, clip(a.low), clip(a.high), color=_colour(ablation),
                            alpha=0.18, lw=0)
        if log:  # decades only: minor tick labels cost more to lay out than the curves
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0), numticks=7))
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # no mathtext
        if metric in limits:
            ax.set_ylim(*limits[metric])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(title)
        ax.set_xlabel("layer")
    axes.flat[0].legend(frameon=False, loc="lower left")
    seeds = table.seed.nunique()
    weights = ("checkpoint" if info["weights"] == "checkpoint" else
               f"random init, {seeds} seed{'s' if seeds > 1 else ''}")
    name = info["model"] if info["model"] == info["model_type"] else \
        f"{info['model']} ({info['model_type']})"
    fig.suptitle(f"{name}, {weights}: {info['depth']} layers, width {info['width']} — "
                 f"{info['input']}", fontsize=10.5)
    fig.text(0.5, 0.015, f"{band_text(info, seeds)}. |λ₂|: {info['spectrum']}. Layer 0 is the "
             "input to the first layer.", ha="center", va="bottom", fontsize=8.5)
    return fig


def outputs(out: str | Path) -> list[Path]:
    return [Path(out) / name for name in PROBE_OUTPUTS]


def write(result: Result, out: str | Path, force: bool = False) -> list[Path]:
    """Write the figure (PNG, PDF, SVG), layers.parquet, layers.csv and probe.json into `out`;
    refuses to overwrite any of them unless force."""
    from rankcollapse import io, plotting

    existing = [p for p in outputs(out) if p.exists()]
    if existing and not force:
        raise ProbeError(f"{out} already holds {[p.name for p in existing]}; nothing was "
                         "overwritten (use --force, or another --out)")
    out = Path(out)
    fig = figure(result)
    with plt_rc({"savefig.dpi": 100}):  # a small PNG: six panels need no print resolution
        saved = plotting.save(fig, out, "probe", formats=("png", "pdf"), tight=False)
    io.write_parquet(result.table, out / "layers.parquet")
    io.atomic_write(out / "layers.csv", lambda tmp: result.table.to_csv(tmp, index=False))
    record = {**result.info, "figure": {k: Path(v).name for k, v in saved.items()},
              "caption": band_text(result.info, result.table.seed.nunique()),
              "verdicts": result.verdicts,
              "verdict_rule": _verdict_rule()}
    io.write_json(json.loads(json.dumps(record, default=_jsonable)), out / "probe.json")
    return outputs(out)


def plt_rc(settings: dict):
    import matplotlib.pyplot as plt

    return plt.rc_context(settings)


def _jsonable(value):
    if isinstance(value, float | np.floating) and not math.isfinite(float(value)):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def _verdict_rule() -> str:
    from rankcollapse.claims import VERDICT_RULE

    return VERDICT_RULE


def summary(result: Result, layers: Iterable[int] | None = None) -> str:
    """The terminal's table: the metrics at the first, middle and last layer per ablation (mean
    over sequences and seeds), then the verdicts' sentences."""
    table, info = result.table, result.info
    depth = int(table.layer.max())
    layers = sorted(set(layers or (0, depth // 2, depth)))
    seeds = table.seed.nunique()
    weights = ("checkpoint, one network" if info["weights"] == "checkpoint" else
               f"random init, {seeds} seed{'s' if seeds > 1 else ''}")
    lines = [f"{info['model']} ({info['model_type']}, {weights}): {depth} layers, width "
             f"{info['width']}, {info['heads']} heads, {info['parameters'] / 1e6:.1f}M "
             "parameters",
             f"input: {info['input']}; {info['dtype']} on {info['device']}",
             f"mean over sequences{' and seeds' if seeds > 1 else ''}; |λ₂| over "
             f"{info['spectrum']}", ""]
    header = (f"{'ablation':<18} {'layer':>5} {'r (ℓ1,∞)':>10} {'r (F)':>10} {'t_sim':>7} "
              f"{'cos':>7} {'eff.rank':>9} {'|λ₂|':>6}")
    lines += [header, "-" * len(header)]
    means = table.groupby(["ablation", "layer"], sort=False)[list(METRICS)].mean()
    for ablation in dict.fromkeys(table.ablation):
        for i, layer in enumerate(layers):
            v = means.loc[(ablation, layer)]
            lam = "—" if math.isnan(v.attn_lambda2) else f"{v.attn_lambda2:.3f}"
            lines.append(f"{ablation if i == 0 else '':<18} {layer:>5} "
                         f"{v.relative_residual_comp:>10.3g} {v.relative_residual:>10.3g} "
                         f"{v.token_similarity:>7.3f} {v.mean_cosine:>7.3f} "
                         f"{v.effective_rank:>9.2f} {lam:>6}")
    lines += ["", "Verdicts (claims registered in src/rankcollapse/claims/claims.yaml, judged by "
              "rankcollapse.claims on this model):"]
    lines += [f"  - {v['on_model']}" for v in result.verdicts]
    return "\n".join(lines)
