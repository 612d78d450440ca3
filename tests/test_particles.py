"""Tests for the KGR26 particle system and its homogenized limits
(rankcollapse.experiments.homogenized.particles).

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

from rankcollapse.experiments.homogenized.particles import (
    HEAD_NORMS,
    antipodal_exponent,
    arcsin_law,
    attention_layer,
    barycentre_update,
    corr_density,
    corr_mean,
    derived_overlap_law,
    diffusion_kernel,
    equal_overlap_tokens,
    gaussian_times,
    head_scale,
    homogenized_time,
    logistic,
    mean_pairwise_inner,
    mean_token_norm_sq,
    meanfield_argmax_update,
    meanfield_argmax_update_weights,
    meanfield_pair_kernel,
    multihead_update,
    overlap_absorption,
    overlap_for_mean,
    pair_coefficient_exact,
    pair_coefficient_expansion,
    pair_drift_coefficient,
    pair_inner_drift_diffusion,
    pair_kernel_exact,
    pair_tokens,
    project_to_sphere,
    record_indices,
    sample_derived_overlap,
    sample_weights,
    simplex_drift,
    simplex_fg,
    simulate_limit,
    simulate_meanfield_argmax,
    simulate_overlap_sde,
    simulate_pair_sde_exact,
    simulate_particles,
    simulate_particles_loop,
    solve_simplex_ode,
    step_size,
    uniform_tokens,
)


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
@pytest.mark.parametrize("regime", ["ballistic", "diffusive"])
def test_step_size_reaches_time_T(regime: str, head_norm: str) -> None:
    L, H, T = 37, 5, 1.7
    eta = step_size(regime, L, H, T, head_norm)
    assert homogenized_time(regime, eta, H, L, head_norm) == pytest.approx(T, rel=1e-12)
    c = head_scale(H, head_norm)
    if regime == "ballistic":
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
    with pytest.raises(ValueError, match="sampling"):
        simulate_particles(3, 3, 1, 2, 0.1, 1.0, 2, 0, sampling="exact")  # type: ignore[arg-type]


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
    Y = attention_layer(X, Q, K, V, beta, step_size("diffusive", 1, 1, dtau))
    change = (Y @ Y.transpose(-1, -2) - X @ X.transpose(-1, -2)) / dtau  # (R, n, n)
    C = diffusion_kernel(X0.unsqueeze(0), beta, 200_000, g)[0]
    drift, _ = pair_inner_drift_diffusion(C, X0 @ X0.T, d)
    off = ~torch.eye(n, dtype=torch.bool)
    z = (change.mean(0) - drift)[off] / (change.std(0)[off] / math.sqrt(R))
    # the O(dtau) remainder of the expansion is ~0.01 * drift, far below one SE here
    assert z.abs().max().item() < 4.5


def test_vectorised_equals_loop_reference() -> None:
    kwargs = dict(n=5, d=4, H=3, L=6, eta=0.3, beta=1.5, runs=3, seed=7, record_every=2)
    fast = simulate_particles(**kwargs, sampling="weights")
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
    eta = step_size("diffusive", L, H, T, head_norm)
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
        eta = step_size("ballistic", L, H, T)
        traj = simulate_particles(n, d, H, L, eta, beta, runs, seed=L, record_every=L, X0=X0)
        spread[L] = traj.inner[:, -1].std()
        # the limit is X(t) = X0: the run average stays at the start within 5 SE
        assert abs(traj.inner[:, -1].mean() - start) < 5 * spread[L] / math.sqrt(runs)
    # fluctuations scale like (H L)^(-1/2): 16x the depth -> ~4x smaller; ask for 2x
    assert spread[160] < 0.5 * spread[10]
    limit = simulate_limit(
        n, d, beta, T, runs=2, seed=0, regime="ballistic", num_steps=4, X0=X0
    )
    np.testing.assert_allclose(limit.inner, start, rtol=0, atol=1e-14)


def test_antipodal_exponent_closed_form_at_zero_temperature() -> None:
    """beta = 0: a_i = mean token for all i, so C_bar = 0, kappa = 2, lambda = (d - 3)/d."""
    for d in (3, 5, 9):
        assert antipodal_exponent(d, 0.0, samples=200) == pytest.approx((d - 3) / d, abs=1e-8)


# ---------------------------------------------------------------------------- the paper's model


@pytest.mark.parametrize("H", [1, 2, 3])
def test_head_average_is_the_papers_update_rule(H: int) -> None:
    """eq:update_tokens on hand-built weights: x_i <- N(x_i + (eta/H) sum_h V_h m_{beta,A_h}(x_i)),
    m_{beta,A}(z) = sum_k e^{beta <A z, x_k>} x_k / sum_k e^{beta <A z, x_k>}, written out with
    plain loops over tokens and heads. Our layer scores <Q x_i, K x_k>, which is <A x_i, x_k>
    for Q = A and K = I."""
    X = np.array([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [0.0, 0.6, -0.8], [-0.48, 0.6, 0.64]])
    A = [np.array([[1.0, 2.0, 0.0], [0.0, -1.0, 1.0], [3.0, 0.0, 1.0]]),
         np.array([[0.0, 1.0, -2.0], [1.0, 0.0, 0.5], [-1.0, 1.0, 0.0]]),
         np.array([[2.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, -1.0]])][:H]
    V = [np.array([[0.5, -1.0, 0.0], [1.0, 0.0, 2.0], [0.0, 1.0, -0.5]]),
         np.array([[-1.0, 0.0, 1.0], [0.5, 0.5, 0.0], [2.0, -1.0, 0.0]]),
         np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])][:H]
    beta, eta = 0.7, 0.3
    expected = np.empty_like(X)
    for i, x in enumerate(X):
        update = np.zeros(3)
        for A_h, V_h in zip(A, V, strict=True):
            w = np.array([np.exp(beta * np.dot(A_h @ x, xk)) for xk in X])
            update += V_h @ (w[:, None] * X).sum(0) / w.sum()
        y = x + eta / H * update
        expected[i] = y / np.linalg.norm(y)

    def stack(mats):
        return torch.tensor(np.stack(mats), dtype=torch.float64).unsqueeze(0)  # (1, H, 3, 3)

    Q, V_t = stack(A), stack(V)
    K = torch.eye(3, dtype=torch.float64).expand(1, H, 3, 3)
    Xt = torch.tensor(X, dtype=torch.float64).unsqueeze(0)
    ours = attention_layer(Xt, Q, K, V_t, beta, eta)  # default head_norm: the paper's mean
    np.testing.assert_allclose(ours[0].numpy(), expected, rtol=0, atol=1e-13)
    loop = attention_layer_loop_ref(Xt, Q, K, V_t, beta, eta)
    np.testing.assert_allclose(loop[0].numpy(), expected, rtol=0, atol=1e-13)
    # our variants differ from the paper's average only by the factor multiplying eta
    for head_norm in ("sum", "sqrt"):
        scaled = attention_layer(Xt, Q, K, V_t, beta, eta * head_scale(H) / head_scale(
            H, head_norm), head_norm)
        np.testing.assert_allclose(scaled[0].numpy(), expected, rtol=0, atol=1e-13)


def attention_layer_loop_ref(*args):
    from rankcollapse.experiments.homogenized.particles import attention_layer_loop

    return attention_layer_loop(*args)


@pytest.mark.parametrize("head_norm", HEAD_NORMS)
def test_default_clocks_are_the_papers(head_norm: str) -> None:
    """Head average: ballistic t = L eta, diffusive tau = L eta^2 / H (eta = sqrt(T H / L))."""
    L, H, T = 64, 4, 2.0
    assert step_size("ballistic", L, H, T) == pytest.approx(T / L)
    assert step_size("diffusive", L, H, T) == pytest.approx(math.sqrt(T * H / L))
    eta = step_size("diffusive", L, H, T, head_norm)
    assert homogenized_time("diffusive", eta, H, L, head_norm) == pytest.approx(T)


# ---------------------------------------------------------------------------- fast sampling


def test_barycentre_update_at_zero_temperature() -> None:
    """At beta = 0 every token's head output is c_H sum_h V_h xbar: the same vector for all."""
    n, d, H = 5, 6, 3
    X = uniform_tokens(2, n, d, torch.Generator().manual_seed(1))
    Q, K, V = sample_weights(2, H, d, torch.Generator().manual_seed(2))
    exact = multihead_update(X, Q, K, V, 0.0)  # (2, n, d)
    xbar = X.mean(dim=1)
    manual = (V @ xbar[:, None, :, None]).squeeze(-1).mean(dim=1)  # (1/H) sum_h V_h xbar
    torch.testing.assert_close(exact, manual.unsqueeze(1).expand(2, n, d), rtol=0, atol=1e-14)
    # its law: N(0, |xbar|^2 / (d H) I), which barycentre_update reproduces from unit normals
    g = torch.ones(2, d, dtype=torch.float64)
    scaled = barycentre_update(X, g, H)[:, 0]
    torch.testing.assert_close(scaled, (xbar.norm(dim=-1) / math.sqrt(d * H)).unsqueeze(-1) * g)


