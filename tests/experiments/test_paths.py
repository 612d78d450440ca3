"""Path-length decomposition (E2): exactness of the dynamic programme and its protocols."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rankcollapse.core.specs import PRESETS
from rankcollapse.core.tasks import make_task
from rankcollapse.experiments import paths
from rankcollapse.training.train import new_model

TASK_OPTIONS = {
    "sorting": {"train_size": 32, "test_size": 8},
    "memorisation": {"train_size": 32, "test_size": 8},
    "hull": {"train_size": 32, "test_size": 8},
}


def _model(task: str, depth: int, heads: int = 2, variant: str = "san_skip", **extra):
    data = make_task(task, **TASK_OPTIONS[task])
    model = new_model(data.spec, {**PRESETS[variant], **extra},
                      {"width": 12, "heads": heads, "depth": depth}, seed=1).double().eval()
    x = data.x_test if data.spec.inputs == "tokens" else data.x_test.double()
    return model, x, data.y_test


@pytest.mark.parametrize("task", sorted(TASK_OPTIONS))
@pytest.mark.parametrize("depth", [1, 3, 6])
def test_all_lengths_sum_to_the_forward_output(task, depth):
    model, x, _ = _model(task, depth)
    _, trace = model(x, capture=True)
    P = paths.path_sums(model, x)
    assert P.shape == (depth + 1, *trace.hidden[-1].shape)
    torch.testing.assert_close(P.sum(0), trace.hidden[-1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(P[0], trace.hidden[0])  # length 0: the input itself


def test_branch_scaled_network_still_decomposes():
    model, x, _ = _model("sorting", 4, branch_scale="inv_sqrt_depth")
    _, trace = model(x, capture=True)
    torch.testing.assert_close(paths.path_sums(model, x).sum(0), trace.hidden[-1],
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("depth", "heads"), [(2, 1), (4, 2), (5, 3)])
def test_dynamic_programme_equals_explicit_enumeration(depth, heads):
    model, x, _ = _model("hull", depth, heads=heads)
    torch.testing.assert_close(paths.path_sums(model, x), paths.enumerate_paths(model, x),
                               rtol=1e-11, atol=1e-12)
    assert sum(paths.path_counts(depth, heads)) == (heads + 1) ** depth


def test_accuracies_full_length_matches_the_network():
    model, x, y = _model("sorting", 3)
    table = paths.exact_accuracies(model, x, y).set_index(["protocol", "k"]).accuracy
    assert table[("exact_up_to", 3)] == pytest.approx(table[("full", 3)])
    sampled = paths.sampled_path_accuracy(model, x, y, samples=[2, 5], repeats=3, seed=0)
    assert list(sampled.k) == [0, 1, 2, 3] * 2 and list(sampled.samples) == [2] * 4 + [5] * 4
    assert sampled.accuracy.between(0, 1).all()
    again = paths.sampled_path_accuracy(model, x, y, samples=[2, 5], repeats=3, seed=0)
    assert sampled.equals(again)  # seeded


@pytest.mark.parametrize("variant", ["post_ln", "san", "pre_ln"])
def test_non_decomposable_variants_are_refused(variant):
    model, x, _ = _model("sorting", 2, variant=variant)
    with pytest.raises(ValueError, match="san_skip"):
        paths.path_sums(model, x)


def test_the_exact_sums_refuse_biases():
    model, x, _ = _model("sorting", 2, bias=True)
    with pytest.raises(ValueError, match="bias must be off"):
        paths.path_sums(model, x)


@pytest.mark.parametrize("variant", ["post_ln", "pre_ln", "san", "san_ln"])
def test_the_sampled_protocol_refuses_what_is_not_a_path_network(variant):
    model, x, y = _model("sorting", 2, variant=variant)
    with pytest.raises(ValueError, match="paths need attention"):
        paths.sampled_path_accuracy(model, x, y, samples=1, repeats=2)


@pytest.mark.parametrize(("depth", "heads"), [(6, 2), (6, 3), (3, 1)])
@pytest.mark.parametrize("length", range(7))
def test_a_sampled_path_of_length_k_uses_k_layers_with_one_head_each(depth, heads, length):
    rng = np.random.default_rng(length)
    for _ in range(20):
        if length > depth:
            with pytest.raises(ValueError, match="outside"):
                paths.sample_path(depth, heads, length, rng)
            return
        path = paths.sample_path(depth, heads, length, rng)
        active = [h for h in path if h is not None]
        assert len(path) == depth and len(active) == length
        assert all(isinstance(h, int) and 0 <= h < heads for h in active)  # one head, not all


def test_a_path_runs_exactly_its_active_layers_and_heads():
    """path_forward on a length-k path = k one-head layers applied by hand, in layer order, the
    inactive ones skipped; no other layer's weights matter."""
    model, x, _ = _model("sorting", 4, heads=2, variant="san_skip_ln_bias")
    h0 = paths.embed(model, x)
    path = [None, 1, None, 0]
    by_hand = h0
    for block, head in zip(model.stack.blocks, path, strict=True):
        if head is not None:
            branch = paths.head_branch(block.attn, by_hand, head)
            by_hand = torch.nn.functional.layer_norm(branch, branch.shape[-1:])
    torch.testing.assert_close(paths.path_forward(model, h0, path), by_hand)
    with torch.no_grad():  # layers off the path do not matter
        for name in ("qkv", "proj"):
            getattr(model.stack.blocks[0].attn, name).weight.mul_(3.0)
            getattr(model.stack.blocks[2].attn, name).weight.mul_(-2.0)
    torch.testing.assert_close(paths.path_forward(model, h0, path), by_hand)


