"""E1's claims: the collapse exponent of random-init networks per variant (Dong et al. 2021).

The exponent k is the slope of log r_{l+1} against log r_l (one layer's map of the relative
residual), fitted on every layer transition of every sequence with r_l <= max_residual and both
residuals above the round-off floor; its interval is over seeds (independent networks).
"""

from __future__ import annotations

import pandas as pd

from rankcollapse.claims.any_model import measure_exponent
from rankcollapse.claims.measurement import Measurement, not_testable

# claim id -> the variant whose exponent it is about
VARIANT = {
    "E1.san_doubly_exponential": "san",
    "E1.san_cubic_rate": "san",
    "E1.skip_prevents": "san_skip",
    "E1.mlp_does_not_prevent": "san_mlp",
    "E1.layernorm_does_not_prevent": "san_ln",
}
IDS = tuple(VARIANT)


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
