"""Config checks that run before any job starts, with messages a person can act on.

`check_schema` validates against workflow/schemas/config.schema.yaml and reports each problem
in one line (the key's dotted path, what is wrong, the allowed keys or values); `check_config`
adds the cross-reference checks a JSON schema cannot express. The workflow then also calls
snakemake's own `validate()`, which fills in the schema's defaults.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NamedTuple

import jsonschema
import yaml


class ConfigError(ValueError):
    """A config problem, reported before any job runs."""


def from_fields(cls, values: dict, what: str):
    """cls(**values) for a dataclass, failing fast with the unknown keys and the allowed ones."""
    from dataclasses import fields

    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise KeyError(f"unknown {what} option(s) {unknown}; allowed: {sorted(known)}")
    return cls(**values)


def _where(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _describe(error: jsonschema.ValidationError) -> str:
    where = _where(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        if allowed:
            return f"{where}: unknown key(s) {unknown}; allowed keys: {allowed}"
        return f"{where}: {error.message}"
    if error.validator == "required":
        return f"{where}: {error.message}"
    if error.validator in ("oneOf", "anyOf"):
        allowed = " or ".join(_shape(branch) for branch in error.validator_value)
        return f"{where}: {error.instance!r} is not allowed; allowed: {allowed}"
    return f"{where}: {error.message}"


def _shape(schema: dict, plural: bool = False) -> str:
    """A schema branch in words: 'a number > 0', 'a non-empty list of distinct integers >= 1'."""
    kind = schema.get("type", "value")
    if kind == "array":
        items = _shape(schema.get("items", {}), plural=True)
        return ("a " + ("non-empty " if schema.get("minItems") else "")
                + ("list of distinct " if schema.get("uniqueItems") else "list of ") + items)
    bounds = [f"{op} {schema[key]}" for key, op in (("minimum", ">="), ("exclusiveMinimum", ">"),
                                                    ("maximum", "<="), ("exclusiveMaximum", "<"))
              if key in schema]
    noun = {"integer": "integer", "number": "number", "string": "string"}.get(kind, kind)
    noun = noun + "s" if plural else ("an " if noun[0] in "aeiou" else "a ") + noun
    return " ".join([noun, *bounds])


def load_schema(path: str | os.PathLike) -> dict:
    return yaml.safe_load(Path(path).read_text())


def check_schema(config: dict, schema: dict) -> None:
    """Raise ConfigError listing every schema violation of `config`, one line each."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = sorted({_describe(e) for e in errors})
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(lines))


# Where each config writes (issue 34): the config named `default` (the schema's default name)
# writes results/ and report/report.{html,pdf}; any other name writes results/<name>/ and
# report/<name>.{html,pdf}, with its figures under report/<name>/figures/. So a name must not be
# a folder that the default writes under results/ (the rules' folders and
# benchmarks/gpu_check.py's results/gpu_check), nor one of report/'s own entries.
DEFAULT_NAME = "default"
RESERVED_NAMES = frozenset({
    # results/<folder>/ of the rules (tests/test_config.py checks the rule files against it)
    "benchmarks", "circle", "init", "logs", "notebooks", "numbers", "particles", "paths",
    "realarch", "tables", "train", "tuned",
    "gpu_check",  # benchmarks/gpu_check.py
    # report/: the default's report.{html,pdf} and figures/, the templates, snakemake's report
    "report", "figures", "templates", "snakemake-report",
})


class OutputRoots(NamedTuple):
    """Where one config's outputs go; the rules build every path from these strings."""

    results: str  # results or results/<name>
    report: str  # the report without its suffix: report/report or report/<name>
    figures: str  # report/figures or report/<name>/figures
    snakemake_report: str  # `snakemake --report`'s file (the Makefile's snakemake-report)


def output_roots(config: dict) -> OutputRoots:
    """The output roots of a config by its `name` (absent: the default's)."""
    name = config.get("name", DEFAULT_NAME)
    if name == DEFAULT_NAME:
        return OutputRoots("results", "report/report", "report/figures",
                           "report/snakemake-report.html")
    return OutputRoots(f"results/{name}", f"report/{name}", f"report/{name}/figures",
                       f"report/{name}/snakemake-report.html")


def config_name(files: list[str | os.PathLike]) -> str:
    """The `name` of the config that `--configfile` builds from these files (later files
    override earlier ones; none sets it: the default's)."""
    name = DEFAULT_NAME
    for path in files:
        name = (yaml.safe_load(Path(path).read_text()) or {}).get("name", name)
    return name


