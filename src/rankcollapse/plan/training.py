"""The workflow's training grid as ensembles, planned from the config before any job runs.

Every training experiment (E4, E2; E5 and E5b are tuned per arm: `tuned_runs`, at the end) asks
for runs of architectures (task, variant, depth) over seeds and optimiser settings. The config
gives `lr`, `warmup` and `weight_decay` as a number or a list (a sweep); an experiment's members
for one architecture are the product seeds x lr x warmup x weight_decay. All members of one
architecture, whichever experiments ask
for them, train as one ensemble (`rankcollapse.training.ensemble`), split into several when
they would
not fit `train.ensemble_memory_mb`:

    groups(config)        {(task, variant, depth): Group}: model, shared training options, members
    ensembles(config)     [Job]: one training job each, (task, variant, depth, part, members)
    tuned_jobs(config)    [TunedJob]: E5's jobs, (task, variant, depths) (`tuned_runs`: its arms)
    experiment_members(config, experiment)   the identity rows an experiment's tables keep

A member is a dict {seed, lr, warmup, weight_decay}; its identity in the tables is
{seed, peak_lr, warmup, weight_decay} (`ensemble.Member.identity`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, fields

from rankcollapse.core.tasks import TaskSpec, task_spec
from rankcollapse.plan.specs import MEMBER_FIELDS, ModelConfig, TrainConfig

# Experiments trained through the `train` rule; E5 and E5b are tuned per arm (`tuned_runs`).
EXPERIMENTS = ("E4", "E2")
MODEL_KEYS = ("width", "heads", "mlp_ratio")
# Keys of the `train` block that are not TrainConfig fields.
PLAN_KEYS = ("eval_size", "gpu", "ensemble_memory_mb")


def sweep(value) -> list:
    """A config value that may be a list (a sweep) or a single value, as a list."""
    return list(value) if isinstance(value, list | tuple) else [value]


@dataclass(frozen=True)
class Group:
    """Every member of one architecture: what they share and who they are."""

    task: str
    variant: str
    depth: int
    model_options: dict  # width, heads, mlp_ratio, depth
    train_options: dict  # the TrainConfig fields every member shares
    members: tuple  # ({seed, lr, warmup, weight_decay}, ...), sorted
    task_options: dict  # the data options (the config's `tasks.<task>`, E2's overrides)


@dataclass(frozen=True)
class Job:
    """One training job: one ensemble (part `part` of its group's members)."""

    task: str
    variant: str
    depth: int
    part: int
    members: tuple

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.task, self.variant, self.depth)


def _settings(config: dict, experiment: str, task: str) -> tuple[dict, dict]:
    """(model sizes, training options with sweeps as lists) of an experiment's runs on `task`.
    E2 takes its model size per task and its optimiser overrides from `paths`."""
    train = dict(config["train"])
    if experiment == "E2":
        paths = config["paths"]
        train = {**train, **paths.get("models", {}).get(task, {}), **paths.get("train", {})}
    return {k: train[k] for k in MODEL_KEYS}, {k: v for k, v in train.items()
                                                 if k not in (*MODEL_KEYS, *PLAN_KEYS)}


def _task_options(config: dict, experiment: str, task: str) -> dict:
    """The task's data options for an experiment's runs: `tasks.<task>`, with E2's overrides
    from `paths.data` (Dong et al.'s data sizes, apart from the other experiments')."""
    options = dict(config["tasks"][task])
    if experiment == "E2":
        options.update(config["paths"].get("data", {}).get(task, {}))
    return options


def _runs(config: dict, experiment: str) -> list[tuple[str, str, int, list[int]]]:
    """(task, variant, depth, seeds) of every architecture an experiment trains."""
    if experiment == "E2":
        p = config["paths"]
        return [(t, v, d, p["seeds"]) for t in p["tasks"] for v in p["variants"]
                for d in p["depths"]]
    if experiment == "E4":
        e = config["escalation"]
        return [(e["task"], v, e["depth"], e["seeds"]) for v in e["variants"]]
    raise ValueError(f"experiment={experiment!r}: allowed values are {list(EXPERIMENTS)}")


