"""Ours, not the paper's: the derived large-temperature pair SDE and the antipodal heuristic.

The code behind E6's claims of kind `ours` (notebooks/06_homogenized_derivation.md):
section 7 (post hoc, written after E6 measured a drift coefficient near 2 where
``thm:large_beta_meta`` prints 1): the exact kernel ``s_d`` of ``A = K^T Q`` (Fisher's law of the
sample correlation, by quadrature), the coefficient ``k_d`` and its 1/d expansion, absorption
from the scale function, the exact law of the derived limit SDE and the pair SDE at finite d;
section 6: the Lyapunov exponent of an antipodal two-cluster state (a heuristic).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from rankcollapse.experiments.homogenized.limits import pair_drift_coefficient
from rankcollapse.experiments.homogenized.model import DTYPE

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
