"""Planning the training grid as ensembles: members from sweeps, shared architectures, the
memory estimate and the split, and what each experiment's tables keep."""

from __future__ import annotations

import copy
import warnings
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rankcollapse.core.model import ModelConfig, build_task_model
from rankcollapse.core.specs import PRESETS
from rankcollapse.core.tasks import TASKS, make_task, task_spec
from rankcollapse.plan import experiments as registry
from rankcollapse.plan import memory
from rankcollapse.plan import training as trainplan
from rankcollapse.plan import tuned as tunedplan
from rankcollapse.plan.config import ConfigError, check_config, load_config
from rankcollapse.training.ensemble import Ensemble
from rankcollapse.training.train import new_model

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = load_config(ROOT / "workflow/config/default.yaml")
SMALL = {"sorting": {"train_size": 40, "test_size": 8}, "hull": {"train_size": 20,
                                                                 "test_size": 5}}


def _config(**blocks) -> dict:
    config = copy.deepcopy(DEFAULT)
    for key, value in blocks.items():
        config[key] = {**config[key], **value}
    return config


def test_members_are_seeds_times_the_optimiser_sweep():
    config = _config(train={"lr": [1e-3, 2e-3, 4e-3], "warmup": [10, 40]},
                     escalation={"seeds": [0, 1, 2], "depth": 16})
    group = trainplan.experiment_groups(config, "E4")[("digits", "post_ln", 16)]
    assert len(group.members) == 3 * 3 * 2
    assert {(m["seed"], m["lr"], m["warmup"]) for m in group.members} == {
        (s, lr, w) for s in (0, 1, 2) for lr in (1e-3, 2e-3, 4e-3) for w in (10, 40)}
    assert all(m["weight_decay"] == 0.01 for m in group.members)  # a scalar stays one value
    assert "lr" not in group.train_options and group.train_options["steps"] == 400


def test_one_ensemble_per_architecture_holds_every_experiment_s_members():
    # E2 on digits with E4's model and optimiser (no overrides) shares E4's san_skip ensemble.
    config = _config(escalation={"seeds": [0, 5], "depth": 8},
                     paths={"tasks": ["digits"], "variants": ["san_skip"], "depths": [8],
                            "seeds": [0, 1], "models": {}, "data": {}, "train": {}})
    groups = trainplan.groups(config)
    shared = groups[("digits", "san_skip", 8)]  # trained by E4 and E2
    assert [m["seed"] for m in shared.members] == [0, 1, 5]
    jobs = trainplan.ensembles(config)
    assert len({j.key for j in jobs}) == len(groups)
    # Each experiment's tables keep its own members only.
    e4 = {(m["variant"], m["seed"]) for m in trainplan.experiment_members(config, "E4")}
    assert ("san_skip", 5) in e4 and ("san_skip", 1) not in e4
    e2 = {(m["variant"], m["seed"]) for m in trainplan.experiment_members(config, "E2")}
    assert e2 == {("san_skip", 0), ("san_skip", 1)}


def test_e2_runs_take_their_model_data_and_optimiser_from_paths():
    group = trainplan.groups(DEFAULT)[("sorting", "san_skip_ln_bias", 6)]
    assert group.model_options == {"width": 48, "heads": 2, "mlp_ratio": 2, "depth": 6}
    assert group.train_options["steps"] == 600
    assert {m["lr"] for m in group.members} == {0.002}
    # paths.data is merged over tasks.sorting for E2's runs only.
    assert group.task_options == {**DEFAULT["tasks"]["sorting"], "train_size": 1000,
                                  "test_size": 200}
    assert DEFAULT["tasks"]["sorting"]["train_size"] != 1000
    config = _config(escalation={"task": "sorting", "variants": ["post_ln"], "depth": 2})
    assert trainplan.groups(config)[("sorting", "post_ln", 2)].task_options \
        == config["tasks"]["sorting"]
    job = next(j for j in trainplan.ensembles(DEFAULT)
               if j.key == (group.task, group.variant, group.depth))
    assert trainplan.job_params(DEFAULT, job)["task_options"] == group.task_options


def test_conflicting_settings_for_one_architecture_are_a_config_error():
    config = _config(escalation={"task": "sorting", "variants": ["san_skip"], "depth": 6})
    with pytest.raises(ConfigError, match="other model, training or data settings"):
        check_config(config)


