"""Summaries of tuning tables (rankcollapse.experiments.trained): which arms selected a setting
on an edge
of the grid their sweep tried (grid_edges, edge_mark). Synthetic tables, no training."""

import itertools
import math

import pandas as pd

from rankcollapse.experiments.trained import edge_mark, grid_edges

KEYS = ["task", "variant", "depth"]


def arm_rows(task, variant, depth, rungs, chosen, tuning="grid"):
    """The tuning rows of one arm: rungs = [(lrs, warmups, weight_decays), ...] (rung r trains
    their product on two tuning seeds); chosen = (lr, warmup, weight_decay), flagged selected
    at the last rung; then two final members at the chosen setting."""
    rows = []
    for rung, (lrs, warmups, wds) in enumerate(rungs):
        for seed, lr, w, wd in itertools.product([100, 101], lrs, warmups, wds):
            rows.append({"task": task, "variant": variant, "depth": depth, "role": "sweep",
                         "seed": seed, "peak_lr": lr, "warmup": w, "weight_decay": wd,
                         "selected": rung == len(rungs) - 1 and (lr, w, wd) == chosen,
                         "rung": rung, "val_accuracy": 0.5, "val_loss": 1.0, "tuning": tuning})
    for seed in (0, 1):
        rows.append({"task": task, "variant": variant, "depth": depth, "role": "final",
                     "seed": seed, "peak_lr": chosen[0], "warmup": chosen[1],
                     "weight_decay": chosen[2], "selected": True, "rung": None,
                     "val_accuracy": 0.5, "val_loss": 1.0, "tuning": tuning})
    return rows


LRS = [1e-3, 3e-3, 1e-2, 3e-2]


def synthetic_tuning() -> pd.DataFrame:
    rows = (
        # the low edge of lr, the high edge of warm-up
        arm_rows("digits", "post_ln", 2, [(LRS, [10, 40], [0.01])], (1e-3, 40, 0.01))
        # the high edge of lr, the low edge of warm-up
        + arm_rows("digits", "post_ln", 4, [(LRS, [10, 40], [0.01])], (3e-2, 10, 0.01))
        # inside in every setting
        + arm_rows("digits", "pre_ln", 2, [(LRS, [10, 20, 40], [0.0, 0.01, 0.1])],
                   (3e-3, 20, 0.01))
        # a single warm-up (and weight decay): never an edge, though both its min and max
        + arm_rows("text", "pre_ln", 2, [(LRS, [10], [0.01])], (1e-2, 10, 0.01))
        # an arm's own grid: 1e-2 is inside the other arms' grids, but this arm's smallest
        + arm_rows("text", "post_ln", 2, [([1e-2, 3e-2, 1e-1], [10, 40], [0.01])],
                   (1e-2, 40, 0.01))
        # successive halving: rung 1 keeps 1e-2 and 3e-2 only; 1e-2 is its low edge there but
        # inside the full grid (rung 0); warm-up and weight decay at their smallest and largest
        + arm_rows("text", "post_ln_deesc", 4,
                   [(LRS, [10, 40], [0.0, 0.1]), ([1e-2, 3e-2], [10], [0.1])],
                   (1e-2, 10, 0.1), tuning="halving (eta 2, 2 rungs)"))
    table = pd.DataFrame(rows)
    table["rung"] = table.rung.astype("Int64")
    return table


EXPECTED = {  # (task, variant, depth): (lr_edge, warmup_edge, weight_decay_edge, mark)
    ("digits", "post_ln", 2): ("low", "high", "", "lr at low edge; warm-up at high edge"),
    ("digits", "post_ln", 4): ("high", "low", "", "lr at high edge; warm-up at low edge"),
    ("digits", "pre_ln", 2): ("", "", "", ""),
    ("text", "pre_ln", 2): ("", "", "", ""),
    ("text", "post_ln", 2): ("low", "high", "", "lr at low edge; warm-up at high edge"),
    ("text", "post_ln_deesc", 4): ("", "low", "high",
                                   "warm-up at low edge; weight decay at high edge"),
}


def test_grid_edges_per_arm_on_the_grid_the_arm_tried():
    edges = grid_edges(synthetic_tuning())
    assert list(edges.columns) == [*KEYS, "lr_edge", "warmup_edge", "weight_decay_edge"]
    assert len(edges) == len(EXPECTED)
    got = {(r.task, r.variant, int(r.depth)): (r.lr_edge, r.warmup_edge, r.weight_decay_edge)
           for r in edges.itertuples()}
    assert got == {arm: e[:3] for arm, e in EXPECTED.items()}


def test_edge_mark_renders_each_arm_and_is_empty_inside():
    edges = grid_edges(synthetic_tuning())
    marks = {(r.task, r.variant, int(r.depth)): edge_mark(r) for _, r in edges.iterrows()}
    assert marks == {arm: e[3] for arm, e in EXPECTED.items()}
    # an arm missing from the edges table (a left merge leaves NaN) has no mark
    assert edge_mark({"lr_edge": math.nan, "warmup_edge": None}) == ""


def test_halving_edges_are_judged_on_the_full_grid_not_the_last_rung():
    table = synthetic_tuning()
    arm = table[(table.variant == "post_ln_deesc") & (table.role == "sweep")]
    last = arm[arm.rung == 1]
    assert last.peak_lr.min() == 1e-2  # the selected lr is the last rung's smallest ...
    edges = grid_edges(table).set_index(KEYS)
    assert edges.loc[("text", "post_ln_deesc", 4), "lr_edge"] == ""  # ... but inside the grid
    # judged on the last rung alone it would be an edge: the test can tell the two apart
    only_last = pd.concat([last, table[(table.variant == "post_ln_deesc")
                                       & (table.role == "final")]])
    assert grid_edges(only_last).iloc[0].lr_edge == "low"


def test_a_table_without_rungs_and_with_no_arm():
    table = synthetic_tuning().drop(columns=["rung", "tuning"])
    assert grid_edges(table).set_index(KEYS).loc[("digits", "post_ln", 4), "lr_edge"] == "high"
    empty = grid_edges(table.iloc[0:0])
    assert empty.empty and "lr_edge" in empty
