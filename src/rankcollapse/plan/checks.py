"""Each experiment's config cross-checks: what a JSON schema cannot express.

One function per config block, each returning a list of one-line problems that name the key,
the bad value and what is allowed. The experiment registry (`plan.experiments`) names each
experiment's check; `plan.config.check_config` runs them all before any job starts.
"""

from __future__ import annotations

from rankcollapse.core.checkpoints import CheckpointError, checkpoint_config, weight_files
from rankcollapse.core.specs import stable_steps, sweep
from rankcollapse.core.tasks import TASKS
from rankcollapse.plan.tuned import HALVING, SCHEDULE, depth_steps, grid_depths


def undefined_variants(config: dict, uses: list[tuple[str, str]]) -> list[str]:
    """Every (key, variant name) of `uses` that names no variant of the config."""
    defined = sorted(config.get("variants", {}))
    return [f"{key}: variant {name!r} is not defined; defined variants (config key `variants`): "
            f"{defined}" for key, name in uses if name not in defined]


def unknown_tasks(uses: list[tuple[str, str]]) -> list[str]:
    """Every (key, task name) of `uses` that names no task of core.tasks.TASKS."""
    known = sorted(TASKS)
    return [f"{key}: unknown task {name!r}; allowed tasks: {known}"
            for key, name in uses if name not in known]


def divisible(key: str, width: int, heads: int, heads_key: str) -> list[str]:
    return [f"{key}={width} is not divisible by {heads_key}={heads}"] if width % heads else []


def init_sweep(config: dict) -> list[str]:
    """The init sweep's variants exist and its width splits into its heads."""
    sweep = config.get("init_sweep", {})
    problems = undefined_variants(config, [("init_sweep.variants", v)
                                           for v in sweep.get("variants", [])])
    if "width" in sweep and "heads" in sweep:
        problems += divisible("init_sweep.width", sweep["width"], sweep["heads"],
                              "init_sweep.heads")
    return problems


def realarch(config: dict) -> list[str]:
    """The realarch block's pretrained checkpoints: each a folder holding a config.json of its
    model's type and the weights the loader will read (what save_pretrained writes), for a model
    that the run measures. Checked when the workflow is planned rather than inside the job that
    would load it."""
    block = config.get("realarch", {})
    problems = []
    models = block.get("models", [])
    for model, path in (block.get("checkpoints") or {}).items():
        key = f"realarch.checkpoints.{model}"
        try:
            config_json = checkpoint_config(path)
        except CheckpointError as err:
            problems.append(f"{key}: {err}")
            continue
        found = config_json["model_type"]
        if found != model:
            problems.append(f"{key}: {path} holds a {found!r} model (its config.json's "
                            f"model_type), not {model!r}")
        try:  # the weights the loader will read: present, readable, not cut short
            weight_files(path, config_json)
        except CheckpointError as err:
            problems.append(f"{key}: {err}")
        if models and model not in models:
            problems.append(f"{key}: {model!r} is not in realarch.models {models}, so its "
                            "checkpoint would never be measured")
    return problems


def paths(config: dict) -> list[str]:
    """The `paths` block: its variants must be ensembles of paths (skips, no MLP, no LayerNorm
    or a post-LN), its tasks known, its runs not shared with `escalation` (whose model and
    optimiser settings differ)."""
    block = config.get("paths", {})
    if not block:
        return []
    defined = config.get("variants", {})
    problems = undefined_variants(config, [("paths.variants", v)
                                           for v in block.get("variants", [])])
    for name in block.get("variants", []):
        v = defined.get(name)
        if v is None:
            continue
        if not v["skip"] or v["mlp"] or v["norm"] == "pre" or v.get("deescalate", 0) \
                or v.get("center_attention", False):
            problems.append(f"paths.variants: variant {name!r} is not an ensemble of paths; "
                            "it needs skip: true, mlp: false, norm: none or post (like san_skip "
                            "or san_skip_ln_bias)")
    problems += unknown_tasks([("paths.tasks", t) for t in block.get("tasks", [])])
    for task, model in block.get("models", {}).items():
        problems += divisible(f"paths.models.{task}.width", model["width"], model["heads"],
                              "heads")
    escalation = config.get("escalation", {})
    # Only a (task, variant) pair trained by both would share results/train/ paths (the tuned
    # arms live in results/tuned/).
    trained = {(escalation.get("task"), v) for v in escalation.get("variants", [])}
    pairs = {(t, v) for t in block.get("tasks", []) for v in block.get("variants", [])} & trained
    if pairs:
        problems.append(f"paths: task(s) {sorted({t for t, _ in pairs})} with variant(s) "
                        f"{sorted({v for _, v in pairs})} are also trained by escalation "
                        "with other settings; use a differently named copy of the variant")
    return problems


def circle(config: dict) -> list[str]:
    """The circle block: its start pairs must exist in the circle's data."""
    block = config.get("circle", {})
    pairs = block.get("points", 1000) // 2 - 1  # the original data's pairs
    if block.get("starts", 1) > pairs:
        return [f"circle.starts={block['starts']} exceeds the {pairs} pairs of "
                f"circle.points={block.get('points', 1000)}"]
    return []


def escalation(config: dict) -> list[str]:
    """The escalation block: its variants and task exist."""
    block = config.get("escalation", {})
    problems = undefined_variants(config, [("escalation.variants", v)
                                           for v in block.get("variants", [])])
    if "task" in block:
        problems += unknown_tasks([("escalation.task", block["task"])])
    return problems