def test_e5b_rivals_are_tuned_arms_at_the_deepest_depth_of_their_task():
    config = _config(depth_grid={"tasks": ["digits", "text"], "depths": {"digits": [2, 8],
                                                                        "text": [2, 4]},
                                 "placements": [], "placement_tasks": []},
                     rival_fixes={"task": "digits",
                                  "variants": ["post_ln_center", "post_ln_deesc"]})
    runs = registry.tuned_runs(config)
    assert ("digits", "post_ln_center", 8) in runs
    assert not any(v == "post_ln_center" and d != 8 for _, v, d in runs)
    assert runs.count(("digits", "post_ln_deesc", 8)) == 1  # an E5 arm already: trained once
    # E5b's rivals are no train-rule ensembles any more.
    assert not any(v == "post_ln_center" for _, v, _ in trainplan.groups(config))
    without = _config(report={"experiments": ["E5"]}, rival_fixes={"variants": ["post_ln_center"]})
    assert not any(v == "post_ln_center" for _, v, _ in registry.tuned_runs(without))


def test_default_plan_tunes_deep_arms_by_halving_with_fresh_seeds():
    """The default report decides E5 where depth bites: digits reaches depth 32 (text depth 8,
    where post-LN already fails), every arm tuned by successive halving on at least 3 tuning
    seeds, at least 5 fresh seeds, E5b's rivals (DeepNorm among them) at the deepest digits
    depth, every arm at one depth trained alike, and the control, post-LN and de-escalation
    evaluated along a budget curve of at least 4 budgets over a factor of 8 that reaches the
    long-training diagnostics' 1,000 steps."""
    from rankcollapse.claims import e5

    grid = DEFAULT["depth_grid"]
    assert tunedplan.grid_depths(grid, "digits")[-1] >= 32
    assert tunedplan.grid_depths(grid, "text")[-1] >= 8
    runs = registry.tuned_runs(DEFAULT)
    deepest = tunedplan.grid_depths(grid, "digits")[-1]
    assert "post_ln_deepnorm" in DEFAULT["rival_fixes"]["variants"]
    for variant in [*grid["placements"], *DEFAULT["rival_fixes"]["variants"]]:
        assert ("digits", variant, deepest) in runs
    budgets = grid["budget_curve"]["budgets"]
    assert len(budgets) >= 4 and max(budgets) >= 8 * min(budgets)
    assert max(budgets) >= e5.LONG_STEPS
    assert {"pre_ln", "post_ln", "post_ln_deesc"} <= set(grid["budget_curve"]["variants"])
    for job in tunedplan.tuned_jobs(DEFAULT, registry.tuned_runs(DEFAULT)):
        for arm in tunedplan.tuned_job_params(DEFAULT, job)["arms"]:
            assert arm["tuning"]["method"] == "halving"
            assert arm["tuning"]["select_by"] == "loss"
            assert len(arm["tuning_seeds"]) >= 3 and len(arm["final_seeds"]) >= 5
            assert not set(arm["final_seeds"]) & set(arm["tuning_seeds"])
            depth = arm["model_options"]["depth"]
            assert arm["train_options"]["steps"] == tunedplan.depth_steps(grid, depth)
            assert arm["train_options"]["schedule"] == "wsd"
            if job.variant == grid["budget_curve"]["control"] and depth == deepest:
                # the control's convergence check reads twice the deepest depth's budget
                assert max(arm["budgets"]) >= 2 * arm["train_options"]["steps"]
            elif job.variant in grid["budget_curve"]["variants"]:
                assert arm["budgets"] == sorted(budgets)
    assert grid["budget_curve"]["control"] == e5.CONTROL
    # The deep arms run alone; the shallow ones of one (task, variant) share a job.
    jobs = tunedplan.tuned_jobs(DEFAULT, registry.tuned_runs(DEFAULT))
    deep = [j for j in jobs if max(j.depths) == deepest]
    assert all(j.depths == (deepest,) for j in deep)
    assert any(len(j.depths) > 1 for j in jobs)


