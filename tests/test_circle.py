"""E3: the circle task, the recurrent one-layer model, training through the shared loop."""

from __future__ import annotations

import math

import pytest
import torch

from rankcollapse import circle
from rankcollapse.model import Block


def test_circle_pairs_sit_on_opposite_arcs_and_step_forward():
    data = circle.circle_task(points=100, radius=0.3, train_size=50, test_size=10, data_seed=1)
    assert data.x_train.shape == (50, 2, 2) and data.y_test.shape == (10, 2, 2)
    torch.testing.assert_close(data.x_train.norm(dim=-1), torch.full((50, 2), 0.3))
    angle = torch.atan2(data.x_train[..., 1], data.x_train[..., 0]) % (2 * math.pi)
    assert (angle[:, 0] < math.pi + 1e-6).all() and (angle[:, 1] >= math.pi - 1e-6).all()
    step = torch.atan2(data.y_train[..., 1], data.y_train[..., 0]) % (2 * math.pi) - angle
    torch.testing.assert_close(step % (2 * math.pi), torch.full((50, 2), 2 * math.pi / 100))
    again = circle.circle_task(points=100, train_size=50, test_size=10, data_seed=1)
    assert torch.equal(again.x_train, data.x_train)


@pytest.mark.parametrize("setup", sorted(circle.SETUPS))
def test_setups_wire_the_layer_as_documented(setup):
    model = circle.CircleModel(setup, width=8, heads=2)
    spec = circle.SETUPS[setup]
    block: Block = model.layer
    original = spec["protocol"] == "original"
    assert block.skip == float(original)  # the layer's own residual: original protocol only
    assert isinstance(block.attn_out, torch.nn.LayerNorm) == original
    assert isinstance(model.embed_norm, torch.nn.LayerNorm) == original
    assert isinstance(block.ffn, torch.nn.Identity) != spec["mlp"]
    x = torch.randn(3, 2, 2)
    out, attn = model(x, capture=True)
    assert out.shape == (3, 2, 2) and attn.shape == (3, 2, 2, 2)
    with torch.no_grad():
        f = model.head(model.layer(model.embed_norm(model.embed(x)))[0])
    torch.testing.assert_close(out, x + f if spec["skip"] else f)  # skip = recurrence residual


def test_training_through_the_shared_loop_learns_the_step_and_rolls_out():
    table = circle.run_job("attn_skip", width=16, heads=2, mlp_ratio=2,
                           task_options={"points": 100, "train_size": 400, "test_size": 50},
                           train_options={"steps": 150, "batch": 32, "lr": 3e-3, "warmup": 10,
                                          "eval_every": 150, "checkpoint_every": 0},
                           rollout_steps=20, starts=3, seed=0)
    assert set(table.step) == set(range(21)) and len(table) == 21 * 3 * 2
    assert table.test_mse.iloc[0] < 1e-3  # a step moves a point by 0.019: learned well below
    start = table[table.step == 0]
    assert (start.relative_residual > 0.5).all()  # opposite points: the pair is far from rank 1