def _name_problems(config: dict) -> list[str]:
    name = config.get("name", DEFAULT_NAME)
    if name in RESERVED_NAMES:
        return [f"name: {name!r} is a folder or file the default config writes under results/ "
                f"or report/, so the two would overwrite each other; choose another name (not "
                f"one of {sorted(RESERVED_NAMES)})"]
    return []


def check_config(config: dict) -> None:
    """Raise ConfigError listing every cross-reference problem of a schema-valid config."""
    problems = _name_problems(config)
    defined = sorted(config.get("variants", {}))
    sweep = config.get("init_sweep", {})
    for name in sweep.get("variants", []):
        if name not in defined:
            problems.append(
                f"init_sweep.variants: variant {name!r} is not defined; "
                f"defined variants (config key `variants`): {defined}"
            )
    if "width" in sweep and "heads" in sweep and sweep["width"] % sweep["heads"]:
        problems.append(
            f"init_sweep.width={sweep['width']} is not divisible by "
            f"init_sweep.heads={sweep['heads']}"
        )
    problems += _training_problems(config, defined)
    problems += _paths_problems(config, defined)
    problems += _realarch_problems(config.get("realarch", {}))
    from rankcollapse.plan.particles import (
        config_problems,  # E6's cross-field checks live with its plan
    )

    problems += config_problems(config.get("particles", {}))
    if problems:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(problems))


def _realarch_problems(realarch: dict) -> list[str]:
    """E1b's pretrained checkpoints: each a folder holding a config.json of its model's type
    and the weights the loader will read (what save_pretrained writes), for a model that the run
    measures. Checked here, when the workflow is planned, rather than inside the job that would
    load it."""
    from rankcollapse.probe.spec import ProbeError, checkpoint_config, weight_files

    problems = []
    models = realarch.get("models", [])
    for model, path in (realarch.get("checkpoints") or {}).items():
        key = f"realarch.checkpoints.{model}"
        try:
            config = checkpoint_config(path)
        except ProbeError as err:
            problems.append(f"{key}: {err}")
            continue
        found = config["model_type"]
        if found != model:
            problems.append(f"{key}: {path} holds a {found!r} model (its config.json's "
                            f"model_type), not {model!r}")
        try:
            weight_files(path, config)
        except ProbeError as err:
            problems.append(f"{key}: {err}")
        if models and model not in models:
            problems.append(f"{key}: {model!r} is not in realarch.models {models}, so its "
                            "checkpoint would never be measured")
    return problems


def _training_problems(config: dict, defined: list[str]) -> list[str]:
    """Cross-references of the training blocks (train, escalation, depth_grid, report)."""
    from rankcollapse.core.tasks import TASKS

    problems = []
    known_tasks = sorted(TASKS)
    grid, escalation = config.get("depth_grid", {}), config.get("escalation", {})
    uses = [("depth_grid.variants", name) for name in grid.get("variants", [])]
    uses += [("depth_grid.placements", name) for name in grid.get("placements", [])]
    uses += [("escalation.variants", name) for name in escalation.get("variants", [])]
    rivals = config.get("rival_fixes", {})
    uses += [("rival_fixes.variants", name) for name in rivals.get("variants", [])]
    for key, name in uses:
        if name not in defined:
            problems.append(f"{key}: variant {name!r} is not defined; "
                            f"defined variants (config key `variants`): {defined}")
    tasks = [("depth_grid.tasks", name) for name in grid.get("tasks", [])]
    if "task" in escalation:
        tasks.append(("escalation.task", escalation["task"]))
    if "task" in rivals:
        tasks.append(("rival_fixes.task", rivals["task"]))
    for key, name in tasks:
        if name not in known_tasks:
            problems.append(f"{key}: unknown task {name!r}; allowed tasks: {known_tasks}")
    fresh = set(grid.get("seeds", [])) & set(grid.get("tuning_seeds", []))
    if fresh:
        problems.append(f"depth_grid.seeds: {sorted(fresh)} also tuning seed(s); the final seeds "
                        "must be fresh (not in depth_grid.tuning_seeds)")
    if grid.get("tuning") == "halving":
        halving = grid.get("halving", {})
        eta, rungs, steps = halving.get("eta", 3), halving.get("rungs", 3), grid.get("steps", 1)
        if steps < eta ** (rungs - 1):
            problems.append(f"depth_grid.halving: {rungs} rungs at eta={eta} need at least "
                            f"eta^(rungs - 1) = {eta ** (rungs - 1)} steps for rung 0; "
                            f"depth_grid.steps is {steps}")
    depths = grid.get("depths", {})
    if isinstance(depths, dict):
        for name in grid.get("tasks", []):
            if name not in depths:
                problems.append(f"depth_grid.depths: no depths for task {name!r}; give a list "
                                "for every task or one per task in depth_grid.tasks")
    experiments = config.get("report", {}).get("experiments", [])
    if "E5b" in experiments and rivals.get("task", "digits") not in grid.get("tasks", []):
        problems.append(f"rival_fixes.task: {rivals.get('task', 'digits')!r} is not in "
                        f"depth_grid.tasks {grid.get('tasks', [])}: E5b's fixes are tuned as "
                        "E5 arms at that task's deepest depth")
    for name in grid.get("placement_tasks", []):
        if name not in grid.get("tasks", []):
            problems.append(f"depth_grid.placement_tasks: {name!r} is not in depth_grid.tasks "
                            f"{grid.get('tasks', [])}")
    train = config.get("train", {})
    if "width" in train and "heads" in train and train["width"] % train["heads"]:
        problems.append(f"train.width={train['width']} is not divisible by "
                        f"train.heads={train['heads']}")
    if not problems:
        from rankcollapse.plan.training import groups

        try:  # one ensemble per (task, variant, depth): its members must share the model
            groups(config)
        except KeyError:  # a partial config (a block left to the schema's defaults)
            pass
        except ValueError as err:
            problems.append(str(err))
    return problems


