"""The selection rule (rankcollapse.training.selection): settings ranked by the mean validation
metric over the tuning seeds, and how clear the choice was (runner-up, margin, spread, near tie),
on sweep rows built to land in each case."""

import math

import pandas as pd
import pytest

from rankcollapse.training import selection


def rows(values, warmup=10):
    """values: {lr: [(val_loss, val_accuracy, diverged) per tuning seed]}."""
    return pd.DataFrame([{"seed": 100 + s, "peak_lr": lr, "warmup": warmup, "weight_decay": 0.01,
                          "val_loss": lo, "val_accuracy": acc, "diverged": d}
                         for lr, per_seed in values.items()
                         for s, (lo, acc, d) in enumerate(per_seed)])


def test_settings_rank_by_mean_validation_loss_and_a_diverged_run_is_worst():
    sweep = rows({1e-3: [(0.5, 0.9, False), (0.7, 0.8, False)],  # mean loss 0.6
                  1e-2: [(0.4, 0.7, False), (0.6, 0.7, False)],  # 0.5: best by loss
                  3e-2: [(0.1, 0.99, False), (math.nan, math.nan, True)]})  # one diverged
    assert [r["lr"] for r in selection.rank(sweep)] == [1e-2, 1e-3, 3e-2]
    # by accuracy the first setting wins (0.85 > 0.7); the diverged one counts 0 -> inf score
    assert [r["lr"] for r in selection.rank(sweep, "accuracy")] == [1e-3, 1e-2, 3e-2]
    assert selection.rank(sweep.iloc[::-1]) == selection.rank(sweep)  # row order is irrelevant
    with pytest.raises(ValueError, match="allowed values"):
        selection.rank(sweep, "bleu")


def test_ties_go_to_the_smaller_learning_rate():
    sweep = rows({1e-2: [(0.5, 0.8, False)], 1e-3: [(0.5, 0.8, False)]})
    assert selection.rank(sweep)[0]["lr"] == 1e-3


def test_a_clear_choice_is_no_near_tie():
    d = selection.decision(rows({1e-3: [(0.50, 0, False), (0.52, 0, False), (0.48, 0, False)],
                                 1e-2: [(0.80, 0, False), (0.83, 0, False), (0.77, 0, False)]}))
    assert d["selected"]["lr"] == 1e-3 and d["runner_up"]["lr"] == 1e-2
    assert d["margin"] == pytest.approx(0.30)
    assert d["spread"] == pytest.approx(pd.Series([0.30, 0.31, 0.29]).std())
    assert d["wins"] == 3 and d["seeds"] == 3 and not d["near_tie"]


def test_a_margin_inside_the_seed_to_seed_spread_is_a_near_tie():
    # The case: two rates whose order flips from seed to seed.
    d = selection.decision(rows({3e-4: [(2.10, 0, False), (1.90, 0, False), (2.00, 0, False)],
                                 1e-3: [(1.99, 0, False), (2.05, 0, False), (2.02, 0, False)]}))
    assert d["selected"]["lr"] == 3e-4 and d["runner_up"]["lr"] == 1e-3
    assert 0 < d["margin"] < d["spread"] and d["near_tie"]
    assert d["wins"] == 2  # the runner-up won on the first seed


def test_one_setting_or_one_seed_leaves_nothing_to_measure_the_margin_by():
    alone = selection.decision(rows({1e-3: [(0.5, 0.9, False)] * 3}))
    assert alone["runner_up"] is None and math.isnan(alone["margin"]) and not alone["near_tie"]
    one_seed = selection.decision(rows({1e-3: [(0.5, 0.9, False)], 1e-2: [(0.6, 0.9, False)]}))
    assert one_seed["margin"] == pytest.approx(0.1) and math.isnan(one_seed["spread"])
    assert not one_seed["near_tie"]


def test_decisions_read_each_arms_last_rung():
    rung0 = rows({1e-3: [(0.9, 0, False)] * 3, 1e-2: [(0.8, 0, False)] * 3,
                  1e-1: [(2.0, 0, False)] * 3}).assign(rung=0, rung_steps=10)
    rung1 = rows({1e-3: [(0.30, 0, False), (0.31, 0, False), (0.29, 0, False)],
                  1e-2: [(0.40, 0, False), (0.42, 0, False), (0.38, 0, False)]}).assign(
        rung=1, rung_steps=30)
    final = rows({1e-3: [(0.2, 0, False)] * 2}).assign(rung=pd.NA, rung_steps=90, role="final")
    table = pd.concat([rung0.assign(role="sweep"), rung1.assign(role="sweep"), final]).assign(
        task="digits", variant="pre_ln", depth=8, metric="loss")
    d = selection.decisions(table).iloc[0]
    assert (d.rung, d.rung_steps, d.selected_lr, d.runner_up_lr) == (1, 30, 1e-3, 1e-2)
    assert d.margin == pytest.approx(0.1) and d.tuning_seeds == 3 and not d.near_tie
