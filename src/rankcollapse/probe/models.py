"""The probe's models: the families' configurations at base size (resized on request), built
at random initialisation, and a checkpoint folder loaded offline after its files are checked.

Nothing is downloaded: a family is built from an explicit configuration (transformers' defaults
are other sizes), a checkpoint is read from a local folder (docs/probe.md, Models).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from rankcollapse.core.checkpoints import checkpoint_config, weight_files
from rankcollapse.core.checkpoints import max_positions as _max_positions
from rankcollapse.probe.spec import FAMILIES, ProbeError


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
    fetched from the network. Eager attention where the architecture has it. Its config.json
    and weights are checked first (ProbeError naming what is missing or damaged)."""
    weight_files(path, checkpoint_config(path))
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
