"""The per-layer metrics: every layer of every ablation measured in float64 over each
sequence's real tokens, the layers on parallel threads of one BLAS thread each (docs/probe.md,
Masks and Cost).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from rankcollapse.core import metrics as M
from rankcollapse.probe.ablation import ARCHS, ablate
from rankcollapse.probe.hooks import _device_of, capture


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
