"""What each switch of `ModelConfig` does inside a `Block`, pinned down on hand-set weights.

Every weight of a block is set here by hand (`load_state_dict(strict=True)`, so none is left at its
random init) and every expected value is computed in this file with plain torch ops, never by
calling the module under test. The wiring, as model.py's docstring states it:

    sublayer(x) = post( skip * x + s * branch(pre(x)) )
      pre  = LN for norm "pre", else identity;   post = LN for norm "post", else identity
      skip = 1 or 0, or DeepNorm's alpha = (2L)^(1/4) (post-LN only);
      s = 1/sqrt(L) for branch_scale "inv_sqrt_depth", else 1
    attention branch:  (A - [center] 11^T/n) V W_O per head, then  Y <- Y - tau * mean_tokens(Y)
    block(x) = mlp_sublayer(attention_sublayer(x))

so de-escalation acts on the attention branch only: after the output projection, before the
1/sqrt(L) scale, the residual sum and the post-LN; neither the residual x nor the MLP output is
centred. Centred attention acts inside attention, on A, before the output projection.
`test_the_weights_tell_every_wiring_apart` shows each switch changes the reference on these
weights, so a module that ignored or misplaced a switch would fail the comparisons.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import pytest
import torch
from torch import Tensor

from rankcollapse.core.model import Block, ModelConfig, Transformer

B, N, D, H = 3, 5, 8, 2  # batch, tokens, width, heads
RATIO = 2  # MLP hidden width = RATIO * D
EPS = 1e-5  # nn.LayerNorm's default epsilon
LN_NAMES = ("attn_in", "attn_out", "ffn.inp", "ffn.out")  # every LayerNorm a Block can hold

NORMS = ["none", "pre", "post"]
EXTRAS = {  # the switches that act inside a sublayer, alone and together
    "plain": {},
    "deesc0.5": {"deescalate": 0.5},
    "deesc1": {"deescalate": 1.0},
    "center": {"center_attention": True},
    "scaled": {"branch_scale": "inv_sqrt_depth"},
    "all": {"deescalate": 0.5, "center_attention": True, "branch_scale": "inv_sqrt_depth",
            "temperature": 2.0},
}


def config(norm: str = "none", skip: bool = True, mlp: bool = True, **extra) -> ModelConfig:
    # depth 4 makes the 1/sqrt(L) factor 1/2 even for a lone Block
    return ModelConfig(width=D, heads=H, depth=4, norm=norm, skip=skip, mlp=mlp, mlp_ratio=RATIO,
                       **extra)


CONFIGS = {
    f"{norm}-{'skip' if skip else 'noskip'}-{'mlp' if mlp else 'nomlp'}-{name}":
        config(norm, skip, mlp, **extra)
    for norm, skip, mlp, (name, extra) in itertools.product(NORMS, [True, False], [True, False],
                                                            EXTRAS.items())
}
CONFIGS |= {  # DeepNorm exists only with post-LN and the skip
    f"post-skip-{'mlp' if mlp else 'nomlp'}-{name}-deepnorm":
        config("post", True, mlp, deepnorm=True, **extra)
    for mlp, (name, extra) in itertools.product([True, False], EXTRAS.items())
}


# --- hand-set weights ------------------------------------------------------------------------

@dataclass
class Weights:
    """One block's weights in the maths convention (Q = X W_Q, rows are tokens)."""

    wq: Tensor  # (D, D); head h uses columns h*D/H .. (h+1)*D/H of wq, wk, wv
    wk: Tensor
    wv: Tensor
    wo: Tensor  # (D, D) output projection
    w1: Tensor  # (D, RATIO*D), b1 (RATIO*D,), w2 (RATIO*D, D), b2 (D,): the MLP
    b1: Tensor
    w2: Tensor
    b2: Tensor
    ln: dict[str, tuple[Tensor, Tensor]]  # LayerNorm name -> (gain (D,), bias (D,))


