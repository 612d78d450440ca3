"""E1's claims: the collapse exponent of random-init networks per variant (Dong et al. 2021).

The exponent k is the slope of log r_{l+1} against log r_l (one layer's map of the relative
residual), fitted on every layer transition of every sequence with r_l <= max_residual and both
residuals above the round-off floor; its interval is over seeds (independent networks).
"""

from __future__ import annotations

import pandas as pd

from rankcollapse.claims.measurement import Measurement, not_testable, over_runs
from rankcollapse.experiments.init_fits import exponent_of, exponent_pairs, exponent_units

# claim id -> the variant whose exponent it is about
VARIANT = {
    "E1.san_doubly_exponential": "san",
    "E1.san_cubic_rate": "san",
    "E1.skip_prevents": "san_skip",
    "E1.mlp_does_not_prevent": "san_mlp",
    "E1.layernorm_does_not_prevent": "san_ln",
}
IDS = tuple(VARIANT)
# The fit's range: layer transitions with r_l at most this (the schema's default of
# fit.max_residual, which the workflow passes; the probe, which reads no config, uses this).
MAX_RESIDUAL = 0.9


def measure(table: pd.DataFrame, value: str, floor: float, max_residual: float,
            resamples: int) -> list[Measurement]:
    """One Measurement per E1 claim from the init-sweep table (columns variant, seed, sample,
    layer and `value`, the relative residual the paper plots)."""
    out = []
    for cid, variant in VARIANT.items():
        t = table[table.variant == variant]
        if t.empty:
            out.append(not_testable(cid, f"variant {variant} is not in this run's sweep"))
            continue
        out.append(measure_exponent(cid, t, value, floor, max_residual, resamples, variant))
    return out


def measure_exponent(cid: str, table: pd.DataFrame, value: str, floor: float,
                     max_residual: float, resamples: int, what: str) -> Measurement:
    """The collapse exponent k of one network kind (`what`, named in the note) over its seeds:
    table has columns seed, sample, layer and `value`. Also used by rankcollapse.probe."""
    pairs = exponent_pairs(table, value, floor, max_residual)
    per_sequence = pairs.groupby(["seed", "sample"]).size()
    note = (f"{what}: {len(pairs)} layer transitions of {len(per_sequence)} sequences "
            f"(at most {per_sequence.max() if len(per_sequence) else 0} per sequence) with "
            f"{floor:g} ≤ r and r_l ≤ {max_residual:g}")
    return over_runs(cid, exponent_units(table, value, floor, max_residual), exponent_of,
                     resamples, note=note)
