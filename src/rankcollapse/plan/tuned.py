"""The depth grid's plan (`depth_grid`, `rival_fixes`): every arm (task, variant, depth) tuned on
its own, the jobs that hold them, and the settings each job trains (budgets per depth, the
sweep's grid, successive halving's rungs)."""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

from rankcollapse.core.specs import MEMBER_FIELDS, MODEL_KEYS, TrainConfig, stable_steps, sweep
from rankcollapse.plan.memory import CONTEXT_MB, member_memory_mb

METHODS = ("grid", "halving")
# Successive halving's defaults (the schema's too). screen_seeds: how many of the tuning seeds
# train the rungs before the deciding one (0: all of them).
HALVING = {"eta": 3, "rungs": 3, "screen_seeds": 0}
# What the tuned arms take from the `train` block; steps, batch, schedule and cooldown are
# depth_grid's own.
TUNED_SHARED = ("clip", "checkpoint_every", "eval_every", "precision", "engine", "attention")
SCHEDULE = {"schedule": "wsd", "cooldown": 0.2}  # the arms' schedule unless depth_grid sets one


def depth_steps(grid: dict, depth: int) -> int:
    """The training budget (steps per network) of every arm at `depth`: depth_grid.steps, one
    number or {depth: steps}."""
    steps = grid["steps"]
    if isinstance(steps, dict):
        if int(depth) not in {int(d) for d in steps}:
            raise ValueError(f"depth_grid.steps gives no budget for depth {depth}; it gives "
                             f"{sorted(int(d) for d in steps)}")
        return int({int(d): v for d, v in steps.items()}[int(depth)])
    return int(steps)


def grid_budgets(grid: dict) -> dict[int, int]:
    """{depth: steps} over every depth the grid trains (a config file's {depth: steps} merged
    over another's may also name depths the grid no longer has)."""
    depths = sorted({d for task in grid["tasks"] for d in grid_depths(grid, task)})
    return {d: depth_steps(grid, d) for d in depths}


def arm_budgets(grid: dict, variant: str, steps: int, deepest: bool = False) -> list[int]:
    """The training budgets at which an arm's final seeds are also evaluated
    (depth_grid.budget_curve): every budget for the curve's variants (their trunk runs to the
    largest), the budgets shorter than the arm's own steps for the others. The curve's
    `control`, at a task's deepest depth (`deepest`), also runs to twice its own steps where
    no budget of the curve goes past them: the longer budget its convergence check reads."""
    curve = grid.get("budget_curve") or {}
    budgets = sorted(int(b) for b in curve.get("budgets", []))
    if variant not in curve.get("variants", []):
        return [b for b in budgets if b < steps]
    if deepest and variant == curve.get("control") and not any(b > steps for b in budgets):
        budgets.append(2 * int(steps))
    return budgets


def grid_depths(grid: dict, task: str) -> list[int]:
    """depth_grid.depths for `task`: one list for every task, or {task: list}."""
    depths = grid["depths"]
    return sorted(int(d) for d in (depths[task] if isinstance(depths, dict) else depths))


def grid_arms(config: dict) -> list[tuple[str, str, int]]:
    """(task, variant, depth) of the depth grid's tuned arms: its variants at each of a task's
    depths, and its placement variants at the deepest depth of each placement task."""
    g = config["depth_grid"]
    runs = []
    for task in g["tasks"]:
        depths = grid_depths(g, task)
        runs += [(task, v, d) for v in g["variants"] for d in depths]
        if task in g.get("placement_tasks", []):
            runs += [(task, v, depths[-1]) for v in g.get("placements", [])
                     if (task, v, depths[-1]) not in runs]
    return runs


def rival_arms(config: dict) -> list[tuple[str, str, int]]:
    """(task, variant, depth) of the rival fixes (`rival_fixes.variants`), tuned as arms of the
    depth grid at the deepest depth of `rival_fixes.task` (none when the grid lacks that task)."""
    g, rivals = config["depth_grid"], config.get("rival_fixes", {})
    if rivals.get("task") not in g["tasks"]:
        return []
    deepest = grid_depths(g, rivals["task"])[-1]
    return [(rivals["task"], v, deepest) for v in rivals.get("variants", [])]


