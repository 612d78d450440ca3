"""TRANSITION (removed once every notebook measures registered claims): the old Claim row,
whose statement and range were set in the notebook.

Verdict rule (also printed in the report's methods section): a claim states the range
[low, high] that its measured quantity must lie in for the claim to hold. With the measured value
m and its 95% interval [lo, hi]:
  - reproduced:       [lo, hi] lies entirely inside [low, high];
  - partly:           m lies inside [low, high] but the interval sticks out of it;
  - not reproduced:   m lies outside [low, high];
  - not testable:     no measurement at this scale (m is missing or not finite).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

_OLD_RULE = (
    "Each claim names the range [low, high] its measured quantity must lie in. Reproduced: the "
    "measurement's whole 95% interval lies in the range; partly: the point estimate lies in it but "
    "the interval does not; not reproduced: the point estimate lies outside; not testable: no "
    "measurement at this scale."
)


def _old_verdict(measured: float | None, interval: tuple[float, float] | None,
            low: float = -math.inf, high: float = math.inf) -> str:
    """Apply the verdict rule of this module's docstring."""
    if measured is None or not math.isfinite(measured):
        return "not testable"
    if not low <= measured <= high:
        return "not reproduced"
    lo, hi = interval if interval is not None else (measured, measured)
    return "reproduced" if low <= lo and hi <= high else "partly"


@dataclass
class Claim:
    id: str  # e.g. "E1.san_doubly_exponential"
    statement: str  # the paper's claim, in one sentence
    source: str  # paper and where in it
    quantity: str  # what was measured, with its unit
    measured: float | None  # point estimate
    interval: tuple[float, float] | None  # 95% interval (bootstrap over seeds)
    low: float = -math.inf  # the claim holds when the quantity lies in [low, high]
    high: float = math.inf
    paper_value: str | None = None  # what the paper reports, when it reports a value
    reason: str = ""  # one line: why this verdict
    verdict: str = field(init=False)

    def __post_init__(self) -> None:
        self.verdict = _old_verdict(self.measured, self.interval, self.low, self.high)

    @property
    def criterion(self) -> str:
        if math.isinf(self.low) and math.isinf(self.high):
            return "any value"
        if math.isinf(self.high):
            return f"≥ {self.low:g}"
        if math.isinf(self.low):
            return f"≤ {self.high:g}"
        return f"in [{self.low:g}, {self.high:g}]"

    def to_dict(self) -> dict:
        out = asdict(self)
        out["criterion"] = self.criterion
        # JSON has no infinity: keep the range as text-friendly None.
        out["low"] = None if math.isinf(self.low) else self.low
        out["high"] = None if math.isinf(self.high) else self.high
        return out
