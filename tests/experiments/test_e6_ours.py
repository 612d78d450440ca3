"""Tests for our own derivations and heuristic (rankcollapse.experiments.homogenized.ours):
the derived large-temperature pair SDE (derivation note, section 7) and the antipodal exponent.

Statistical tests compare a Monte Carlo mean with a reference using the standard error (SE) of
the estimate; every tolerance is stated and justified next to the assertion. Seeds are fixed so
the suite is deterministic, but nothing is hard-coded from a previous run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rankcollapse.experiments.homogenized.limits import (
    arcsin_law,
    meanfield_pair_kernel,
    simulate_overlap_sde,
)
from rankcollapse.experiments.homogenized.model import gaussian_times, pair_tokens
from rankcollapse.experiments.homogenized.ours import (
    antipodal_exponent,
    corr_density,
    corr_mean,
    derived_overlap_law,
    overlap_absorption,
    pair_coefficient_exact,
    pair_coefficient_expansion,
    pair_kernel_exact,
    sample_derived_overlap,
    simulate_pair_sde_exact,
)


def test_antipodal_exponent_closed_form_at_zero_temperature() -> None:
    """beta = 0: a_i = mean token for all i, so C_bar = 0, kappa = 2, lambda = (d - 3)/d."""
    for d in (3, 5, 9):
        assert antipodal_exponent(d, 0.0, samples=200) == pytest.approx((d - 3) / d, abs=1e-8)


@pytest.mark.parametrize("d", [3, 5, 16])
def test_fisher_density_is_a_density_with_mean_f_d(d: int) -> None:
    """p_d(. | rho) integrates to 1 and its mean is f_d(rho) (two closed forms, one law)."""
    from scipy.integrate import quad

    for rho in (0.0, 0.3, 0.8):
        mass = quad(lambda r, rho=rho: corr_density(r, rho, d), -1, 1, points=[rho])[0]
        mean = quad(lambda r, rho=rho: r * corr_density(r, rho, d), -1, 1,
                    points=[rho])[0]
        assert mass == pytest.approx(1.0, abs=1e-8)
        assert mean == pytest.approx(corr_mean(rho, d), abs=1e-8)


def test_corr_mean_against_one_gaussian_factor() -> None:
    """f_d(rho) is the mean cosine of (Gx, Gy) for one Gaussian matrix G (Monte Carlo)."""
    d, rho, samples = 6, 0.4, 200_000
    g = torch.Generator().manual_seed(1)
    Y = gaussian_times(pair_tokens(d, rho).T.expand(samples, d, 2), g)
    cos = (Y[..., 0] * Y[..., 1]).sum(-1) / Y.norm(dim=-2).prod(-1)
    se = cos.std().item() / math.sqrt(samples)
    assert abs(cos.mean().item() - corr_mean(rho, d)) < 4.5 * se  # false alarm < 1e-5


def test_exact_pair_kernel_against_monte_carlo() -> None:
    """The quadrature s_d(R) of A = K^T Q equals the kernel meanfield_pair_kernel samples."""
    R, d = np.array([0.3, 0.7]), 5
    s, se = meanfield_pair_kernel(R, d, 200_000, torch.Generator().manual_seed(2))
    exact = pair_kernel_exact(R, d)
    assert np.all(np.abs(s - exact) < 4.5 * se)
    np.testing.assert_allclose(pair_kernel_exact(-R, d), -exact, atol=1e-14)  # odd in R
    np.testing.assert_allclose(pair_kernel_exact([0.0, 1.0], d), [0.0, 1.0])


def test_derived_coefficient_limits() -> None:
    """k_d(u) = 2 - (8 - 11u^2)/(2d) + O(d^-2), and at u -> 1 the exact boundary value
    1 + (d-1)/2 [((d-1)/(d-2))^2 - 1] (f_d'(1) = (d-1)/(d-2), derivation note 7.5)."""
    u = np.array([0.25, 0.5, 0.75])
    for d in (64, 256):
        gap = np.abs(pair_coefficient_exact(u, d) - pair_coefficient_expansion(u, d))
        assert gap.max() < 30 / d**2  # second order: about 7/d^2 at these u
    assert np.all(np.abs(pair_coefficient_exact(u, 256) - 2) < 0.02)
    d = 16
    boundary = 1 + (d - 1) / 2 * (((d - 1) / (d - 2)) ** 2 - 1)
    assert pair_coefficient_exact(0.9999, d) == pytest.approx(boundary, abs=2e-3)


def test_absorption_from_the_scale_function() -> None:
    """k = 1 gives the printed arcsin law; k = 3/2 against a direct quadrature of the scale
    function S'(u) = (1 - u^2)^(-k/2); k >= 2: no absorption."""
    from scipy.integrate import quad

    u0 = np.array([-0.5, 0.0, 0.3, 0.5])
    np.testing.assert_allclose(overlap_absorption(1.0, u0), arcsin_law(u0), atol=1e-12)

    def scale(a: float, b: float) -> float:
        return quad(lambda v: (1 - v * v) ** -0.75, a, b)[0]

    direct = [scale(-1, x) / scale(-1, 1) for x in u0]
    np.testing.assert_allclose(overlap_absorption(1.5, u0), direct, atol=1e-7)
    assert np.all(np.isnan(overlap_absorption(2.0, u0)))


def test_derived_limit_law_against_euler_maruyama() -> None:
    """The exact law of du = -2u(1-u^2)dt + sqrt(2)(1-u^2)dB (u = tanh(artanh u0 + sqrt(2)B_t))
    against Euler-Maruyama of that SDE and against exact draws."""
    paths, t_end = 4000, 1.0
    for u0 in (0.0, 0.5):
        law = derived_overlap_law(u0, t_end, 0.9)
        _, u = simulate_overlap_sde(2.0, u0, t_end, paths, seed=3, dt=1e-3)
        draws = sample_derived_overlap(u0, t_end, paths, seed=4)
        for values in (u[:, -1], draws):
            for key, hit in [("p_pos", values > 0), ("p_near", np.abs(values) >= 0.9)]:
                p = float(law[key])
                # 4.5 SE of a binomial fraction, 0.01 for the Euler-Maruyama step
                assert abs(hit.mean() - p) < 4.5 * math.sqrt(p * (1 - p) / paths) + 0.01
    assert derived_overlap_law(0.5, 0.0, 0.9)["p_pos"] == 1.0
    assert derived_overlap_law(0.5, 1e6, 0.9)["p_pos"] == pytest.approx(0.5, abs=1e-3)


def test_finite_d_pair_sde() -> None:
    """With k = 2 and a huge d the finite-d SDE in artanh u is a Brownian motion: the limit law;
    at d = 64 it stays within its 1/d corrections of the limit."""
    paths, t_end = 4000, 1.0
    nodes = np.linspace(0.02, 0.995, 11)
    for d, table, slack in [(10**9, (nodes, np.full(11, 2.0)), 0.0), (64, None, 0.03)]:
        _, u = simulate_pair_sde_exact(d, 0.5, t_end, paths, seed=5, dt=5e-3, table=table)
        p = float(derived_overlap_law(0.5, t_end, 0.9)["p_pos"])
        assert abs((u[:, -1] > 0).mean() - p) < 4.5 * math.sqrt(p * (1 - p) / paths) + slack
