"""Intervals over independent runs (networks, seeds): numpy only, no torch, no claims.

A statistic over runs (`resample_runs`) carries the samples its interval is computed from:
with at least MIN_RUNS_FOR_BOOTSTRAP runs, the statistic on bootstrap resamples of whole runs,
and with fewer, the statistic on each run alone; `run_interval` turns them into the 95%
percentile interval or the range of the runs. The claims' measurements
(`rankcollapse.claims.measurement`) and the experiments' summary tables both use them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

# With fewer independent runs than this, an interval over runs is their range, not a 95% one.
MIN_RUNS_FOR_BOOTSTRAP = 5
LEVEL = 0.95


@dataclass(frozen=True)
class RunSamples:
    """A statistic over independent runs and the samples of its interval.

    kind: "bootstrap" (samples are the statistic on resampled runs), "range" (samples are the
    statistic on each run alone: fewer than MIN_RUNS_FOR_BOOTSTRAP runs), "none" (no runs).
    Undefined samples are kept as NaN.
    """

    value: float  # the statistic on all runs; NaN when undefined
    n: int  # independent runs
    kind: Literal["bootstrap", "range", "none"]
    samples: list[float]
    method: str  # how the interval is obtained, for tables and the ledger

    def interval(self, undefined_at: float | None = None) -> tuple[float, float] | None:
        """`run_interval` of these samples."""
        return run_interval(self.kind, self.samples, undefined_at)


def resample_runs(units: dict, statistic: Callable[[list], float], resamples: int = 1000,
                  seed: int = 0, unit: str = "seeds") -> RunSamples:
    """statistic over independent runs, with the samples of its interval.

    units: {run id: data of that run} (e.g. a DataFrame per seed); statistic(list of run data)
    -> float (NaN when undefined). With >= MIN_RUNS_FOR_BOOTSTRAP runs, `samples` holds the
    statistic on `resamples` bootstrap resamples of whole runs (a run drawn twice counts twice);
    with fewer, the statistic on each run alone ("range of n runs"). `unit` names the runs in
    the method.
    """
    keys = list(units)
    data = [units[k] for k in keys]
    value = as_float(statistic(data))
    n = len(keys)
    if n == 0:
        return RunSamples(value, 0, "none", [], "no runs")
    if n < MIN_RUNS_FOR_BOOTSTRAP:
        samples = [as_float(statistic([d])) for d in data]
        return RunSamples(value, n, "range", samples, f"range of {n} {unit} (fewer than "
                          f"{MIN_RUNS_FOR_BOOTSTRAP}: no 95% interval)")
    rng = np.random.default_rng(seed)
    samples = [as_float(statistic([data[i] for i in rng.integers(0, n, n)]))
               for _ in range(resamples)]
    return RunSamples(value, n, "bootstrap", samples, f"95% percentile bootstrap over {n} "
                      f"{unit} ({resamples} resamples)")


def run_interval(kind: str, samples: list[float] | None, undefined_at: float | None = None
                 ) -> tuple[float, float] | None:
    """The interval of a statistic's samples: "range" the min and max of the runs; "bootstrap"
    the 95% percentile interval of the resamples; None for any other kind or no samples.
    Undefined samples are placed at `undefined_at` (a claim's failing side); None drops them,
    for descriptive tables only."""
    if kind not in ("bootstrap", "range") or not samples:
        return None
    values = np.asarray(samples, dtype=float)
    if undefined_at is None:
        values = values[np.isfinite(values)]
        if values.size == 0:
            return None
    else:
        values = np.where(np.isfinite(values), values, undefined_at)
    if kind == "range":
        return float(values.min()), float(values.max())
    alpha = (1 - LEVEL) / 2
    # Order statistics rather than interpolation: an infinite sample stays infinite.
    return (float(np.quantile(values, alpha, method="lower")),
            float(np.quantile(values, 1 - alpha, method="higher")))


def as_float(value) -> float:
    """float(value), NaN when it is not a number."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.nan
    return value
