"""E1b: real architectures (BERT, ALBERT, XLNet) and their path ablations (Dong et al. 2021,
Fig. 2), on the probe's models and ablations; this module holds E1b's own inputs and table.
The ablations and where the code lives: docs/experiments.md.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor, nn

from rankcollapse import probe
from rankcollapse.core.checkpoints import package_text
from rankcollapse.core.model import DTYPES

MODELS = ("bert", "albert", "xlnet")
ABLATIONS = {  # name: (attention skip kept, feed-forward kept)
    name: probe.ABLATIONS[name][:2]
    for name in ("san", "san_mlp", "san_skip", "transformer", "san_skip_2021")
}
# ALBERT as the 2021 code ablated it (probe.ablate): for BERT and XLNet that code removed the
# block cleanly (= san_skip), so this ablation exists for ALBERT only.
ALBERT_ONLY = {"san_skip_2021"}


def _check_model(model: str) -> None:
    if model not in MODELS:
        raise ValueError(f"model={model!r}: allowed values are {list(MODELS)}")


def build(model: str, seed: int = 0, checkpoint: str | Path | None = None,
          config_overrides: dict | None = None) -> nn.Module:
    """A BERT/ALBERT/XLNet base model in eval mode: random init from `seed`, or a checkpoint.

    checkpoint: a local directory written by `save_pretrained` (pretrained weights); nothing is
    ever fetched from the network. config_overrides: e.g. smaller sizes for tests.
    """
    _check_model(model)
    if checkpoint is not None:
        net = probe.load(checkpoint)
        if probe.model_type(net) != model:
            raise ValueError(f"checkpoint {checkpoint} holds a {probe.model_type(net)} model, "
                             f"not {model}")
        return net
    config = probe.base_config(model)
    for key, value in (config_overrides or {}).items():
        setattr(config, key, value)
    return probe.build(model, seed, config)


def ablate(net: nn.Module, model: str, ablation: str) -> nn.Module:
    """A copy of `net` with the attention skip and/or the feed-forward block removed."""
    if ablation not in ABLATIONS:
        raise ValueError(f"ablation={ablation!r}: allowed values are {list(ABLATIONS)}")
    if ablation in ALBERT_ONLY and model != "albert":
        raise ValueError(f"ablation {ablation!r} exists for ALBERT only")
    _check_model(model)
    return probe.ablate(net, model, ablation)


def hidden_states(net: nn.Module, model: str, input_ids: Tensor) -> list[Tensor]:
    """Every layer's hidden state, [layer 0 (input to the first layer), ..., layer L].

    Each is (batch, tokens, width); ALBERT's one shared layer gives all its applications.
    """
    _check_model(model)
    return probe.hidden_states(net, model, input_ids)


def residual_table(states: list[Tensor]) -> pd.DataFrame:
    """One row per (sample, layer): the relative residual, composite (as plotted) and Frobenius."""
    rows = [pd.DataFrame({"sample": range(X.shape[0]), "layer": layer,
                          **probe.sequence_metrics(X, None, full=False)})  # in float64
            for layer, X in enumerate(states)]
    return pd.concat(rows, ignore_index=True)


# ---- inputs --------------------------------------------------------------------------------


def random_ids(batch: int, tokens: int, vocab_size: int, seed: int) -> Tensor:
    """(batch, tokens) token ids uniform in [FIRST_ID, vocab_size), from their own generator."""
    return probe.random_ids(batch, tokens, vocab_size, seed, probe.FIRST_ID)


def text_ids(text: str, batch: int, tokens: int, vocab_size: int) -> Tensor:
    """(batch, tokens) ids of consecutive windows of `text`, split into words and punctuation.

    No pretrained tokenizer is available offline. At random initialisation the embedding rows
    are i.i.d., so which id a word gets does not matter, only which tokens repeat: ids are given
    in order of first appearance from FIRST_ID on.
    """
    need = batch * tokens
    ids = probe.word_ids(text, vocab_size=10**12)
    if len(ids) < need:
        raise ValueError(f"text has {len(ids)} tokens, {need} needed")
    if max(ids) >= vocab_size:
        raise ValueError(f"text has {max(ids) - probe.FIRST_ID + 1} distinct tokens, more than "
                         "the vocabulary")
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
            # The probe's measurement, residuals only (E1b reads no attention matrices).
            table = probe.measure(net, model, ids, ablations=[ablation], full=False)
            table = table[["ablation", "sample", "layer", *probe.RESIDUALS]]
            table.insert(0, "input", kind)
            frames.append(table)
            last = table[table.layer == table.layer.max()].relative_residual_comp.mean()
            log(f"{model} {kind} {ablation}: mean r at last layer {last:.3g}")
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "weights", "pretrained" if checkpoint is not None else "init")
    out.insert(0, "model", model)
    return out
