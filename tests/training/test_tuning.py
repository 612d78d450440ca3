"""Per-arm tuning (rankcollapse.training.tuning): the grid, the selection rule, and one tiny
tuned job."""

import math

import pandas as pd
import pytest

from rankcollapse.core.specs import PRESETS
from rankcollapse.core.tasks import make_task
from rankcollapse.plan import tuned as tunedplan
from rankcollapse.training import tuning


def test_grid_is_the_product_and_scalars_are_sweeps_of_one():
    g = tunedplan.grid({"lr": [1e-3, 1e-2], "warmup": [10, 40], "weight_decay": 0.01})
    assert len(g) == 4 and {x["weight_decay"] for x in g} == {0.01}
    assert tunedplan.grid({"lr": 1e-3, "warmup": 5, "weight_decay": 0.0}) == [
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
    from rankcollapse.training.ensemble import load_members

    assert [m["settings"]["seed"] for m in load_members(tmp_path / "ensemble.pt")] == [0, 1]


# --- successive halving ----------------------------------------------------------------------

def test_rung_budgets_grow_by_eta_up_to_the_full_budget():
    assert tunedplan.rung_steps(90, "grid") == [90]
    assert tunedplan.rung_steps(90, "halving", eta=3, rungs=3) == [10, 30, 90]
    assert tunedplan.rung_steps(90, "halving", eta=3, rungs=1) == [90]
    with pytest.raises(ValueError, match="no step to train"):
        tunedplan.rung_steps(5, "halving", eta=3, rungs=4)
    with pytest.raises(ValueError, match="allowed values"):
        tunedplan.rung_steps(5, "bayes")


def test_rank_orders_every_setting_and_select_takes_the_first():
    rows = sweep_rows([(1e-3, 10, 0.8, 0.5, False), (1e-2, 10, 0.9, 0.4, False),
                       (1e-2, 40, 0.9, 0.3, False), (3e-2, 10, 0.95, math.nan, True)])
    ranked = tuning.rank(rows, "accuracy")
    assert [(r["lr"], r["warmup"]) for r in ranked] == [(1e-2, 40), (1e-2, 10), (1e-3, 10),
                                                       (3e-2, 10)]  # diverged: last
    assert tuning.rank(rows.iloc[::-1], "accuracy") == ranked  # row order does not matter
    assert tuning.select(rows, "accuracy") == ranked[0]


TINY = {"width": 8, "heads": 2, "mlp_ratio": 1, "depth": 1}
SHARED = {"steps": 8, "batch": 8, "clip": 1.0, "checkpoint_every": 0, "eval_every": 4}
SWEEP = {"lr": [1e-3, 3e-3, 1e-2, 3e-2], "warmup": 4, "weight_decay": 0.0}


def _tuned(folder, method, **halving):
    folder.mkdir()
    chosen = tuning.run_tuned_job(
        "digits", {}, PRESETS["post_ln"], TINY, SHARED, SWEEP, [100, 101], [0, 1],
        folder / "ensemble.pt", folder / "history.parquet", folder / "tuning.parquet",
        extra_columns={"task": "digits", "variant": "post_ln", "depth": 1},
        tuning={"method": method, **halving})
    return (chosen, pd.read_parquet(folder / "tuning.parquet"),
            pd.read_parquet(folder / "history.parquet"))


def test_halving_with_one_rung_is_the_grid(tmp_path):
    chosen_g, table_g, history_g = _tuned(tmp_path / "grid", "grid")
    chosen_h, table_h, history_h = _tuned(tmp_path / "halving", "halving", eta=3, rungs=1)
    assert chosen_h == chosen_g
    assert set(table_g.tuning) == {"grid"} and set(table_h.tuning) == {"halving (eta 3, 1 rungs)"}
    pd.testing.assert_frame_equal(table_h.drop(columns="tuning"), table_g.drop(columns="tuning"),
                                  check_exact=True)
    pd.testing.assert_frame_equal(history_h, history_g, check_exact=True)


def test_halving_keeps_the_best_of_each_rung_and_is_deterministic(tmp_path):
    chosen, table, _ = _tuned(tmp_path / "a", "halving", eta=2, rungs=2)
    sweep = table[table.role == "sweep"]
    rung0, rung1 = sweep[sweep.rung == 0], sweep[sweep.rung == 1]
    assert set(rung0.rung_steps) == {4} and set(rung1.rung_steps) == {8}
    assert len(rung0) == 4 * 2 and len(rung1) == 2 * 2  # 4 settings, then the best half
    kept = tuning.rank(rung0, "loss")[:2]  # the default rule: mean validation loss
    assert sorted(rung1.peak_lr.unique()) == sorted(k["lr"] for k in kept)
    assert chosen == tuning.select(rung1, "loss")
    # selected: the chosen setting at the rung that chose it, and the final members
    assert set(table[table.selected].role) == {"sweep", "final"}
    assert (table[table.selected & (table.role == "sweep")].rung == 1).all()
    assert table[table.role == "final"].rung.isna().all()
    assert set(table.precision) == {"float32"} and set(table.engine) == {"eager"}
    from rankcollapse.experiments.trained import last_rungs, selected_settings

    shown = last_rungs(table)  # each setting at the last rung it reached
    assert len(shown) == 4 * 2 and set(shown[shown.peak_lr.isin([k["lr"] for k in kept])]
                                       .rung) == {1}
    picked = selected_settings(table).iloc[0]
    assert picked.peak_lr == chosen["lr"] and picked.tuned_by == "halving (eta 2, 2 rungs)"
    again, table_again, _ = _tuned(tmp_path / "b", "halving", eta=2, rungs=2)
    assert again == chosen
    pd.testing.assert_frame_equal(table_again, table, check_exact=True)


def test_the_report_says_which_method_chose_the_settings():

    from rankcollapse.plan import describe
    from rankcollapse.plan.config import load_config

    from conftest import ROOT

    config = load_config(ROOT / "workflow/config/default.yaml")
    config["depth_grid"].update(lr=[0.0003, 0.001, 0.003, 0.01, 0.03], warmup=[10, 40])
    config["depth_grid"].pop("tuning")
    grid_line = describe.depth_grid(config)
    assert "(grid)" in grid_line
    config["depth_grid"].update(tuning="halving", steps=180, halving={"eta": 3, "rungs": 3},
                                tuning_seeds=[100, 101, 102])
    line = describe.depth_grid(config)
    assert ("successive halving (eta 3, rungs at fractions of the budget: 10 settings at 1/9, 4 "
            "at 1/3, 2 at the full budget)") in line and "180 steps of batch" in line
    # 10 settings x 3 tuning seeds: 10 at rung 0, 4 at rung 1, 2 at rung 2, then 5 fresh seeds
    arms = int(line.split(" tuned arms")[0])
    assert line.endswith(f"{arms * ((10 + 4 + 2) * 3 + 5)} trained networks")
    # With 9 settings the last rung would retrain a lone survivor: it is not trained.
    config["depth_grid"].update(lr=[1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0], warmup=5)
    line = describe.depth_grid(config)
    assert "9 settings at 1/9, 3 at 1/3)" in line
    assert line.endswith(f"{arms * ((9 + 3) * 3 + 5)} trained networks")


# --- several arms in one job (depth_grid.merge_depths_up_to) ---------------------------------

def _arm(depth: int) -> dict:
    """trainplan.tuned_params-shaped settings of one tiny arm."""
    return {"task": "digits", "task_options": {}, "variant": PRESETS["post_ln"],
            "model_options": {**TINY, "depth": depth}, "train_options": SHARED,
            "sweep": {"lr": [1e-3, 1e-2], "warmup": 4, "weight_decay": 0.0},
            "tuning_seeds": [100], "final_seeds": [0, 1],
            "memory": {"member_mb": 1.0, "budget_mb": 4096.0, "gpu_mb": 0}}


def _arms_job(folder, depths):
    folder.mkdir(exist_ok=True)
    paths = {name: folder / name for name in tuning.ARM_FILES}
    chosen = tuning.run_tuned_arms(
        [_arm(d) for d in depths], paths["ensemble.pt"], paths["history.parquet"],
        paths["tuning.parquet"], paths["metrics.parquet"], eval_size=4,
        identity={"task": "digits", "variant": "post_ln"})
    tables = {name: pd.read_parquet(paths[name]) for name in tuning.ARM_FILES[1:]}
    return chosen, tables


def test_arms_in_one_job_equal_each_arm_in_its_own_job(tmp_path):
    from rankcollapse.training.ensemble import load_members

    chosen, merged = _arms_job(tmp_path / "L1-2", [1, 2])
    alone = [_arms_job(tmp_path / f"L{d}", [d]) for d in (1, 2)]
    assert chosen == [a[0][0] for a in alone]
    for name, table in merged.items():
        assert set(table.depth) == {1, 2}, name
        expected = pd.concat([a[1][name] for a in alone], ignore_index=True)
        pd.testing.assert_frame_equal(table, expected, check_exact=True)
    members = load_members(tmp_path / "L1-2" / "ensemble.pt")
    assert [(m["settings"]["model_options"]["depth"], m["settings"]["seed"]) for m in members] \
        == [(1, 0), (1, 1), (2, 0), (2, 1)]
    alone_members = [m for d in (1, 2) for m in load_members(tmp_path / f"L{d}" / "ensemble.pt")]
    for a, b in zip(members, alone_members, strict=True):
        assert all((a["model"][k] == b["model"][k]).all() for k in a["model"])
    assert not list((tmp_path / "L1-2").glob("arm_L*"))  # the arms' folders are removed


def test_a_killed_multi_arm_job_keeps_its_finished_arms(tmp_path, monkeypatch):
    reference = _arms_job(tmp_path / "reference", [1, 2])
    real, trained = tuning.run_tuned_job, []

    def fails_at_depth_2(**kwargs):
        if kwargs["model_options"]["depth"] == 2:
            raise KeyboardInterrupt("killed")
        trained.append(kwargs["model_options"]["depth"])
        return real(**kwargs)

    monkeypatch.setattr(tuning, "run_tuned_job", fails_at_depth_2)
    with pytest.raises(KeyboardInterrupt):
        _arms_job(tmp_path / "killed", [1, 2])
    assert (tmp_path / "killed" / "arm_L1" / "done.json").exists() and trained == [1]
    # A leftover folder written with other settings is discarded, not reused.
    stale = tmp_path / "killed" / "arm_L2"
    stale.mkdir(exist_ok=True)
    (stale / "settings.json").write_text('{"fingerprint": "other"}')
    (stale / "checkpoint_sweep.pt").write_text("not a checkpoint")

    def counts(**kwargs):
        trained.append(kwargs["model_options"]["depth"])
        return real(**kwargs)

    monkeypatch.setattr(tuning, "run_tuned_job", counts)
    resumed = _arms_job(tmp_path / "killed", [1, 2])
    assert trained == [1, 2]  # depth 1 was not trained again
    assert resumed[0] == reference[0]
    for name, table in resumed[1].items():
        pd.testing.assert_frame_equal(table, reference[1][name], check_exact=True)


def test_a_rung_that_would_retrain_a_lone_survivor_is_skipped(tmp_path):
    """eta 4 over 4 settings leaves one after rung 0: that one is the selection, and its full
    budget is the fresh seeds' (no tuning seed retrains it)."""
    from rankcollapse.training.selection import decisions

    chosen, table, _ = _tuned(tmp_path / "a", "halving", eta=4, rungs=2)
    sweep = table[table.role == "sweep"]
    assert set(sweep.rung) == {0} and len(sweep) == 4 * 2
    assert chosen == tuning.select(sweep, "loss")
    assert (table[table.selected & (table.role == "sweep")].rung == 0).all()
    d = decisions(table).iloc[0]
    assert d.rung == 0 and d.selected_lr == chosen["lr"] and d.tuning_seeds == 2


WSD_SHARED = {**SHARED, "steps": 12, "schedule": "wsd", "cooldown": 0.25}


def _one_rate_job(folder, steps, budgets=()):
    """A tuned job whose sweep has one setting (so every job selects it) at `steps`."""
    folder.mkdir()
    tuning.run_tuned_job(
        "digits", {}, PRESETS["post_ln"], TINY, {**WSD_SHARED, "steps": steps},
        {"lr": 3e-3, "warmup": 2, "weight_decay": 0.0}, [100], [0, 1],
        folder / "ensemble.pt", folder / "history.parquet", folder / "tuning.parquet",
        extra_columns={"task": "digits", "variant": "post_ln", "depth": 1}, budgets=budgets)
    return pd.read_parquet(folder / "tuning.parquet"), pd.read_parquet(folder / "history.parquet")


def test_the_budget_curve_rows_are_the_runs_of_those_budgets(tmp_path):
    """The fresh seeds' curve (a trunk to the longest budget, cool-downs branched off it) gives
    at each budget the test metrics of a job trained that many steps, and keeps the networks of
    the job's own budget."""
    table, history = _one_rate_job(tmp_path / "curve", 12, budgets=[8, 12, 16])
    curve = table[table.role == "budget"].sort_values(["rung_steps", "seed"])
    assert sorted(curve.rung_steps.unique()) == [8, 16]  # 12 is the final rows' own budget
    assert (curve.val_loss.isna()).all() and curve.selected.all()
    for steps in (8, 16):
        alone, _ = _one_rate_job(tmp_path / f"L{steps}", steps)
        final = alone[alone.role == "final"].sort_values("seed")
        at = curve[curve.rung_steps == steps]
        assert list(at.test_loss) == list(final.test_loss), steps
        assert list(at.test_accuracy) == list(final.test_accuracy), steps
    alone12, history12 = _one_rate_job(tmp_path / "L12", 12)
    columns = ["seed", "test_loss", "test_accuracy", "val_loss", "val_accuracy", "rung_steps"]
    pd.testing.assert_frame_equal(
        table[table.role == "final"][columns].reset_index(drop=True),
        alone12[alone12.role == "final"][columns].reset_index(drop=True), check_exact=True)
    pd.testing.assert_frame_equal(history.drop(columns=["config_hash", "code_version"]),
                                  history12.drop(columns=["config_hash", "code_version"]),
                                  check_exact=True)


def test_screening_rungs_train_on_the_first_tuning_seeds_and_the_deciding_rung_on_all(tmp_path):
    from rankcollapse.training.selection import decisions

    chosen, table, _ = _tuned(tmp_path / "a", "halving", eta=2, rungs=2, screen_seeds=1)
    sweep = table[table.role == "sweep"]
    assert set(sweep[sweep.rung == 0].seed) == {100} and len(sweep[sweep.rung == 0]) == 4
    assert set(sweep[sweep.rung == 1].seed) == {100, 101} and len(sweep[sweep.rung == 1]) == 4
    assert chosen == tuning.select(sweep[sweep.rung == 1], "loss")
    assert decisions(table).iloc[0].tuning_seeds == 2
