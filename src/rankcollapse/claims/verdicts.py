"""Verdicts: a measurement judged against its registered range by the rule in `VERDICT_RULE`, and
the only prose that states a conclusion (`sentence`: a fixed phrase per kind and verdict)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from rankcollapse.claims.measurement import Measurement, sample_interval
from rankcollapse.claims.registry import BASIS_TYPES, ClaimSpec, RegistryError
from rankcollapse.stats import MIN_RUNS_FOR_BOOTSTRAP

VERDICTS = ("reproduced", "partly", "not reproduced", "not testable")

VERDICT_RULE = (
    "Every claim is registered before it is measured (claims.yaml): its statement, "
    "source, kind, the measured quantity, the range [low, high] that quantity must lie in for the "
    "claim to hold, and the range's basis. Reproduced: the measurement's whole interval lies in "
    "the range; partly: the point estimate lies in it but the interval does not; not reproduced: "
    "the point estimate lies outside; not testable: no measurement at this scale. Intervals over "
    f"independent runs (networks, seeds) are 95% percentile bootstrap intervals when they rest on "
    f"at least {MIN_RUNS_FOR_BOOTSTRAP} runs, and the plain range of the runs otherwise (labelled "
    "so); a resample or run in which the statistic is undefined counts against the claim (ranked "
    "beyond the failing end of the range), never dropped. Sequences, rollouts and layers of one "
    "network are never counted as independent runs."
)


def verdict(measured: float | None, interval: tuple[float, float] | None,
            low: float = -math.inf, high: float = math.inf) -> str:
    """The verdict rule (VERDICT_RULE) for a point estimate and its interval."""
    if measured is None or not math.isfinite(measured):
        return "not testable"
    if not low <= measured <= high:
        return "not reproduced"
    lo, hi = interval if interval is not None else (measured, measured)
    return "reproduced" if low <= lo and hi <= high else "partly"


def interval_of(spec: ClaimSpec, m: Measurement) -> tuple[float, float] | None:
    """The measurement's interval, undefined samples ranked beyond the failing end."""
    return sample_interval(m, spec.failing_side)


def _fmt(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "−∞" if value == -math.inf else ("∞" if value == math.inf else "—")
    return f"{value:.3g}"


@dataclass
class Judged:
    """A registered claim with its measurement and verdict: one ledger row."""

    spec: ClaimSpec
    measurement: Measurement
    interval: tuple[float, float] | None
    verdict: str = field(init=False)

    def __post_init__(self) -> None:
        value = self.measurement.value
        self.verdict = verdict(None if value is None else float(value), self.interval,
                               self.spec.low, self.spec.high)

    @property
    def value_text(self) -> str:
        value = self.measurement.value
        if value is None or not math.isfinite(value):
            return "—"
        if self.interval is None:
            return _fmt(value)
        return f"{_fmt(value)} [{_fmt(self.interval[0])}, {_fmt(self.interval[1])}]"

    @property
    def why(self) -> str:
        """One generated line: how the numbers meet the range (never a typed reading)."""
        m, crit = self.measurement, self.spec.criterion
        if self.verdict == "not testable":
            return f"not measured in this run: {m.note}" if m.note else "not measured in this run"
        if self.verdict == "not reproduced":
            return f"the estimate {_fmt(m.value)} lies outside the range ({crit})"
        if self.verdict == "partly":
            return (f"the estimate {_fmt(m.value)} lies in the range ({crit}) but the interval "
                    f"[{_fmt(self.interval[0])}, {_fmt(self.interval[1])}] leaves it")
        if self.interval is None:
            return f"the value {_fmt(m.value)} lies in the range ({crit})"
        return f"the whole interval {self.value_text} lies in the range ({crit})"

    def to_dict(self) -> dict:
        spec = asdict(self.spec)
        spec["low"] = None if math.isinf(self.spec.low) else self.spec.low
        spec["high"] = None if math.isinf(self.spec.high) else self.spec.high
        return {**spec, "criterion": self.spec.criterion, "basis_title":
                BASIS_TYPES[self.spec.basis_type], "measured": self.measurement.value,
                "interval": list(self.interval) if self.interval else None,
                "value": self.value_text, "method": self.measurement.method,
                "n": self.measurement.n, "note": self.measurement.note,
                "verdict": self.verdict, "why": self.why, "sentence": sentence(self)}


def judge(spec: ClaimSpec, m: Measurement) -> Judged:
    if spec.id != m.id:
        raise RegistryError(f"measurement {m.id} judged against claim {spec.id}")
    return Judged(spec, m, interval_of(spec, m))


# The only words that state a conclusion: one phrase per kind and verdict.
PHRASES = {
    "paper": {"reproduced": "Reproduced", "partly": "Partly reproduced (the estimate is in "
              "range, its interval is not)", "not reproduced": "Not reproduced",
              "not testable": "Not testable at this scale"},
    "ours": {"reproduced": "Holds here", "partly": "Holds for the estimate but not its "
             "interval", "not reproduced": "Does not hold here",
             "not testable": "Not testable at this scale"},
    "check": {"reproduced": "Check passes", "partly": "Check passes for the estimate but not "
              "its interval", "not reproduced": "Check fails",
              "not testable": "Check not run at this scale"},
}


def sentence(row: Judged) -> str:
    """The sentence that reports a claim's verdict: a fixed phrase for the verdict, the claim in
    quotation marks (as registered, attributed to its source), and the numbers behind it."""
    phrase = PHRASES[row.spec.kind][row.verdict]
    statement = row.spec.statement.rstrip(".")
    numbers = (f"{row.value_text}, {row.measurement.method}, n = {row.measurement.n}; holds if "
               f"{row.spec.criterion}" if row.verdict != "not testable"
               else (row.measurement.note or "no measurement"))
    return f"{phrase}: “{statement}” ({row.spec.source}; {numbers})."
