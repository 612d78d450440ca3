"""Tests for the KGR26 particle system and its homogenized limits (rankcollapse.particles).

Statistical tests compare a Monte Carlo mean with a reference using the standard error (SE) of
the estimate; every tolerance is stated and justified next to the assertion. Seeds are fixed so
the suite is deterministic, but nothing is hard-coded from a previous run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rankcollapse.particles import (
    HEAD_NORMS,
    antipodal_exponent,
    attention_layer,
    diffusion_kernel,
    head_scale,
    homogenized_time,
    mean_pairwise_inner,
    mean_token_norm_sq,
    multihead_update,
    pair_inner_drift_diffusion,
    record_indices,
    sample_weights,
    simulate_limit,
    simulate_particles,
    simulate_particles_loop,
    step_size,
    uniform_tokens,
)

torch.set_num_threads(2)


def fixed_tokens(n: int, d: int, seed: int = 3) -> torch.Tensor:
    """One fixed configuration ``(n, d)`` shared by all runs of a test."""
    return uniform_tokens(1, n, d, torch.Generator().manual_seed(seed))[0]


# ---------------------------------------------------------------------------- statistics


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 7), d=st.integers(2, 6), seed=st.integers(0, 2**31 - 1))
def test_statistics_match_brute_force(n: int, d: int, seed: int) -> None:
    X = uniform_tokens(3, n, d, torch.Generator().manual_seed(seed))  # (3, n, d)
    gram = X @ X.transpose(-1, -2)
    off = ~torch.eye(n, dtype=torch.bool)
    brute = torch.stack([gram[r][off].mean() for r in range(3)])
    torch.testing.assert_close(mean_pairwise_inner(X), brute, rtol=0, atol=1e-12)
    # on the sphere |mean|^2 = 1/n + (n-1)/n * mean pairwise inner product
    torch.testing.assert_close(
        mean_token_norm_sq(X), 1 / n + (n - 1) / n * brute, rtol=0, atol=1e-12
    )


def test_statistics_at_full_collapse() -> None:
    X = fixed_tokens(1, 5).expand(6, 5).unsqueeze(0)  # six copies of one point
    assert mean_pairwise_inner(X).item() == pytest.approx(1.0, abs=1e-14)
    assert mean_token_norm_sq(X).item() == pytest.approx(1.0, abs=1e-14)


# ---------------------------------------------------------------------------- scalings


@pytest.mark.parametrize("head_norm", HEAD_NORMS)
@pytest.mark.parametrize("regime", ["deterministic", "stochastic"])
def test_step_size_reaches_time_T(regime: str, head_norm: str) -> None:
    L, H, T = 37, 5, 1.7
    eta = step_size(regime, L, H, T, head_norm)
    assert homogenized_time(regime, eta, H, L, head_norm) == pytest.approx(T, rel=1e-12)
    c = head_scale(H, head_norm)
    if regime == "deterministic":
        # the noise clock eta^2 c^2 H L = T^2/(H L) must vanish as depth grows
        big = step_size(regime, 100 * L, H, T, head_norm)
        assert big**2 * c**2 * H * 100 * L < eta**2 * c**2 * H * L / 50


def test_head_scale_conventions() -> None:
    assert [head_scale(4, norm) for norm in ("sum", "sqrt", "mean")] == [1.0, 0.5, 0.25]


def test_invalid_names_fail_fast() -> None:
    with pytest.raises(ValueError, match="regime"):
        step_size("chaotic", 10, 1, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="head_norm"):
        head_scale(2, "max")  # type: ignore[arg-type]


def test_record_indices_include_ends() -> None:
    assert record_indices(10, 3).tolist() == [0, 3, 6, 9, 10]
    assert record_indices(10, 5).tolist() == [0, 5, 10]


# ---------------------------------------------------------------------------- particle system


def test_projection_keeps_tokens_on_sphere() -> None:
    # large steps and many layers: round-off in the normalisation must not accumulate
    traj = simulate_particles(n=8, d=5, H=3, L=500, eta=0.7, beta=2.0, runs=4, seed=0)
    norms = traj.final.norm(dim=-1)
    assert (norms - 1).abs().max().item() < 1e-12
    limit = simulate_limit(
        n=8, d=5, beta=2.0, T=3.0, runs=4, seed=0, num_steps=100, samples_per_step=4
    )
    assert (limit.final.norm(dim=-1) - 1).abs().max().item() < 1e-12


@pytest.mark.parametrize("head_norm", HEAD_NORMS)
def test_increment_has_zero_mean_and_predicted_covariance(head_norm: str) -> None:
    """Gaussian V: E[update] = 0 and E<u_i, u_k> = c_H^2 H C_ik(X) (derivation, section 2)."""
    n, d, H, beta, R = 5, 4, 3, 1.5, 20_000
    X = fixed_tokens(n, d).expand(R, n, d)
    g = torch.Generator().manual_seed(11)
    Q, K, V = sample_weights(R, H, d, g)
    u = multihead_update(X, Q, K, V, beta, head_norm)  # (R, n, d)
    mean, se = u.mean(0), u.std(0) / math.sqrt(R)
    # n*d = 20 components; |z| < 4.5 has a false-alarm probability ~1e-4 for all of them
    assert (mean.abs() / se).max().item() < 4.5

    inner = torch.einsum("rid,rkd->rik", u, u)  # (R, n, n)
    emp, emp_se = inner.mean(0), inner.std(0) / math.sqrt(R)
    C = diffusion_kernel(fixed_tokens(n, d).unsqueeze(0), beta, 200_000, g)[0]
    predicted = head_scale(H, head_norm) ** 2 * H * C
    # C is itself a 200k-sample Monte Carlo estimate (relative error ~0.3%), hence the 1% slack
    assert ((emp - predicted).abs() / (emp_se + 0.01 * predicted.abs())).max().item() < 4.5
    # different coordinates are uncorrelated: Cov(u_i^a, u_i^b) = 0 for a != b
    cross = (u[..., 0] * u[..., 1]).mean(0)
    cross_se = (u[..., 0] * u[..., 1]).std(0) / math.sqrt(R)
    assert (cross.abs() / cross_se).max().item() < 4.5


def test_one_layer_drift_of_inner_products_matches_formula() -> None:
    """Mean one-layer change of <x_i, x_k> / dtau = the Ito drift of the derived SDE."""
    n, d, beta, R, dtau = 4, 4, 1.0, 100_000, 0.01
    X0 = fixed_tokens(n, d)
    g = torch.Generator().manual_seed(5)
    X = X0.expand(R, n, d)
    Q, K, V = sample_weights(R, 1, d, g)
    Y = attention_layer(X, Q, K, V, beta, step_size("stochastic", 1, 1, dtau))
    change = (Y @ Y.transpose(-1, -2) - X @ X.transpose(-1, -2)) / dtau  # (R, n, n)
    C = diffusion_kernel(X0.unsqueeze(0), beta, 200_000, g)[0]
    drift, _ = pair_inner_drift_diffusion(C, X0 @ X0.T, d)
    off = ~torch.eye(n, dtype=torch.bool)
    z = (change.mean(0) - drift)[off] / (change.std(0)[off] / math.sqrt(R))
    # the O(dtau) remainder of the expansion is ~0.01 * drift, far below one SE here
    assert z.abs().max().item() < 4.5


def test_vectorised_equals_loop_reference() -> None:
    kwargs = dict(n=5, d=4, H=3, L=6, eta=0.3, beta=1.5, runs=3, seed=7, record_every=2)
    fast = simulate_particles(**kwargs)
    slow = simulate_particles_loop(**kwargs)
    np.testing.assert_array_equal(fast.layers, slow.layers)
    np.testing.assert_allclose(fast.inner, slow.inner, rtol=0, atol=1e-13)
    np.testing.assert_allclose(fast.mean_norm_sq, slow.mean_norm_sq, rtol=0, atol=1e-13)
    torch.testing.assert_close(fast.final, slow.final, rtol=0, atol=1e-13)


def test_seeding_is_deterministic() -> None:
    kwargs = dict(n=6, d=3, H=2, L=20, eta=0.2, beta=1.0, runs=5, record_every=5)
    a = simulate_particles(seed=1, **kwargs)
    b = simulate_particles(seed=1, **kwargs)
    c = simulate_particles(seed=2, **kwargs)
    np.testing.assert_array_equal(a.inner, b.inner)
    torch.testing.assert_close(a.final, b.final, rtol=0, atol=0)
    assert np.abs(a.inner[:, 1:] - c.inner[:, 1:]).min() > 0
    # chunked runs: reproducible given (seed, chunk_runs), runs stay independent across chunks
    d1 = simulate_particles(seed=1, chunk_runs=2, **kwargs)
    d2 = simulate_particles(seed=1, chunk_runs=2, **kwargs)
    np.testing.assert_array_equal(d1.inner, d2.inner)
    assert d1.inner.shape == a.inner.shape
    assert len(np.unique(d1.inner[:, -1])) == 5  # no two chunks share a random stream
    # the limit solver too
    la = simulate_limit(n=4, d=3, beta=1.0, T=1.0, runs=3, seed=4, num_steps=10, samples_per_step=2)
    lb = simulate_limit(n=4, d=3, beta=1.0, T=1.0, runs=3, seed=4, num_steps=10, samples_per_step=2)
    np.testing.assert_array_equal(la.inner, lb.inner)


# ---------------------------------------------------------------------------- limits


@pytest.fixture(scope="module")
def stochastic_limit():
    """EM solution of the stochastic limit, shared by the head-normalisation cases."""
    n, d, beta, T = 4, 4, 1.0, 2.0
    X0 = fixed_tokens(n, d)
    traj = simulate_limit(
        n, d, beta, T, runs=3000, seed=21, num_steps=25, record_every=5, samples_per_step=4, X0=X0
    )
    return (n, d, beta, T, X0), traj


@pytest.mark.parametrize(("head_norm", "H"), [("sum", 1), ("sqrt", 3), ("mean", 2)])
def test_em_limit_agrees_with_deep_particles(stochastic_limit, head_norm: str, H: int) -> None:
    (n, d, beta, T, X0), limit = stochastic_limit
    L, runs = 50, 3000
    eta = step_size("stochastic", L, H, T, head_norm)
    deep = simulate_particles(
        n, d, H, L, eta, beta, runs, seed=H, record_every=10, head_norm=head_norm, X0=X0
    )
    np.testing.assert_allclose(deep.t, limit.t)  # both record at fractions 0, 0.2, ..., 1
    # the dynamics must actually move the statistic, or agreement would be vacuous
    assert deep.inner[:, -1].mean() - deep.inner[:, 0].mean() > 0.1
    for name in ("inner", "mean_norm_sq"):
        p, q = getattr(deep, name), getattr(limit, name)
        se = np.sqrt(p.var(0) / runs + q.var(0) / runs)
        # 4 SE of sampling noise plus 0.01 for the O(1/L) and O(dtau) weak discretisation
        # errors (L = 25 ... 400 and 25 ... 200 EM steps differ by less than one SE ~ 0.007)
        assert np.all(np.abs(p.mean(0) - q.mean(0)) <= 4 * se + 0.01), name


def test_deterministic_regime_spread_shrinks_with_depth() -> None:
    n, d, H, beta, T, runs = 6, 4, 2, 1.0, 1.0, 300
    X0 = fixed_tokens(n, d)
    start = mean_pairwise_inner(X0.unsqueeze(0)).item()
    spread = {}
    for L in (10, 160):
        eta = step_size("deterministic", L, H, T)
        traj = simulate_particles(n, d, H, L, eta, beta, runs, seed=L, record_every=L, X0=X0)
        spread[L] = traj.inner[:, -1].std()
        # the limit is X(t) = X0: the run average stays at the start within 5 SE
        assert abs(traj.inner[:, -1].mean() - start) < 5 * spread[L] / math.sqrt(runs)
    # fluctuations scale like (H L)^(-1/2): 16x the depth -> ~4x smaller; ask for 2x
    assert spread[160] < 0.5 * spread[10]
    limit = simulate_limit(
        n, d, beta, T, runs=2, seed=0, regime="deterministic", num_steps=4, X0=X0
    )
    np.testing.assert_allclose(limit.inner, start, rtol=0, atol=1e-14)


def test_antipodal_exponent_closed_form_at_zero_temperature() -> None:
    """beta = 0: a_i = mean token for all i, so C_bar = 0, kappa = 2, lambda = (d - 3)/d."""
    for d in (3, 5, 9):
        assert antipodal_exponent(d, 0.0, samples=200) == pytest.approx((d - 3) / d, abs=1e-8)
