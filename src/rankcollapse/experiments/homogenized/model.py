"""E6's particle system [KGR26]: random multi-head attention on the sphere, one layer at a time.

Koubbi, Geshkovski, Rigollet, *Homogenized Transformers* (arXiv 2604.01978), cited by the paper's
LaTeX labels. ``eq:update_tokens``: ``x_i <- N(x_i + eta c_H sum_h V_h m_{beta, A_h}[mu_X](x_i))``
with fresh weights per layer and head from the law (G) with ``sigma_V^2 = sigma_A^2 = 1/d`` and
``A = K^T Q`` (so our ``beta`` is the paper's ``beta_eff``); ``c_H = 1/H`` (``head_norm="mean"``)
is the paper's, ``"sum"`` and ``"sqrt"`` are ours. Also the regimes' clocks (``cor:ode1``,
``cor:SDE``), the statistics and starting configurations, and our same-law fast sampling (an
implementation device, not a claim). Derivation note (notebooks/06_homogenized_derivation.md),
sections 1, 2 and 5. States are ``(runs, n, d)`` float64 tensors.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from torch import Tensor

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
