"""A run's claims against the registry: every measurement of the run's sections judged, and the
run refused when it measures an unregistered claim or misses a registered one."""

from __future__ import annotations

from rankcollapse.claims.measurement import Measurement
from rankcollapse.claims.registry import ClaimSpec, RegistryError
from rankcollapse.claims.verdicts import Judged, judge


def judge_sections(registry: dict[str, ClaimSpec], sections: list[dict]) -> list[Judged]:
    """Judge every measurement the sections carry; the run's claims must match the registry:
    no measurement of an unregistered claim, and every registered claim of an experiment in the
    run measured (possibly as not testable). Rows come in registry order."""
    measured: dict[str, Measurement] = {}
    problems = []
    experiments = [s["experiment"] for s in sections]
    for section in sections:
        for data in section.get("measurements", []):
            m = Measurement.from_dict(data)
            if m.id not in registry:
                problems.append(f"{section['experiment']} measured {m.id!r}, which the "
                                "registry does not hold")
            elif registry[m.id].experiment != section["experiment"]:
                problems.append(f"{m.id} is registered for {registry[m.id].experiment}, but "
                                f"{section['experiment']} measured it")
            elif m.id in measured:
                problems.append(f"{m.id} was measured twice")
            measured[m.id] = m
    for cid, spec in registry.items():
        if spec.experiment in experiments and cid not in measured:
            problems.append(f"{cid} is registered but {spec.experiment} did not measure it")
    if problems:
        raise RegistryError("the run's claims do not match the registry (claims.yaml):\n  - "
                            + "\n  - ".join(problems))
    return [judge(spec, measured[cid]) for cid, spec in registry.items() if cid in measured]
