"""The ablations: Yu & Zhang's de-escalation, the wrappers that remove a block's paths, and
where each architecture keeps its layers and attention (ARCHS), which `ablate` and the capture
read.

A wrapper stands in for a named submodule of a copy of the model and reads the original's
weights (shared, not copied); the library's code is not edited (docs/probe.md, Ablations).
"""

from __future__ import annotations

import contextvars
import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from rankcollapse.core.model import token_mean
from rankcollapse.probe.spec import ABLATIONS, ProbeError, probe_ablations

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
