"""Random multi-head attention on the sphere and its homogenized limits [KGR26].

Koubbi, Geshkovski, Rigollet, *Homogenized Transformers* (arXiv 2604.01978, 2026).

The model: ``n`` tokens on the unit sphere ``S^{d-1}``; at every layer and for every head, fresh
Gaussian ``Q, K, V`` (entries ``N(0, 1/d)``) are drawn; the residual update is

    x_i  <-  Proj_S( x_i + eta * c_H * sum_h V_h sum_j softmax_j(beta <Q_h x_i, K_h x_j>) x_j ),

with ``Proj_S(x) = x / |x|`` and ``c_H`` the head normalisation (``"sum"``: 1, ``"sqrt"``:
``H^-1/2``, ``"mean"``: ``H^-1``). All simulations are batched over independent runs (weight
draws): a state is a tensor of shape ``(runs, n, d)`` in float64.

What is read from the paper (abstract and public summaries; the full text could not be read
here) and what is derived in ``notebooks/06_homogenized_derivation.md``:

* paper: weights resampled per layer and per head; tokens on the sphere; joint scalings of depth
  ``L``, step ``eta`` and heads ``H`` give a deterministic limit or a stochastic limit with
  common noise; in the Gaussian case the limiting drift vanishes.
* derived here: the per-layer increment has mean 0 and covariance
  ``eta^2 c_H^2 H (C(X)/d) (x) I_d`` with ``C_ik(X) = E_{Q,K} <a_i, a_k>`` (``a_i`` the attention
  average of token ``i``); hence the named scalings of :func:`step_size`, the SDE solved by
  :func:`simulate_limit` (tangent common noise plus the Ito drift of the projection) and the
  heuristic collapse criterion :func:`antipodal_exponent`.

No file I/O, no paths: callers (workflow scripts) turn the returned arrays into tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from .metrics import mean_token_norm_sq  # |mean_i x_i|^2, (..., n, d) -> (...)

Regime = Literal["deterministic", "stochastic"]
HeadNorm = Literal["sum", "sqrt", "mean"]

REGIMES: tuple[str, ...] = ("deterministic", "stochastic")
HEAD_NORMS: tuple[str, ...] = ("sum", "sqrt", "mean")
DTYPE = torch.float64  # round-off must stay far below the 1e-12 norm tolerance over many layers


# --------------------------------------------------------------------------------------------
# scalings
# --------------------------------------------------------------------------------------------


def head_scale(H: int, head_norm: HeadNorm = "sum") -> float:
    """The factor ``c_H`` multiplying the sum of the ``H`` head outputs.

    ``"sum"`` (c_H = 1) is the plain head sum of DESIGN.md's update rule; ``"sqrt"`` and
    ``"mean"`` are the other two conventions. With H i.i.d. zero-mean heads the combined output
    has covariance ``c_H^2 H Sigma(X)``, so the three only re-parametrise ``eta``
    (see :func:`step_size`).
    """
    if H < 1:
        raise ValueError(f"H must be >= 1, got {H}")
    if head_norm == "sum":
        return 1.0
    if head_norm == "sqrt":
        return 1.0 / math.sqrt(H)
    if head_norm == "mean":
        return 1.0 / H
    raise ValueError(f"head_norm must be one of {HEAD_NORMS}, got {head_norm!r}")


def step_size(regime: Regime, L: int, H: int, T: float, head_norm: HeadNorm = "sum") -> float:
    """Residual step ``eta`` that puts a depth-``L``, ``H``-head stack at homogenized time ``T``.

    Per layer the combined head output has mean ``c_H H m(X)`` and covariance
    ``c_H^2 H Sigma(X)`` (derived; ``c_H`` from :func:`head_scale`). Over ``L`` layers:

    * ``"deterministic"``: drift clock ``eta c_H H L = T``; the noise clock
      ``eta^2 c_H^2 H L = T^2 / (H L)`` then vanishes as ``H L -> infinity``. For Gaussian weights
      ``m = 0``, so the limit is "tokens stay where they start".
    * ``"stochastic"``: noise clock ``eta^2 c_H^2 H L = T`` (``eta ~ (H L)^{-1/2}`` for the head
      sum); needs ``m = 0`` (true for zero-mean Gaussian ``V``), else the drift would blow up.

    Returns:
        eta (float).
    """
    if L < 1 or T < 0:
        raise ValueError(f"need L >= 1 and T >= 0, got L={L}, T={T}")
    c = head_scale(H, head_norm)
    if regime == "deterministic":
        return T / (c * H * L)
    if regime == "stochastic":
        return math.sqrt(T / (c * c * H * L))
    raise ValueError(f"regime must be one of {REGIMES}, got {regime!r}")


def homogenized_time(
    regime: Regime, eta: float, H: int, layers: int | np.ndarray, head_norm: HeadNorm = "sum"
) -> float | np.ndarray:
    """Inverse of :func:`step_size`: the homogenized time reached after ``layers`` layers."""
    c = head_scale(H, head_norm)
    if regime == "deterministic":
        return eta * c * H * layers
    if regime == "stochastic":
        return eta * eta * c * c * H * layers
    raise ValueError(f"regime must be one of {REGIMES}, got {regime!r}")


# --------------------------------------------------------------------------------------------
# statistics (pure functions on (..., n, d))
# --------------------------------------------------------------------------------------------


def mean_pairwise_inner(X: Tensor) -> Tensor:
    """Mean of ``<x_i, x_j>`` over ordered distinct pairs ``i != j``. ``(..., n, d) -> (...)``.

    Uses ``sum_{i != j} <x_i, x_j> = |sum_i x_i|^2 - sum_i |x_i|^2`` (O(n d), no Gram matrix).
    Equals 1 when all tokens coincide; about 0 for independent uniform tokens.
    """
    n = X.shape[-2]
    if n < 2:
        raise ValueError("mean_pairwise_inner needs n >= 2 tokens")
    total = X.sum(dim=-2).pow(2).sum(dim=-1)
    diag = X.pow(2).sum(dim=(-2, -1))
    return (total - diag) / (n * (n - 1))


STATISTICS = {"inner": mean_pairwise_inner, "mean_norm_sq": mean_token_norm_sq}


# --------------------------------------------------------------------------------------------
# the particle system
# --------------------------------------------------------------------------------------------


def project_to_sphere(X: Tensor) -> Tensor:
    """Normalise every token (last axis) to unit length. Shape preserved."""
    return X / X.norm(dim=-1, keepdim=True)


def uniform_tokens(runs: int, n: int, d: int, generator: torch.Generator) -> Tensor:
    """``runs`` independent sets of ``n`` i.i.d. uniform points on ``S^{d-1}``: ``(runs, n, d)``."""
    return project_to_sphere(torch.randn(runs, n, d, generator=generator, dtype=DTYPE))


def sample_weights(
    runs: int, H: int, d: int, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """Fresh ``Q, K, V`` for one layer, each ``(runs, H, d, d)`` with entries ``N(0, 1/d)``.

    One ``randn`` call per layer (in this order) so that the loop reference draws the very same
    numbers.
    """
    W = torch.randn(3, runs, H, d, d, generator=generator, dtype=DTYPE) / math.sqrt(d)
    return W[0], W[1], W[2]


def attention_averages(X: Tensor, Q: Tensor, K: Tensor, beta: float) -> Tensor:
    """Attention-weighted token averages ``a_i = sum_j softmax_j(beta <Q x_i, K x_j>) x_j``.

    Args:
        X: ``(R, n, d)`` tokens. Q, K: ``(R, M, d, d)`` for ``M`` heads (or samples).
    Returns:
        ``(R, M, n, d)``.
    """
    QX = torch.einsum("rmab,rnb->rmna", Q, X)  # (R, M, n, d)
    KX = torch.einsum("rmab,rnb->rmna", K, X)  # (R, M, n, d)
    A = torch.softmax(beta * QX @ KX.transpose(-1, -2), dim=-1)  # (R, M, n, n), rows sum to 1
    return A @ X.unsqueeze(1)  # (R, M, n, d)


def multihead_update(
    X: Tensor, Q: Tensor, K: Tensor, V: Tensor, beta: float, head_norm: HeadNorm = "sum"
) -> Tensor:
    """Combined head output ``c_H sum_h V_h a_i^h`` before the step and the projection.

    Args:
        X: ``(R, n, d)``. Q, K, V: ``(R, H, d, d)``.
    Returns:
        ``(R, n, d)``. Zero mean over the draw of ``V`` (it is independent of Q, K and centred).
    """
    a = attention_averages(X, Q, K, beta)  # (R, H, n, d)
    heads = torch.einsum("rhab,rhnb->rhna", V, a)  # (R, H, n, d): V_h a_i^h
    return head_scale(Q.shape[1], head_norm) * heads.sum(dim=1)


def attention_layer(
    X: Tensor,
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    beta: float,
    eta: float,
    head_norm: HeadNorm = "sum",
) -> Tensor:
    """One layer: ``Proj_S(X + eta * multihead_update(X))``. ``(R, n, d) -> (R, n, d)``."""
    return project_to_sphere(X + eta * multihead_update(X, Q, K, V, beta, head_norm))


def attention_layer_loop(
    X: Tensor,
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    beta: float,
    eta: float,
    head_norm: HeadNorm = "sum",
) -> Tensor:
    """Reference for :func:`attention_layer`: plain Python loops over runs, heads and tokens."""
    R, n, d = X.shape
    H = Q.shape[1]
    c = head_scale(H, head_norm)
    out = torch.empty_like(X)
    for r in range(R):
        for i in range(n):
            update = torch.zeros(d, dtype=X.dtype)
            for h in range(H):
                query = Q[r, h] @ X[r, i]
                scores = torch.stack([beta * torch.dot(query, K[r, h] @ X[r, j]) for j in range(n)])
                weights = torch.softmax(scores, dim=0)
                average = torch.zeros(d, dtype=X.dtype)
                for j in range(n):
                    average = average + weights[j] * X[r, j]
                update = update + V[r, h] @ average
            y = X[r, i] + eta * c * update
            out[r, i] = y / torch.linalg.vector_norm(y)
    return out


@dataclass
class Trajectory:
    """Statistics recorded along a simulation; one row per run.

    Attributes:
        t: ``(num_records,)`` depth fraction ``k / L`` in [0, 1] (for the limit solver: the
            fraction ``s / T`` of homogenized time), so finite-depth curves and the limit overlay
            on the same axis.
        layers: ``(num_records,)`` layer (or EM step) index ``k`` of each record.
        inner: ``(runs, num_records)`` mean pairwise inner product :func:`mean_pairwise_inner`.
        mean_norm_sq: ``(runs, num_records)`` :func:`mean_token_norm_sq`.
        final: ``(runs, n, d)`` state after the last layer (float64 tensor).
    """

    t: np.ndarray
    layers: np.ndarray
    inner: np.ndarray
    mean_norm_sq: np.ndarray
    final: Tensor


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


def _stats(X: Tensor) -> tuple[Tensor, Tensor]:
    return mean_pairwise_inner(X), mean_token_norm_sq(X)


LayerFn = Callable[[Tensor, Tensor, Tensor, Tensor, float, float, HeadNorm], Tensor]


def _simulate(
    layer_fn: LayerFn,
    n: int,
    d: int,
    H: int,
    L: int,
    eta: float,
    beta: float,
    runs: int,
    seed: int,
    record_every: int,
    head_norm: HeadNorm,
    X0: Tensor | np.ndarray | None,
    chunk_runs: int | None,
) -> Trajectory:
    ks = record_indices(L, record_every)
    inner = np.empty((runs, len(ks)))
    norm_sq = np.empty((runs, len(ks)))
    finals = []
    for c, (lo, hi) in enumerate(_run_chunks(runs, chunk_runs)):
        g = torch.Generator().manual_seed(_chunk_seed(seed, c))
        X = _initial_state(X0, lo, hi, n, d, g)
        rec = 0
        for k in range(L + 1):
            if k == ks[rec]:
                a, b = _stats(X)
                inner[lo:hi, rec], norm_sq[lo:hi, rec] = a.numpy(), b.numpy()
                rec += 1
            if k == L:
                break
            Q, K, V = sample_weights(hi - lo, H, d, g)
            X = layer_fn(X, Q, K, V, beta, eta, head_norm)
        finals.append(X)
    return Trajectory(ks / L, ks, inner, norm_sq, torch.cat(finals))


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
    head_norm: HeadNorm = "sum",
    X0: Tensor | np.ndarray | None = None,
    chunk_runs: int | None = None,
) -> Trajectory:
    """Depth-``L`` random multi-head attention on the sphere, ``runs`` independent weight draws.

    Args:
        n, d: tokens and dimension. H: heads. L: layers. eta: residual step (see
            :func:`step_size`). beta: inverse temperature.
        runs: independent runs (fresh X0 unless given, fresh weights). seed: torch.Generator seed.
        record_every: record statistics every this many layers (and at layers 0 and L).
        head_norm: head normalisation ``c_H`` (:func:`head_scale`).
        X0: optional initial tokens, ``(n, d)`` shared by all runs or ``(runs, n, d)``;
            default i.i.d. uniform on the sphere, drawn from the generator.
        chunk_runs: simulate at most this many runs at once (memory ~
            ``chunk_runs * H * n * max(n, d) * 8`` bytes). Each chunk has its own seeded stream,
            so results are deterministic given ``(seed, chunk_runs)``; ``None`` = one chunk.

    Returns:
        :class:`Trajectory` with ``inner`` and ``mean_norm_sq`` of shape ``(runs, num_records)``
        and ``t = k / L``.
    """
    return _simulate(
        attention_layer,
        n,
        d,
        H,
        L,
        eta,
        beta,
        runs,
        seed,
        record_every,
        head_norm,
        X0,
        chunk_runs,
    )


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
    head_norm: HeadNorm = "sum",
    X0: Tensor | np.ndarray | None = None,
) -> Trajectory:
    """Per-token loop reference for :func:`simulate_particles` (same seed -> same numbers).

    Draws the same random numbers in the same order (one chunk) and applies
    :func:`attention_layer_loop`. For tests and the speed benchmark only.
    """
    return _simulate(
        attention_layer_loop,
        n,
        d,
        H,
        L,
        eta,
        beta,
        runs,
        seed,
        record_every,
        head_norm,
        X0,
        None,
    )


# --------------------------------------------------------------------------------------------
# limit equations
# --------------------------------------------------------------------------------------------


def diffusion_kernel(X: Tensor, beta: float, samples: int, generator: torch.Generator) -> Tensor:
    """Monte Carlo estimate of ``C_ik(X) = E_{Q,K} <a_i, a_k>`` (unbiased).

    The per-layer head output ``y_i = V a_i`` has ``Cov(y_i, y_k) = (C_ik / d) I_d``
    (``E[V M V^T] = tr(M) I / d``). No closed form for the softmax expectation, hence sampling.

    Args:
        X: ``(R, n, d)``. samples: number of ``(Q, K)`` draws per run.
    Returns:
        ``(R, n, n)`` symmetric PSD.
    """
    R, n, d = X.shape
    QK = torch.randn(2, R, samples, d, d, generator=generator, dtype=DTYPE) / math.sqrt(d)
    a = attention_averages(X, QK[0], QK[1], beta)  # (R, M, n, d)
    return torch.einsum("rmia,rmka->rik", a, a) / samples


def _em_step(X: Tensor, beta: float, dtau: float, samples: int, g: torch.Generator) -> Tensor:
    """One Euler-Maruyama step of the stochastic limit (Ito form), then renormalisation.

    dx_i = P_{x_i} dZ_i - ((d-1) / (2d)) C_ii(X) x_i dtau,
    d<Z_i^a, Z_k^b> = (C_ik(X) / d) delta_ab dtau.

    The common noise dZ is built as ``sqrt(dtau / (M d)) sum_m G_m a^m`` with ``M`` fresh
    ``(Q_m, K_m)`` draws and independent standard Gaussian ``d x d`` matrices ``G_m``:
    conditionally on the ``(Q_m, K_m)`` it is exactly Gaussian with covariance
    ``(dtau / d) C_hat (x) I_d``, where ``C_hat = (1/M) sum_m a^m a^m^T`` is an unbiased estimate
    of ``C`` -- a randomised-coefficient EM step whose one-step mean and covariance are exact
    (its law is a Gaussian mixture; it becomes the plain Gaussian-increment EM step as
    ``M -> infinity``; the difference is in fourth moments only, which do not enter the limit).

    The step is followed by renormalisation to keep the state on the sphere. With the explicit
    Ito drift included, ``|x + P dZ + ito|^2 = 1 + (zero mean, O(dtau))``, so renormalising adds
    no further mean drift (the Ito drift is not counted twice). Note that the Ito term is radial:
    after renormalisation it only rescales the O(sqrt(dtau)) noise by 1 + O(dtau), so the
    projected scheme would produce the same drift without it (projection *is* the Ito
    correction). The derived drift formula is checked independently against one particle layer
    (see :func:`pair_inner_drift_diffusion`).
    """
    R, n, d = X.shape
    W = torch.randn(3, R, samples, d, d, generator=g, dtype=DTYPE)
    a = attention_averages(X, W[0] / math.sqrt(d), W[1] / math.sqrt(d), beta)  # (R, M, n, d)
    dZ = torch.einsum("rmab,rmnb->rna", W[2], a) * math.sqrt(dtau / (samples * d))  # (R, n, d)
    C_diag = a.pow(2).sum(dim=-1).mean(dim=1)  # (R, n): C_hat_ii
    radial = (dZ * X).sum(dim=-1, keepdim=True)
    tangent = dZ - radial * X  # P_x dZ
    ito = -((d - 1) / (2 * d)) * C_diag.unsqueeze(-1) * X * dtau
    return project_to_sphere(X + tangent + ito)


def simulate_limit(
    n: int,
    d: int,
    beta: float,
    T: float,
    runs: int,
    seed: int,
    regime: Regime = "stochastic",
    num_steps: int = 200,
    record_every: int = 1,
    samples_per_step: int = 64,
    X0: Tensor | np.ndarray | None = None,
    chunk_runs: int | None = None,
) -> Trajectory:
    """The homogenized limit up to time ``T``, on the same statistics as :func:`simulate_particles`.

    * ``"stochastic"``: Euler-Maruyama with ``num_steps`` steps of ``dtau = T / num_steps`` for
      the common-noise SDE on ``(S^{d-1})^n`` (see :func:`_em_step` and the derivation notebook),
      ``samples_per_step`` Monte Carlo ``(Q, K)`` draws per step for the diffusion kernel.
    * ``"deterministic"``: Gaussian weights have zero drift, and the Ito drift of the projection
      is of order ``eta^2 H L -> 0``: ``X(t) = X0`` for all t. Returned as constant trajectories.

    Args: as :func:`simulate_particles`; ``X0`` default i.i.d. uniform from the generator.
    Returns:
        :class:`Trajectory`; ``t = k / num_steps`` is the fraction of ``T`` (so it lines up with
        the particle system's ``k / L`` when that one uses ``eta = step_size(regime, L, H, T)``).
    """
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {REGIMES}, got {regime!r}")
    ks = record_indices(num_steps, record_every)
    inner = np.empty((runs, len(ks)))
    norm_sq = np.empty((runs, len(ks)))
    finals = []
    dtau = T / num_steps
    for c, (lo, hi) in enumerate(_run_chunks(runs, chunk_runs)):
        g = torch.Generator().manual_seed(_chunk_seed(seed, c))
        X = _initial_state(X0, lo, hi, n, d, g)
        if regime == "deterministic":
            a, b = _stats(X)
            inner[lo:hi], norm_sq[lo:hi] = a.numpy()[:, None], b.numpy()[:, None]
            finals.append(X)
            continue
        rec = 0
        for k in range(num_steps + 1):
            if k == ks[rec]:
                a, b = _stats(X)
                inner[lo:hi, rec], norm_sq[lo:hi, rec] = a.numpy(), b.numpy()
                rec += 1
            if k == num_steps:
                break
            X = _em_step(X, beta, dtau, samples_per_step, g)
        finals.append(X)
    return Trajectory(ks / num_steps, ks, inner, norm_sq, torch.cat(finals))


def pair_inner_drift_diffusion(C: Tensor, rho: Tensor, d: int) -> tuple[Tensor, Tensor]:
    """Ito drift and quadratic-variation rate of ``rho_ik = <x_i, x_k>`` under the SDE (derived).

    drift  = [ C_ik (d - 2 + rho^2) - (d - 1) rho (C_ii + C_kk) / 2 ] / d
    diffusion = (1 - rho^2) [ C_ii + C_kk - 2 rho C_ik ] / d

    Args:
        C: ``(..., n, n)`` kernel (:func:`diffusion_kernel`). rho: ``(..., n, n)`` Gram matrix.
    Returns:
        two ``(..., n, n)`` tensors (diagonal entries are 0 / meaningless).
    """
    diag = torch.diagonal(C, dim1=-2, dim2=-1)
    mean_diag = (diag.unsqueeze(-1) + diag.unsqueeze(-2)) / 2
    drift = (C * (d - 2 + rho**2) - (d - 1) * rho * mean_diag) / d
    diffusion = (1 - rho**2) * (2 * mean_diag - 2 * rho * C) / d
    return drift, diffusion


def antipodal_exponent(
    d: int,
    beta: float,
    n: int = 2,
    samples: int = 20_000,
    seed: int = 0,
    eps: float = 1e-4,
) -> float:
    """DERIVED HEURISTIC (not from the paper): Lyapunov exponent of an antipodal two-cluster state.

    Tokens split into two groups of ``ceil(n/2)`` and ``floor(n/2)`` at ``x`` and ``-x``. Near
    that state ``v = 1 + rho`` (rho the inner product of the two groups) follows, to leading
    order, a geometric Brownian motion; ``log v`` drifts at rate

        lambda = [ (d - 3) kappa / 2 - (d - 1) C_bar ] / d,

    ``C_bar = E|a_1|^2`` at the antipodal state, ``kappa = lim E|a_1 + a_2|^2 / v`` (derivation,
    section "A derived collapse criterion"). ``lambda < 0``: antipodal configurations attract
    with positive probability, so collapse to a single cluster is *not* certain (mitigated);
    ``lambda > 0``: the two-cluster state is unstable and clustering proceeds. Full collapse
    itself is always locally attracting (kappa = 0 there).

    Both quantities are estimated by Monte Carlo over ``samples`` draws of ``(Q, K)`` with
    common random numbers; ``eps`` is the size of ``v`` used for ``kappa``.
    Returns:
        lambda (float). The boundary of the (d, n, beta) plane is ``lambda = 0``; in this
        heuristic n enters only through the group sizes (balanced groups do not depend on n).
    """
    if n < 2:
        raise ValueError("need n >= 2")
    g = torch.Generator().manual_seed(seed)
    n_plus = (n + 1) // 2
    e1 = torch.zeros(d, dtype=DTYPE)
    e1[0] = 1.0
    e2 = torch.zeros(d, dtype=DTYPE)
    e2[1] = 1.0
    # second group at -x rotated towards e2 so that 1 + rho = v = eps
    angle = math.acos(-1.0 + eps)
    x_minus = math.cos(angle) * e1 + math.sin(angle) * e2
    QK = torch.randn(2, 1, samples, d, d, generator=g, dtype=DTYPE) / math.sqrt(d)

    def group_means(x_minus_vec: Tensor) -> tuple[Tensor, Tensor]:
        X = torch.cat([e1.expand(n_plus, d), x_minus_vec.expand(n - n_plus, d)]).unsqueeze(0)
        a = attention_averages(X, QK[0], QK[1], beta)[0]  # (M, n, d)
        return a[:, 0], a[:, -1]  # one token of each group

    a1, a2 = group_means(-e1)
    C_bar = 0.5 * (a1.pow(2).sum(-1).mean() + a2.pow(2).sum(-1).mean())
    b1, b2 = group_means(x_minus)
    kappa = (b1 + b2).pow(2).sum(-1).mean() / eps
    return float(((d - 3) * kappa / 2 - (d - 1) * C_bar) / d)
