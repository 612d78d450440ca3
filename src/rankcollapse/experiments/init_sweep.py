"""Experiment E1: metrics of every layer of random-init networks, from one forward pass each."""

from __future__ import annotations

import pandas as pd
import torch

from rankcollapse.core.metrics import layer_metrics
from rankcollapse.core.model import DTYPES, build


def random_tokens(batch: int, tokens: int, width: int, generator: torch.Generator,
                  dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Gaussian input sequences (batch, tokens, width), entries N(0, 1)."""
    return torch.randn(batch, tokens, width, generator=generator, dtype=dtype)


@torch.no_grad()
def init_sweep(variant: dict, seed: int, depth: int, width: int, heads: int, tokens: int,
               batch: int, dtype: str = "float64", device: str | torch.device = "cpu",
               **model_options) -> pd.DataFrame:
    """Per-layer metrics of one random network of depth `depth` on `batch` random sequences.

    One captured pass gives every depth 0..depth (layer 0 is the input). The model weights and
    the inputs both come from `seed`. Returns one row per (sample, layer) with the columns of
    `metrics.layer_metrics`.
    """
    torch_dtype = DTYPES[dtype]
    torch.manual_seed(seed)  # the weights
    model = build(variant, depth=depth, width=width, heads=heads, **model_options)
    model = model.to(device=device, dtype=torch_dtype).eval()
    gen = torch.Generator().manual_seed(seed + 1_000_003)  # the inputs, independent of weights
    x = random_tokens(batch, tokens, width, gen, torch_dtype).to(device)
    _, trace = model(x, capture=True)
    rows = []
    for layer, hidden in enumerate(trace.hidden):
        attn = trace.attention[layer - 1] if layer > 0 else None
        values = {k: v.cpu().numpy() for k, v in layer_metrics(hidden, attn).items()}
        rows.append(pd.DataFrame({"sample": range(batch), "layer": layer, **values}))
    return pd.concat(rows, ignore_index=True)