@dataclass(frozen=True)
class TunedJob:
    """One tuned job: the arms of one (task, variant) at `depths`, tuned one after another in one
    process (`tuning.run_tuned_arms`). One depth unless depth_grid.merge_depths_up_to merges
    the shallow ones."""

    task: str
    variant: str
    depths: tuple[int, ...]

    @property
    def label(self) -> str:
        """The job's folder name after "L": its depths joined by "-" (L8, L2-4-8)."""
        return "-".join(str(d) for d in self.depths)

    @property
    def key(self) -> tuple[str, str, str]:
        """(task, variant, label): the job's wildcards in the workflow."""
        return (self.task, self.variant, self.label)


def tuned_jobs(config: dict, runs: list[tuple[str, str, int]]) -> list[TunedJob]:
    """The jobs that train the tuned arms `runs` (task, variant, depth; in their order): every
    arm alone, except that the arms of one (task, variant) at depths up to
    `depth_grid.merge_depths_up_to` share one job, where a job's start (interpreter, torch,
    data, a GPU's context: seconds) would dwarf a shallow arm's work. 0 (the default) merges
    nothing."""
    limit = int(config["depth_grid"].get("merge_depths_up_to", 0))
    jobs: list[list] = []
    merged: dict[tuple[str, str], list] = {}
    for task, variant, depth in runs:
        if depth <= limit and (task, variant) in merged:
            merged[(task, variant)][2].append(depth)
            continue
        job = [task, variant, [depth]]
        jobs.append(job)
        if depth <= limit:
            merged[(task, variant)] = job
    return [TunedJob(t, v, tuple(d)) for t, v, d in jobs]


def tuned_job_params(config: dict, job: TunedJob) -> dict:
    """Everything one tuned job needs: {"arms": tuned_params of each of its depths}."""
    return {"arms": [tuned_params(config, job.task, job.variant, d) for d in job.depths]}


def tuned_job_gpu_mb(config: dict, job: TunedJob) -> int:
    """GPU memory (MB) a tuned job declares: its largest arm's (they run one after another)."""
    return max(tuned_memory(config, job.task, job.variant, d)["gpu_mb"] for d in job.depths)


def tuned_params(config: dict, task: str, variant: str, depth: int) -> dict:
    """Everything one tuned job needs (tuning.run_tuned_job's arguments but the paths)."""
    g, train = config["depth_grid"], config["train"]
    defaults = asdict(TrainConfig())
    shared = {k: train.get(k, defaults[k]) for k in TUNED_SHARED}
    steps = depth_steps(g, depth)
    shared.update(steps=steps, batch=g["batch"],
                  **{k: g.get(k, default) for k, default in SCHEDULE.items()})
    return {"task": task, "task_options": dict(config["tasks"][task]),
            "variant": config["variants"][variant],
            "model_options": {**{k: train[k] for k in MODEL_KEYS}, "depth": int(depth)},
            "train_options": shared,
            "sweep": {k: g[k] for k in MEMBER_FIELDS},
            "tuning_seeds": [int(s) for s in g["tuning_seeds"]],
            "final_seeds": [int(s) for s in g["seeds"]],
            "tuning": {"method": g.get("tuning", "grid"), **HALVING, **g.get("halving", {}),
                       "select_by": g.get("select_by", "loss")},
            "memory": tuned_memory(config, task, variant, depth),
            "budgets": arm_budgets(g, variant, steps,
                                   deepest=int(depth) == grid_depths(g, task)[-1])}


def arm_work(params: dict) -> list[dict]:
    """What one tuned arm trains (`params`: tuned_params): [{what, members, steps}], each
    successive-halving rung's sweep ("sweep rung r") and the fresh seeds ("final": a trunk to the
    longest budget of their curve, and each shorter budget's cool-down branched off it)."""
    steps = params["train_options"]["steps"]
    rungs = rung_plan(len(grid(params["sweep"])), steps, params["tuning"],
                      len(params["tuning_seeds"]))
    work = [{"what": f"sweep rung {i}", "members": r["settings"] * r["seeds"],
             "steps": r["budget"]} for i, r in enumerate(rungs)]
    trunk = max([steps, *params["budgets"]])
    cooldown = params["train_options"]["cooldown"]
    branched = sum(b - stable_steps(b, cooldown) for b in {*params["budgets"], steps} - {trunk})
    return work + [{"what": "final", "members": len(params["final_seeds"]),
                    "steps": trunk + branched}]