def _paths_problems(config: dict, defined: list[str]) -> list[str]:
    """Cross-references of E2's `paths` block: its variants must be ensembles of paths (skips,
    no MLP, no LayerNorm or a post-LN), its tasks known, its runs not shared with E4/E5 (whose
    model and optimiser settings differ); and E3's start pairs must exist."""
    from rankcollapse.core.tasks import TASKS

    problems = []
    circle = config.get("circle", {})
    pairs = circle.get("points", 1000) // 2 - 1  # the original data's pairs
    if circle.get("starts", 1) > pairs:
        problems.append(f"circle.starts={circle['starts']} exceeds the {pairs} pairs of "
                        f"circle.points={circle.get('points', 1000)}")
    paths = config.get("paths", {})
    if not paths:
        return problems
    for name in paths.get("variants", []):
        if name not in defined:
            problems.append(f"paths.variants: variant {name!r} is not defined; "
                            f"defined variants (config key `variants`): {defined}")
            continue
        v = config["variants"][name]
        if not v["skip"] or v["mlp"] or v["norm"] == "pre" or v.get("deescalate", 0) \
                or v.get("center_attention", False):
            problems.append(f"paths.variants: variant {name!r} is not an ensemble of paths; "
                            "it needs skip: true, mlp: false, norm: none or post (like san_skip "
                            "or san_skip_ln_bias)")
    for name in paths.get("tasks", []):
        if name not in TASKS:
            problems.append(f"paths.tasks: unknown task {name!r}; allowed tasks: {sorted(TASKS)}")
    for task, model in paths.get("models", {}).items():
        if model["width"] % model["heads"]:
            problems.append(f"paths.models.{task}.width={model['width']} is not divisible by "
                            f"heads={model['heads']}")
    escalation = config.get("escalation", {})
    # Only a (task, variant) pair trained by both would share results/train/ paths (E5's and
    # E5b's tuned runs live in results/tuned/).
    trained = {(escalation.get("task"), v) for v in escalation.get("variants", [])}
    pairs = {(t, v) for t in paths.get("tasks", []) for v in paths.get("variants", [])} & trained
    shared, shared_variants = {t for t, _ in pairs}, {v for _, v in pairs}
    if pairs:
        problems.append(f"paths: task(s) {sorted(shared)} with variant(s) "
                        f"{sorted(shared_variants)} are also trained by escalation "
                        "with other settings; use a differently named copy of the variant")
    return problems


def main(argv: list[str]) -> int:
    """`python -m rankcollapse.plan.config FIELD CONFIGFILE...`: print one of the output roots
    (results, report, figures, snakemake_report) of the config built from the files, as
    `snakemake --configfile` merges them over the Snakefile's default (the Makefile's messages)."""
    if len(argv) < 2 or argv[0] not in OutputRoots._fields:
        print(f"usage: python -m rankcollapse.plan.config {{{','.join(OutputRoots._fields)}}} "
              "CONFIGFILE...", file=sys.stderr)
        return 2
    print(getattr(output_roots({"name": config_name(argv[1:])}), argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
