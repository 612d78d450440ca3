"""Simulating E6's particle system over depth, ``runs`` independent weight draws at once.

:func:`simulate_particles` iterates ``eq:update_tokens`` [KGR26] (model.py) and records the
clustering statistics every few layers in a :class:`Trajectory`; :func:`simulate_particles_loop`
is its per-token loop reference (tests and benchmark B3); :func:`simulate_meanfield_argmax` moves
tokens at ``beta_eff = infinity`` (the setting of ``thm:large_beta_meta``). :func:`simulate_steps`
is shared with the limit solvers (limits.py), so finite depth and the limit are recorded alike.
No file I/O: callers turn the arrays into tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from rankcollapse.core.metrics import mean_token_norm_sq  # |mean_i x_i|^2, (..., n, d) -> (...)
from rankcollapse.experiments.homogenized.model import (
    DTYPE,
    SAMPLINGS,
    HeadNorm,
    Sampling,
    attention_layer,
    attention_layer_loop,
    barycentre_update,
    gram,
    head_scale,
    mean_pairwise_inner,
    meanfield_argmax_update,
    normals,
    project_to_sphere,
    sample_projections,
    sample_weights,
    uniform_tokens,
    update_from_projections,
)


@dataclass
class Trajectory:
    """Statistics recorded along a simulation; one row per run.

    Attributes:
        t: ``(num_records,)`` depth fraction ``k / L`` in [0, 1] (for the limit solver: the
            fraction ``s / T`` of the homogenized time), so finite-depth curves and the limit
            overlay on the same axis.
        layers: ``(num_records,)`` layer (or EM step) index ``k`` of each record.
        inner: ``(runs, num_records)`` mean pairwise overlap :func:`mean_pairwise_inner`.
        mean_norm_sq: ``(runs, num_records)`` ``m = |xbar|^2`` (:func:`mean_token_norm_sq`).
        final: ``(runs, n, d)`` state after the last layer (float64 tensor).
        gram: ``(runs, num_records, n, n)`` overlaps, when recorded (else None).
    """

    t: np.ndarray
    layers: np.ndarray
    inner: np.ndarray
    mean_norm_sq: np.ndarray
    final: Tensor
    gram: np.ndarray | None = None


def record_indices(L: int, record_every: int) -> np.ndarray:
    """Layers at which statistics are recorded: 0, every ``record_every``-th, and always ``L``."""
    if record_every < 1:
        raise ValueError(f"record_every must be >= 1, got {record_every}")
    ks = list(range(0, L + 1, record_every))
    if ks[-1] != L:
        ks.append(L)
    return np.asarray(ks)


def _chunk_seed(seed: int, chunk: int) -> int:
    # Independent, reproducible streams per chunk of runs; chunk 0 keeps the plain seed so that
    # an unchunked run is seeded exactly by `seed` (what the loop reference uses).
    if chunk == 0:
        return seed
    return int(np.random.SeedSequence([seed, chunk]).generate_state(1, dtype=np.uint64)[0] >> 1)


def _initial_state(
    X0: Tensor | np.ndarray | None, lo: int, hi: int, n: int, d: int, generator: torch.Generator
) -> Tensor:
    """Initial tokens of runs ``lo:hi``: drawn uniformly, or taken from ``X0`` (projected)."""
    if X0 is None:
        return uniform_tokens(hi - lo, n, d, generator)
    X0 = torch.as_tensor(X0, dtype=DTYPE)
    if X0.shape[-2:] != (n, d) or X0.dim() not in (2, 3):
        raise ValueError(
            f"X0 must be (n, d) or (runs, n, d) with (n, d) = ({n}, {d}), got {tuple(X0.shape)}"
        )
    X = X0.expand(hi - lo, n, d) if X0.dim() == 2 else X0[lo:hi]
    return project_to_sphere(X.clone())


def _run_chunks(runs: int, chunk_runs: int | None) -> list[tuple[int, int]]:
    size = runs if chunk_runs is None else max(1, int(chunk_runs))
    return [(start, min(start + size, runs)) for start in range(0, runs, size)]


Step = Callable[[Tensor, torch.Generator], Tensor]


def simulate_steps(
    step: Step,
    n: int,
    d: int,
    L: int,
    runs: int,
    seed: int,
    record_every: int,
    X0: Tensor | np.ndarray | None,
    chunk_runs: int | None,
    record_gram: bool = False,
) -> Trajectory:
    """Apply ``step`` ``L`` times to ``runs`` initial states (chunk by chunk, each chunk with its
    own seeded generator), recording the statistics at :func:`record_indices`."""
    ks = record_indices(L, record_every)
    inner = np.empty((runs, len(ks)))
    norm_sq = np.empty((runs, len(ks)))
    grams = np.empty((runs, len(ks), n, n)) if record_gram else None
    finals = []
    for c, (lo, hi) in enumerate(_run_chunks(runs, chunk_runs)):
        g = torch.Generator().manual_seed(_chunk_seed(seed, c))
        X = _initial_state(X0, lo, hi, n, d, g)
        rec = 0
        for k in range(L + 1):
            if k == ks[rec]:
                inner[lo:hi, rec] = mean_pairwise_inner(X).numpy()
                norm_sq[lo:hi, rec] = mean_token_norm_sq(X).numpy()
                if grams is not None:
                    grams[lo:hi, rec] = gram(X).numpy()
                rec += 1
            if k == L:
                break
            X = step(X, g)
        finals.append(X)
    return Trajectory(ks / L, ks, inner, norm_sq, torch.cat(finals), grams)


def layer_step(
    n: int, d: int, H: int, eta: float, beta: float, head_norm: HeadNorm = "mean",
    sampling: Sampling = "fast",
) -> Step:
    """The one-layer map ``(X, generator) -> X'`` of ``eq:update_tokens`` for these settings.

    ``"weights"`` draws full ``Q, K, V`` (:func:`sample_weights`). ``"fast"`` draws the same law
    more cheaply: one Gaussian vector per run at ``beta = 0`` (:func:`barycentre_update`), the
    projections ``Q X^T, K X^T, V X^T`` when ``n < d`` (:func:`sample_projections`), and full
    weights from float32 normals (:func:`normals`) otherwise.
    """
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
    head_scale(H, head_norm)  # validate early
    if sampling == "fast" and beta == 0:
        def step(X: Tensor, g: torch.Generator) -> Tensor:
            noise = normals((X.shape[0], d), g)
            return project_to_sphere(X + eta * barycentre_update(X, noise, H, head_norm))
    elif sampling == "fast" and n < d:
        def step(X: Tensor, g: torch.Generator) -> Tensor:
            QX, KX, VX = sample_projections(X, H, g)
            return project_to_sphere(X + eta * update_from_projections(QX, KX, VX, beta,
                                                                       head_norm))
    elif sampling == "fast":
        def step(X: Tensor, g: torch.Generator) -> Tensor:
            Q, K, V = normals((3, X.shape[0], H, d, d), g) / math.sqrt(d)
            return attention_layer(X, Q, K, V, beta, eta, head_norm)
    else:
        def step(X: Tensor, g: torch.Generator) -> Tensor:
            Q, K, V = sample_weights(X.shape[0], H, d, g)
            return attention_layer(X, Q, K, V, beta, eta, head_norm)
    return step


def simulate_particles(
    n: int,
    d: int,
    H: int,
    L: int,
    eta: float,
    beta: float,
    runs: int,
    seed: int,
    record_every: int = 1,
    head_norm: HeadNorm = "mean",
    X0: Tensor | np.ndarray | None = None,
    chunk_runs: int | None = None,
    sampling: Sampling = "fast",
    record_gram: bool = False,
) -> Trajectory:
    """Depth-``L`` random multi-head attention on the sphere, ``runs`` independent weight draws.

    Args:
        n, d: tokens and dimension. H: heads. L: layers. eta: step (see :func:`step_size`).
        beta: inverse temperature (the paper's beta_eff).
        runs: independent runs (fresh X0 unless given, fresh weights). seed: torch.Generator seed.
        record_every: record statistics every this many layers (and at layers 0 and L).
        head_norm: head normalisation ``c_H`` (:func:`head_scale`; the paper's is "mean").
        X0: optional initial tokens, ``(n, d)`` shared by all runs or ``(runs, n, d)``;
            default i.i.d. uniform on the sphere, drawn from the generator.
        chunk_runs: simulate at most this many runs at once. Each chunk has its own seeded
            stream, so results are deterministic given ``(seed, chunk_runs)``.
        sampling: "fast" (same law, fewer random numbers; :func:`layer_step`) or "weights"
            (full matrices, the same numbers as :func:`simulate_particles_loop`).
        record_gram: also record every run's overlaps ``(n, n)`` at each record.

    Returns:
        :class:`Trajectory` with ``inner`` and ``mean_norm_sq`` of shape ``(runs, num_records)``
        and ``t = k / L``.
    """
    step = layer_step(n, d, H, eta, beta, head_norm, sampling)
    return simulate_steps(step, n, d, L, runs, seed, record_every, X0, chunk_runs, record_gram)


def simulate_particles_loop(
    n: int,
    d: int,
    H: int,
    L: int,
    eta: float,
    beta: float,
    runs: int,
    seed: int,
    record_every: int = 1,
    head_norm: HeadNorm = "mean",
    X0: Tensor | np.ndarray | None = None,
) -> Trajectory:
    """Per-token loop reference for ``simulate_particles(..., sampling="weights")``.

    Draws the same random numbers in the same order (one chunk) and applies
    :func:`attention_layer_loop`. For tests and the speed benchmark only.
    """
    def step(X: Tensor, g: torch.Generator) -> Tensor:
        Q, K, V = sample_weights(X.shape[0], H, d, g)
        return attention_layer_loop(X, Q, K, V, beta, eta, head_norm)

    return simulate_steps(step, n, d, L, runs, seed, record_every, X0, None)


def simulate_meanfield_argmax(
    n: int,
    d: int,
    H: int,
    L: int,
    eta: float,
    runs: int,
    seed: int,
    record_every: int = 1,
    head_norm: HeadNorm = "mean",
    X0: Tensor | np.ndarray | None = None,
    chunk_runs: int | None = None,
) -> Trajectory:
    """``n`` tagged tokens moved by ``eq:update_tokens`` at ``beta_eff = infinity`` over a
    full-support background measure (:func:`meanfield_argmax_update`). Same return as
    :func:`simulate_particles`; ``n = 2`` is the pair of ``thm:large_beta_meta``."""

    def step(X: Tensor, g: torch.Generator) -> Tensor:
        return project_to_sphere(X + eta * meanfield_argmax_update(X, H, g, head_norm))

    return simulate_steps(step, n, d, L, runs, seed, record_every, X0, chunk_runs)
