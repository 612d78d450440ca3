"""Path-length decomposition (E2): exactness of the dynamic programme and its protocols."""

from __future__ import annotations

import pytest
import torch

from rankcollapse import paths
from rankcollapse.model import PRESETS
from rankcollapse.tasks import make_task
from rankcollapse.train import new_model

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
    sampled = paths.sampled_path_accuracy(model, x, y, samples=2, repeats=3, seed=0)
    assert list(sampled.k) == [0, 1, 2, 3] and sampled.accuracy.between(0, 1).all()
    again = paths.sampled_path_accuracy(model, x, y, samples=2, repeats=3, seed=0)
    assert sampled.equals(again)  # seeded


@pytest.mark.parametrize("variant", ["post_ln", "san", "pre_ln"])
def test_non_decomposable_variants_are_refused(variant):
    model, x, _ = _model("sorting", 2, variant=variant)
    with pytest.raises(ValueError, match="san_skip"):
        paths.path_sums(model, x)
