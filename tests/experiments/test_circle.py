"""E3: the circle data, the recurrent one-layer model, collapse times, training as ensembles."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rankcollapse.core.model import Block
from rankcollapse.experiments import circle


def test_the_original_pairs_sit_on_opposite_arcs_and_step_forward():
    data = circle.circle_task(points=100, radius=0.3)
    m = 100 // 2 - 1
    assert data.x_train.shape == (m, 2, 2) and torch.equal(data.x_test, data.x_train)
    torch.testing.assert_close(data.x_train.norm(dim=-1), torch.full((m, 2), 0.3))
    angle = torch.atan2(data.x_train[..., 1], data.x_train[..., 0]) % (2 * math.pi)
    one = 2 * math.pi / 100
    torch.testing.assert_close(angle[:, 0], torch.arange(m) * one)  # token 1: p_i, in order
    torch.testing.assert_close((angle[:, 1] - angle[:, 0]) % (2 * math.pi),
                               torch.full((m,), m * one))  # token 2: p_{i+m}, the opposite arc
    step = torch.atan2(data.y_train[..., 1], data.y_train[..., 0]) % (2 * math.pi) - angle
    torch.testing.assert_close(step % (2 * math.pi), torch.full((m, 2), one))
    starts = circle.start_pairs(data, 4)
    assert torch.equal(starts[0], data.x_train[0]) and len(starts) == 4


@pytest.mark.parametrize("setup", sorted(circle.SETUPS))
def test_setups_wire_the_layer_as_documented(setup):
    model = circle.CircleModel(setup, width=8, heads=2)
    spec = circle.SETUPS[setup]
    block: Block = model.layer
    original = spec["protocol"] == "original"
    assert block.skip == float(original)  # the layer's own residual: original protocol only
    assert isinstance(block.attn_out, torch.nn.LayerNorm) == original
    assert isinstance(model.embed_norm, torch.nn.LayerNorm) == original
    assert (block.attn.proj.bias is not None) == original  # biases: the original's BERT layer
    assert isinstance(block.ffn, torch.nn.Identity) != spec["mlp"]
    x = torch.randn(3, 2, 2)
    out, attn = model(x, capture=True)
    assert out.shape == (3, 2, 2) and attn.shape == (3, 2, 2, 2)
    with torch.no_grad():
        f = model.head(model.layer(model.embed_norm(model.embed(x)))[0])
    torch.testing.assert_close(out, x + f if spec["skip"] else f)  # skip = recurrence residual


def test_the_original_setups_start_from_the_bert_initialisation():
    torch.manual_seed(0)
    model = circle.CircleModel("ln_mlp", width=128)
    d = 128
    q = model.layer.attn.qkv.weight[:d].detach()
    v = model.layer.attn.qkv.weight[2 * d:].detach()
    head = model.head.weight.detach()
    assert abs(float(q.std()) - 0.02) < 0.002 and abs(float(head.std()) - 0.02) < 0.01
    assert abs(float(v.std()) - 1 / math.sqrt(3 * d)) < 0.005  # Kaiming-uniform, a = sqrt(5)
    assert float(model.layer.attn.qkv.bias.detach().abs().max()) == 0.0
    assert model.layer.ffn.f[0].weight.shape == (d, d)  # mlp_ratio 1: hidden width d


def test_collapse_step_finds_merging_and_stalling_and_ignores_the_last_steps():
    T, thr = 100, 0.03
    moving = np.stack([np.stack([np.cos(a), np.sin(a)], -1) * 0.3
                       for a in (np.arange(T + 1) * 0.01, np.arange(T + 1) * 0.01 + np.pi)], 1)
    assert math.isnan(circle.collapse_step(moving, thr, min_stall=48)["collapse_step"])
    merged = moving.copy()
    merged[40:, 1] = merged[40:, 0] + 0.01  # token 2 joins token 1 at step 40, still moving
    out = circle.collapse_step(merged, thr, min_stall=48)
    assert out["merge_step"] == 40 and out["collapse_step"] == 40
    assert math.isnan(out["stall_step"])
    stalled = moving.copy()
    stalled[30:] = stalled[30]  # both stop at step 30, apart
    out = circle.collapse_step(stalled, thr, min_stall=48)
    assert math.isnan(out["merge_step"]) and out["stall_step"] <= 30 and out["collapse_step"] <= 30
    late = moving.copy()
    late[80:] = late[80]  # a stop over the last 20 steps is too short to tell from motion
    assert math.isnan(circle.collapse_step(late, thr, min_stall=48)["collapse_step"])
    blown = moving.copy()
    blown[50:] = np.nan  # a diverged roll-out has not collapsed
    assert math.isnan(circle.collapse_step(blown, thr, min_stall=48)["collapse_step"])


def test_training_all_seeds_as_one_ensemble_learns_the_step_and_rolls_out():
    table = circle.run_job(["ln_skip", "attn"], width=16, heads=2, mlp_ratio=1,
                           task_options={"points": 100},
                           train_options={"steps": 150, "batch": 16, "lr": 3e-3, "warmup": 1,
                                          "schedule": "constant", "weight_decay": 0.0,
                                          "clip": None, "eval_every": 150,
                                          "checkpoint_every": 0},
                           rollout_steps=20, starts=3, seeds=[0, 1])
    assert set(table.step) == set(range(21)) and len(table) == 2 * 2 * 21 * 3 * 2
    assert set(table.seed) == {0, 1} and set(table.setup) == {"ln_skip", "attn"}
    mse = table[table.setup == "ln_skip"].groupby("seed").train_mse.first()
    assert (mse < 1e-3).all()  # a step moves a point by 0.019: learned well below
    start = table[table.step == 0]
    assert (start.pair_distance > 0.5).all()  # opposite points, 0.6 apart
    times = circle.collapse_steps(table)
    assert len(times) == 2 * 2 * 3 and set(times.columns) >= {"merge_step", "stall_step",
                                                          "collapse_step", "last_step"}
    again = circle.run_setup("ln_skip", width=16, heads=2, mlp_ratio=1,
                           task_options={"points": 100},
                           train_options={"steps": 150, "batch": 16, "lr": 3e-3, "warmup": 1,
                                          "schedule": "constant", "weight_decay": 0.0,
                                          "clip": None, "eval_every": 150,
                                          "checkpoint_every": 0},
                           rollout_steps=20, starts=3, seeds=[1])
    one = table[(table.seed == 1) & (table.setup == "ln_skip")].reset_index(drop=True)
    np.testing.assert_allclose(again.x.to_numpy(), one.x.to_numpy(), rtol=1e-4, atol=1e-6)
