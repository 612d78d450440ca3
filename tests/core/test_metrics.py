import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rankcollapse.core.metrics import (
    attention_spectrum,
    composite_norm,
    effective_rank,
    layer_metrics,
    mean_cosine_similarity,
    mean_token_norm_sq,
    relative_residual,
    relative_residuals,
    token_similarity,
)

SCALAR_METRICS = [
    lambda X: relative_residual(X, "fro"),
    lambda X: relative_residual(X, "comp"),
    token_similarity,
    mean_cosine_similarity,
    effective_rank,
]


@st.composite
def sequences(draw, min_n=2, max_n=7, min_d=2, max_d=6):
    n = draw(st.integers(min_n, max_n))
    d = draw(st.integers(min_d, max_d))
    seed = draw(st.integers(0, 2**31 - 1))
    shift = draw(st.floats(-3, 3))
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=gen, dtype=torch.float64) + shift


@settings(max_examples=60, deadline=None)
@given(X=sequences(), scale=st.floats(1e-3, 1e3))
@pytest.mark.parametrize("metric", SCALAR_METRICS)
def test_scale_invariant(metric, X, scale):
    torch.testing.assert_close(metric(scale * X), metric(X), rtol=1e-9, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(X=sequences(), seed=st.integers(0, 1000))
@pytest.mark.parametrize("metric", SCALAR_METRICS)
def test_token_permutation_invariant(metric, X, seed):
    perm = torch.randperm(X.shape[0], generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(metric(X[perm]), metric(X), rtol=1e-9, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(X=sequences())
def test_residual_squared_is_one_minus_token_similarity(X):
    torch.testing.assert_close(relative_residual(X) ** 2, 1 - token_similarity(X),
                               rtol=1e-9, atol=1e-12)


@settings(max_examples=50, deadline=None)
@given(x=sequences(min_n=1, max_n=1), n=st.integers(2, 9))
def test_rank_one_input_has_collapsed(x, n):
    X = x.expand(n, -1).clone()  # every token equal
    assert relative_residual(X).item() == pytest.approx(0, abs=1e-12)
    assert relative_residual(X, "comp").item() == pytest.approx(0, abs=1e-12)
    assert token_similarity(X).item() == pytest.approx(1)
    assert mean_cosine_similarity(X).item() == pytest.approx(1)
    assert effective_rank(X).item() == pytest.approx(1, abs=1e-6)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_orthonormal_tokens(n):
    X = torch.eye(n, dtype=torch.float64)  # n orthonormal tokens in R^n
    assert token_similarity(X).item() == pytest.approx(1 / n)
    assert relative_residual(X).item() == pytest.approx(math.sqrt(1 - 1 / n))
    assert mean_cosine_similarity(X).item() == pytest.approx(0, abs=1e-12)
    assert effective_rank(X).item() == pytest.approx(n)
    assert mean_token_norm_sq(X).item() == pytest.approx(1 / n)


def test_composite_norm_by_hand():
    X = torch.tensor([[1.0, -2.0], [3.0, 4.0], [0.0, -1.0]], dtype=torch.float64)
    # column sums |.|: 4, 7 -> 7; row sums: 3, 7, 1 -> 7
    assert composite_norm(X).item() == pytest.approx(7.0)


def test_mean_cosine_matches_pairwise_definition():
    X = torch.randn(6, 4, dtype=torch.float64)
    U = X / X.norm(dim=-1, keepdim=True)
    pairs = [(U[i] @ U[j]).item() for i in range(6) for j in range(6) if i != j]
    assert mean_cosine_similarity(X).item() == pytest.approx(np.mean(pairs))


def test_batched_shapes():
    X = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    for metric in SCALAR_METRICS:
        assert metric(X).shape == (2, 3)


def test_attention_spectrum_known_matrices():
    uniform = torch.full((4, 4), 0.25, dtype=torch.float64)
    identity = torch.eye(4, dtype=torch.float64)
    p, q = 0.3, 0.1  # two-state chain: eigenvalues 1 and 1 - p - q
    chain = torch.tensor([[1 - p, p], [q, 1 - q]], dtype=torch.float64)
    assert attention_spectrum(uniform).item() == pytest.approx(0, abs=1e-12)
    assert attention_spectrum(identity).item() == pytest.approx(1)
    assert attention_spectrum(chain).item() == pytest.approx(1 - p - q)
    batch = torch.stack([uniform, identity])
    assert attention_spectrum(batch).shape == (2,)


def test_layer_metrics_keys_and_attention():
    X = torch.randn(3, 5, 4, dtype=torch.float64)
    A = torch.softmax(torch.randn(3, 2, 5, 5, dtype=torch.float64), dim=-1)
    out = layer_metrics(X, A)
    assert set(out) == {"relative_residual", "relative_residual_comp", "token_similarity",
                        "mean_cosine", "effective_rank", "attn_lambda2"}
    assert all(v.shape == (3,) for v in out.values())
    assert torch.all((out["attn_lambda2"] >= 0) & (out["attn_lambda2"] <= 1 + 1e-12))
    assert torch.isnan(layer_metrics(X)["attn_lambda2"]).all()


@settings(max_examples=30, deadline=None)
@given(X=sequences())
def test_both_residuals_at_once_are_the_single_ones_exactly(X):
    both = relative_residuals(X[None].expand(3, -1, -1))
    for norm in ("fro", "comp"):
        assert torch.equal(both[norm], relative_residual(X[None].expand(3, -1, -1), norm))
