"""Random multi-head attention on the sphere and its homogenized limits [KGR26].

Koubbi, Geshkovski, Rigollet, *Homogenized Transformers* (arXiv 2604.01978, 2026). Equations and
theorems are cited by the paper's LaTeX labels (``eq:update_tokens``, ``cor:SDE``, ...).

The model (``eq:update_tokens``): ``n`` tokens on the unit sphere ``S^{d-1}``; at every layer and
for every head ``h`` fresh weights ``theta_h = (V_h, A_h)`` are drawn, and

    x_i  <-  N( x_i + (eta / H) sum_h V_h m_{beta, A_h}[mu_X](x_i) ),      N(x) = x / |x|,

with the softmax barycentre ``m_{beta,A}[mu](z) = sum_k e^{beta <A z, x_k>} x_k / sum_k
e^{beta <A z, x_k>}``. Heads are **averaged** (``head_norm="mean"``, the paper's convention and
the default); ``"sum"`` (c_H = 1) and ``"sqrt"`` (c_H = H^{-1/2}) are our variants. Weights follow
the paper's Gaussian law (G) with ``sigma_V^2 = sigma_A^2 = 1/d``: we draw ``Q, K, V`` with
``N(0, 1/d)`` entries and score ``<Q x_i, K x_k> = <A x_i, x_k>`` with ``A = K^T Q`` (a product
``W W'^T`` of two independent Gaussian matrices), so our ``beta`` is the paper's effective
temperature ``beta_eff = beta d sigma_A^2``.

Fast sampling, same law: a layer uses its weights only through ``Q X^T, K X^T, V X^T``. For
``G`` with i.i.d. ``N(0, 1/d)`` entries and ``X^T = U R`` (thin QR, ``U`` with orthonormal columns),
``G X^T = (G U) R`` and ``G U`` again has i.i.d. ``N(0, 1/d)`` entries, so ``d min(n, d)`` normals
per matrix replace ``d^2`` (:func:`sample_projections`). At ``beta = 0`` every token sees the same
barycentre ``xbar`` and the head average ``(1/H) sum_h V_h xbar`` is exactly ``N(0, |xbar|^2/(d H)
I_d)``: a layer costs O(n d) (:func:`barycentre_update`). ``sampling="weights"`` draws the full
matrices instead (the per-token loop reference draws the same numbers).

All simulations are batched over independent runs (weight draws): a state is ``(runs, n, d)``
in float64. No file I/O, no paths: callers turn the returned arrays into tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from rankcollapse.core.metrics import mean_token_norm_sq  # |mean_i x_i|^2, (..., n, d) -> (...)

Regime = Literal["ballistic", "diffusive"]
HeadNorm = Literal["mean", "sum", "sqrt"]
Sampling = Literal["fast", "weights"]

REGIMES: tuple[str, ...] = ("ballistic", "diffusive")
HEAD_NORMS: tuple[str, ...] = ("mean", "sum", "sqrt")  # "mean" is the paper's; the others ours
SAMPLINGS: tuple[str, ...] = ("fast", "weights")
DTYPE = torch.float64  # round-off must stay far below the 1e-12 norm tolerance over many layers


# --------------------------------------------------------------------------------------------
# scalings (cor:ode1, cor:SDE)
# --------------------------------------------------------------------------------------------


def head_scale(H: int, head_norm: HeadNorm = "mean") -> float:
    """The factor ``c_H`` multiplying the sum of the ``H`` head outputs.

    ``"mean"``: ``1/H``, the paper's head average (``eq:update_tokens``). ``"sum"`` (1) and
    ``"sqrt"`` (``H^{-1/2}``) are our variants; with H i.i.d. zero-mean heads they only
    re-parametrise ``eta`` (see :func:`step_size`).
    """
    if H < 1:
        raise ValueError(f"H must be >= 1, got {H}")
    if head_norm == "mean":
        return 1.0 / H
    if head_norm == "sum":
        return 1.0
    if head_norm == "sqrt":
        return 1.0 / math.sqrt(H)
    raise ValueError(f"head_norm must be one of {HEAD_NORMS}, got {head_norm!r}")


def step_size(regime: Regime, L: int, H: int, T: float, head_norm: HeadNorm = "mean") -> float:
    """Step ``eta`` that puts a depth-``L``, ``H``-head stack at time ``T`` of the regime's clock.

    With the paper's head average the clocks are ``t = L eta`` (ballistic, ``cor:ode1``: then
    ``alpha eta L`` and ``eta^2 L`` vanish as ``L -> infinity``) and ``tau = L eta^2 / H``
    (diffusive, ``cor:SDE``: ``eta ~ sqrt(H / L)``, which needs ``H = o(L^{1/3})``). For a head
    normalisation ``c_H`` the same clocks read ``eta c_H H L`` and ``eta^2 c_H^2 H L`` (the
    combined head output has covariance ``c_H^2 H`` times one head's).

    Returns:
        eta (float).
    """
    if L < 1 or T < 0:
        raise ValueError(f"need L >= 1 and T >= 0, got L={L}, T={T}")
    c = head_scale(H, head_norm)
    if regime == "ballistic":
        return T / (c * H * L)
    if regime == "diffusive":
        return math.sqrt(T / (c * c * H * L))
    raise ValueError(f"regime must be one of {REGIMES}, got {regime!r}")


def homogenized_time(
    regime: Regime, eta: float, H: int, layers: int | np.ndarray, head_norm: HeadNorm = "mean"
) -> float | np.ndarray:
    """Inverse of :func:`step_size`: the regime's time after ``layers`` layers."""
    c = head_scale(H, head_norm)
    if regime == "ballistic":
        return eta * c * H * layers
    if regime == "diffusive":
        return eta * eta * c * c * H * layers
    raise ValueError(f"regime must be one of {REGIMES}, got {regime!r}")


def variance_ratio(eta: float, H: int, d: int) -> float:
    """The paper's ``alpha = eta sigma^2 / H`` under (G) with the head average:
    ``eta (d - 1) / (d H)`` (``sigma^2 = sigma_V^2 (d - 1)``)."""
    return eta * (d - 1) / (d * H)


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


def gram(X: Tensor) -> Tensor:
    """Pairwise overlaps ``R_ij = <x_i, x_j>``: ``(..., n, d) -> (..., n, n)``."""
    return X @ X.transpose(-1, -2)


STATISTICS = {"inner": mean_pairwise_inner, "mean_norm_sq": mean_token_norm_sq}


# --------------------------------------------------------------------------------------------
# initial configurations
# --------------------------------------------------------------------------------------------


def project_to_sphere(X: Tensor) -> Tensor:
    """Normalise every token (last axis) to unit length: the map N of ``eq:update_tokens``."""
    return X / X.norm(dim=-1, keepdim=True)


def uniform_tokens(runs: int, n: int, d: int, generator: torch.Generator) -> Tensor:
    """``runs`` independent sets of ``n`` i.i.d. uniform points on ``S^{d-1}``: ``(runs, n, d)``."""
    return project_to_sphere(torch.randn(runs, n, d, generator=generator, dtype=DTYPE))


def equal_overlap_tokens(n: int, d: int, gamma: float) -> Tensor:
    """``n`` unit vectors in ``R^d`` with every pairwise overlap equal to ``gamma``: ``(n, d)``.

    The Gram matrix ``(1 - gamma) I + gamma 11^T`` has rank ``n``, so this needs ``d >= n`` and
    ``-1/(n-1) < gamma < 1`` (the simplex configuration of ``thm:clustering_random_init``).
    The tokens are the rows of its Cholesky factor, padded with zeros to ``d`` coordinates.
    """
    if n > d:
        raise ValueError(f"equal overlaps need d >= n, got n={n}, d={d}")
    if not -1.0 / (n - 1) < gamma < 1.0:
        raise ValueError(f"gamma must lie in (-1/(n-1), 1) = ({-1 / (n - 1):.3g}, 1), got {gamma}")
    G = (1 - gamma) * torch.eye(n, dtype=DTYPE) + gamma
    X = torch.zeros(n, d, dtype=DTYPE)
    X[:, :n] = torch.linalg.cholesky(G)
    return project_to_sphere(X)


def overlap_for_mean(m0: float, n: int) -> float:
    """The common overlap ``gamma`` at which ``m = |xbar|^2 = 1/n + (1 - 1/n) gamma`` equals m0."""
    return (m0 - 1.0 / n) / (1.0 - 1.0 / n)


def pair_tokens(d: int, overlap: float) -> Tensor:
    """Two unit vectors in ``R^d`` with ``<x_1, x_2> = overlap``: ``(2, d)``."""
    X = torch.zeros(2, d, dtype=DTYPE)
    X[0, 0] = 1.0
    X[1, 0] = overlap
    X[1, 1] = math.sqrt(max(0.0, 1.0 - overlap * overlap))
    return X


# --------------------------------------------------------------------------------------------
# one layer
# --------------------------------------------------------------------------------------------


def sample_weights(
    runs: int, H: int, d: int, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """Fresh ``Q, K, V`` for one layer, each ``(runs, H, d, d)`` with entries ``N(0, 1/d)``.

    One ``randn`` call per layer (in this order) so that the loop reference draws the very same
    numbers.
    """
    W = torch.randn(3, runs, H, d, d, generator=generator, dtype=DTYPE) / math.sqrt(d)
    return W[0], W[1], W[2]


def normals(shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    """Standard normals for the fast paths, drawn in float32 and returned as float64.

    torch draws float32 normals several times faster than float64 ones; their 24-bit resolution
    is far below any statistic measured here. (:func:`sample_weights` keeps float64 draws, so
    the loop reference sees the same numbers.)
    """
    return torch.randn(shape, generator=generator, dtype=torch.float32).to(DTYPE)


def gaussian_times(Y: Tensor, generator: torch.Generator) -> Tensor:
    """A draw of ``G Y`` for a fresh ``G`` with i.i.d. ``N(0, 1/d)`` entries, per leading index.

    ``Y`` is ``(..., d, k)``. With the thin QR ``Y = U R``, ``G Y = (G U) R`` and ``G U`` has
    i.i.d. ``N(0, 1/d)`` entries (``U`` has orthonormal columns), so only ``d min(d, k)`` normals
    are drawn. Same law as multiplying by a full matrix; not the same numbers.
    """
    d = Y.shape[-2]
    R = torch.linalg.qr(Y, mode="r").R  # (..., min(d, k), k)
    Z = normals((*Y.shape[:-2], d, R.shape[-2]), generator)
    return Z @ R / math.sqrt(d)


def sample_projections(
    X: Tensor, H: int, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """``Q X^T, K X^T, V X^T`` for fresh ``Q, K, V`` per head, in law: each ``(R, H, d, n)``.

    One thin QR of ``X^T`` serves all heads and matrices (:func:`gaussian_times`).
    """
    runs, n, d = X.shape
    R = torch.linalg.qr(X.transpose(-1, -2), mode="r").R  # (runs, k, n), k = min(d, n)
    Z = normals((3, runs, H, d, R.shape[-2]), generator)
    P = Z @ R.unsqueeze(1) / math.sqrt(d)  # (3, runs, H, d, n)
    return P[0], P[1], P[2]


def update_from_projections(
    QX: Tensor, KX: Tensor, VX: Tensor, beta: float, head_norm: HeadNorm = "mean"
) -> Tensor:
    """``c_H sum_h V_h m_{beta, A_h}(x_i)`` from the projections ``Q_h X^T`` etc. ``(R, H, d, n)``.

    Column ``i`` of ``Q X^T`` is ``Q x_i``, so the scores are ``<Q x_i, K x_k> = <A x_i, x_k>``
    (``A = K^T Q``), and ``V m_i = (V X^T) pi_i`` with ``pi_i`` row ``i`` of the softmax.
    Returns:
        ``(R, n, d)``.
    """
    scores = beta * QX.transpose(-1, -2) @ KX  # (R, H, n, n)
    weights = torch.softmax(scores, dim=-1)  # rows sum to 1: pi_{i -> k}
    heads = VX @ weights.transpose(-1, -2)  # (R, H, d, n): column i is V_h m_h(x_i)
    return head_scale(QX.shape[1], head_norm) * heads.sum(dim=1).transpose(-1, -2)


def attention_averages(X: Tensor, Q: Tensor, K: Tensor, beta: float) -> Tensor:
    """The barycentres ``m_{beta, A}(x_i) = sum_k softmax_k(beta <Q x_i, K x_k>) x_k``.

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
    X: Tensor, Q: Tensor, K: Tensor, V: Tensor, beta: float, head_norm: HeadNorm = "mean"
) -> Tensor:
    """Combined head output ``c_H sum_h V_h m_h(x_i)`` before the step and the projection.

    Args:
        X: ``(R, n, d)``. Q, K, V: ``(R, H, d, d)``.
    Returns:
        ``(R, n, d)``. Zero mean over the draw of ``V`` (``lem:lemma_app``: ``b = 0`` under (G)).
    """
    Xt = X.transpose(-1, -2).unsqueeze(1)  # (R, 1, d, n)
    return update_from_projections(Q @ Xt, K @ Xt, V @ Xt, beta, head_norm)


def attention_layer(
    X: Tensor,
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    beta: float,
    eta: float,
    head_norm: HeadNorm = "mean",
) -> Tensor:
    """One layer of ``eq:update_tokens``: ``N(X + eta * multihead_update(X))``. ``(R, n, d)``."""
    return project_to_sphere(X + eta * multihead_update(X, Q, K, V, beta, head_norm))


def barycentre_update(X: Tensor, g: Tensor, H: int, head_norm: HeadNorm = "mean") -> Tensor:
    """The head output at ``beta = 0`` from one standard Gaussian vector per run.

    At ``beta = 0`` every barycentre is the mean token ``xbar``, so the layer's output is
    ``c_H sum_h V_h xbar``, exactly ``N(0, c_H^2 H |xbar|^2 / d I_d)`` given X: ``g (R, d)`` is
    scaled to that law. Returns ``(R, 1, d)`` (the same vector for every token).
    """
    d = X.shape[-1]
    xbar = X.mean(dim=-2)  # (R, d)
    scale = head_scale(H, head_norm) * math.sqrt(H / d) * xbar.norm(dim=-1, keepdim=True)
    return (scale * g).unsqueeze(-2)


def meanfield_argmax_update(
    X: Tensor, H: int, generator: torch.Generator, head_norm: HeadNorm = "mean"
) -> Tensor:
    """Head output when ``beta_eff -> infinity`` over a full-support background measure.

    Laplace's principle: the barycentre of a measure of full support on the sphere tends to the
    maximiser of ``y -> <A z, y>``, i.e. ``m_{infinity, A}(z) = A z / |A z|``, whatever the
    measure (the setting of ``thm:large_beta_meta``). With ``A = K^T Q`` the three products are
    drawn with :func:`gaussian_times` (same law as full matrices).
    Returns:
        ``(R, n, d)``.
    """
    Xt = X.transpose(-1, -2).unsqueeze(1).expand(-1, H, -1, -1)  # (R, H, d, n)
    AX = gaussian_times(gaussian_times(Xt, generator), generator)  # K^T (Q x_i)
    m = AX / AX.norm(dim=-2, keepdim=True)
    heads = gaussian_times(m, generator)  # V_h m_h(x_i), (R, H, d, n)
    return head_scale(H, head_norm) * heads.sum(dim=1).transpose(-1, -2)


def meanfield_argmax_update_weights(
    X: Tensor, Q: Tensor, K: Tensor, V: Tensor, head_norm: HeadNorm = "mean"
) -> Tensor:
    """:func:`meanfield_argmax_update` with explicit weights ``(R, H, d, d)`` (the reference)."""
    A = K.transpose(-1, -2) @ Q  # (R, H, d, d)
    AX = A @ X.transpose(-1, -2).unsqueeze(1)  # (R, H, d, n)
    heads = V @ (AX / AX.norm(dim=-2, keepdim=True))
    return head_scale(Q.shape[1], head_norm) * heads.sum(dim=1).transpose(-1, -2)


def attention_layer_loop(
    X: Tensor,
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    beta: float,
    eta: float,
    head_norm: HeadNorm = "mean",
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


# --------------------------------------------------------------------------------------------
# simulation
# --------------------------------------------------------------------------------------------


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


def _simulate(
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
    return _simulate(step, n, d, L, runs, seed, record_every, X0, chunk_runs, record_gram)


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

    return _simulate(step, n, d, L, runs, seed, record_every, X0, None)


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

    return _simulate(step, n, d, L, runs, seed, record_every, X0, chunk_runs)


# --------------------------------------------------------------------------------------------
# the diffusive limit (eq:Diffusive_gaussian_case, eq:Dij_explicit_clean)
# --------------------------------------------------------------------------------------------


def diffusion_kernel(X: Tensor, beta: float, samples: int, generator: torch.Generator) -> Tensor:
    """Monte Carlo estimate of ``s_mu(x_i, x_k) = E_A <m(x_i), m(x_k)>`` (unbiased).

    One head's output ``y_i = V m(x_i)`` has ``Cov(y_i, y_k) = (s_ik / d) I_d``: the noise kernel
    ``K[mu](x, y) = (1/d) E_A <m(x), m(y)> I_d`` of the paper. No closed form, hence sampling.

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
    """One Euler-Maruyama step of ``eq:Diffusive_gaussian_case`` (Ito form), then N.

    dx_i = P_{x_i} dZ_i - ((d-1) / (2d)) s(x_i, x_i) x_i dtau,
    d<Z_i^a, Z_k^b> = (s(x_i, x_k) / d) delta_ab dtau.

    The common noise dZ is ``sqrt(dtau / (M d)) sum_m G_m m^(m)`` with ``M`` fresh ``(Q_m, K_m)``
    draws and independent standard Gaussian ``d x d`` matrices ``G_m``: conditionally on the
    ``(Q_m, K_m)`` it is exactly Gaussian with covariance ``(dtau / d) s_hat (x) I_d``, where
    ``s_hat`` is an unbiased estimate of the kernel (a randomised-coefficient EM step whose
    one-step mean and covariance are exact). The Ito term is radial: after N it only rescales
    the noise by 1 + O(dtau).
    """
    R, n, d = X.shape
    W = torch.randn(3, R, samples, d, d, generator=g, dtype=DTYPE)
    a = attention_averages(X, W[0] / math.sqrt(d), W[1] / math.sqrt(d), beta)  # (R, M, n, d)
    dZ = torch.einsum("rmab,rmnb->rna", W[2], a) * math.sqrt(dtau / (samples * d))  # (R, n, d)
    s_diag = a.pow(2).sum(dim=-1).mean(dim=1)  # (R, n)
    radial = (dZ * X).sum(dim=-1, keepdim=True)
    tangent = dZ - radial * X  # P_x dZ
    ito = -((d - 1) / (2 * d)) * s_diag.unsqueeze(-1) * X * dtau
    return project_to_sphere(X + tangent + ito)


def simulate_limit(
    n: int,
    d: int,
    beta: float,
    T: float,
    runs: int,
    seed: int,
    regime: Regime = "diffusive",
    num_steps: int = 200,
    record_every: int = 1,
    samples_per_step: int = 64,
    X0: Tensor | np.ndarray | None = None,
    chunk_runs: int | None = None,
) -> Trajectory:
    """The homogenized limit up to time ``T``, on the same statistics as :func:`simulate_particles`.

    * ``"diffusive"`` (``cor:SDE``): Euler-Maruyama with ``num_steps`` steps of ``T / num_steps``
      for ``eq:Diffusive_gaussian_case`` (:func:`_em_step`), ``samples_per_step`` Monte Carlo
      ``(Q, K)`` draws per step for the kernel.
    * ``"ballistic"`` (``cor:ode1``): ``Xdot = b(X)`` with ``b = 0`` under (G) (``lem:lemma_app``),
      so ``X(t) = X0``; returned as constant trajectories.

    Returns:
        :class:`Trajectory`; ``t = k / num_steps`` is the fraction of ``T``.
    """
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {REGIMES}, got {regime!r}")
    dtau = T / num_steps
    if regime == "ballistic":
        return _simulate(lambda X, g: X, n, d, num_steps, runs, seed, record_every, X0, chunk_runs)

    def step(X: Tensor, g: torch.Generator) -> Tensor:
        return _em_step(X, beta, dtau, samples_per_step, g)

    return _simulate(step, n, d, num_steps, runs, seed, record_every, X0, chunk_runs)


def pair_inner_drift_diffusion(s: Tensor, R: Tensor, d: int) -> tuple[Tensor, Tensor]:
    """Ito drift and quadratic-variation rate of the overlaps ``R_ik`` (``eq:Dij_explicit_clean``).

    drift     = (1/d) (d - 2 + R^2) s_ik - ((d - 1) / (2d)) R (s_ii + s_kk)
    diffusion = (1 - R^2) (s_ii + s_kk - 2 R s_ik) / d

    Args:
        s: ``(..., n, n)`` kernel (:func:`diffusion_kernel`). R: ``(..., n, n)`` overlaps.
    Returns:
        two ``(..., n, n)`` tensors (diagonal entries are 0 / meaningless).
    """
    diag = torch.diagonal(s, dim1=-2, dim2=-1)
    mean_diag = (diag.unsqueeze(-1) + diag.unsqueeze(-2)) / 2
    drift = (s * (d - 2 + R**2) - (d - 1) * R * mean_diag) / d
    diffusion = (1 - R**2) * (2 * mean_diag - 2 * R * s) / d
    return drift, diffusion


# --------------------------------------------------------------------------------------------
# the clustering theorems' limits
# --------------------------------------------------------------------------------------------


def logistic(u0: float | np.ndarray, tau: float | np.ndarray) -> np.ndarray:
    """``thm:clustering_small_beta``: the solution ``u0 / (u0 + (1 - u0) e^{-tau})`` of
    ``udot = u (1 - u)``, the law of the mean overlap ``m = |xbar|^2``."""
    u0, tau = np.asarray(u0, float), np.asarray(tau, float)
    return u0 / (u0 + (1 - u0) * np.exp(-tau))


def simplex_fg(
    gammas: np.ndarray, n: int, d: int, beta: float, samples: int, generator: torch.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``f(gamma) = E_A sum_k pi_{i->k}^2`` and ``g(gamma) = E_A sum_k pi_{i->k} pi_{j->k}``
    (``i != j``) on the simplex configuration with overlap gamma (``thm:clustering_random_init``).

    Monte Carlo over ``samples`` draws of ``A = K^T Q`` (entries of Q, K ``N(0, 1/d)``), the same
    draws for every gamma (common random numbers: smooth in gamma). ``f`` is averaged over tokens
    ``i`` and ``g`` over pairs, which have the same law by symmetry.

    Returns:
        ``f, g`` arrays shaped like ``gammas``.
    """
    f_out, g_out = np.empty(len(gammas)), np.empty(len(gammas))
    Z = torch.randn(2, samples, d, n, generator=generator, dtype=DTYPE) / math.sqrt(d)
    off = ~torch.eye(n, dtype=torch.bool)
    for j, gamma in enumerate(np.asarray(gammas, float)):
        R = equal_overlap_tokens(n, n, float(gamma)).T  # (n, n): X^T = U R with U = I_n
        QX, KX = Z[0] @ R, Z[1] @ R  # (samples, d, n): Q x_i in law
        pi = torch.softmax(beta * QX.transpose(-1, -2) @ KX, dim=-1)  # (samples, n, n)
        overlap = pi @ pi.transpose(-1, -2)  # sum_k pi_ik pi_jk
        f_out[j] = torch.diagonal(overlap, dim1=-2, dim2=-1).mean().item()
        g_out[j] = overlap[:, off].mean().item()
    return f_out, g_out


def simplex_drift(
    gamma: np.ndarray, f: np.ndarray, g: np.ndarray, d: int | None = None
) -> np.ndarray:
    """The drift of the common overlap on the simplex.

    ``d=None``: the printed ODE of ``thm:clustering_random_init``,
    ``b(gamma) = gamma + (1 - gamma) g - gamma (gamma + (1 - gamma) f) = S - gamma P``.
    ``d`` given: the exact drift ``eq:Dij_explicit_clean`` evaluated on the simplex, which adds
    ``(gamma P - (2 - gamma^2) S) / d`` (the correction noted by the paper's formaliser), with
    ``P = s(x_i, x_i) = gamma + (1 - gamma) f`` and ``S = s(x_i, x_j) = gamma + (1 - gamma) g``.
    """
    P = gamma + (1 - gamma) * f
    S = gamma + (1 - gamma) * g
    drift = S - gamma * P
    if d is not None:
        drift = drift + (gamma * P - (2 - gamma**2) * S) / d
    return drift


def solve_simplex_ode(
    gamma0: float, taus: np.ndarray, grid: np.ndarray, f: np.ndarray, g: np.ndarray,
    d: int | None = None, substeps: int = 20,
) -> np.ndarray:
    """RK4 solution of ``gammadot = simplex_drift(gamma)`` at the times ``taus`` (increasing,
    starting at 0), with f and g interpolated linearly on ``grid``. Returns ``gamma(taus)``."""
    def rhs(x: float) -> float:
        fx, gx = np.interp(x, grid, f), np.interp(x, grid, g)
        return float(simplex_drift(np.float64(x), fx, gx, d))

    out = np.empty(len(taus))
    x, now = float(gamma0), 0.0
    for j, tau in enumerate(np.asarray(taus, float)):
        h = (tau - now) / substeps
        for _ in range(substeps if tau > now else 0):
            k1 = rhs(x)
            k2 = rhs(x + h * k1 / 2)
            k3 = rhs(x + h * k2 / 2)
            k4 = rhs(x + h * k3)
            x += h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
        out[j], now = x, tau
    return out


def meanfield_pair_kernel(
    overlaps: np.ndarray, d: int, samples: int, generator: torch.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``s(R) = E_A <A x/|A x|, A y/|A y|>`` for ``<x, y> = R``: the kernel of two tokens at
    ``beta_eff = infinity`` (:func:`meanfield_argmax_update`), by Monte Carlo over ``A = K^T Q``.

    Returns:
        (mean, standard error) arrays shaped like ``overlaps``.
    """
    mean, se = np.empty(len(overlaps)), np.empty(len(overlaps))
    for j, R in enumerate(np.asarray(overlaps, float)):
        Xt = pair_tokens(d, float(R)).T.expand(samples, d, 2)
        AX = gaussian_times(gaussian_times(Xt, generator), generator)  # (samples, d, 2)
        m = AX / AX.norm(dim=-2, keepdim=True)
        cos = (m[..., 0] * m[..., 1]).sum(-1)
        mean[j], se[j] = cos.mean().item(), cos.std().item() / math.sqrt(samples)
    return mean, se


def pair_drift_coefficient(R: np.ndarray, s: np.ndarray, d: int) -> np.ndarray:
    """The drift coefficient ``k`` of the pair overlap in the time ``t = tau / d``.

    ``eq:Dij_explicit_clean`` with ``s(x, x) = 1`` (unit barycentres at ``beta_eff = infinity``)
    gives the drift ``D(R) = ((d - 2 + R^2) s(R) - (d - 1) R) / d``; ``thm:large_beta_meta``
    prints the limit ``du = -u (1 - u^2) dt + sqrt(2) (1 - u^2) dB``, i.e. ``d D(u) -> -k u(1-u^2)``
    with ``k = 1``. Returns ``k = -d D(R) / (R (1 - R^2))``.
    """
    R = np.asarray(R, float)
    drift = ((d - 2 + R**2) * s - (d - 1) * R) / d
    return -d * drift / (R * (1 - R**2))


def simulate_overlap_sde(
    k: float, u0: float, t_end: float, paths: int, seed: int, dt: float = 1e-3,
    records: int = 20,
) -> tuple[np.ndarray, np.ndarray]:
    """Euler-Maruyama for ``du = -k u (1 - u^2) dt + sqrt(2) (1 - u^2) dB`` on [-1, 1]
    (``k = 1``: the printed limit of ``thm:large_beta_meta``), ``paths`` paths from ``u0``.

    Returns:
        ``(t, u)``: ``records + 1`` times ``j t_end / records`` and ``u`` of shape
        ``(paths, records + 1)``.
    """
    rng = np.random.default_rng(seed)
    steps = max(records, int(round(t_end / dt / records)) * records)
    dt = t_end / steps
    u = np.full(paths, float(u0))
    out = np.empty((paths, records + 1))
    out[:, 0] = u
    for step in range(1, steps + 1):
        u = u - k * u * (1 - u * u) * dt + math.sqrt(2 * dt) * (1 - u * u) * rng.standard_normal(
            paths)
        np.clip(u, -1.0, 1.0, out=u)  # +-1 are absorbing: the coefficients vanish there
        if step % (steps // records) == 0:
            out[:, step // (steps // records)] = u
    return np.linspace(0, t_end, records + 1), out


def arcsin_law(u0: float | np.ndarray) -> np.ndarray:
    """``thm:large_beta_meta``: ``P(u -> +1) = 1/2 + arcsin(u0) / pi`` under the printed SDE."""
    return 0.5 + np.arcsin(np.asarray(u0, float)) / np.pi


# --------------------------------------------------------------------------------------------
# ours: the large-temperature pair SDE of the model as implemented (derivation note, section 7)
# --------------------------------------------------------------------------------------------


def _hyp2f1_half(c: float, z: float) -> float:
    """``2F1(1/2, 1/2; c; z)`` for ``c > 1`` and ``0 <= z <= 1``: scipy's, or where it returns
    NaN (large c near z = 1) the power series, whose terms fall off fast for large c."""
    from scipy.special import hyp2f1

    value = float(hyp2f1(0.5, 0.5, c, z))
    if math.isfinite(value):
        return value
    total, term, n = 1.0, 1.0, 0
    while term > 1e-17 * total and n < 100_000:
        term *= (n + 0.5) ** 2 / ((c + n) * (n + 1)) * z
        total += term
        n += 1
    return total


def corr_mean(rho: float, d: int) -> float:
    """``f_d(rho)``: the mean of ``cos(G x, G y)`` for a Gaussian ``G`` with ``d`` rows and unit
    ``x, y`` with ``<x, y> = rho``, i.e. of the uncentred sample correlation of ``d`` i.i.d.
    pairs with correlation rho (Fisher's law with ``n = d + 1``), exactly:
    ``rho (2/d) (Gamma((d+1)/2) / Gamma(d/2))^2 2F1(1/2, 1/2; d/2 + 1; rho^2)``."""
    from scipy.special import gammaln

    scale = math.exp(math.log(2.0 / d) + 2.0 * (gammaln((d + 1) / 2) - gammaln(d / 2)))
    return rho * scale * _hyp2f1_half(d / 2 + 1, rho * rho)


def corr_density(r: float, rho: float, d: int) -> float:
    """``p_d(r | rho)``: the density of that uncentred sample correlation (Fisher 1915 with
    ``n = d + 1`` observations), for ``d >= 3`` and ``|rho| < 1``."""
    from scipy.special import gammaln

    if not -1.0 < r < 1.0:
        return 0.0
    log = (math.log(d - 1) + gammaln(d) - 0.5 * math.log(2 * math.pi) - gammaln(d + 0.5)
           + (d / 2) * math.log1p(-rho * rho) + ((d - 3) / 2) * math.log1p(-r * r)
           - (d - 0.5) * math.log1p(-rho * r))
    return math.exp(log) * _hyp2f1_half(d + 0.5, (1 + rho * r) / 2)


def pair_kernel_exact(R: float | np.ndarray, d: int) -> np.ndarray:
    """``s_d(R) = E <Ax/|Ax|, Ay/|Ay|>`` for ``A = K^T Q`` (i.i.d. Gaussian Q, K), exactly:
    ``int f_d(r) p_d(r | R) dr`` (:func:`corr_mean`, :func:`corr_density`), by adaptive
    quadrature. The kernel that :func:`meanfield_pair_kernel` estimates by Monte Carlo.
    Odd in R, ``s_d(+-1) = +-1``. Needs ``d >= 3``."""
    from scipy.integrate import quad

    if d < 3:
        raise ValueError(f"pair_kernel_exact needs d >= 3, got {d}")
    R = np.asarray(R, float)
    out = np.empty(R.shape)
    for idx, value in np.ndenumerate(R):
        a = abs(float(value))
        if a == 0.0 or a >= 1.0:
            out[idx] = float(np.sign(value)) * min(a, 1.0)
            continue
        integral = quad(lambda r, a=a: corr_mean(r, d) * corr_density(r, a, d), -1.0, 1.0,
                        points=[a], limit=200, epsabs=1e-13, epsrel=1e-11)[0]
        out[idx] = math.copysign(integral, float(value))
    return out


def pair_coefficient_exact(R: float | np.ndarray, d: int) -> np.ndarray:
    """The derived drift coefficient ``k_d(R)`` of the pair overlap in ``t = tau / d``
    (:func:`pair_drift_coefficient` of the exact kernel :func:`pair_kernel_exact`);
    ``k_d(R) = 2 - (8 - 11 R^2) / (2d) + O(d^-2)`` (:func:`pair_coefficient_expansion`)."""
    R = np.asarray(R, float)
    return pair_drift_coefficient(R, pair_kernel_exact(R, d), d)


def pair_coefficient_expansion(R: float | np.ndarray, d: float) -> np.ndarray:
    """``2 - (8 - 11 R^2) / (2d)``: :func:`pair_coefficient_exact` to first order in ``1/d``."""
    R = np.asarray(R, float)
    return 2.0 - (8.0 - 11.0 * R**2) / (2.0 * d)


def overlap_absorption(k: float, u0: float | np.ndarray) -> np.ndarray:
    """``P(u -> +1)`` for ``du = -k u (1 - u^2) dt + sqrt(2) (1 - u^2) dB`` from ``u0``, from the
    scale function ``S'(u) = (1 - u^2)^(-k/2)``: ``I_{(1+u0)/2}(1 - k/2, 1 - k/2)`` for
    ``k < 2`` (``k = 1``: :func:`arcsin_law`). For ``k >= 2`` the scale function is unbounded,
    ``+-1`` are never reached and there is no absorption: NaN."""
    from scipy.special import betainc

    u0 = np.asarray(u0, float)
    if k >= 2:
        return np.full(u0.shape, np.nan)
    a = 1.0 - k / 2.0
    return betainc(a, a, (1.0 + u0) / 2.0)


def derived_overlap_law(u0: float, t: float | np.ndarray, near: float) -> dict[str, np.ndarray]:
    """The law of the derived limit ``du = -2u(1 - u^2) dt + sqrt(2)(1 - u^2) dB`` at time t,
    exactly: ``u(t) = tanh(artanh u0 + sqrt(2) B_t)``. Returns ``p_pos = P(u > 0)``,
    ``p_near = P(|u| >= near)`` and the quantiles ``q10, q50, q90`` of u, shaped like t."""
    from scipy.stats import norm

    t = np.asarray(t, float)
    y0, a = math.atanh(u0), math.atanh(near)
    sd = np.sqrt(2.0 * t)
    with np.errstate(divide="ignore", invalid="ignore"):
        p_pos = np.where(sd > 0, norm.cdf(y0 / sd), float(u0 > 0))
        p_near = np.where(sd > 0, norm.cdf((y0 - a) / sd) + norm.cdf((-y0 - a) / sd),
                          float(abs(u0) >= near))
    out = {"p_pos": p_pos, "p_near": p_near}
    for q in (10, 50, 90):
        out[f"q{q}"] = np.tanh(y0 + sd * norm.ppf(q / 100))
    return out


def sample_derived_overlap(u0: float, t: float, paths: int, seed: int) -> np.ndarray:
    """``paths`` exact draws of ``u(t) = tanh(artanh u0 + sqrt(2 t) Z)`` (the derived limit)."""
    z = np.random.default_rng(seed).standard_normal(paths)
    return np.tanh(math.atanh(u0) + math.sqrt(2.0 * t) * z)


def pair_coefficient_table(d: int, grid: int = 41) -> tuple[np.ndarray, np.ndarray]:
    """``(|u| nodes, k_d at the nodes)``: :func:`pair_coefficient_exact` on ``grid`` points of
    [0.02, 0.995] (k_d is even in u), for :func:`simulate_pair_sde_exact`."""
    nodes = np.linspace(0.02, 0.995, grid)
    return nodes, pair_coefficient_exact(nodes, d)


def simulate_pair_sde_exact(
    d: int, u0: float, t_end: float, paths: int, seed: int, dt: float = 2e-3,
    records: int = 20, table: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The pair's overlap SDE at finite d (derivation note, 7.5 and 7.7), exact in d given the
    kernel, by Euler-Maruyama in ``Y = artanh u`` (no boundary):

        dY = u [(2 - k)(d - 2) + k u^2] / (d - 2 + u^2) dt
             + sqrt(2 (d - 2 + k u^2) / (d - 2 + u^2)) dB,      u = tanh Y, k = k_d(|u|),

    with ``k_d`` from ``table`` (default :func:`pair_coefficient_table`), interpolated linearly
    in ``|u|`` (constant beyond its nodes). Same return as :func:`simulate_overlap_sde`.
    """
    nodes, k_nodes = pair_coefficient_table(d) if table is None else table
    if not np.allclose(np.diff(nodes), nodes[1] - nodes[0]):
        raise ValueError("simulate_pair_sde_exact needs equally spaced nodes")
    h, slopes = nodes[1] - nodes[0], np.append(np.diff(k_nodes), 0.0)
    rng = np.random.default_rng(seed)
    steps = max(records, int(round(t_end / dt / records)) * records)
    dt = t_end / steps
    y = np.full(paths, math.atanh(u0))
    out = np.empty((paths, records + 1))
    out[:, 0] = u0
    every = steps // records
    for step in range(1, steps + 1):
        u = np.tanh(y)
        u2 = u * u
        # linear interpolation on the equally spaced nodes, constant beyond them
        x = np.clip((np.abs(u) - nodes[0]) / h, 0.0, len(nodes) - 1.0)
        i = x.astype(np.intp)
        k = k_nodes[i] + (x - i) * slopes[i]
        den = d - 2 + u2
        drift = u * ((2 - k) * (d - 2) + k * u2) / den
        noise = np.sqrt(2 * (d - 2 + k * u2) / den)
        y = y + drift * dt + noise * math.sqrt(dt) * rng.standard_normal(paths)
        if step % every == 0:
            out[:, step // every] = np.tanh(y)
    return np.linspace(0, t_end, records + 1), out


# --------------------------------------------------------------------------------------------
# ours: a heuristic, not the paper's
# --------------------------------------------------------------------------------------------


def antipodal_exponents(
    d: int,
    betas: np.ndarray,
    n: int = 2,
    samples: int = 20_000,
    seed: int = 0,
    eps: float = 1e-4,
) -> np.ndarray:
    """OUR HEURISTIC (not in the paper): Lyapunov exponent of an antipodal two-cluster state.

    Tokens split into two groups of ``ceil(n/2)`` and ``floor(n/2)`` at ``x`` and ``-x``. Near
    that state ``v = 1 + R`` (R the overlap of the two groups) follows, to leading order of
    ``eq:Dij_explicit_clean``, a geometric Brownian motion; ``log v`` drifts at rate

        lambda = [ (d - 3) kappa / 2 - (d - 1) C_bar ] / d,

    ``C_bar = E|m_1|^2`` at the antipodal state, ``kappa = lim E|m_1 + m_2|^2 / v`` (derivation
    note, section "An antipodal criterion (ours)"). ``lambda < 0``: antipodal configurations
    attract with positive probability; ``lambda > 0``: the two-cluster state is unstable.

    Both quantities are estimated by Monte Carlo over ``samples`` draws of ``(Q, K)``, the same
    draws for both configurations and every beta (common random numbers). All tokens lie in
    ``span(e_1, e_2)``, so only ``Q U, K U`` (``U = [e_1 e_2]``, i.i.d. entries) are drawn.
    ``eps`` is the size of ``v`` used for ``kappa``.
    Returns:
        lambda per beta, shaped like ``betas``.
    """
    if n < 2:
        raise ValueError("need n >= 2")
    g = torch.Generator().manual_seed(seed)
    n_plus = (n + 1) // 2
    QU, KU = torch.randn(2, samples, d, 2, generator=g, dtype=DTYPE) / math.sqrt(d)
    angle = math.acos(-1.0 + eps)  # second group at -x rotated towards e_2: 1 + R = eps

    def group_means(beta: float, second: tuple[float, float]) -> tuple[Tensor, Tensor]:
        C = torch.tensor([[1.0] * n_plus + [second[0]] * (n - n_plus),
                          [0.0] * n_plus + [second[1]] * (n - n_plus)], dtype=DTYPE)  # U^T X^T
        QX, KX = QU @ C, KU @ C  # (samples, d, n): Q x_i in law
        pi = torch.softmax(beta * QX.transpose(-1, -2) @ KX, dim=-1)  # (samples, n, n)
        m = pi @ C.T  # barycentres in the (e_1, e_2) coordinates, (samples, n, 2)
        return m[:, 0], m[:, -1]  # one token of each group

    out = []
    for beta in np.atleast_1d(np.asarray(betas, float)):
        a1, a2 = group_means(float(beta), (-1.0, 0.0))
        C_bar = 0.5 * (a1.pow(2).sum(-1).mean() + a2.pow(2).sum(-1).mean())
        b1, b2 = group_means(float(beta), (math.cos(angle), math.sin(angle)))
        kappa = (b1 + b2).pow(2).sum(-1).mean() / eps
        out.append(float(((d - 3) * kappa / 2 - (d - 1) * C_bar) / d))
    return np.asarray(out).reshape(np.shape(betas))


def antipodal_exponent(d: int, beta: float, n: int = 2, samples: int = 20_000, seed: int = 0,
                       eps: float = 1e-4) -> float:
    """:func:`antipodal_exponents` at one beta (OUR HEURISTIC)."""
    return float(antipodal_exponents(d, np.asarray([beta]), n, samples, seed, eps)[0])
