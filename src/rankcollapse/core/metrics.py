"""Collapse metrics: pure functions of tensors. A batch of sequences (..., n, d), rows being
tokens, gives one value per sequence (...). Conventions: docs/model.md.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch import Tensor

ResidualNorm = Literal["fro", "comp"]


def token_residual(X: Tensor) -> Tensor:
    """res(X) = X - 1 xbar^T with xbar the token mean, shape (..., n, d).

    The token mean is the x minimising ||X - 1 x^T||_F, so this is the Frobenius-optimal residual
    of Dong et al. (2021), and their original plots centre this way for every norm.
    """
    return X - X.mean(dim=-2, keepdim=True)


def composite_norm(X: Tensor) -> Tensor:
    """The l1,inf composite norm sqrt(||X||_1 ||X||_inf) of Dong et al.'s theorem, shape (...).

    ||X||_1 is the largest absolute column sum, ||X||_inf the largest absolute row sum.
    """
    A = X.abs()
    col = A.sum(dim=-2).amax(dim=-1)
    row = A.sum(dim=-1).amax(dim=-1)
    return torch.sqrt(col * row)


def relative_residual(X: Tensor, norm: ResidualNorm = "fro") -> Tensor:
    """||X - 1 xbar^T|| / ||X||, shape (...): 0 when all tokens are equal (rank collapse).

    norm="fro" is the Frobenius norm, for which relative_residual**2 == 1 - token_similarity;
    norm="comp" is the composite l1,inf norm that Dong et al. plot.
    """
    if norm == "fro":
        return torch.linalg.matrix_norm(token_residual(X)) / torch.linalg.matrix_norm(X)
    if norm == "comp":
        return composite_norm(token_residual(X)) / composite_norm(X)
    raise ValueError(f"norm={norm!r}: allowed values are 'fro', 'comp'")


def relative_residuals(X: Tensor) -> dict[ResidualNorm, Tensor]:
    """relative_residual(X, norm) for both norms, {"fro": (...), "comp": (...)}, computing the
    residual once (the same numbers; about half the work of two calls on large states)."""
    R = token_residual(X)
    return {"fro": torch.linalg.matrix_norm(R) / torch.linalg.matrix_norm(X),
            "comp": composite_norm(R) / composite_norm(X)}


def token_similarity(X: Tensor) -> Tensor:
    """t_sim = ||Pi_1 X||_F^2 / ||X||_F^2 of Yu & Zhang, in [0, 1], shape (...).

    The share of the stream's energy in span{1}; t_div = 1 - t_sim.
    """
    n = X.shape[-2]
    mean_energy = n * X.mean(dim=-2).pow(2).sum(dim=-1)  # ||Pi_1 X||_F^2 = n ||xbar||^2
    return mean_energy / X.pow(2).sum(dim=(-2, -1))


def mean_cosine_similarity(X: Tensor) -> Tensor:
    """Mean cosine similarity over the n(n-1) ordered pairs of distinct tokens, shape (...)."""
    n = X.shape[-2]
    unit = X / torch.linalg.vector_norm(X, dim=-1, keepdim=True)
    # sum_{i,j} <u_i, u_j> = ||sum_i u_i||^2, and the n diagonal terms are 1 each.
    total = unit.sum(dim=-2).pow(2).sum(dim=-1)
    return (total - n) / (n * (n - 1))


def mean_token_norm_sq(X: Tensor) -> Tensor:
    """||(1/n) sum_i x_i||^2, shape (...): for tokens on the unit sphere, 1 iff they coincide."""
    return X.mean(dim=-2).pow(2).sum(dim=-1)


def effective_rank(X: Tensor) -> Tensor:
    """exp(entropy of the normalised singular values) (Roy & Vetterli 2007), shape (...).

    1 for a rank-one X, min(n, d) when all singular values are equal.
    """
    s = torch.linalg.svdvals(X)
    p = s / s.sum(dim=-1, keepdim=True)
    entropy = -(p * torch.log(p.clamp_min(torch.finfo(p.dtype).tiny))).sum(dim=-1)
    return torch.exp(entropy)


def attention_spectrum(A: Tensor) -> Tensor:
    """|lambda_2|: the second-largest eigenvalue modulus of each row-stochastic A (..., n, n).

    A row-stochastic matrix has eigenvalue 1 on span{1}; the rest of the spectrum, led by
    |lambda_2|, sets how fast everything outside span{1} contracts. Spectral gap = 1 - |lambda_2|.
    Returns shape (...).
    """
    # LAPACK's geev through NumPy: torch.linalg.eigvals gives up on the exactly rank-one
    # (uniform) attention matrices of a collapsed network, whose eigenvalue 0 is highly repeated.
    moduli = np.abs(np.linalg.eigvals(A.detach().cpu().numpy()))
    second = np.sort(moduli, axis=-1)[..., -2]
    return torch.from_numpy(second).to(device=A.device, dtype=A.dtype)


def layer_metrics(X: Tensor, A: Tensor | None = None) -> dict[str, Tensor]:
    """Every per-sequence metric of one layer's hidden state X (B, n, d), each of shape (B,).

    With the layer's attention A (B, H, n, n), also |lambda_2| averaged over heads.
    """
    residual = relative_residuals(X)
    out = {
        "relative_residual": residual["fro"],
        "relative_residual_comp": residual["comp"],
        "token_similarity": token_similarity(X),
        "mean_cosine": mean_cosine_similarity(X),
        "effective_rank": effective_rank(X),
    }
    nan = torch.full_like(out["token_similarity"], float("nan"))
    out["attn_lambda2"] = attention_spectrum(A).mean(dim=-1) if A is not None else nan
    return out