def draw(seed: int) -> Weights:
    """Fixed weights, all distinct: a block that used the wrong LayerNorm or a transposed matrix
    computes something else. Gains and biases away from (1, 0) so each LayerNorm leaves a mark."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int, std: float = 1.0) -> Tensor:
        return std * torch.randn(*shape, generator=g, dtype=torch.float64)

    return Weights(
        wq=rand(D, D, std=D**-0.5), wk=rand(D, D, std=D**-0.5), wv=rand(D, D, std=D**-0.5),
        wo=rand(D, D, std=D**-0.5), w1=rand(D, RATIO * D, std=D**-0.5), b1=rand(RATIO * D, std=0.3),
        w2=rand(RATIO * D, D, std=(RATIO * D) ** -0.5), b2=rand(D, std=0.3),
        ln={name: (1 + rand(D, std=0.3), rand(D, std=0.3)) for name in LN_NAMES},
    )


def state_dict(w: Weights, cfg: ModelConfig) -> dict[str, Tensor]:
    """The Block's parameters for these weights (nn.Linear stores W^T: y = x W^T + b)."""
    sd = {"attn.qkv.weight": torch.cat([w.wq.T, w.wk.T, w.wv.T]), "attn.proj.weight": w.wo.T}
    lns = {"pre": ["attn_in"], "post": ["attn_out"], "none": []}[cfg.norm]
    if cfg.mlp:
        sd |= {"ffn.f.0.weight": w.w1.T, "ffn.f.0.bias": w.b1,
               "ffn.f.2.weight": w.w2.T, "ffn.f.2.bias": w.b2}
        lns += {"pre": ["ffn.inp"], "post": ["ffn.out"], "none": []}[cfg.norm]
    for name in lns:
        sd[f"{name}.weight"], sd[f"{name}.bias"] = w.ln[name]
    return sd


def block_with(w: Weights, cfg: ModelConfig) -> Block:
    block = Block(cfg).double()
    block.load_state_dict(state_dict(w, cfg), strict=True)  # every parameter is set by hand
    return block


def stack_with(ws: list[Weights], cfg: ModelConfig) -> Transformer:
    model = Transformer(cfg).double()
    model.load_state_dict({f"blocks.{i}.{k}": v for i, w in enumerate(ws)
                           for k, v in state_dict(w, cfg).items()}, strict=True)
    return model


def tokens(seed: int = 0, shift: float = 0.7) -> Tensor:
    """(B, N, D) tokens with a non-zero token mean, so centring anything is visible."""
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.randn(B, N, D, generator=g, dtype=torch.float64) + shift


# --- the wiring by hand ----------------------------------------------------------------------

def token_mean(y: Tensor) -> Tensor:
    return y.mean(dim=-2, keepdim=True)  # (B, 1, D): (1/n) 1^T Y, one row per sequence


def layer_norm(x: Tensor, gain_bias: tuple[Tensor, Tensor]) -> Tensor:
    gain, bias = gain_bias
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased variance, as LayerNorm uses
    return (x - mu) / torch.sqrt(var + EPS) * gain + bias


def softmax_rows(s: Tensor) -> Tensor:
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def attention(x: Tensor, w: Weights, beta: float = 1.0, center: bool = False
              ) -> tuple[Tensor, Tensor]:
    """x (B, N, D) -> (concat_h M_h V_h W_O: (B, N, D), A: (B, H, N, N)), M_h = A_h or
    A_h - 11^T/n, with A_h = softmax(beta Q_h K_h^T / sqrt(d_head)) row by row."""
    dh = D // H
    q, k, v = x @ w.wq, x @ w.wk, x @ w.wv
    heads, maps = [], []
    for h in range(H):
        cols = slice(h * dh, (h + 1) * dh)
        a = softmax_rows(beta * q[..., cols] @ k[..., cols].transpose(-1, -2) / math.sqrt(dh))
        m = a - torch.full((N, N), 1.0 / N, dtype=a.dtype) if center else a
        heads.append(m @ v[..., cols])  # (B, N, d_head)
        maps.append(a)
    return torch.cat(heads, dim=-1) @ w.wo, torch.stack(maps, dim=1)


def gelu(z: Tensor) -> Tensor:
    return 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))  # exact GELU, nn.GELU's default


def mlp(x: Tensor, w: Weights) -> Tensor:
    return gelu(x @ w.w1 + w.b1) @ w.w2 + w.b2


def block_by_hand(x: Tensor, w: Weights, cfg: ModelConfig) -> tuple[Tensor, Tensor]:
    """The documented wiring: (block output (B, N, D), attention maps (B, H, N, N))."""
    s = 1 / math.sqrt(cfg.depth) if cfg.branch_scale == "inv_sqrt_depth" else 1.0
    r = (2 * cfg.depth) ** 0.25 if cfg.deepnorm else 1.0 if cfg.skip else 0.0
    h, a = attention(layer_norm(x, w.ln["attn_in"]) if cfg.norm == "pre" else x, w,
                     cfg.temperature, cfg.center_attention)
    h = h - cfg.deescalate * token_mean(h)  # de-escalation: on the attention branch alone
    z = r * x + s * h
    if cfg.norm == "post":
        z = layer_norm(z, w.ln["attn_out"])
    if cfg.mlp:
        f = mlp(layer_norm(z, w.ln["ffn.inp"]) if cfg.norm == "pre" else z, w)
        z = r * z + s * f
        if cfg.norm == "post":
            z = layer_norm(z, w.ln["ffn.out"])
    return z, a


