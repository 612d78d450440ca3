"""E1b: real architectures from their configs (offline), their path ablations and checkpoints."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may touch the network
pytest.importorskip("transformers")

from rankcollapse import probe  # noqa: E402
from rankcollapse.probe import realarch  # noqa: E402

TINY = {  # small enough to build in milliseconds; vocabulary above probe.FIRST_ID
    "bert": {"vocab_size": 1200, "hidden_size": 32, "num_hidden_layers": 3,
             "num_attention_heads": 2, "intermediate_size": 64},
    "albert": {"vocab_size": 1200, "embedding_size": 16, "hidden_size": 32,
               "num_hidden_layers": 3, "num_attention_heads": 2, "intermediate_size": 64},
    "xlnet": {"vocab_size": 1200, "d_model": 32, "n_layer": 3, "n_head": 2, "d_head": 16,
              "d_inner": 64},
}
FFN_NAMES = {"bert": "intermediate.dense", "albert": "ffn", "xlnet": "ff.layer_1"}


def tiny(model: str, seed: int = 0) -> nn.Module:
    return realarch.build(model, seed, config_overrides=TINY[model])


def ids(batch: int = 3, tokens: int = 10) -> torch.Tensor:
    return realarch.random_ids(batch, tokens, 1200, seed=0)


def test_base_configs_are_base_size():
    for model in realarch.MODELS:
        c = probe.base_config(model)
        width = getattr(c, "hidden_size", None) or c.d_model
        layers = getattr(c, "num_hidden_layers", None) or c.n_layer
        assert (width, layers) == (768, 12), model
    albert = probe.base_config("albert")
    assert albert.embedding_size == 128 and albert.intermediate_size == 3072
    assert albert.num_hidden_groups == 1  # one set of weights shared by all 12 layers
    assert probe.base_config("xlnet").d_inner == 3072


@pytest.mark.parametrize("model", realarch.MODELS)
@pytest.mark.parametrize("ablation", list(realarch.ABLATIONS))
def test_ablated_module_tree(model, ablation):
    net = tiny(model)
    if ablation in realarch.ALBERT_ONLY and model != "albert":
        with pytest.raises(ValueError, match="ALBERT only"):
            realarch.ablate(net, model, ablation)
        return
    ablated = realarch.ablate(net, model, ablation)
    skip, ffn = realarch.ABLATIONS[ablation]
    names = dict(ablated.named_modules())
    wrappers = {type(m).__name__ for m in names.values()}
    no_skip = {"BertSelfOutputAblated", "AlbertAttentionAblated", "XLNetAttentionAblated"}
    assert bool(no_skip & wrappers) == (not skip)
    # The attention's LayerNorm survives the skip's removal.
    attn_norms = [n for n, m in names.items() if isinstance(m, nn.LayerNorm)
                  and ("attention" in n or "rel_attn" in n)]
    assert attn_norms, sorted(names)
    # The feed-forward block is gone (or kept) entirely.
    has_ffn = any(n.endswith(FFN_NAMES[model]) and not isinstance(m, nn.Identity)
                  for n, m in names.items())
    assert has_ffn == ffn
    # The original model is untouched, and the copy reads the original's weights (no copies).
    assert not no_skip & {type(m).__name__ for m in net.modules()}
    originals = {p.data_ptr() for p in net.parameters()}
    assert {p.data_ptr() for p in ablated.parameters()} <= originals


@pytest.mark.parametrize("model", realarch.MODELS)
def test_capture_matches_the_library_and_transformer_is_the_model(model):
    net = tiny(model)
    x = ids()
    with torch.no_grad():
        reference = net(input_ids=x, output_hidden_states=True).hidden_states
    states = realarch.hidden_states(realarch.ablate(net, model, "transformer"), model, x)
    assert len(states) == TINY[model].get("num_hidden_layers", TINY[model].get("n_layer")) + 1
    for ours, theirs in zip(states, reference, strict=True):
        torch.testing.assert_close(ours, theirs)


def test_albert_wrapper_with_skip_is_albert_attention():
    net = tiny("albert")
    x = ids()
    layer = net.encoder.albert_layer_groups[0].albert_layers[0]
    h = net.encoder.embedding_hidden_mapping_in(net.embeddings(input_ids=x))
    with torch.no_grad():
        expected = layer.attention(h)[0]
        got = probe.AlbertAttentionAblated(layer.attention, skip=True)(h)[0]
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("model", realarch.MODELS)
def test_san_collapses_and_skip_does_not(model):
    net = tiny(model)
    x = ids()
    r = {ab: realarch.residual_table(realarch.hidden_states(realarch.ablate(net, model, ab),
                                                            model, x))
         for ab in ("san", "san_skip")}
    last = {ab: t[t.layer == t.layer.max()].relative_residual_comp.mean() for ab, t in r.items()}
    assert last["san"] < 1e-3
    assert last["san_skip"] > 0.05


@pytest.mark.parametrize("model", realarch.MODELS)
def test_san_keeps_a_collapsed_input_collapsed(model):
    """All tokens equal in, all tokens equal out: pure attention cannot create rank."""
    net = realarch.ablate(tiny(model), model, "san")
    x = torch.full((2, 8), 1100)
    if model == "bert":  # positions would make the tokens differ; remove them
        net.embeddings.position_embeddings.weight.data.zero_()
    if model == "albert":
        net.embeddings.position_embeddings.weight.data.zero_()
    states = realarch.hidden_states(net, model, x)
    # XLNet has no absolute positions, but its relative-position scores still vary per query;
    # with equal tokens the values are equal, so every token's output is the same mean anyway.
    spread = states[-1] - states[-1].mean(dim=1, keepdim=True)
    assert spread.abs().max() < 1e-5


def test_checkpoint_directory_is_loaded_offline(tmp_path):
    net = tiny("bert", seed=3)
    net.save_pretrained(tmp_path)
    loaded = realarch.build("bert", checkpoint=tmp_path)
    for (name, a), b in zip(net.state_dict().items(), loaded.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    table = realarch.run("bert", 0, ["random"], ["san", "transformer"], batch=2, tokens=6,
                         checkpoint=tmp_path)
    assert set(table.weights) == {"pretrained"}
    assert set(table.ablation) == {"san", "transformer"}
    assert table.layer.max() == 3


def test_inputs_random_and_package_text():
    a, b = (realarch.model_inputs("random", 4, 16, 1200, seed=1) for _ in range(2))
    assert torch.equal(a, b) and a.min() >= probe.FIRST_ID and a.max() < 1200
    text = realarch.model_inputs("text", 32, 128, 30000, seed=0)
    assert text.shape == (32, 128) and text.min() >= probe.FIRST_ID
    assert len(text.unique()) < text.numel() / 2  # real text repeats its words
    with pytest.raises(ValueError, match="allowed values"):
        realarch.model_inputs("wiki", 1, 1, 1200, seed=0)