def depth_grid(config: dict) -> list[str]:
    """The depth grid: its variants and tasks exist, fresh seeds, a budget for every depth, a
    warm-up and a halving that fit each depth's budget, budget-curve points that branch off a
    stable phase, depths for every task, placement tasks among the grid's tasks."""
    grid = config.get("depth_grid", {})
    curve = grid.get("budget_curve") or {}
    problems = undefined_variants(
        config, [("depth_grid.variants", v) for v in grid.get("variants", [])]
        + [("depth_grid.placements", v) for v in grid.get("placements", [])]
        + [("depth_grid.budget_curve.variants", v) for v in curve.get("variants", [])])
    problems += unknown_tasks([("depth_grid.tasks", t) for t in grid.get("tasks", [])])
    if "control" in curve and curve["control"] not in curve.get("variants", []):
        problems.append(f"depth_grid.budget_curve.control: {curve['control']!r} is not one of "
                        f"the curve's variants {curve.get('variants', [])}; allowed: one of them")
    fresh = set(grid.get("seeds", [])) & set(grid.get("tuning_seeds", []))
    if fresh:
        problems.append(f"depth_grid.seeds: {sorted(fresh)} also tuning seed(s); the final seeds "
                        "must be fresh (not in depth_grid.tuning_seeds)")
    depths = grid.get("depths", {})
    if isinstance(depths, dict):
        for name in grid.get("tasks", []):
            if name not in depths:
                problems.append(f"depth_grid.depths: no depths for task {name!r}; give a list "
                                "for every task or one per task in depth_grid.tasks")
    for name in grid.get("placement_tasks", []):
        if name not in grid.get("tasks", []):
            problems.append(f"depth_grid.placement_tasks: {name!r} is not in depth_grid.tasks "
                            f"{grid.get('tasks', [])}")
    every = sorted({int(d) for t in grid.get("tasks", []) if not isinstance(depths, dict)
                    or t in depths for d in grid_depths({"depths": depths}, t)})
    steps = grid.get("steps", 200)
    if isinstance(steps, dict):
        missing = [d for d in every if d not in {int(k) for k in steps}]
        if missing:
            return problems + [f"depth_grid.steps gives no budget for depth(s) {missing} of "
                               f"depth_grid.depths; it gives {sorted(int(k) for k in steps)}"]
    return problems + _budget_problems(grid, {d: depth_steps(grid | {"steps": steps}, d)
                                              for d in every})


def _budget_problems(grid: dict, budgets: dict[int, int]) -> list[str]:
    """Each depth's budget against the warm-up, the halving rungs and the budget curve."""
    problems = []
    schedule = grid.get("schedule", SCHEDULE["schedule"])
    fraction = grid.get("cooldown", SCHEDULE["cooldown"])
    warmup = max(sweep(grid.get("warmup", 1)))
    halving = {**HALVING, **grid.get("halving", {})}
    for depth, steps in sorted(budgets.items()):
        room = stable_steps(steps, fraction) if schedule == "wsd" else steps
        if warmup > room:
            problems.append(f"depth_grid.warmup={warmup} does not fit depth {depth}'s budget of "
                            f"{steps} steps (depth_grid.steps)"
                            + (f" before its cool-down of {steps - room} steps"
                               if schedule == "wsd" else "")
                            + f"; allowed: a warm-up of at most {room} steps")
        if grid.get("tuning") == "halving" and steps < halving["eta"] ** (halving["rungs"] - 1):
            problems.append(f"depth_grid.halving: {halving['rungs']} rungs at eta="
                            f"{halving['eta']} need at least eta^(rungs - 1) = "
                            f"{halving['eta'] ** (halving['rungs'] - 1)} steps for rung 0; "
                            f"depth {depth}'s budget (depth_grid.steps) is {steps}")
    curve = grid.get("budget_curve") or {}
    if curve.get("budgets") and schedule != "wsd":
        problems.append(f"depth_grid.budget_curve: budgets are cool-downs branched off one run, "
                        f"which needs depth_grid.schedule: wsd (it is {schedule!r})")
    elif curve.get("budgets"):
        for b in sorted(curve["budgets"]):
            if stable_steps(b, fraction) < warmup:
                problems.append(f"depth_grid.budget_curve.budgets: {b} steps leave "
                                f"{stable_steps(b, fraction)} before the cool-down, less than "
                                f"the warm-up (depth_grid.warmup up to {warmup}); allowed: "
                                "budgets whose stable phase reaches past the warm-up")
    return problems


def rival_fixes(config: dict, reported: bool = True) -> list[str]:
    """The rival fixes exist and, when their experiment is reported, are tuned at a task of the
    depth grid."""
    rivals, grid = config.get("rival_fixes", {}), config.get("depth_grid", {})
    problems = undefined_variants(config, [("rival_fixes.variants", v)
                                           for v in rivals.get("variants", [])])
    if "task" in rivals:
        problems += unknown_tasks([("rival_fixes.task", rivals["task"])])
    if reported and rivals.get("task", "digits") not in grid.get("tasks", []):
        problems.append(f"rival_fixes.task: {rivals.get('task', 'digits')!r} is not in "
                        f"depth_grid.tasks {grid.get('tasks', [])}: the rival fixes are tuned "
                        "as arms of the depth grid at that task's deepest depth")
    return problems


def train(config: dict) -> list[str]:
    """The shared `train` block (the ensembles' and the tuned arms'): a width that splits into
    heads."""
    block = config.get("train", {})
    if "width" in block and "heads" in block:
        return divisible("train.width", block["width"], block["heads"], "train.heads")
    return []
