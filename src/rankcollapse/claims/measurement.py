"""Measurements: what an experiment measured for one registered claim, with its interval.

Code that measures never sets a statement, a range or a kind (those are the registry's); the
interval statistics over independent runs are `rankcollapse.stats`'.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Literal

from rankcollapse.stats import resample_runs, run_interval

IntervalKind = Literal["bootstrap", "range", "given", "none"]


@dataclass
class Measurement:
    """What an experiment measured for one registered claim.

    interval_kind: "bootstrap" (samples are the statistic on resampled runs), "range" (samples are
    the statistic on each run alone: fewer than MIN_RUNS_FOR_BOOTSTRAP runs), "given" (an
    interval computed another way, named by `method`), "none" (a single exact computation).
    Undefined samples are kept as NaN; `judge` ranks them beyond the failing end of the range.
    """

    id: str
    value: float | None  # the point estimate; None/NaN: not measurable at this scale
    method: str  # how the interval was obtained, for the ledger
    n: int  # independent runs (networks, seeds) the interval rests on; 1 for an exact value
    interval_kind: IntervalKind = "none"
    samples: list[float] | None = None
    interval: tuple[float, float] | None = None  # for interval_kind "given"
    note: str = ""  # neutral context (what it was measured on); never a conclusion

    def to_dict(self) -> dict:
        out = asdict(self)
        out["value"] = _finite_or_none(self.value)
        if self.samples is not None:
            out["samples"] = [_finite_or_none(v) for v in self.samples]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Measurement:
        data = dict(data)
        if data.get("samples") is not None:
            data["samples"] = [math.nan if v is None else float(v) for v in data["samples"]]
        if data.get("interval") is not None:
            data["interval"] = tuple(data["interval"])
        return cls(**data)


def _finite_or_none(value):
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def not_testable(cid: str, note: str) -> Measurement:
    """A registered claim that this run cannot measure (say why in `note`)."""
    return Measurement(cid, None, "not measured", 0, note=note)


def exact(cid: str, value: float, method: str = "exact computation", n: int = 1,
          note: str = "") -> Measurement:
    """A value without sampling error (an identity's largest deviation, a deterministic fit)."""
    return Measurement(cid, float(value), method, n, note=note)


def at_scale(cid: str, measured: Measurement, scale: float | None, needed: float,
             what: str) -> Measurement:
    """A diagnostic that restates a paper claim's measurement at a larger scale (longer training):
    `measured` (the paper claim's Measurement of this run) under the diagnostic's id when the
    run's `scale` (e.g. its training steps) is at least `needed`, else not testable, saying
    what run measures it."""
    if scale is None or scale < needed:
        return not_testable(cid, f"{what} is {scale} in this run; this diagnostic needs at least "
                                 f"{needed:,g} (a run of workflow/config/diagnostics.yaml)")
    note = f"{what} {scale:,g}" + (f"; {measured.note}" if measured.note else "")
    return replace(measured, id=cid, note=note)


def over_runs(cid: str, units: dict, statistic, resamples: int = 1000, seed: int = 0,
              unit: str = "seeds", note: str = "") -> Measurement:
    """statistic over independent runs (`rankcollapse.stats.resample_runs`: units is {run id:
    data of that run}), as the Measurement of claim `cid` with the interval the verdict rule asks
    for; not testable when there are no runs."""
    runs = resample_runs(units, statistic, resamples, seed, unit)
    if runs.n == 0:
        return not_testable(cid, note or "no runs")
    return Measurement(cid, runs.value, runs.method, runs.n, runs.kind, runs.samples, note=note)


def sample_interval(m: Measurement, undefined_at: float | None = None
                    ) -> tuple[float, float] | None:
    """The interval of a measurement: "given" as given; "range" the min and max of the runs;
    "bootstrap" the 95% percentile interval of the resamples. Undefined samples are placed at
    `undefined_at` (a claim's failing side); None drops them, for descriptive tables only."""
    if m.interval_kind == "given":
        return m.interval
    return run_interval(m.interval_kind, m.samples, undefined_at)