def test_e5_is_one_tuned_job_per_arm_with_placements_at_the_deepest_depth():
    config = _config(depth_grid={"tasks": ["digits", "text"], "depths": {"digits": [2, 8],
                                                                        "text": [2, 4]},
                                 "placements": ["post_ln_deesc_mlp"],
                                 "placement_tasks": ["digits"], "steps": 100},
                     report={"experiments": ["E5"]})  # no E5b: no rival arms
    runs = registry.tuned_runs(config)
    variants = config["depth_grid"]["variants"]
    assert len(runs) == 2 * len(variants) + 2 * len(variants) + 1
    assert ("digits", "post_ln_deesc_mlp", 8) in runs
    assert not any(v == "post_ln_deesc_mlp" for t, v, _ in runs if t == "text")
    params = tunedplan.tuned_params(config, "text", "post_ln", 4)
    assert params["model_options"]["depth"] == 4
    assert params["train_options"]["steps"] == tunedplan.depth_steps(config["depth_grid"], 4)
    assert params["sweep"]["lr"] == config["depth_grid"]["lr"]
    assert not set(params["tuning_seeds"]) & set(params["final_seeds"])
    assert ("digits", "post_ln", 2) not in {j.key for j in trainplan.ensembles(config)
                                            if j.depth == 2}  # E5 is not a `train` job


