"""Tests for E6's particle system (rankcollapse.experiments.homogenized.model and .simulate).

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

from rankcollapse.core.metrics import mean_token_norm_sq
from rankcollapse.experiments.homogenized.limits import diffusion_kernel, simulate_limit
from rankcollapse.experiments.homogenized.model import (
    HEAD_NORMS,
    attention_layer,
    barycentre_update,
    equal_overlap_tokens,
    gaussian_times,
    head_scale,
    homogenized_time,
    mean_pairwise_inner,
    meanfield_argmax_update,
    meanfield_argmax_update_weights,
    multihead_update,
    overlap_for_mean,
    pair_tokens,
    project_to_sphere,
    sample_weights,
    step_size,
    uniform_tokens,
)
from rankcollapse.experiments.homogenized.simulate import (
    record_indices,
    simulate_meanfield_argmax,
    simulate_particles,
    simulate_particles_loop,
)


def fixed_tokens(n: int, d: int, seed: int = 3) -> torch.Tensor:
    """One fixed configuration ``(n, d)`` shared by all runs of a test."""
    return uniform_tokens(1, n, d, torch.Generator().manual_seed(seed))[0]


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
    from rankcollapse.experiments.homogenized.model import attention_layer_loop

    return attention_layer_loop(*args)


@pytest.mark.parametrize("head_norm", HEAD_NORMS)
def test_default_clocks_are_the_papers(head_norm: str) -> None:
    """Head average: ballistic t = L eta, diffusive tau = L eta^2 / H (eta = sqrt(T H / L))."""
    L, H, T = 64, 4, 2.0
    assert step_size("ballistic", L, H, T) == pytest.approx(T / L)
    assert step_size("diffusive", L, H, T) == pytest.approx(math.sqrt(T * H / L))
    eta = step_size("diffusive", L, H, T, head_norm)
    assert homogenized_time("diffusive", eta, H, L, head_norm) == pytest.approx(T)


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
