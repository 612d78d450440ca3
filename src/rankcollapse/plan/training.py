"""The workflow's training grid as ensembles, planned from the config before any job runs.

Every experiment whose registry record has `training` (the tuned arms are planned one by one
instead: plan.tuned) asks for runs of architectures (task, variant, depth) over seeds and optimiser
settings. The config gives `lr`, `warmup` and `weight_decay` as a number or a list (a sweep); an
experiment's members for one architecture are the product seeds x lr x warmup x weight_decay.
All members of one architecture, whichever experiments ask for them, train as one ensemble
(`rankcollapse.training.ensemble`), split into several when they would not fit
`train.ensemble_memory_mb`:

    groups(config)        {(task, variant, depth): Group}: model, shared training options, members
    ensembles(config)     [Job]: one training job each, (task, variant, depth, part, members)
    experiment_members(config, experiment)   the identity rows an experiment's tables keep

A member is a dict {seed, lr, warmup, weight_decay}; its identity in the tables is
{seed, peak_lr, warmup, weight_decay} (`ensemble.Member.identity`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, fields

from rankcollapse.core.specs import MEMBER_FIELDS, MODEL_KEYS, TrainConfig, sweep
from rankcollapse.plan import experiments
from rankcollapse.plan.memory import CONTEXT_MB, member_memory_mb, split

# Keys of the `train` block that are not TrainConfig fields.
PLAN_KEYS = ("eval_size", "gpu", "ensemble_memory_mb")


@dataclass(frozen=True)
class Group:
    """Every member of one architecture: what they share and who they are."""

    task: str
    variant: str
    depth: int
    model_options: dict  # width, heads, mlp_ratio, depth
    train_options: dict  # the TrainConfig fields every member shares
    members: tuple  # ({seed, lr, warmup, weight_decay}, ...), sorted
    task_options: dict  # the data options (the config's `tasks.<task>`, a record's overrides)


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


def _training(experiment: str):
    training = experiments.get(experiment).training
    if training is None:
        raise ValueError(f"experiment={experiment!r} trains no ensembles; those that do: "
                         f"{list(experiments.ensemble_trained())}")
    return training


def _settings(config: dict, experiment: str, task: str) -> tuple[dict, dict]:
    """(model sizes, training options with sweeps as lists) of an experiment's runs on `task`
    (its registry record's `training.train`, which may override the `train` block per
    task)."""
    train = _training(experiment).train(config, task)
    return {k: train[k] for k in MODEL_KEYS}, {k: v for k, v in train.items()
                                                 if k not in (*MODEL_KEYS, *PLAN_KEYS)}


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
    for task, variant, depth, seeds in _training(experiment).runs(config):
        model, train = _settings(config, experiment, task)
        defaults = asdict(TrainConfig())
        shared = {k: train.get(k, defaults[k]) for k in shared_keys}
        members = _members(seeds, {k: train.get(k, defaults[k]) for k in MEMBER_FIELDS})
        out[(task, variant, int(depth))] = Group(
            task, variant, int(depth), {**model, "depth": int(depth)}, shared,
            tuple(sorted(members, key=_sort_key)), _training(experiment).data(config, task))
    return out


def experiment_members(config: dict, experiment: str) -> list[dict]:
    """The identity rows (task, variant, depth, seed, peak_lr, warmup, weight_decay) that the
    experiment's collected tables keep (its ensembles may hold other experiments' members)."""
    return [{"task": g.task, "variant": g.variant, "depth": g.depth, "seed": m["seed"],
             "peak_lr": m["lr"], "warmup": m["warmup"], "weight_decay": m["weight_decay"]}
            for g in experiment_groups(config, experiment).values() for m in g.members]


def groups(config: dict, trained: tuple[str, ...] | None = None) -> dict[tuple, Group]:
    """Every architecture that is trained, with the union of its members over experiments.

    Raises ValueError when two experiments train one architecture with different model sizes
    or shared training options (one ensemble cannot hold both)."""
    out: dict[tuple, Group] = {}
    for experiment in trained or experiments.ensemble_trained():
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


def ensembles(config: dict, trained: tuple[str, ...] | None = None) -> list[Job]:
    """Every training job: each architecture's members, split to fit the memory budget."""
    budget = config["train"].get("ensemble_memory_mb", 4096)
    jobs = []
    for key, group in groups(config, trained).items():
        per_member = member_memory_mb(group.task, group.task_options,
                                      config["variants"][group.variant], group.model_options,
                                      group.train_options["batch"])
        for part, members in enumerate(split(list(group.members), per_member, budget)):
            jobs.append(Job(*key, part, tuple(members)))
    return jobs


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


