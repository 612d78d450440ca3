import pytest
import torch

from rankcollapse.core.model import (
    ModelConfig,
    Transformer,
    build,
    build_task_model,
    token_mean,
)
from rankcollapse.core.specs import PRESETS

VARIANTS = sorted(PRESETS)


def make(variant: str, depth: int = 4, seed: int = 0, **kw) -> Transformer:
    torch.manual_seed(seed)
    return build(PRESETS[variant], depth=depth, width=16, heads=2, **kw).double()


@pytest.mark.parametrize("variant", VARIANTS)
def test_capture_records_every_layer(variant):
    model = make(variant, depth=5)
    x = torch.randn(3, 7, 16, dtype=torch.float64)
    y, trace = model(x, capture=True)
    assert len(trace.hidden) == 6 and len(trace.attention) == 5
    assert trace.hidden[0] is x
    assert torch.equal(trace.hidden[-1], y)
    for attn in trace.attention:
        assert attn.shape == (3, 2, 7, 7)
        assert torch.all(attn >= 0)
        torch.testing.assert_close(attn.sum(-1), torch.ones(3, 2, 7, dtype=torch.float64))


@pytest.mark.parametrize("variant", VARIANTS)
def test_capture_does_not_change_the_output(variant):
    """The fused kernel (training) and the materialised attention (capture) agree."""
    model = make(variant)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    fused, none = model(x)
    captured, _ = model(x, capture=True)
    assert none is None
    torch.testing.assert_close(fused, captured, rtol=1e-10, atol=1e-12)


def test_first_layers_of_a_deep_stack_are_a_shallow_stack():
    """Why one pass of depth L measures every depth <= L: same seed, same first blocks."""
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    _, deep = make("post_ln", depth=9, seed=3)(x, capture=True)
    shallow, _ = make("post_ln", depth=4, seed=3)(x)
    torch.testing.assert_close(deep.hidden[4], shallow)


def test_pure_attention_block_is_attention_times_values():
    """san: X_{l+1} = sum_h A_h X W_V,h W_O,h exactly, no residual and no norm."""
    model = make("san", depth=1)
    attn = model.blocks[0].attn
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    y, trace = model(x, capture=True)
    v = (x @ attn.qkv.weight.T)[..., 32:].view(1, 5, 2, 8).transpose(1, 2)  # (B, H, n, dh)
    heads = (trace.attention[0] @ v).transpose(1, 2).reshape(1, 5, 16)
    torch.testing.assert_close(y, heads @ attn.proj.weight.T)


def test_deescalation_removes_the_token_mean_of_attention_output():
    torch.manual_seed(0)
    attn = Transformer(ModelConfig(width=16, heads=2, depth=1, deescalate=1.0)).blocks[0].attn
    y, _ = attn(torch.randn(4, 6, 16))
    torch.testing.assert_close(y.mean(dim=-2), torch.zeros(4, 16), atol=1e-6, rtol=0)
    torch.manual_seed(0)
    half = Transformer(ModelConfig(width=16, heads=2, depth=1, deescalate=0.5)).blocks[0].attn
    torch.manual_seed(0)
    plain = Transformer(ModelConfig(width=16, heads=2, depth=1)).blocks[0].attn
    x = torch.randn(4, 6, 16)
    y_half, y_plain = half(x)[0], plain(x)[0]
    torch.testing.assert_close(y_half, y_plain - 0.5 * y_plain.mean(dim=-2, keepdim=True))


def test_switches_resolve_to_modules():
    block = make("pre_ln").blocks[0]
    assert isinstance(block.attn_in, torch.nn.LayerNorm)
    assert isinstance(block.attn_out, torch.nn.Identity)
    block = make("san").blocks[0]
    assert block.skip == 0.0 and isinstance(block.ffn, torch.nn.Identity)


def test_unknown_option_fails_fast_with_its_name():
    with pytest.raises(KeyError, match="dropout"):
        ModelConfig.from_dict({"dropout": 0.1})
    with pytest.raises(ValueError, match="norm"):
        ModelConfig(norm="middle")
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(width=10, heads=3)
    with pytest.raises(ValueError, match="tau"):
        ModelConfig(deescalate=1.5)


def test_centred_attention_is_a_minus_uniform_times_values():
    torch.manual_seed(0)
    cfg = ModelConfig(width=16, heads=2, depth=1, center_attention=True, skip=False, mlp=False,
                      norm="none")
    attn = Transformer(cfg).double().blocks[0].attn
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    y, A = attn(x, capture=True)
    fused, _ = attn(x)
    v = (x @ attn.qkv.weight.T)[..., 32:].view(2, 6, 2, 8).transpose(1, 2)
    centred = (A - 1 / 6) @ v  # (A - (1/n) 1 1^T) V
    expected = centred.transpose(1, 2).reshape(2, 6, 16) @ attn.proj.weight.T
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(fused, expected)


