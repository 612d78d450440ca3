"""Experiment E1b: real architectures (BERT, ALBERT, XLNet) and their path ablations.

Dong, Cordonnier & Loukas (2021), Fig. 2: the relative residual of every layer of BERT-base,
ALBERT-base and XLNet-base, pretrained and at random initialisation, with the attention skip
and the feed-forward block removed or kept:

    san        no attention skip (its LayerNorm kept), no feed-forward block
    san_mlp    no attention skip, feed-forward block kept (with its own residual and LayerNorm)
    san_skip   attention skip kept, no feed-forward block
    transformer  the unmodified model

Models are built from explicit base-size configurations with Hugging Face `transformers`, so
nothing is downloaded (a local checkpoint directory can be given for pretrained weights). An
ablation swaps named submodules for the small wrappers below; the library's code is not edited.
"Removing the feed-forward block" drops the whole sublayer (its residual and LayerNorm too), as
in the original code for BERT and XLNet; "removing the skip" keeps the LayerNorm: LN(h + a)
becomes LN(a).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor, nn

from .metrics import relative_residuals

MODELS = ("bert", "albert", "xlnet")
ABLATIONS = {  # name: (attention skip kept, feed-forward kept)
    "san": (False, False),
    "san_mlp": (False, True),
    "san_skip": (True, False),
    "transformer": (True, True),
    # ALBERT as the 2021 code ablated it: ffn and ffn_output set to Identity, so the layer still
    # applies LN(gelu(a) + a) to the attention output a. For BERT and XLNet that code removed
    # the block cleanly (= san_skip), so this ablation exists for ALBERT only.
    "san_skip_2021": (True, False),
}
ALBERT_ONLY = {"san_skip_2021"}
DTYPES = {"float32": torch.float32, "float64": torch.float64}
FIRST_ID = 1000  # input ids start here: clear of padding (zero embedding row) and special tokens


def base_config(model: str):
    """The base-size configuration of `model` (BERT-base-cased, ALBERT-base-v2, XLNet-base-cased).

    Set explicitly: transformers' default AlbertConfig is xxlarge and XLNetConfig is large.
    Values are those of the published checkpoints' config.json files.
    """
    import transformers

    common = {"attn_implementation": "eager"}  # plain softmax attention, as the 2021 code ran
    if model == "bert":
        return transformers.BertConfig(
            vocab_size=28996, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512,
            type_vocab_size=2, initializer_range=0.02, layer_norm_eps=1e-12, **common)
    if model == "albert":
        return transformers.AlbertConfig(
            vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12,
            num_attention_heads=12, intermediate_size=3072, num_hidden_groups=1,
            inner_group_num=1, hidden_act="gelu_new", max_position_embeddings=512,
            type_vocab_size=2, initializer_range=0.02, layer_norm_eps=1e-12, **common)
    if model == "xlnet":
        return transformers.XLNetConfig(
            vocab_size=32000, d_model=768, n_layer=12, n_head=12, d_inner=3072,
            ff_activation="gelu", untie_r=True, attn_type="bi", initializer_range=0.02,
            layer_norm_eps=1e-12, mem_len=None, **common)
    raise ValueError(f"model={model!r}: allowed values are {list(MODELS)}")


def build(model: str, seed: int = 0, checkpoint: str | Path | None = None,
          config_overrides: dict | None = None) -> nn.Module:
    """A BERT/ALBERT/XLNet base model in eval mode: random init from `seed`, or a checkpoint.

    checkpoint: a local directory written by `save_pretrained` (pretrained weights); nothing is
    ever fetched from the network. config_overrides: e.g. smaller sizes for tests.
    """
    import transformers

    classes = {"bert": transformers.BertModel, "albert": transformers.AlbertModel,
               "xlnet": transformers.XLNetModel}
    if model not in classes:
        raise ValueError(f"model={model!r}: allowed values are {list(MODELS)}")
    if checkpoint is not None:
        net = classes[model].from_pretrained(str(checkpoint), local_files_only=True,
                                             attn_implementation="eager")
    else:
        config = base_config(model)
        for key, value in (config_overrides or {}).items():
            setattr(config, key, value)
        torch.manual_seed(seed)
        net = classes[model](config)
    return net.eval()


# ---- wrappers ------------------------------------------------------------------------------


class BertSelfOutputNoSkip(nn.Module):
    """BertSelfOutput without the residual: LN(dropout(dense(a))) instead of LN(... + h)."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.original = original

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        o = self.original
        return o.LayerNorm(o.dropout(o.dense(hidden_states)))


class FeedForwardRemoved(nn.Module):
    """Stands in for BertOutput: the layer's output is the attention sublayer's output."""

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        return input_tensor