def close(a: Tensor, b: Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-9, atol=1e-11)


def far(a: Tensor, b: Tensor) -> bool:
    """Clearly different: what a miswired block would be on these weights."""
    return (a - b).abs().max().item() > 1e-3


# --- every configuration against the reference -----------------------------------------------

@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("capture", [False, True], ids=["fused", "captured"])
def test_block_matches_the_wiring_by_hand(cfg, capture):
    w, x = draw(1), tokens()
    expected, maps = block_by_hand(x, w, cfg)
    out, _mid, attn = block_with(w, cfg)(x, capture)
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-11)
    if capture:
        torch.testing.assert_close(attn, maps, rtol=1e-9, atol=1e-11)
    else:
        assert attn is None


FLIPS = {  # (config, the same config with one switch changed)
    "pre-vs-post": ({"norm": "pre"}, {"norm": "post"}),
    "none-vs-pre": ({"norm": "none"}, {"norm": "pre"}),
    "none-vs-post": ({"norm": "none"}, {"norm": "post"}),
    "skip": ({}, {"skip": False}),
    "mlp": ({}, {"mlp": False}),
    "deesc": ({}, {"deescalate": 0.5}),
    "deesc-strength": ({"deescalate": 0.5}, {"deescalate": 1.0}),
    "center": ({}, {"center_attention": True}),
    "center-vs-deesc1": ({"center_attention": True}, {"deescalate": 1.0}),
    "scale": ({}, {"branch_scale": "inv_sqrt_depth"}),
    "temperature": ({}, {"temperature": 2.0}),
}


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("flip", FLIPS.values(), ids=FLIPS.keys())
def test_the_weights_tell_every_wiring_apart(flip, norm):
    """Why the comparison above can fail: on these weights, changing any one switch changes the
    reference clearly, so a block that ignored or swapped a switch would not match it."""
    before, after = ({"norm": norm, **f} for f in flip)
    w, x = draw(1), tokens()
    assert far(block_by_hand(x, w, config(**before))[0], block_by_hand(x, w, config(**after))[0])


# --- known weights: uniform attention that averages the tokens --------------------------------

def averaging(seed: int = 2) -> Weights:
    """W_Q = W_K = 0 (every attention row is 1/n, exactly) and W_V = W_O = I: the attention
    branch is 1 mean(x), the token mean copied to every token."""
    eye = torch.eye(D, dtype=torch.float64)
    return replace(draw(seed), wq=torch.zeros(D, D, dtype=torch.float64),
                   wk=torch.zeros(D, D, dtype=torch.float64), wv=eye, wo=eye)


@pytest.mark.parametrize("capture", [False, True], ids=["fused", "captured"])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("tau", [0.0, 0.5, 1.0])
def test_averaging_attention_in_closed_form(norm, tau, capture):
    """With branch 1 mean(x): none -> x + (1-tau) mean(x); pre -> x + (1-tau) mean(LN x);
    post -> LN(x + (1-tau) mean(x)). At tau = 1 the branch vanishes and x passes unchanged
    (none, pre): de-escalation never centres the residual itself."""
    w, x = averaging(), tokens()
    out, _mid, attn = block_with(w, config(norm, mlp=False, deescalate=tau))(x, capture)
    inner = layer_norm(x, w.ln["attn_in"]) if norm == "pre" else x
    expected = x + (1 - tau) * token_mean(inner)
    if norm == "post":
        expected = layer_norm(expected, w.ln["attn_out"])
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-11)
    if tau == 1.0 and norm != "post":
        assert close(out, x)
        assert far(out, x - token_mean(x))  # x itself is not centred
    if capture:
        torch.testing.assert_close(attn, torch.full((B, H, N, N), 1 / N, dtype=torch.float64))