def test_one_head_branch_is_that_heads_share_of_the_layer():
    """Summed over heads, the one-head branches (biases counted once) give the full layer."""
    model, x, _ = _model("hull", 1, heads=3, variant="san_skip_ln_bias")
    attn, h = model.stack.blocks[0].attn, paths.embed(model, x)
    with torch.no_grad():
        attn.proj.bias.normal_()
        attn.qkv.bias.normal_()
    heads = sum(paths.head_branch(attn, h, i) - attn.proj.bias for i in range(3))
    full = paths.head_branch(attn, h, paths.ALL_HEADS) - attn.proj.bias
    torch.testing.assert_close(heads, full)
    with torch.no_grad():
        torch.testing.assert_close(full + attn.proj.bias, attn(h)[0])


@pytest.mark.parametrize("variant", ["san_skip_ln_bias", "san_skip"])
@pytest.mark.parametrize("task", sorted(TASK_OPTIONS))
def test_every_layer_and_every_head_with_residuals_is_the_full_network(variant, task):
    model, x, y = _model(task, 6, heads=2, variant=variant)
    with torch.no_grad():  # trained-looking biases and LayerNorm gains, not the zero/one init
        for name, p in model.named_parameters():
            if "bias" in name or "attn_out" in name:
                p.normal_(0.0, 0.3)
    h0 = paths.embed(model, x)
    every = [paths.ALL_HEADS] * 6
    full, _ = model.stack(h0)
    torch.testing.assert_close(paths.path_forward(model, h0, every, residual=True), full,
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(paths.readout(model, full), model(x)[0], rtol=1e-12, atol=1e-12)
    # Without residuals (the original protocol's path layers) it is a different function.
    assert not torch.allclose(paths.path_forward(model, h0, every), full)


def test_path_measurements_of_both_networks(tmp_path):
    """measure_saved on a post-LN network with biases gives full and sampled rows (no exact
    sums); on the LN-free network also the exact ones, whose full length is the network."""
    from rankcollapse.training.train import run_job

    tables = {}
    for variant in ("san_skip_ln_bias", "san_skip"):
        model_path = tmp_path / f"{variant}.pt"
        run_job("sorting", TASK_OPTIONS["sorting"], PRESETS[variant],
                {"width": 8, "heads": 2, "depth": 2},
                {"steps": 3, "batch": 4, "warmup": 1, "eval_every": 3, "checkpoint_every": 0},
                seed=0, model_path=model_path, history_path=tmp_path / f"{variant}.parquet")
        tables[variant] = paths.measure_job(model_path, eval_size=8, samples=[2, 3], repeats=2)
    original, ln_free = tables["san_skip_ln_bias"], tables["san_skip"]
    assert set(original.protocol) == {"full", "sampled"}
    assert (original.network == "post_ln").all() and original.bias.all()
    assert set(ln_free.protocol) == {"full", "sampled", "exact_up_to", "exact_exactly"}
    assert (ln_free.network == "ln_free").all() and not ln_free.bias.any()
    acc = ln_free.set_index(["protocol", "k"]).accuracy
    assert acc[("exact_up_to", 2)] == pytest.approx(acc[("full", 2)])
    assert set(original[original.protocol == "sampled"].samples) == {2, 3}
    assert (original[original.protocol != "sampled"].samples == 0).all()


@pytest.mark.parametrize("variant", ["san_skip_ln_bias", "san_skip"])
def test_paths_run_together_equal_paths_run_one_by_one(variant):
    model, x, _ = _model("hull", 5, heads=3, variant=variant)
    h0 = paths.embed(model, x)
    rng = np.random.default_rng(0)
    drawn = [paths.sample_path(5, 3, k, rng) for k in (0, 1, 2, 2, 3, 5, 5)]
    together = paths.paths_forward(model, h0, drawn)
    for i, path in enumerate(drawn):
        torch.testing.assert_close(together[i], paths.path_forward(model, h0, path))