class AlbertAttentionAblated(nn.Module):
    """AlbertAttention recomputed from the original's weights, with or without the skip.

    ALBERT adds the residual inside its attention module, so it cannot be dropped by swapping a
    smaller part; with skip=True this reproduces AlbertAttention exactly (tested).
    """

    def __init__(self, original: nn.Module, skip: bool):
        super().__init__()
        self.original = original
        self.skip = skip

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
        return o.LayerNorm(hidden_states + out if self.skip else out), probs


class AlbertLayerAttentionOnly(nn.Module):
    """AlbertLayer without its feed-forward block (and without that block's LayerNorm)."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.attention = original.attention  # the feed-forward weights are left behind

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None,
                **kwargs) -> Tensor:
        return self.attention(hidden_states, attention_mask, **kwargs)[0]


class XLNetAttentionNoSkip(nn.Module):
    """XLNetRelativeAttention's content stream without the residual in post_attention.

    Only the plain encoder use (no query stream g, no memory) is supported.
    """

    def __init__(self, original: nn.Module):
        super().__init__()
        self.original = original

    def forward(self, h, g, attn_mask_h, attn_mask_g, r, seg_mat, mems=None,
                target_mapping=None, output_attentions=False):
        if g is not None or mems is not None:
            raise NotImplementedError("the no-skip XLNet attention supports h only, no mems")
        o = self.original
        q = torch.einsum("ibh,hnd->ibnd", h, o.q)  # (n, B, H, head)
        k = torch.einsum("ibh,hnd->ibnd", h, o.k)
        v = torch.einsum("ibh,hnd->ibnd", h, o.v)
        k_r = torch.einsum("ibh,hnd->ibnd", r.type(o.r.dtype), o.r)
        attn_vec = o.rel_attn_core(q, k, v, k_r, seg_mat=seg_mat, attn_mask=attn_mask_h)
        return o.post_attention(h, attn_vec, residual=False), None


def ablate(net: nn.Module, model: str, ablation: str) -> nn.Module:
    """A copy of `net` with the attention skip and/or the feed-forward block removed."""
    if ablation not in ABLATIONS:
        raise ValueError(f"ablation={ablation!r}: allowed values are {list(ABLATIONS)}")
    skip, ffn = ABLATIONS[ablation]
    if ablation in ALBERT_ONLY and model != "albert":
        raise ValueError(f"ablation {ablation!r} exists for ALBERT only")
    # Copy the module tree but share the weights (only read here): a deep copy of base-size
    # weights per ablation costs more than the wrappers do.
    net = copy.deepcopy(net, memo={id(t): t for t in (*net.parameters(), *net.buffers())})
    if model == "bert":
        for layer in net.encoder.layer:
            if not skip:
                layer.attention.output = BertSelfOutputNoSkip(layer.attention.output)
            if not ffn:
                layer.intermediate = nn.Identity()
                layer.output = FeedForwardRemoved()
    elif model == "albert":
        for group in net.encoder.albert_layer_groups:
            for i, layer in enumerate(group.albert_layers):  # shared across depth
                if not skip:
                    layer.attention = AlbertAttentionAblated(layer.attention, skip=False)
                if ablation == "san_skip_2021":
                    layer.ffn, layer.ffn_output = nn.Identity(), nn.Identity()
                elif not ffn:
                    group.albert_layers[i] = AlbertLayerAttentionOnly(layer)
    elif model == "xlnet":
        for layer in net.layer:
            if not skip:
                layer.rel_attn = XLNetAttentionNoSkip(layer.rel_attn)
            if not ffn:
                layer.ff = nn.Identity()
    else:
        raise ValueError(f"model={model!r}: allowed values are {list(MODELS)}")
    return net


# ---- capture -------------------------------------------------------------------------------


def _layer_slots(net: nn.Module, model: str) -> tuple[list[nn.Module], int]:
    """The modules applied as layers (each once, ALBERT's shared one too) and the depth."""
    if model == "bert":
        return list(net.encoder.layer), len(net.encoder.layer)
    if model == "albert":
        layers = [m for g in net.encoder.albert_layer_groups for m in g.albert_layers]
        return layers, net.config.num_hidden_layers
    if model == "xlnet":
        return list(net.layer), len(net.layer)
    raise ValueError(f"model={model!r}: allowed values are {list(MODELS)}")


@torch.no_grad()
def hidden_states(net: nn.Module, model: str, input_ids: Tensor) -> list[Tensor]:
    """Every layer's hidden state, [layer 0 (input to the first layer), ..., layer L].

    Each is (batch, tokens, width). Forward hooks record the layers in call order, so ALBERT's
    one shared layer gives all its applications; XLNet's (tokens, batch, width) is transposed.
    """
    slots, depth = _layer_slots(net, model)
    states: list[Tensor] = []

    def first(x) -> Tensor:
        x = x[0] if isinstance(x, tuple) else x
        return x.transpose(0, 1) if model == "xlnet" else x

    def pre_hook(module, args, kwargs):
        if not states:
            states.append(first(args[0] if args else next(iter(kwargs.values()))))

    def hook(module, args, output):
        states.append(first(output))

    handles = []
    for module in dict.fromkeys(slots):  # unique, in order
        handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        handles.append(module.register_forward_hook(hook))
    try:
        net(input_ids=input_ids)
    finally:
        for handle in handles:
            handle.remove()
    if len(states) != depth + 1:
        raise RuntimeError(f"captured {len(states)} states, expected {depth + 1}")
    return states


def residual_table(states: list[Tensor]) -> pd.DataFrame:
    """One row per (sample, layer): the relative residual, composite (as plotted) and Frobenius."""
    rows = []
    for layer, X in enumerate(states):
        X = X.double()  # metrics in float64 whatever the forward pass ran in
        r = relative_residuals(X)
        rows.append(pd.DataFrame({
            "sample": range(X.shape[0]), "layer": layer,
            "relative_residual_comp": r["comp"].numpy(), "relative_residual": r["fro"].numpy(),
        }))
    return pd.concat(rows, ignore_index=True)


# ---- inputs --------------------------------------------------------------------------------


def random_ids(batch: int, tokens: int, vocab_size: int, seed: int) -> Tensor:
    """(batch, tokens) token ids uniform in [FIRST_ID, vocab_size), from their own generator."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(FIRST_ID, vocab_size, (batch, tokens), generator=gen)


def package_text() -> str:
    """English prose that ships with scikit-learn: its bundled data sets' descriptions."""
    import sklearn.datasets

    descr = Path(sklearn.datasets.__file__).parent / "descr"
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(descr.glob("*.rst")))


