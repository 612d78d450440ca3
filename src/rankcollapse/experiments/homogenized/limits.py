"""The paper's limits [KGR26] and the quantities its theorems state (E6's claims of kind `paper`).

The diffusive limit SDE (``cor:SDE``, ``eq:Diffusive_gaussian_case``; the overlaps' Ito drift
``eq:Dij_explicit_clean``) by Euler-Maruyama, and the ballistic one (``cor:ode1``: ``X(t) = X(0)``
under (G)); the logistic law of ``thm:clustering_small_beta``; the simplex ODE of
``thm:clustering_random_init`` (printed, and with the formalisation's 1/d correction); the pair at
``beta_eff = infinity`` of ``thm:large_beta_meta`` (its kernel by Monte Carlo, the drift
coefficient, the printed SDE and its arcsin law). Derivation note, sections 3 and 4; what we
derived ourselves is in ours.py.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from rankcollapse.experiments.homogenized.model import (
    DTYPE,
    REGIMES,
    Regime,
    attention_averages,
    equal_overlap_tokens,
    gaussian_times,
    pair_tokens,
    project_to_sphere,
)
from rankcollapse.experiments.homogenized.simulate import Trajectory, simulate_steps

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
        return simulate_steps(lambda X, g: X, n, d, num_steps, runs, seed, record_every, X0,
                              chunk_runs)

    def step(X: Tensor, g: torch.Generator) -> Tensor:
        return _em_step(X, beta, dtau, samples_per_step, g)

    return simulate_steps(step, n, d, num_steps, runs, seed, record_every, X0, chunk_runs)


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