@pytest.mark.parametrize(("n", "d", "beta"), [(4, 10, 0.0), (4, 10, 1.3), (3, 8, 5.0)])
def test_fast_sampling_has_the_law_of_full_weights(n: int, d: int, beta: float) -> None:
    """One layer from a fixed start: the fast path (barycentre or projections) and full weight
    matrices give the same mean and variance of the mean overlap and of one coordinate."""
    X0 = fixed_tokens(n, d, seed=4)
    R, H, eta = 40_000, 2, 0.5
    out = {}
    for sampling in ("weights", "fast"):
        traj = simulate_particles(n, d, H, 1, eta, beta, R, seed=9, X0=X0, sampling=sampling)
        out[sampling] = np.stack([traj.inner[:, -1], traj.final[:, 0, 0].numpy()])
    a, b = out["weights"], out["fast"]
    se = np.sqrt(a.var(1) / R + b.var(1) / R)
    # two independent samples of the same law: |difference of means| < 4.5 SE
    assert np.all(np.abs(a.mean(1) - b.mean(1)) < 4.5 * se)
    # variances agree within 5 % (the variance of a sample variance: about 2 var^2 / R)
    np.testing.assert_allclose(a.var(1), b.var(1), rtol=0.05)


def test_gaussian_times_law() -> None:
    """G Y for fresh G (entries N(0, 1/d)) has rows ~ N(0, Y^T Y / d): check its covariance."""
    d, R = 7, 200_000
    Y = torch.tensor([[1.0, 0.5], [0.0, 2.0], [1.0, -1.0]] + [[0.0, 0.0]] * (d - 3),
                     dtype=torch.float64)
    GY = gaussian_times(Y.expand(R, d, 2), torch.Generator().manual_seed(3))  # (R, d, 2)
    rows = GY.reshape(-1, 2)
    cov = rows.T @ rows / rows.shape[0]
    torch.testing.assert_close(cov, Y.T @ Y / d, rtol=0.02, atol=0.002)