@pytest.mark.parametrize("norm", NORMS)
def test_centred_averaging_attention_is_zero(norm):
    """(A - 11^T/n) = 0 for uniform A: the attention sublayer is the identity, or LN under
    post-LN; the plain block adds the token mean."""
    w, x = averaging(), tokens()
    out, _mid, _ = block_with(w, config(norm, mlp=False, center_attention=True))(x)
    expected = layer_norm(x, w.ln["attn_out"]) if norm == "post" else x
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-11)
    plain, _mid, _ = block_with(w, config(norm, mlp=False))(x)
    assert far(plain, expected)


@pytest.mark.parametrize("norm", NORMS)
def test_without_skip_the_input_is_dropped(norm):
    """skip=False: the sublayer is f(x) (none), f(LN x) (pre) or LN(f(x)) (post), nothing of x
    added. With the averaging branch f(x) = 1 mean(x), adding to x anything with zero token mean
    leaves the output unchanged without the skip, and changes it with the skip."""
    w, x = averaging(), tokens()
    out, _mid, _ = block_with(w, config(norm, skip=False, mlp=False))(x)
    branch = token_mean(layer_norm(x, w.ln["attn_in"]) if norm == "pre" else x).expand_as(x)
    expected = layer_norm(branch, w.ln["attn_out"]) if norm == "post" else branch
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-11)

    if norm != "pre":  # LN mixes features, so the zero-mean change would reach the pre-LN branch
        bump = torch.randn(B, N, D, generator=torch.Generator().manual_seed(5),
                           dtype=torch.float64)
        bump = bump - token_mean(bump)  # zero mean over tokens: mean(x + bump) = mean(x)
        no_skip = block_with(w, config(norm, skip=False, mlp=False))
        torch.testing.assert_close(no_skip(x + bump)[0], out, rtol=1e-9, atol=1e-11)
        with_skip = block_with(w, config(norm, skip=True, mlp=False))
        assert far(with_skip(x + bump)[0], with_skip(x)[0])


# --- norm placement, the MLP sublayer and the two sublayers together ---------------------------

@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("norm", NORMS)
def test_mlp_sublayer_wiring(norm, skip):
    """The FeedForward sublayer alone: post LN(x + f(x)), pre x + f(LN x), none x + f(x), and
    without the skip f(x), f(LN x), LN(f(x)); each differs from the other two placements."""
    w, x = draw(3), tokens()
    cfg = config(norm, skip=skip)
    ffn = block_with(w, cfg).ffn
    r = 1.0 if skip else 0.0
    by_norm = {
        "none": r * x + mlp(x, w),
        "pre": r * x + mlp(layer_norm(x, w.ln["ffn.inp"]), w),
        "post": layer_norm(r * x + mlp(x, w), w.ln["ffn.out"]),
    }
    torch.testing.assert_close(ffn(x), by_norm[norm], rtol=1e-9, atol=1e-11)
    for other in set(NORMS) - {norm}:
        assert far(ffn(x), by_norm[other])


@pytest.mark.parametrize("norm", NORMS)
def test_attention_sublayer_output_feeds_the_mlp_sublayer(norm):
    """The block is mlp_sublayer(attention_sublayer(x)): the MLP sees the attention sublayer's
    output, residual and post-LN included, not the raw x or the bare branch."""
    w, x = draw(4), tokens()
    block = block_with(w, config(norm))
    attn_only = block_with(w, config(norm, mlp=False))
    z, _mid, _ = attn_only(x)
    torch.testing.assert_close(block(x)[0], block.ffn(z), rtol=1e-9, atol=1e-11)
    assert far(block(x)[0], block.ffn(x))


# --- de-escalation -----------------------------------------------------------------------------

@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("tau", [0.5, 1.0])
def test_deescalation_centres_the_attention_branch_only(norm, tau):
    """Y <- Y - tau mean(Y) on the attention branch: after W_O, before the residual is added and
    before the post-LN. Not on the residual x, not after the LN, not on the MLP output."""
    w, x = draw(5), tokens()
    cfg = config(norm, mlp=False, deescalate=tau)
    out, _mid, _ = block_with(w, cfg)(x)
    y, _ = attention(layer_norm(x, w.ln["attn_in"]) if norm == "pre" else x, w)
    post = (lambda t: layer_norm(t, w.ln["attn_out"])) if norm == "post" else (lambda t: t)
    right = post(x + (y - tau * token_mean(y)))
    torch.testing.assert_close(out, right, rtol=1e-9, atol=1e-11)
    assert far(out, post(x + y - tau * token_mean(x + y)))  # residual centred too: wrong
    assert far(out, post(x + y) - tau * token_mean(post(x + y)))  # after the LN: wrong
    assert far(out, post(x + y))  # not applied at all: wrong

    # With the MLP: its output is not centred; only the attention branch is.
    block = block_with(w, config(norm, deescalate=tau))
    z, _mid, _ = block_with(w, config(norm, mlp=False, deescalate=tau))(x)
    f = mlp(layer_norm(z, w.ln["ffn.inp"]) if norm == "pre" else z, w)
    if norm != "post":
        torch.testing.assert_close(block(x)[0] - z, f, rtol=1e-9, atol=1e-11)
        assert token_mean(f).abs().max() > 1e-2
    final = (lambda t: layer_norm(t, w.ln["ffn.out"])) if norm == "post" else (lambda t: t)
    torch.testing.assert_close(block(x)[0], final(z + f), rtol=1e-9, atol=1e-11)
    assert far(block(x)[0], final(z + f - tau * token_mean(f)))