def _members(seeds: list[int], train: dict) -> list[dict]:
    """seeds x lr x warmup x weight_decay, each member a dict."""
    grids = [sweep(train[k]) for k in MEMBER_FIELDS]
    return [{"seed": int(seed), **dict(zip(MEMBER_FIELDS, values, strict=True))}
            for seed in seeds for values in itertools.product(*grids)]


def _sort_key(member: dict) -> tuple:
    return (member["seed"], *(member[k] for k in MEMBER_FIELDS))


def experiment_groups(config: dict, experiment: str) -> dict[tuple, Group]:
    """{(task, variant, depth): Group} of the members one experiment asks for."""
    out = {}
    shared_keys = [f.name for f in fields(TrainConfig) if f.name not in MEMBER_FIELDS]
    for task, variant, depth, seeds in _runs(config, experiment):
        model, train = _settings(config, experiment, task)
        defaults = asdict(TrainConfig())
        shared = {k: train.get(k, defaults[k]) for k in shared_keys}
        members = _members(seeds, {k: train.get(k, defaults[k]) for k in MEMBER_FIELDS})
        out[(task, variant, int(depth))] = Group(
            task, variant, int(depth), {**model, "depth": int(depth)}, shared,
            tuple(sorted(members, key=_sort_key)), _task_options(config, experiment, task))
    return out


def experiment_members(config: dict, experiment: str) -> list[dict]:
    """The identity rows (task, variant, depth, seed, peak_lr, warmup, weight_decay) that the
    experiment's collected tables keep (its ensembles may hold other experiments' members)."""
    return [{"task": g.task, "variant": g.variant, "depth": g.depth, "seed": m["seed"],
             "peak_lr": m["lr"], "warmup": m["warmup"], "weight_decay": m["weight_decay"]}
            for g in experiment_groups(config, experiment).values() for m in g.members]


def groups(config: dict, experiments=EXPERIMENTS) -> dict[tuple, Group]:
    """Every architecture that is trained, with the union of its members over experiments.

    Raises ValueError when two experiments train one architecture with different model sizes
    or shared training options (one ensemble cannot hold both)."""
    out: dict[tuple, Group] = {}
    for experiment in experiments:
        for key, group in experiment_groups(config, experiment).items():
            if key not in out:
                out[key] = group
                continue
            have = out[key]
            if (have.model_options, have.train_options, have.task_options) != (
                    group.model_options, group.train_options, group.task_options):
                raise ValueError(
                    f"{experiment} trains task {key[0]!r}, variant {key[1]!r}, depth {key[2]} "
                    "with other model, training or data settings than another experiment; use "
                    "a differently named copy of the variant")
            merged = {tuple(sorted(m.items())): m for m in (*have.members, *group.members)}
            out[key] = Group(*key, have.model_options, have.train_options,
                             tuple(sorted(merged.values(), key=_sort_key)), have.task_options)
    return out


# ---- memory ---------------------------------------------------------------------------------

# Floats that one training step keeps for the backward pass, per token of the batch and block:
# fitted to the saved tensors that autograd records for the ensemble's step (tests check the
# estimate against that count): the residual stream and its norms ~ width, the attention
# scores and probabilities ~ heads x tokens, the MLP ~ width and its hidden layer.
SAVED_PER_WIDTH, SAVED_PER_ATTENTION = 4.5, 2.5
SAVED_MLP_PER_WIDTH, SAVED_MLP_PER_HIDDEN = 5.5, 2.2
MARGIN = 1.25  # allocator slack and transient buffers
STATE_COPIES = 6  # weights, gradients, two AdamW moments, two temporaries of the update


def parameter_count(spec: TaskSpec, cfg: ModelConfig) -> int:
    """Parameters of model.TaskModel(cfg) for the task `spec`, counted from the sizes (building
    the model, even on the meta device, is too slow to plan a paper-size grid)."""
    d, hidden = cfg.width, cfg.mlp_ratio * cfg.width
    norms = (cfg.norm != "none") * (1 + cfg.mlp)  # LayerNorms per block, 2d parameters each
    block = 4 * d * d + 4 * d * cfg.bias + 2 * d * norms + cfg.mlp * (2 * d * hidden + hidden + d)
    embed = spec.input_dim * d + (d if spec.inputs == "features" else 0)
    tokens = spec.tokens + (spec.readout == "class_token")
    around = embed + (d if spec.readout == "class_token" else 0) + tokens * d + 2 * d \
        + d * spec.classes + spec.classes
    return cfg.depth * block + around