def tuned_job_priority(config: dict, job: TunedJob) -> float:
    """The job's work, in thousands of layer-member-steps (depth x members x steps over its
    arms): the workflow's scheduling priority, so that the longest jobs start first and the
    short ones fill the cores at the end."""
    return sum(arm["model_options"]["depth"] * sum(w["members"] * w["steps"]
                                                   for w in arm_work(arm))
               for arm in tuned_job_params(config, job)["arms"]) / 1000


def tuned_memory(config: dict, task: str, variant: str, depth: int) -> dict:
    """A tuned job's memory plan: the estimate per member (MB), the budget of one ensemble
    (`train.ensemble_memory_mb`: a sweep larger than it trains in parts, one after another)
    and the GPU memory the job declares (resources: gpu_mb; 0 without a GPU)."""
    g, train = config["depth_grid"], config["train"]
    model = {**{k: train[k] for k in MODEL_KEYS}, "depth": int(depth)}
    per = member_memory_mb(task, dict(config["tasks"][task]), config["variants"][variant], model,
                           int(g["batch"]))
    budget = float(train.get("ensemble_memory_mb", 4096))
    settings = math.prod(len(sweep(g[k])) for k in MEMBER_FIELDS)
    largest = max(len(g["tuning_seeds"]) * settings, len(g["seeds"]))
    fit = max(1, math.floor(budget / per))
    gpu = math.ceil(min(largest, fit) * per + CONTEXT_MB) if train.get("gpu", 0) else 0
    return {"member_mb": per, "budget_mb": budget, "gpu_mb": gpu}


def grid(sweep: dict) -> list[dict]:
    """Every setting {lr, warmup, weight_decay} of a sweep whose values are numbers or lists."""
    values = [v if isinstance(v, list | tuple) else [v] for v in (sweep[k] for k in MEMBER_FIELDS)]
    return [dict(zip(MEMBER_FIELDS, combo, strict=True)) for combo in itertools.product(*values)]


def rung_steps(steps: int, method: str = "grid", eta: int = HALVING["eta"],
               rungs: int = HALVING["rungs"]) -> list[int]:
    """The training budget of each rung: successive halving's rung r trains
    steps / eta^(rungs - 1 - r) steps, the last rung the full budget; the grid is one rung."""
    if method not in METHODS:
        raise ValueError(f"tuning={method!r}: allowed values are {list(METHODS)}")
    if method == "grid":
        return [int(steps)]
    if int(rungs) < 1 or int(eta) < 2:
        raise ValueError(f"halving needs rungs >= 1 and eta >= 2, got rungs={rungs}, eta={eta}")
    budgets = [round(steps / eta ** (rungs - 1 - r)) for r in range(int(rungs))]
    if budgets[0] < 1:
        raise ValueError(f"halving: {rungs} rungs at eta={eta} leave rung 0 of {steps} steps "
                         "with no step to train")
    return budgets


def rung_plan(settings: int, steps: int, tuning: dict, seeds: int) -> list[dict]:
    """The rungs a tuned arm trains: [{budget, settings, seeds}] for a sweep of `settings`
    settings over `seeds` tuning seeds (tuning: {method, eta, rungs, screen_seeds}). Rung r keeps
    the best 1/eta (rounded up) for the next; a rung that would train a single setting is not
    trained (that setting is the selection: its full budget is the fresh seeds'), so the last
    rung listed decides; the rungs before it (the screening rungs) train on the first
    `screen_seeds` tuning seeds when that is set, the deciding rung on all of them."""
    t = {"method": "grid", **HALVING, **tuning}
    budgets = rung_steps(int(steps), t["method"], t["eta"], t["rungs"])
    plan, survivors = [], int(settings)
    for rung, budget in enumerate(budgets):
        if rung and survivors == 1:
            break
        plan.append({"budget": budget, "settings": survivors, "seeds": int(seeds)})
        survivors = 1 if rung == len(budgets) - 1 else math.ceil(survivors / t["eta"])
    screen = int(t.get("screen_seeds") or 0)
    for rung in plan[:-1]:
        rung["seeds"] = min(screen, seeds) if screen else seeds
    return plan