@given(st.integers(1, 60), st.floats(1.0, 500.0), st.floats(1.0, 5000.0))
def test_split_is_contiguous_near_equal_and_fits(count, per_member, budget):
    members = list(range(count))
    parts = memory.split(members, per_member, budget)
    assert [m for part in parts for m in part] == members  # in order, each once
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    fit = max(1, int(budget // per_member))
    assert max(sizes) <= fit
    assert len(parts) == -(-count // fit)  # as few as fit


def test_memory_budget_splits_an_architecture_deterministically():
    config = _config(escalation={"seeds": list(range(10)), "depth": 16})
    group = trainplan.groups(config)[("digits", "post_ln", 16)]
    per = memory.member_memory_mb("digits", {}, PRESETS["post_ln"], group.model_options, 64)
    config["train"]["ensemble_memory_mb"] = int(per * 4) + 1  # 4 members fit, not 5
    jobs = [j for j in trainplan.ensembles(config) if j.key == ("digits", "post_ln", 16)]
    assert [len(j.members) for j in jobs] == [3, 4, 3] and [j.part for j in jobs] == [0, 1, 2]
    assert [m["seed"] for j in jobs for m in j.members] == list(range(10))
    assert jobs == [j for j in trainplan.ensembles(config) if j.key == jobs[0].key]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_task_spec_without_data_equals_the_built_task(name):
    assert task_spec(name, **SMALL.get(name, {})) == make_task(name, **SMALL.get(name, {})).spec


@pytest.mark.parametrize("variant", sorted(PRESETS))
@pytest.mark.parametrize("name", sorted(TASKS))
def test_parameter_count_from_sizes_equals_the_model(name, variant):
    options = {"width": 24, "heads": 3, "depth": 3, "mlp_ratio": 3}
    spec = task_spec(name, **SMALL.get(name, {}))
    model = build_task_model(PRESETS[variant], asdict(spec), **options)
    cfg = ModelConfig.from_dict({**PRESETS[variant], **options})
    assert memory.parameter_count(spec, cfg) == sum(p.numel() for p in model.parameters())


def _saved_bytes_per_member(variant: str, options: dict, batch: int, k: int = 2) -> float:
    """What autograd actually keeps for one ensemble step, per member (distinct storages)."""
    data = make_task("digits")
    ens = Ensemble([new_model(data.spec, PRESETS[variant], options, s) for s in range(k)])
    storages: dict[int, int] = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    x = data.x_train[:k * batch].view(k, batch, *data.x_train.shape[1:])
    with warnings.catch_warnings(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        ens.losses(x, data.y_train[:k * batch].view(k, batch),
                   flat=ens.flat.clone().requires_grad_(True))  # as a training step does
    params = sum(p.numel() for p in ens.params.values()) // k
    return sum(storages.values()) / k + memory.STATE_COPIES * params * 4


@pytest.mark.parametrize(("variant", "options", "batch"), [
    ("post_ln", {"width": 32, "heads": 2, "mlp_ratio": 2, "depth": 4}, 64),
    ("pre_ln", {"width": 64, "heads": 4, "mlp_ratio": 4, "depth": 3}, 48),
    ("san_skip", {"width": 32, "heads": 2, "mlp_ratio": 2, "depth": 6}, 64),
    ("post_ln_center", {"width": 16, "heads": 2, "mlp_ratio": 2, "depth": 4}, 32),
])
def test_memory_estimate_bounds_what_a_step_keeps(variant, options, batch):
    measured = _saved_bytes_per_member(variant, options, batch) / 2**20
    estimate = memory.member_memory_mb("digits", {}, PRESETS[variant], options, batch)
    assert measured <= estimate <= 1.6 * measured


def test_select_members_keeps_the_experiment_s_rows():
    table = pd.DataFrame({"task": "digits", "variant": "post_ln", "depth": 8, "seed": [0, 1, 2],
                          "peak_lr": [1e-3, 1e-3, 2e-3], "warmup": 40, "weight_decay": 0.01,
                          "value": [10, 11, 12]})
    members = [{"task": "digits", "variant": "post_ln", "depth": 8, "seed": s, "peak_lr": lr,
                "warmup": 40, "weight_decay": 0.01} for s, lr in [(0, 1e-3), (2, 2e-3)]]
    kept = trainplan.select_members(table, members)
    assert list(kept.value) == [10, 12]


def test_merged_e5_jobs_group_the_shallow_arms_of_one_task_and_variant():
    grid = {"tasks": ["digits", "text"], "variants": ["post_ln", "pre_ln"],
            "depths": {"digits": [2, 4, 8, 16], "text": [2, 4]},
            "placements": ["post_ln_deesc_mlp"], "placement_tasks": ["digits"], "steps": 100}
    config = _config(depth_grid={**grid, "merge_depths_up_to": 0}, rival_fixes={"variants": []})
    alone = tunedplan.tuned_jobs(config, registry.tuned_runs(config))  # one job per arm
    assert [(j.task, j.variant, j.depths[0]) for j in alone] == registry.tuned_runs(config)
    assert all(len(j.depths) == 1 for j in alone) and alone[0].label == "2"
    config = _config(depth_grid={**grid, "merge_depths_up_to": 8}, rival_fixes={"variants": []})
    jobs = tunedplan.tuned_jobs(config, registry.tuned_runs(config))
    assert [(j.task, j.variant, j.label) for j in jobs] == [
        ("digits", "post_ln", "2-4-8"), ("digits", "post_ln", "16"),
        ("digits", "pre_ln", "2-4-8"), ("digits", "pre_ln", "16"),
        ("digits", "post_ln_deesc_mlp", "16"),
        ("text", "post_ln", "2-4"), ("text", "pre_ln", "2-4")]
    # every arm in exactly one job
    assert sorted((j.task, j.variant, d) for j in jobs for d in j.depths) \
        == sorted(registry.tuned_runs(config))
    params = tunedplan.tuned_job_params(config, jobs[0])
    assert [a["model_options"]["depth"] for a in params["arms"]] == [2, 4, 8]
    assert params["arms"][1] == tunedplan.tuned_params(config, "digits", "post_ln", 4)
    config["train"]["gpu"] = 1
    assert tunedplan.tuned_job_gpu_mb(config, jobs[0]) == tunedplan.tuned_memory(
        config, "digits", "post_ln", 8)["gpu_mb"] > 0  # the largest arm's


def test_a_budget_per_depth_and_each_arms_budget_curve():
    grid = {"tasks": ["digits"], "depths": [2, 8, 32], "steps": {2: 100, 8: 200, 32: 400},
            "budget_curve": {"budgets": [50, 150, 400, 800], "variants": ["pre_ln"]}}
    assert [tunedplan.depth_steps(grid, d) for d in (2, 8, 32)] == [100, 200, 400]
    assert tunedplan.depth_steps({**grid, "steps": 300}, 8) == 300
    with pytest.raises(ValueError, match="no budget for depth 4"):
        tunedplan.depth_steps(grid, 4)
    # A config file's {depth: steps} merged over another's may name depths the grid lacks.
    assert tunedplan.grid_budgets({**grid, "steps": {2: 100, 8: 200, 32: 400, 64: 9}}) == {
        2: 100, 8: 200, 32: 400}
    assert tunedplan.arm_budgets(grid, "pre_ln", 200) == [50, 150, 400, 800]  # past its own
    assert tunedplan.arm_budgets(grid, "post_ln_center", 200) == [50, 150]  # up to its own
    assert tunedplan.arm_budgets({"steps": 5}, "pre_ln", 5) == []
    # The control at a task's deepest depth also runs to twice its own steps, where the curve
    # stops short of them; elsewhere, and for other variants, the curve alone.
    control = {**grid, "budget_curve": {"budgets": [50, 100, 200], "control": "pre_ln",
                                        "variants": ["pre_ln", "post_ln"]}}
    assert tunedplan.arm_budgets(control, "pre_ln", 400, deepest=True) == [50, 100, 200, 800]
    assert tunedplan.arm_budgets(control, "pre_ln", 400) == [50, 100, 200]
    assert tunedplan.arm_budgets(control, "post_ln", 400, deepest=True) == [50, 100, 200]
    assert tunedplan.arm_budgets(control, "pre_ln", 100, deepest=True) == [50, 100, 200]


def test_an_arms_work_and_the_jobs_priority_put_the_longest_job_first():
    # One arm: 9 settings x 3 tuning seeds by halving (screen on 1 seed), steps 90, the curve
    # [30, 180]: rungs of 10 and 30 steps, then 5 fresh seeds on a trunk of 180 steps and the
    # cool-downs of 30 and 90 (6 and 18 steps) branched off it.
    arm = {"train_options": {"steps": 90, "cooldown": 0.2}, "budgets": [30, 180],
           "sweep": {"lr": [1, 2, 3, 4, 5, 6, 7, 8, 9], "warmup": 1, "weight_decay": 0.0},
           "tuning": {"method": "halving", "eta": 3, "rungs": 3, "screen_seeds": 1},
           "tuning_seeds": [100, 101, 102], "final_seeds": [0, 1, 2, 3, 4]}
    assert tunedplan.arm_work(arm) == [
        {"what": "sweep rung 0", "members": 9, "steps": 10},
        {"what": "sweep rung 1", "members": 9, "steps": 30},
        {"what": "final", "members": 5, "steps": 180 + 6 + 18}]
    jobs = tunedplan.tuned_jobs(DEFAULT, registry.tuned_runs(DEFAULT))
    priority = {job.key: tunedplan.tuned_job_priority(DEFAULT, job) for job in jobs}
    deepest = max(jobs, key=lambda j: max(j.depths))
    control = DEFAULT["depth_grid"]["budget_curve"]["control"]
    # the control at the deepest depth trains past its budget: the longest job of all
    assert max(priority, key=priority.get) == (deepest.task, control, deepest.label)
    for job in jobs:  # a deepest-depth job before every merged shallow one
        if max(job.depths) == max(deepest.depths):
            assert all(priority[job.key] > priority[j.key] for j in jobs if len(j.depths) > 1)


def test_the_rung_plan_trains_no_lone_survivor_and_screens_on_fewer_seeds():
    halving = {"method": "halving", "eta": 3, "rungs": 3}
    assert tunedplan.rung_plan(9, 900, halving, 3) == [
        {"budget": 100, "settings": 9, "seeds": 3}, {"budget": 300, "settings": 3, "seeds": 3}]
    assert tunedplan.rung_plan(10, 900, halving, 3)[-1] == {"budget": 900, "settings": 2,
                                                           "seeds": 3}
    # screening rungs on the first seed, the deciding rung (the last trained) on all three
    assert [r["seeds"] for r in tunedplan.rung_plan(9, 900, {**halving, "screen_seeds": 1},
                                                    3)] == [1, 3]
    assert tunedplan.rung_plan(4, 90, {"method": "grid"}, 2) == [
        {"budget": 90, "settings": 4, "seeds": 2}]
    assert tunedplan.rung_plan(1, 90, halving, 2) == [{"budget": 10, "settings": 1, "seeds": 2}]


def test_the_halving_protocol_has_one_default():
    """The library's protocol when called without a config (plan.tuned.HALVING, which the tuned
    job, the report's size line and the checks start from) is the schema's default one."""
    import yaml

    schema = yaml.safe_load((Path(__file__).resolve().parents[2]
                             / "workflow/schemas/config.schema.yaml").read_text())
    halving = schema["properties"]["depth_grid"]["properties"]["halving"]["properties"]
    assert tunedplan.HALVING == {k: v["default"] for k, v in halving.items()}