def test_full_deescalation_keeps_the_token_mean_of_the_stream():
    """tau = 1, no norm, no MLP: the branch has zero token mean, so the output's token mean is
    the input's, which is not zero (the residual stream is not centred)."""
    w, x = draw(6), tokens()
    out, _mid, _ = block_with(w, config("none", mlp=False, deescalate=1.0))(x)
    torch.testing.assert_close(token_mean(out), token_mean(x), rtol=1e-9, atol=1e-11)
    assert token_mean(x).abs().max() > 0.1
    plain, _mid, _ = block_with(w, config("none", mlp=False))(x)
    assert far(token_mean(plain), token_mean(x))


# --- centred attention -------------------------------------------------------------------------

@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_centred_attention_is_a_minus_uniform_inside_attention(temperature):
    """center_attention: each head computes (A - 11^T/n) V, then W_O. The captured A stays
    row-stochastic (the matrix before centring), and fused and captured outputs agree."""
    w, x = draw(7), tokens()
    cfg = config("none", skip=False, mlp=False, center_attention=True, temperature=temperature)
    attn = block_with(w, cfg).attn
    y, a = attn(x, capture=True)
    fused, _ = attn(x)
    assert a.shape == (B, H, N, N) and (a >= 0).all()
    torch.testing.assert_close(a.sum(-1), torch.ones(B, H, N, dtype=torch.float64))

    dh = D // H
    v = (x @ w.wv).view(B, N, H, dh).transpose(1, 2)  # (B, H, N, d_head)
    centred = (a - torch.ones(N, N, dtype=torch.float64) / N) @ v  # (A - 11^T/n) V per head
    expected = centred.transpose(1, 2).reshape(B, N, D) @ w.wo
    torch.testing.assert_close(y, expected, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(fused, expected, rtol=1e-9, atol=1e-11)
    _, maps = attention(x, w, temperature)
    torch.testing.assert_close(a, maps, rtol=1e-9, atol=1e-11)  # A itself, by hand

    plain = (a @ v).transpose(1, 2).reshape(B, N, D) @ w.wo
    assert far(y, plain)
    assert far(y, plain - token_mean(plain))  # not de-escalation: mean(AV) != mean(V)


# --- 1/sqrt(L) branch scale --------------------------------------------------------------------

@pytest.mark.parametrize("norm", NORMS)
def test_branch_scale_multiplies_both_branches_not_the_residual(norm):
    """inv_sqrt_depth with L = 4: post(x + h/2), then post(z + f(z)/2); x and z unscaled."""
    w, x = draw(8), tokens()
    out, _mid, _ = block_with(w, config(norm, branch_scale="inv_sqrt_depth"))(x)
    pre = {"none": lambda t, _: t, "pre": layer_norm, "post": lambda t, _: t}[norm]
    post = {"none": lambda t, _: t, "pre": lambda t, _: t, "post": layer_norm}[norm]

    def wired(scale_attn: float, scale_mlp: float, scale_residual: float) -> Tensor:
        h, _ = attention(pre(x, w.ln["attn_in"]), w)
        z = post(scale_residual * x + scale_attn * h, w.ln["attn_out"])
        f = mlp(pre(z, w.ln["ffn.inp"]), w)
        return post(scale_residual * z + scale_mlp * f, w.ln["ffn.out"])

    torch.testing.assert_close(out, wired(0.5, 0.5, 1.0), rtol=1e-9, atol=1e-11)
    assert far(out, wired(0.5, 1.0, 1.0))  # attention branch only
    assert far(out, wired(1.0, 0.5, 1.0))  # MLP branch only
    assert far(out, wired(1.0, 1.0, 0.5))  # the residual instead of the branches
    assert far(out, wired(1.0, 1.0, 1.0))


# --- DeepNorm: the residual scaled by alpha before the post-LN --------------------------------

@pytest.mark.parametrize("depth", [4, 32])
def test_deepnorm_scales_the_residual_before_each_post_ln(depth):
    """deepnorm: z = LN(alpha x + attention(x)), then LN(alpha z + mlp(z)), alpha = (2L)^(1/4)
    (8^(1/4) ~ 1.68 at L = 4, 64^(1/4) ~ 2.83 at L = 32): the residual is scaled, not the
    branch, and the scale applies around both sublayers."""
    w, x = draw(9), tokens()
    alpha = (2 * depth) ** 0.25
    assert alpha == pytest.approx({4: 1.6817928, 32: 2.8284271}[depth])
    cfg = replace(config("post", deepnorm=True), depth=depth)
    h, _ = attention(x, w)
    ln_attn = layer_norm(alpha * x + h, w.ln["attn_out"])  # LN(alpha x + attention(x)) by hand
    attn_only = block_with(w, replace(cfg, mlp=False))
    for capture in (False, True):
        torch.testing.assert_close(attn_only(x, capture)[0], ln_attn, rtol=1e-9, atol=1e-11)
    assert far(ln_attn, layer_norm(x + h, w.ln["attn_out"]))  # plain post-LN: wrong
    assert far(ln_attn, layer_norm(x + alpha * h, w.ln["attn_out"]))  # branch scaled: wrong

    def wired(a_attn: float, a_mlp: float) -> Tensor:
        z = layer_norm(a_attn * x + h, w.ln["attn_out"])
        return layer_norm(a_mlp * z + mlp(z, w), w.ln["ffn.out"])

    out, mid, _ = block_with(w, cfg)(x)
    torch.testing.assert_close(mid, ln_attn, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(out, wired(alpha, alpha), rtol=1e-9, atol=1e-11)
    assert far(out, wired(alpha, 1.0))  # attention sublayer only: wrong
    assert far(out, wired(1.0, alpha))  # MLP sublayer only: wrong


# --- the captured trace and the fused path -----------------------------------------------------

TRACED = {name: CONFIGS[name] for name in
          ["post-skip-mlp-plain", "pre-skip-mlp-plain", "none-noskip-nomlp-plain",
           "post-skip-mlp-deesc1", "post-skip-mlp-center", "pre-noskip-mlp-all"]}


@pytest.mark.parametrize("cfg", TRACED.values(), ids=TRACED.keys())
def test_trace_holds_the_input_and_every_block_output(cfg):
    """Transformer(capture=True): L+1 hidden states (the input, then each block's output), equal
    to the blocks called one by one and to the wiring by hand; L row-stochastic attention maps
    (B, H, n, n), each the map of its block's input."""
    L = cfg.depth
    ws = [draw(10 + i) for i in range(L)]
    model, x = stack_with(ws, cfg), tokens()
    out, trace = model(x, capture=True)
    assert len(trace.hidden) == L + 1 and len(trace.attention) == L
    assert trace.hidden[0] is x
    assert torch.equal(trace.hidden[-1], out)
    state = x
    for i, (block, w) in enumerate(zip(model.blocks, ws, strict=True)):
        one = block(trace.hidden[i])[0]
        torch.testing.assert_close(trace.hidden[i + 1], one, rtol=1e-9, atol=1e-11)
        state, maps = block_by_hand(state, w, cfg)
        torch.testing.assert_close(trace.hidden[i + 1], state, rtol=1e-9, atol=1e-11)
        a = trace.attention[i]
        assert a.shape == (B, H, N, N) and (a >= 0).all()
        torch.testing.assert_close(a.sum(-1), torch.ones(B, H, N, dtype=torch.float64))
        torch.testing.assert_close(a, maps, rtol=1e-9, atol=1e-11)
    assert all(far(trace.hidden[i], trace.hidden[i + 1]) for i in range(L))  # each block acts


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_fused_and_captured_paths_agree(cfg):
    """The fused kernel (training) and the materialised attention (measuring) give one output."""
    model, x = stack_with([draw(20 + i) for i in range(cfg.depth)], cfg), tokens()
    fused, trace = model(x)
    captured, _ = model(x, capture=True)
    assert trace is None
    torch.testing.assert_close(fused, captured, rtol=1e-10, atol=1e-12)