def text_ids(text: str, batch: int, tokens: int, vocab_size: int) -> Tensor:
    """(batch, tokens) ids of consecutive windows of `text`, split into words and punctuation.

    No pretrained tokenizer is available offline. At random initialisation the embedding rows
    are i.i.d., so which id a word gets does not matter, only which tokens repeat: ids are given
    in order of first appearance from FIRST_ID on.
    """
    words = re.findall(r"\w+|[^\w\s]", text)
    vocab: dict[str, int] = {}
    ids = [vocab.setdefault(w, FIRST_ID + len(vocab)) for w in words]
    need = batch * tokens
    if len(ids) < need:
        raise ValueError(f"text has {len(ids)} tokens, {need} needed")
    if FIRST_ID + len(vocab) > vocab_size:
        raise ValueError(f"text has {len(vocab)} distinct tokens, more than the vocabulary")
    return torch.tensor(ids[:need]).view(batch, tokens)


def model_inputs(kind: str, batch: int, tokens: int, vocab_size: int, seed: int) -> Tensor:
    if kind == "random":
        return random_ids(batch, tokens, vocab_size, seed)
    if kind == "text":
        return text_ids(package_text(), batch, tokens, vocab_size)
    raise ValueError(f"input={kind!r}: allowed values are ['random', 'text']")


# ---- one job -------------------------------------------------------------------------------


def run(model: str, seed: int, inputs: list[str], ablations: list[str], batch: int,
        tokens: int, input_seed: int = 0, dtype: str = "float32",
        checkpoint: str | Path | None = None,
        log: Callable[[str], None] = lambda msg: None) -> pd.DataFrame:
    """Per-layer residuals of `model` (random init from `seed`, or `checkpoint`) for every input
    kind and ablation (ALBERT-only ablations are skipped for the others).

    One row per (input, ablation, sample, layer); columns model, weights, input, ablation,
    sample, layer, relative_residual_comp, relative_residual.
    """
    net = build(model, seed, checkpoint).to(DTYPES[dtype])
    vocab_size = net.config.vocab_size
    frames = []
    for kind in inputs:
        ids = model_inputs(kind, batch, tokens, vocab_size, input_seed)
        for ablation in ablations:
            if ablation in ALBERT_ONLY and model != "albert":
                continue
            table = residual_table(hidden_states(ablate(net, model, ablation), model, ids))
            table.insert(0, "ablation", ablation)
            table.insert(0, "input", kind)
            frames.append(table)
            last = table[table.layer == table.layer.max()].relative_residual_comp.mean()
            log(f"{model} {kind} {ablation}: mean r at last layer {last:.3g}")
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "weights", "pretrained" if checkpoint is not None else "init")
    out.insert(0, "model", model)
    return out
