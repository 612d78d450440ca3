"""Checks of the workflow config that a JSON schema cannot express (cross-references).

The schema (workflow/schemas/config.schema.yaml) checks keys, types and ranges; these checks run
right after it, before any job starts, and name the offending key and the allowed values.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config problem, reported before any job runs."""


def check_config(config: dict) -> None:
    """Raise ConfigError listing every cross-reference problem of a schema-valid config."""
    problems = []
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
    if problems:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(problems))
