"""The workflow's config: loaded as --configfile merges it (`load_config`, the variant presets
under it), checked before any job starts with one line per problem (`check_schema`, then
`check_config`: each experiment's checks and the data checks), and where it writes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NamedTuple

import jsonschema
import yaml

from rankcollapse.core.specs import PRESETS, with_presets
from rankcollapse.plan import checks, experiments
from rankcollapse.plan.training import groups


class ConfigError(ValueError):
    """A config problem, reported before any job runs."""


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


# Where each config writes: the config named `default` (the schema's default name)
# writes results/ and report/report.{html,pdf}; any other name writes results/<name>/ and
# report/<name>.{html,pdf}, with its figures under report/<name>/figures/. So a name must not be
# a folder that the default writes under results/ (the rules' folders and
# benchmarks/gpu_check.py's results/gpu_check), nor one of report/'s own entries.
DEFAULT_NAME = "default"
RESERVED_NAMES = frozenset({
    # results/<folder>/ of the rules (tests/plan/test_config.py checks the rule files against it)
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
    """Raise ConfigError listing every cross-reference problem of a schema-valid config: its
    name, the shared `train` block, each experiment's checks (the registry's `checks`: its
    blocks' cross-checks and their data's), and that experiments training one architecture agree
    on its model."""
    problems = _name_problems(config) + checks.train(config) + experiments.problems(config)
    try:  # one ensemble per (task, variant, depth): its members must share the model
        groups(config)
    except KeyError:  # a partial config, or a name that the checks above reported
        pass
    except ValueError as err:
        problems.append(str(err))
    if problems:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(problems))


def merge(base: dict, override: dict) -> dict:
    """`override` over `base`, recursively for nested mappings, as `snakemake --configfile`
    merges config files over the Snakefile's."""
    out = dict(base)
    for key, value in override.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(
            out.get(key), dict) else value
    return out


def load_config(*files: str | os.PathLike) -> dict:
    """The config that the workflow sees from these files (the first is usually
    workflow/config/default.yaml), merged in order, with the variant presets
    (specs.with_presets); not validated (check_schema, check_config)."""
    config: dict = {}
    for path in files:
        config = merge(config, yaml.safe_load(Path(path).read_text()) or {})
    return with_presets_applied(config)


def with_presets_applied(config: dict) -> dict:
    """`config` with its `variants` block on top of the presets (the workflow applies this to
    Snakemake's config before any check, so a block of the wrong shape is named here)."""
    variants = config.get("variants")
    if variants is not None and not isinstance(variants, dict):
        raise ConfigError(f"invalid config:\n  - variants: {variants!r} is not allowed; allowed: "
                          "a mapping of names to switches (variants: {mine: {skip: true, mlp: "
                          "true, norm: post}}), which adds to or overrides the presets "
                          f"{sorted(PRESETS)}")
    return {**config, "variants": with_presets(variants)}


def main(argv: list[str]) -> int:
    """`python -m rankcollapse.plan.config FIELD CONFIGFILE...`: print one of the output roots
    (results, report, figures, snakemake_report) of the config built from the files, as
    `snakemake --configfile` merges them over the Snakefile's default (the Makefile's messages)."""
    if len(argv) < 2 or argv[0] not in OutputRoots._fields:
        print(f"usage: python -m rankcollapse.plan.config {{{','.join(OutputRoots._fields)}}} "
              "CONFIGFILE...", file=sys.stderr)
        return 2
    try:
        name = config_name(argv[1:])
    except (OSError, yaml.YAMLError) as err:
        print(f"python -m rankcollapse.plan.config: cannot read a config file: {err}",
              file=sys.stderr)
        return 2
    print(getattr(output_roots({"name": name}), argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
