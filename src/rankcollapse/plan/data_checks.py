"""Config values that refer to data, judged against that data before any job starts.

The schema bounds each value on its own and the registry's checks cross-check the blocks; these
checks read the data a value refers to (the text corpus, scikit-learn's texts, a checkpoint
folder) or a task's own constraint, and say what the value would run into inside its job: a task
whose test set would not fit in its data, an empty evaluation block, a text too short for the
realarch batch, a checkpoint shorter than the tokens, a batch larger than a training split. One
function per config block, each named by its experiment's record (`plan.experiments`) beside
its cross-checks; torch-free (the facts come from core/tasks.py and core/checkpoints.py). One
line per problem: the key, its value, what is allowed.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

# ---- training tasks (the paths, escalation and depth_grid blocks) ----------------------------


def _uses(config: dict, block: str) -> list[tuple[str, str, bool]]:
    """(task, the key that uses it, whether paths.data's overrides apply) of the training runs
    a block plans (unknown tasks are the cross-checks' to say)."""
    from rankcollapse.core.tasks import TASKS

    b = config.get(block, {})
    tasks = [b["task"]] if block == "escalation" and "task" in b else b.get("tasks", [])
    key = "escalation.task" if block == "escalation" else f"{block}.tasks"
    return [(t, key, block == "paths") for t in tasks if t in TASKS]


def _options(config: dict, task: str, e2: bool) -> tuple[dict, dict]:
    """(the options a run of `task` is built with: the task's defaults, `tasks.<task>`, and with
    e2 the paths block's `paths.data.<task>`; the config key each given option comes from)."""
    from rankcollapse.core.tasks import TASKS

    defaults = {k: p.default for k, p in inspect.signature(TASKS[task]).parameters.items()}
    options, keys = dict(defaults), {k: f"tasks.{task}.{k}" for k in defaults}
    layers = [(f"tasks.{task}", config.get("tasks", {}).get(task, {}))]
    if e2:
        layers.append((f"paths.data.{task}", config.get("paths", {}).get("data", {}).get(task, {})))
    for prefix, given in layers:
        for k, v in given.items():
            options[k], keys[k] = v, f"{prefix}.{k}"
    return options, keys


def _task_problems(config: dict, block: str, tuned: bool = False) -> list[str]:
    """The data problems of the tasks `block` trains on; tuned: its arms select their settings
    on the validation split, which must then exist."""
    problems = []
    for task, used_by, e2 in _uses(config, block):
        o, key = _options(config, task, e2)
        if task == "memorisation" and o["test_size"] > o["train_size"]:
            problems.append(
                f"{key['test_size']}={o['test_size']} exceeds {key['train_size']}="
                f"{o['train_size']} (used by {used_by}): the test sequences are the first "
                f"test_size memorised ones; allowed: test_size <= train_size")
        if task == "text":
            problems += _text_problems(o, key, used_by)
        if task == "digits" and tuned and not o["val_fraction"] > 0:
            problems.append(
                f"{key['val_fraction']}={o['val_fraction']}: digits is in {used_by}, whose "
                "tuned arms select their settings on the validation split, and 0 leaves none; "
                "allowed: a fraction in (0, 1)")
    return problems


def paths(config: dict) -> list[str]:
    """The tasks of the paths block, with its own data sizes (paths.data)."""
    return _task_problems(config, "paths")


def escalation(config: dict) -> list[str]:
    """The task of the escalation block."""
    return _task_problems(config, "escalation")


def _text_problems(o: dict, key: dict, used_by: str) -> list[str]:
    """Every block of the corpus (train, validation, test) must hold a window of length + 1."""
    from rankcollapse.core.tasks import text_blocks, text_corpus, text_windows

    size = len(text_corpus())
    blocks = dict(zip(("training", "validation", "test"),
                      text_blocks(size, o["val_fraction"], o["test_fraction"]), strict=True))
    empty = [name for name, chars in blocks.items() if text_windows(chars, o["length"]) < 1]
    if not empty:
        return []
    longest = min(blocks.values()) - 1
    return [f"{key['length']}={o['length']} (used by {used_by}) leaves the {' and '.join(empty)} "
            f"block(s) of the text corpus ({size} characters, split "
            f"{'/'.join(str(c) for c in blocks.values())} by {key['val_fraction']}="
            f"{o['val_fraction']} and {key['test_fraction']}={o['test_fraction']}) without one "
            f"sequence of length + 1 characters; allowed: length <= {longest}"]


# ---- the circle block -----------------------------------------------------------------------


def circle(config: dict) -> list[str]:
    """Each width of the circle block splits into its heads."""
    circle = config.get("circle", {})
    heads = circle.get("heads", 2)
    return [f"circle.widths: {w} is not divisible by circle.heads={heads} (each head has "
            f"width / heads dimensions); allowed: multiples of {heads}"
            for w in circle.get("widths", []) if w % heads]


# ---- the realarch block ---------------------------------------------------------------------


def realarch(config: dict) -> list[str]:
    """The realarch block's text input fits the text that ships with scikit-learn, and its
    tokens fit each checkpoint's positions."""
    realarch = config.get("realarch", {})
    from rankcollapse.core.checkpoints import (
        WORD_PATTERN,
        CheckpointError,
        checkpoint_config,
        max_positions,
        package_text,
    )

    problems = []
    tokens, batch = realarch.get("tokens", 128), realarch.get("batch", 32)
    if min(realarch.get("text_seeds", 1), len(realarch.get("seeds", [0]))) > 0:
        words = len(re.findall(WORD_PATTERN, package_text()))
        if batch * tokens > words:
            problems.append(
                f"realarch.batch={batch} x realarch.tokens={tokens} = {batch * tokens} tokens of "
                f"text input, but the text that ships with scikit-learn has {words} "
                f"(realarch.text_seeds={realarch.get('text_seeds', 1)} seeds run it); allowed: "
                f"batch x tokens <= {words}, or text_seeds: 0")
    for model, path in (realarch.get("checkpoints") or {}).items():
        key = f"realarch.checkpoints.{model}"
        try:
            found = checkpoint_config(path)
        except CheckpointError:
            continue  # said by config.check_config
        folder = Path(path).expanduser()  # its weights: plan.checks.realarch
        limit = max_positions(found)
        if limit is not None and tokens > limit:
            problems.append(f"realarch.tokens={tokens} exceeds the {limit} positions of the "
                            f"checkpoint {key} ({folder}/config.json); allowed: tokens <= {limit}")
    return problems


# ---- the depth_grid block -------------------------------------------------------------------


def depth_grid(config: dict, tuned: bool = True) -> list[str]:
    """The depth grid's tasks (their data; with `tuned`, a validation split to select on), the
    tasks its per-task depths name, and its batch against each task's training split."""
    from rankcollapse.core.tasks import TASKS, training_examples

    grid = config.get("depth_grid", {})
    depths = grid.get("depths", {})
    problems = _task_problems(config, "depth_grid", tuned)
    problems += [f"depth_grid.depths.{name}: unknown task {name!r}, so these depths are never "
                 f"trained; depths are given per task of depth_grid.tasks "
                 f"{grid.get('tasks', [])}"
                 for name in (depths if isinstance(depths, dict) else []) if name not in TASKS]
    batch = grid.get("batch", 32)
    for task in grid.get("tasks", []):
        if task not in TASKS:
            continue  # said by the cross-checks
        options, key = _options(config, task, False)
        examples = training_examples(task, **options)
        if batch > examples:
            problems.append(f"depth_grid.batch={batch} exceeds the {examples} training examples "
                            f"of task {task!r} (its training split under tasks.{task}); "
                            f"allowed: batch <= {examples}")
    return problems