def test_scaled_branches_use_one_over_sqrt_depth():
    torch.manual_seed(0)
    plain = make("san_skip", depth=4)
    torch.manual_seed(0)
    scaled = build({**PRESETS["san_skip"], "branch_scale": "inv_sqrt_depth"}, depth=4, width=16,
                   heads=2).double()
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    h, _ = plain.blocks[0].attn(x)
    torch.testing.assert_close(scaled.blocks[0](x)[0], x + h / 2)  # 1/sqrt(4)


def test_attention_biases_are_a_switch_off_by_default():
    """bias: the q, k, v and output maps get biases (BERT's attention, Dong et al.'s SAN):
    y = softmax((x W_q + b_q)(x W_k + b_k)^T / sqrt(d_h)) (x W_v + b_v) W_o + b_o, per head."""
    assert not any("bias" in n for n, _ in make("san").blocks[0].attn.named_parameters())
    torch.manual_seed(0)
    attn = Transformer(ModelConfig(width=16, heads=2, depth=1, bias=True)).double().blocks[0].attn
    with torch.no_grad():
        attn.qkv.bias.normal_()
        attn.proj.bias.normal_()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    q, k, v = (x @ attn.qkv.weight.T + attn.qkv.bias).split(16, dim=-1)
    q, k, v = (t.view(2, 5, 2, 8).transpose(1, 2) for t in (q, k, v))
    A = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1)
    expected = (A @ v).transpose(1, 2).reshape(2, 5, 16) @ attn.proj.weight.T + attn.proj.bias
    for capture in (False, True):
        torch.testing.assert_close(attn(x, capture=capture)[0], expected)


# --- de-escalation placements and causal attention ----------------------------------------


def _block(**switches):
    torch.manual_seed(0)
    cfg = ModelConfig(width=16, heads=2, depth=1, **{"norm": "post", **switches})
    return Transformer(cfg).double().blocks[0]


def test_output_placement_centres_after_the_post_ln():
    """deescalate_at=output: the attention sublayer's output (after its post-LN) has zero token
    mean; with deescalate_mlp the block output too."""
    x = torch.randn(3, 7, 16, dtype=torch.float64)
    out, mid, _ = _block(deescalate=1.0, deescalate_at="output", deescalate_mlp=True)(x)
    torch.testing.assert_close(mid.mean(-2), torch.zeros(3, 16, dtype=torch.float64))
    torch.testing.assert_close(out.mean(-2), torch.zeros(3, 16, dtype=torch.float64))
    out, mid, _ = _block(deescalate=1.0, deescalate_at="output")(x)
    torch.testing.assert_close(mid.mean(-2), torch.zeros(3, 16, dtype=torch.float64))
    assert out.mean(-2).abs().max() > 1e-3  # the MLP is left alone without deescalate_mlp


def test_branch_placement_leaves_the_post_ln_output_uncentred():
    x = torch.randn(3, 7, 16, dtype=torch.float64)
    _, mid, _ = _block(deescalate=1.0)(x)
    assert mid.mean(-2).abs().max() > 1e-3  # LN(x + centred branch) is not centred


def test_mlp_branch_is_centred_with_deescalate_mlp():
    block = _block(deescalate=1.0, deescalate_mlp=True, mlp=True)
    z = torch.randn(3, 7, 16, dtype=torch.float64)
    ffn = block.ffn
    h = ffn.centre_branch(ffn.f(ffn.inp(z)))
    torch.testing.assert_close(h.mean(-2), torch.zeros(3, 16, dtype=torch.float64))
    plain = _block(deescalate=1.0).ffn
    assert plain.centre_branch.__class__.__name__ == "Identity"


def test_placements_are_checked():
    with pytest.raises(ValueError, match="deescalate_at"):
        ModelConfig(deescalate_at="before")


def test_causal_attention_never_looks_ahead():
    """Changing a later token leaves every earlier output unchanged (both attention paths, with
    de-escalation and centred attention, which then use the prefix mean)."""
    for switches in ({}, {"deescalate": 1.0}, {"center_attention": True},
                     {"deescalate": 1.0, "deescalate_at": "output", "deescalate_mlp": True}):
        torch.manual_seed(0)
        model = Transformer(ModelConfig(width=16, heads=2, depth=2, causal=True,
                                        **switches)).double()
        x = torch.randn(2, 6, 16, dtype=torch.float64)
        y = x.clone()
        y[:, 4:] += 1.0
        for capture in (False, True):
            a, b = model(x, capture)[0], model(y, capture)[0]
            torch.testing.assert_close(a[:, :4], b[:, :4])
            assert (a[:, 4:] - b[:, 4:]).abs().max() > 1e-3
        _, trace = model(x, capture=True)
        assert torch.all(trace.attention[0].triu(1) == 0)  # lower-triangular


def test_prefix_mean():
    x = torch.arange(6.0).view(1, 3, 2)
    torch.testing.assert_close(token_mean(x, causal=True)[0, 1], x[0, :2].mean(0))
    torch.testing.assert_close(token_mean(x)[0, 0], x[0].mean(0))


