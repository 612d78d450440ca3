"""Per-arm tuning (rankcollapse.tuning): the grid, the selection rule, and one tiny tuned job."""

import math

import pandas as pd
import pytest

from rankcollapse import tuning
from rankcollapse.model import PRESETS
from rankcollapse.tasks import make_task


def test_grid_is_the_product_and_scalars_are_sweeps_of_one():
    g = tuning.grid({"lr": [1e-3, 1e-2], "warmup": [10, 40], "weight_decay": 0.01})
    assert len(g) == 4 and {x["weight_decay"] for x in g} == {0.01}
    assert tuning.grid({"lr": 1e-3, "warmup": 5, "weight_decay": 0.0}) == [
        {"lr": 1e-3, "warmup": 5, "weight_decay": 0.0}]


def sweep_rows(values):
    """values: [(lr, warmup, val_accuracy, val_loss, diverged)] for one tuning seed."""
    return pd.DataFrame([{"peak_lr": lr, "warmup": w, "weight_decay": 0.01, "val_accuracy": a,
                          "val_loss": lo, "diverged": d} for lr, w, a, lo, d in values])


def test_selection_maximises_validation_accuracy_and_breaks_ties_on_loss():
    rows = sweep_rows([(1e-3, 10, 0.8, 0.5, False), (1e-2, 10, 0.9, 0.4, False),
                       (1e-2, 40, 0.9, 0.3, False), (3e-2, 10, 0.95, math.nan, True)])
    assert tuning.select(rows, "accuracy") == {"lr": 1e-2, "warmup": 40, "weight_decay": 0.01}


def test_selection_on_loss_for_language_models_and_diverged_is_worst():
    rows = sweep_rows([(1e-3, 10, 0.3, 2.0, False), (1e-2, 10, 0.4, 1.5, False),
                       (3e-2, 10, math.nan, math.nan, True)])
    assert tuning.select(rows, "loss")["lr"] == 1e-2


def test_selection_averages_over_tuning_seeds():
    rows = pd.concat([sweep_rows([(1e-3, 10, 0.9, 0.1, False), (1e-2, 10, 0.8, 0.2, False)]),
                      sweep_rows([(1e-3, 10, 0.5, 0.9, False), (1e-2, 10, 0.8, 0.2, False)])])
    assert tuning.select(rows, "accuracy")["lr"] == 1e-2


def test_a_task_without_a_validation_split_cannot_be_tuned():
    with pytest.raises(ValueError, match="no validation split"):
        tuning.validation_data(make_task("sorting", train_size=20, test_size=10))


def test_final_seeds_must_be_fresh(tmp_path):
    with pytest.raises(ValueError, match="fresh"):
        tuning.run_tuned_job("digits", {}, PRESETS["post_ln"], {}, {}, {}, [0], [0, 1],
                             tmp_path / "e.pt", tmp_path / "h.parquet", tmp_path / "t.parquet")


def test_a_tiny_tuned_job_writes_sweep_and_final_rows(tmp_path):
    chosen = tuning.run_tuned_job(
        "digits", {}, PRESETS["post_ln_deesc"],
        {"width": 8, "heads": 2, "mlp_ratio": 1, "depth": 1},
        {"steps": 4, "batch": 8, "clip": 1.0, "checkpoint_every": 0, "eval_every": 4},
        {"lr": [1e-3, 1e-2], "warmup": 2, "weight_decay": 0.0}, [100], [0, 1],
        tmp_path / "ensemble.pt", tmp_path / "history.parquet", tmp_path / "tuning.parquet",
        extra_columns={"task": "digits", "variant": "post_ln_deesc", "depth": 1})
    table = pd.read_parquet(tmp_path / "tuning.parquet")
    assert list(table.role) == ["sweep", "sweep", "final", "final"]
    assert set(table[table.role == "final"].seed) == {0, 1}
    final = table[table.role == "final"]
    assert (final.peak_lr == chosen["lr"]).all() and final.selected.all()
    assert table[table.role == "sweep"].selected.sum() == 1
    assert final.test_accuracy.notna().all() and final.val_accuracy.notna().all()
    assert table[table.role == "sweep"].test_accuracy.isna().all()  # never looked at test
    history = pd.read_parquet(tmp_path / "history.parquet")
    assert set(history.seed) == {0, 1}
    from rankcollapse.ensemble import load_members

    assert [m["settings"]["seed"] for m in load_members(tmp_path / "ensemble.pt")] == [0, 1]