def test_meanfield_argmax_barycentre() -> None:
    """beta_eff = infinity over a full-support measure: m(z) = A z / |A z| with A = K^T Q; the
    fast draw has the law of explicit weights (one layer, two tokens)."""
    d = 5
    X = pair_tokens(d, 0.3).unsqueeze(0)
    Q = torch.eye(d, dtype=torch.float64).reshape(1, 1, d, d) * 2.0
    K = torch.diag(torch.arange(1.0, d + 1, dtype=torch.float64)).reshape(1, 1, d, d)
    V = torch.eye(d, dtype=torch.float64).reshape(1, 1, d, d)
    A = K[0, 0].T @ Q[0, 0]
    expected = torch.stack([A @ x / torch.linalg.vector_norm(A @ x) for x in X[0]])
    torch.testing.assert_close(meanfield_argmax_update_weights(X, Q, K, V)[0], expected)
    R = 60_000
    Xr = X.expand(R, 2, d)
    Qr, Kr, Vr = sample_weights(R, 1, d, torch.Generator().manual_seed(5))
    full = project_to_sphere(Xr + 0.4 * meanfield_argmax_update_weights(Xr, Qr, Kr, Vr))
    fast = project_to_sphere(Xr + 0.4 * meanfield_argmax_update(
        Xr, 1, torch.Generator().manual_seed(6)))
    overlaps = [(Y[:, 0] * Y[:, 1]).sum(-1).numpy() for Y in (full, fast)]
    se = math.sqrt(overlaps[0].var() / R + overlaps[1].var() / R)
    assert abs(overlaps[0].mean() - overlaps[1].mean()) < 4.5 * se
    traj = simulate_meanfield_argmax(2, d, 2, 5, 0.3, 3, seed=1, X0=pair_tokens(d, 0.0))
    assert (traj.final.norm(dim=-1) - 1).abs().max() < 1e-12


# ---------------------------------------------------------------------------- theorem limits


def test_equal_overlap_start() -> None:
    X = equal_overlap_tokens(4, 6, 0.3)
    G = (X @ X.T).numpy()
    np.testing.assert_allclose(G, 0.7 * np.eye(4) + 0.3, atol=1e-14)
    gamma = overlap_for_mean(0.4, 4)
    m = mean_token_norm_sq(equal_overlap_tokens(4, 4, gamma).unsqueeze(0)).item()
    assert m == pytest.approx(0.4, abs=1e-14)
    with pytest.raises(ValueError, match="d >= n"):
        equal_overlap_tokens(5, 4, 0.2)
    with pytest.raises(ValueError, match="gamma"):
        equal_overlap_tokens(3, 4, -0.6)


