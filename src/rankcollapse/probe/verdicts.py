"""The registered claims that apply to any model (E1's collapse exponent, E4's escalation),
measured on the probe's table by the code that measures them in E1 and E4 and judged by the
registry's rule (src/rankcollapse/claims/claims.yaml, shipped with the package).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

# Registered claims that apply to any model, and the ablation each is measured on. E4's
# escalation claim is registered for networks at init and for trained ones: a checkpoint is
# judged against the trained one.
CLAIMS_INIT = {
    "E1.san_doubly_exponential": "san",
    "E1.san_cubic_rate": "san",
    "E1.skip_prevents": "san_skip",
    "E1.mlp_does_not_prevent": "san_mlp",
    "E4.escalation_post_ln_init": "transformer",
    "E4.linear_rate_log_reading": "transformer",
}
CLAIMS_CHECKPOINT = {**{k: v for k, v in CLAIMS_INIT.items() if k.startswith("E1.")},
                     "E4.escalation_post_ln_trained": "transformer"}
# Below these the measured quantity is round-off (E1's fit floor in float64; E4's t_div floors).
RESIDUAL_FLOOR = {"float32": 1e-5, "float64": 1e-13}
TDIV_FLOOR = {"float32": 1e-6, "float64": 1e-12}
RESAMPLES = 1000


def measure_claims(table: pd.DataFrame, checkpoint: bool, dtype: str = "float32",
                   resamples: int = RESAMPLES) -> list:
    """Measurements of the registered claims that apply to any model, on the probe's table
    (columns seed, ablation, sample, layer and the metrics), by the code that measures them in
    E1 and E4. The unit of replication is the random network (seed); a checkpoint is one
    network, so its values carry no interval over runs (said in the method)."""
    from rankcollapse.claims import Measurement, not_testable
    from rankcollapse.claims import e1 as e1_claims
    from rankcollapse.claims import e4 as e4_claims

    wanted = CLAIMS_CHECKPOINT if checkpoint else CLAIMS_INIT
    out = []
    for cid, ablation in wanted.items():
        t = table[table.ablation == ablation]
        if t.empty:
            out.append(not_testable(cid, f"the {ablation} ablation was not probed"))
            continue
        if cid.startswith("E1."):
            m = e1_claims.measure_exponent(cid, t, "relative_residual_comp",
                                           RESIDUAL_FLOOR[dtype], e1_claims.MAX_RESIDUAL,
                                           resamples, ablation)
        else:
            key = "log_r2" if cid == "E4.linear_rate_log_reading" else "rho"
            m = e4_claims.measure_escalation(cid, t, key, TDIV_FLOOR[dtype], resamples,
                                             note=f"{ablation}: t_sim of the unmodified model")
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
    for m in measure_claims(table, checkpoint, info["dtype"]):
        row = judge(specs[m.id], m)
        out.append({**row.to_dict(), "on_model": f"On this model ({scope}): {sentence(row)}"})
    return out