# --- DeepNorm (Wang et al. 2022) -----------------------------------------------------------

TASK = {"inputs": "features", "input_dim": 12, "tokens": 5, "classes": 3,
        "readout": "class_token"}


def _task_model(seed: int, **switches) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_task_model(PRESETS["post_ln"], TASK, depth=32, width=16, heads=2, **switches)


@pytest.mark.parametrize("bias", [False, True])
def test_deepnorm_init_divides_v_proj_and_mlp_by_eight_l_to_the_quarter(bias):
    """N = 32: alpha = 64^(1/4) ~ 2.83 on every residual; the value rows of qkv, proj and both
    MLP matrices are exactly the ordinary init (same seed) / 256^(1/4) = 4; q and k rows,
    the LayerNorms, the embedding, positions and head are untouched."""
    cfg = ModelConfig(depth=32, deepnorm=True)
    assert cfg.skip_factor == pytest.approx(2.8284271247, rel=1e-9)
    assert cfg.deepnorm_init_divisor == 4.0
    plain, deep = _task_model(7, bias=bias), _task_model(7, bias=bias, deepnorm=True)
    for block in deep.stack.blocks:
        assert block.skip == cfg.skip_factor and block.ffn.skip == cfg.skip_factor
        assert block.scale == 1.0 and block.ffn.scale == 1.0  # branch_factor unchanged

    shrunk = {"attn.proj.weight", "attn.proj.bias", "ffn.f.0.weight", "ffn.f.0.bias",
              "ffn.f.2.weight", "ffn.f.2.bias"}
    ref = dict(plain.named_parameters())
    names = set()
    for name, p in deep.named_parameters():
        expected = ref[name].detach()
        local = name.split(".", 3)[-1] if name.startswith("stack.blocks.") else ""
        if local in shrunk:
            expected = expected / 4
        elif local in ("attn.qkv.weight", "attn.qkv.bias"):
            expected = torch.cat([expected[:32], expected[32:] / 4])  # q, k kept; v / 4
        torch.testing.assert_close(p.detach(), expected, rtol=0, atol=0)
        names.add(local)
    expected_names = {"attn.qkv.weight", "attn.proj.weight", "ffn.f.0.weight", "ffn.f.0.bias",
                      "ffn.f.2.weight", "ffn.f.2.bias"}
    assert expected_names | ({"attn.qkv.bias", "attn.proj.bias"} if bias else set()) <= names
    # The check has teeth: the shrunk weights really differ, q and k rows really agree.
    qkv_plain = plain.stack.blocks[5].attn.qkv.weight
    qkv_deep = deep.stack.blocks[5].attn.qkv.weight
    assert torch.equal(qkv_plain[:32], qkv_deep[:32])
    assert not torch.equal(qkv_plain[32:], qkv_deep[32:])
    f2 = (plain.stack.blocks[0].ffn.f[2].weight, deep.stack.blocks[0].ffn.f[2].weight)
    assert torch.equal(f2[0] / 4, f2[1]) and not torch.equal(*f2)


def test_deepnorm_init_constants_follow_depth():
    for depth in (1, 6, 100):
        cfg = ModelConfig(depth=depth, deepnorm=True)
        assert cfg.skip_factor == pytest.approx((2 * depth) ** 0.25)
        assert cfg.deepnorm_init_divisor == pytest.approx((8 * depth) ** 0.25)
    off = ModelConfig(depth=32)
    assert off.skip_factor == 1.0 and off.deepnorm_init_divisor == 1.0
    assert ModelConfig(depth=32, skip=False, norm="none").skip_factor == 0.0


def test_deepnorm_needs_post_ln_and_the_skip():
    for bad in ({"norm": "pre"}, {"norm": "none"}, {"skip": False}):
        with pytest.raises(ValueError, match="deepnorm.*norm='post' and skip=True"):
            ModelConfig(deepnorm=True, **bad)
    with pytest.raises(ValueError, match="deepnorm"):
        ModelConfig.from_dict({**PRESETS["post_ln_deepnorm"], "norm": "pre"})
    ModelConfig(deepnorm=True, mlp=False)  # attention + skip + post-LN alone is fine


def test_deepnorm_preset_builds_a_task_model_that_runs():
    torch.manual_seed(0)
    model = build_task_model(PRESETS["post_ln_deepnorm"], TASK, depth=4, width=16, heads=2)
    assert model.stack.cfg.deepnorm and model.stack.cfg.norm == "post"
    assert model.stack.blocks[0].skip == pytest.approx(8 ** 0.25)
    x = torch.randn(3, 5, 12)
    logits, trace = model(x, capture=True)
    assert logits.shape == (3, 3) and torch.isfinite(logits).all()
    assert len(trace.hidden) == 5
    torch.testing.assert_close(model(x)[0], logits)
    logits.sum().backward()  # and trains: every parameter gets a gradient
    assert all(p.grad is not None for p in model.parameters())