def test_logistic_solves_the_law() -> None:
    tau = np.linspace(0, 4, 401)
    u = logistic(0.3, tau)
    assert u[0] == pytest.approx(0.3)
    derivative = np.gradient(u, tau)
    np.testing.assert_allclose(derivative[1:-1], (u * (1 - u))[1:-1], atol=1e-4)


def test_simplex_drift_is_the_overlap_drift_on_the_simplex() -> None:
    """The corrected simplex drift equals eq:Dij_explicit_clean evaluated on the simplex kernel
    (s_ii = P, s_ij = S); the printed one differs by (gamma P - (2 - gamma^2) S) / d."""
    n, d = 4, 9
    for gamma, f, g in [(0.0, 0.4, 0.2), (0.5, 0.3, 0.27), (-0.2, 0.5, 0.1)]:
        P, S = gamma + (1 - gamma) * f, gamma + (1 - gamma) * g
        s = torch.full((n, n), S, dtype=torch.float64)
        s.fill_diagonal_(P)
        R = torch.full((n, n), gamma, dtype=torch.float64)
        R.fill_diagonal_(1.0)
        drift, _ = pair_inner_drift_diffusion(s, R, d)
        assert simplex_drift(gamma, f, g, d) == pytest.approx(drift[0, 1].item(), abs=1e-14)
        assert simplex_drift(gamma, f, g, d) - simplex_drift(gamma, f, g) == pytest.approx(
            (gamma * P - (2 - gamma**2) * S) / d, abs=1e-14)


def test_simplex_ode_at_zero_temperature_is_the_logistic_law() -> None:
    """beta = 0: pi = 1/n, so f = g = 1/n, and m = gamma + (1 - gamma)/n solves mdot = m(1-m)."""
    n, grid = 4, np.linspace(-0.3, 0.999, 30)
    f, g = simplex_fg(grid, n, 8, 0.0, 100, torch.Generator().manual_seed(0))
    np.testing.assert_allclose(f, 1 / n, atol=1e-12)
    np.testing.assert_allclose(g, 1 / n, atol=1e-12)
    taus = np.linspace(0, 3, 7)
    gamma = solve_simplex_ode(0.0, taus, grid, f, g)
    np.testing.assert_allclose(gamma + (1 - gamma) / n, logistic(1 / n, taus), atol=1e-8)


def test_simplex_weights_depend_on_temperature() -> None:
    grid = np.array([0.0])
    f, g = simplex_fg(grid, 4, 16, 4.0, 5000, torch.Generator().manual_seed(0))
    assert f[0] > 0.25 + 0.05  # sharper attention: more weight on one token
    assert f[0] > g[0]  # Cauchy-Schwarz: sum_k pi_ik pi_jk <= sum_k pi_ik^2 on average


def test_pair_kernel_and_coefficient() -> None:
    """s(1) = 1 exactly; s(R) = R would give the printed coefficient k = 1 exactly."""
    g = torch.Generator().manual_seed(0)
    s, se = meanfield_pair_kernel(np.array([1.0 - 1e-12, 0.0]), 6, 20_000, g)
    assert s[0] == pytest.approx(1.0, abs=1e-9)
    assert abs(s[1]) < 4.5 * se[1]  # x -> -x symmetry: s(0) = 0
    R = np.array([0.25, 0.5, 0.75])
    np.testing.assert_allclose(pair_drift_coefficient(R, R, 16), 1.0, atol=1e-12)


def test_printed_overlap_sde_follows_the_arcsin_law() -> None:
    """k = 1 from u0 = 1/2: absorbed at +1 with probability 1/2 + arcsin(1/2)/pi = 2/3."""
    paths = 4000
    _, u = simulate_overlap_sde(1.0, 0.5, 8.0, paths, seed=0, dt=2e-3)
    positive = (u[:, -1] > 0).mean()
    assert abs(positive - arcsin_law(0.5)) < 4.5 * math.sqrt(2 / 9 / paths) + 0.01
    assert (np.abs(u[:, -1]) > 0.9).mean() > 0.95  # absorbed by t = 8


# --- ours: the large-temperature pair SDE derived for the model (derivation note, section 7) --


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
