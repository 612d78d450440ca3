"""The registered claims that apply to any model (the registry's `any_model` field: E1's collapse
exponent, E4's escalation), measured on the probe's table by the statistics E1 and E4 measure
their networks with (rankcollapse.claims.any_model) and judged by the registry's rule
(src/rankcollapse/claims/claims.yaml, shipped with the package).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

# Below these the measured quantity is round-off (E1's fit floor in float64; E4's t_div floors).
RESIDUAL_FLOOR = {"float32": 1e-5, "float64": 1e-13}
TDIV_FLOOR = {"float32": 1e-6, "float64": 1e-12}
RESAMPLES = 1000


def claims_on(checkpoint: bool, registry: str | Path | None = None) -> dict[str, dict]:
    """{claim id: its any_model field (ablation, statistic, weights)} of the registered claims
    judged on random-init networks (checkpoint False) or on a checkpoint, in registry order."""
    from rankcollapse.claims import REGISTRY_PATH, load_registry

    weights = "checkpoint" if checkpoint else "init"
    return {cid: spec.any_model for cid, spec in load_registry(registry or REGISTRY_PATH).items()
            if spec.any_model and weights in spec.any_model["weights"]}


def measure_claims(table: pd.DataFrame, checkpoint: bool, dtype: str = "float32",
                   resamples: int = RESAMPLES, registry: str | Path | None = None) -> list:
    """Measurements of the registered claims that apply to any model (`claims_on`), on the
    probe's table (columns seed, ablation, sample, layer and the metrics). The unit of
    replication is the random network (seed); a checkpoint is one network, so its values carry
    no interval over runs (said in the method)."""
    from rankcollapse.claims import Measurement, not_testable
    from rankcollapse.claims.any_model import STATISTICS, measure_on_model

    out = []
    for cid, on in claims_on(checkpoint, registry).items():
        ablation, statistic = on["ablation"], on["statistic"]
        t = table[table.ablation == ablation]
        if t.empty:
            out.append(not_testable(cid, f"the {ablation} ablation was not probed"))
            continue
        escalation = STATISTICS[statistic][1] is not None
        floor = (TDIV_FLOOR if escalation else RESIDUAL_FLOOR)[dtype]
        note = f"{ablation}: t_sim of the unmodified model" if escalation else ablation
        m = measure_on_model(cid, statistic, t, floor, resamples, note)
        if checkpoint and m.value is not None:
            m = Measurement(cid, m.value, "one network (a checkpoint): no interval over runs",
                            1, note=m.note)
        out.append(m)
    return out


def judge_on_model(table: pd.DataFrame, info: dict, registry: str | Path | None = None
                   ) -> list[dict]:
    """The registered claims that apply to any model, judged on this one by the registry's
    rule, each with its generated sentence prefixed by what it concerns."""
    from rankcollapse.claims import REGISTRY_PATH, RegistryError, judge, load_registry, sentence

    try:
        specs = load_registry(registry or REGISTRY_PATH)
    except RegistryError as err:
        return [{"id": None, "verdict": "not judged", "on_model": f"No verdicts: {err}"}]
    checkpoint = info["weights"] == "checkpoint"
    seeds = table.seed.nunique()
    scope = (f"{info['model']}, a checkpoint: one network" if checkpoint else
             f"{info['model']}, random init, {seeds} seed{'s' if seeds > 1 else ''}")
    out = []
    for m in measure_claims(table, checkpoint, info["dtype"], registry=registry):
        row = judge(specs[m.id], m)
        out.append({**row.to_dict(), "on_model": f"On this model ({scope}): {sentence(row)}"})
    return out