def member_memory_mb(task: str, task_options: dict, variant: dict, model_options: dict,
                     batch: int, bytes_per_float: int = 4) -> float:
    """Estimated peak memory (MB) that one ensemble member adds to a training step."""
    spec = task_spec(task, **task_options)
    cfg = ModelConfig.from_dict({**variant, **model_options})
    params = parameter_count(spec, cfg)
    tokens = spec.tokens + (spec.readout == "class_token")
    per_token = SAVED_PER_WIDTH * cfg.width + SAVED_PER_ATTENTION * cfg.heads * tokens
    if cfg.mlp:
        per_token += SAVED_MLP_PER_WIDTH * cfg.width + SAVED_MLP_PER_HIDDEN * cfg.mlp_ratio \
            * cfg.width
    saved = MARGIN * cfg.depth * batch * tokens * per_token
    return (STATE_COPIES * params + saved) * bytes_per_float / 2**20


def split(members: list, per_member_mb: float, budget_mb: float) -> list[list]:
    """Members in as few contiguous, near-equal parts as fit `budget_mb` each (at least one
    member per part, however large)."""
    fit = max(1, math.floor(budget_mb / per_member_mb))
    parts = math.ceil(len(members) / fit)
    bounds = [round(i * len(members) / parts) for i in range(parts + 1)]
    return [members[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def ensembles(config: dict, experiments=EXPERIMENTS) -> list[Job]:
    """Every training job: each architecture's members, split to fit the memory budget."""
    budget = config["train"].get("ensemble_memory_mb", 4096)
    jobs = []
    for key, group in groups(config, experiments).items():
        per_member = member_memory_mb(group.task, group.task_options,
                                      config["variants"][group.variant], group.model_options,
                                      group.train_options["batch"])
        for part, members in enumerate(split(list(group.members), per_member, budget)):
            jobs.append(Job(*key, part, tuple(members)))
    return jobs


# What a job holds on a GPU besides its ensembles: the CUDA context, cuBLAS's workspace and the
# allocator's slack (a few hundred MB each on current GPUs), rounded up.
CONTEXT_MB = 1024


def _per_member_mb(config: dict, task: str, task_options: dict, variant: str,
                   model_options: dict, batch: int) -> float:
    return member_memory_mb(task, task_options, config["variants"][variant], model_options,
                            batch)


def job_memory_mb(config: dict, job: Job) -> int:
    """The GPU memory (MB) a training job declares (resources: gpu_mb): its members' estimated
    step memory (`member_memory_mb`) and CONTEXT_MB; 0 when the config uses no GPU
    (train.gpu 0)."""
    if not config["train"].get("gpu", 0):
        return 0
    group = groups(config)[job.key]
    per = _per_member_mb(config, job.task, group.task_options, job.variant,
                         group.model_options, group.train_options["batch"])
    return math.ceil(len(job.members) * per + CONTEXT_MB)


def job_params(config: dict, job: Job) -> dict:
    """Everything one training job needs (ensemble.run_job's arguments but the paths)."""
    group = groups(config)[job.key]
    return {"task": job.task, "task_options": group.task_options,
            "variant": config["variants"][job.variant], "model_options": group.model_options,
            "train_options": group.train_options, "members": [dict(m) for m in job.members]}


IDENTITY = ["task", "variant", "depth", "seed", "peak_lr", "warmup", "weight_decay"]


def select_members(table, members: list[dict]):
    """The rows of `table` whose member identity (IDENTITY columns) is one of `members`, in
    the table's order."""
    import pandas as pd

    wanted = pd.DataFrame(members, columns=IDENTITY).drop_duplicates()
    keys = table[IDENTITY].reset_index(drop=True)
    mask = keys.merge(wanted.assign(_keep=True), on=IDENTITY, how="left")["_keep"].eq(True)
    return table[mask.to_numpy()].reset_index(drop=True)


# ---- E5: per-arm tuning ---------------------------------------------------------------------

TUNED_SHARED = ("schedule", "clip", "checkpoint_every", "eval_every", "precision", "engine",
                "attention")


def grid_depths(grid: dict, task: str) -> list[int]:
    """depth_grid.depths for `task`: one list for every task, or {task: list}."""
    depths = grid["depths"]
    return sorted(int(d) for d in (depths[task] if isinstance(depths, dict) else depths))


def tuned_runs(config: dict) -> list[tuple[str, str, int]]:
    """(task, variant, depth) of every E5 job: the grid's variants at each of the task's
    depths, the placement variants at its deepest depth (for placement_tasks), and E5b's rival
    fixes (`rival_fixes.variants`) at the deepest depth of `rival_fixes.task` when the report
    includes E5b."""
    g = config["depth_grid"]
    runs = []
    for task in g["tasks"]:
        depths = grid_depths(g, task)
        runs += [(task, v, d) for v in g["variants"] for d in depths]
        if task in g.get("placement_tasks", []):
            runs += [(task, v, depths[-1]) for v in g.get("placements", [])
                     if (task, v, depths[-1]) not in runs]
    rivals = config.get("rival_fixes", {})
    if "E5b" in config.get("report", {}).get("experiments", []) and rivals.get("task") in \
            g["tasks"]:
        task = rivals["task"]
        deepest = grid_depths(g, task)[-1]
        runs += [(task, v, deepest) for v in rivals.get("variants", [])
                 if (task, v, deepest) not in runs]
    return runs


@dataclass(frozen=True)
class TunedJob:
    """One E5 job: the arms of one (task, variant) at `depths`, tuned one after another in one
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


def tuned_jobs(config: dict) -> list[TunedJob]:
    """E5's jobs, in tuned_runs' order: every arm alone, except that the arms of one (task,
    variant) at depths up to `depth_grid.merge_depths_up_to` share one job, where a job's
    start (interpreter, torch, data, a GPU's context: seconds) would dwarf a shallow arm's
    work. 0 (the default) merges nothing."""
    limit = int(config["depth_grid"].get("merge_depths_up_to", 0))
    jobs: list[list] = []
    merged: dict[tuple[str, str], list] = {}
    for task, variant, depth in tuned_runs(config):
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
    shared.update(steps=g["steps"], batch=g["batch"])
    return {"task": task, "task_options": dict(config["tasks"][task]),
            "variant": config["variants"][variant],
            "model_options": {**{k: train[k] for k in MODEL_KEYS}, "depth": int(depth)},
            "train_options": shared,
            "sweep": {k: g[k] for k in MEMBER_FIELDS},
            "tuning_seeds": [int(s) for s in g["tuning_seeds"]],
            "final_seeds": [int(s) for s in g["seeds"]],
            "tuning": {"method": g.get("tuning", "grid"), **g.get("halving", {})},
            "memory": tuned_memory(config, task, variant, depth)}


def tuned_memory(config: dict, task: str, variant: str, depth: int) -> dict:
    """A tuned job's memory plan: the estimate per member (MB), the budget of one ensemble
    (`train.ensemble_memory_mb`: a sweep larger than it trains in parts, one after another)
    and the GPU memory the job declares (resources: gpu_mb; 0 without a GPU)."""
    g, train = config["depth_grid"], config["train"]
    model = {**{k: train[k] for k in MODEL_KEYS}, "depth": int(depth)}
    per = _per_member_mb(config, task, dict(config["tasks"][task]), variant, model,
                         int(g["batch"]))
    budget = float(train.get("ensemble_memory_mb", 4096))
    settings = math.prod(len(sweep(g[k])) for k in MEMBER_FIELDS)
    largest = max(len(g["tuning_seeds"]) * settings, len(g["seeds"]))
    fit = max(1, math.floor(budget / per))
    gpu = math.ceil(min(largest, fit) * per + CONTEXT_MB) if train.get("gpu", 0) else 0
    return {"member_mb": per, "budget_mb": budget, "gpu_mb": gpu}
