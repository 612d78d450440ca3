"""Intervals over independent runs (rankcollapse.stats), and the import graph around them."""

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rankcollapse
from rankcollapse.stats import MIN_RUNS_FOR_BOOTSTRAP, resample_runs, run_interval


def mean(runs: list) -> float:
    return float(np.mean(runs)) if runs else math.nan


def test_fewer_than_five_runs_give_their_range_more_a_bootstrap():
    few = resample_runs({i: float(i) for i in range(MIN_RUNS_FOR_BOOTSTRAP - 1)}, mean, 40)
    assert (few.kind, few.n, few.samples) == ("range", 4, [0.0, 1.0, 2.0, 3.0])
    assert few.method == "range of 4 seeds (fewer than 5: no 95% interval)"
    assert few.interval() == (0.0, 3.0)
    many = resample_runs({i: float(i) for i in range(6)}, mean, 40, unit="networks")
    assert (many.kind, many.n, len(many.samples)) == ("bootstrap", 6, 40)
    assert many.value == pytest.approx(2.5)
    assert many.method == "95% percentile bootstrap over 6 networks (40 resamples)"
    lo, hi = many.interval()
    assert 0.0 <= lo <= 2.5 <= hi <= 5.0


def test_no_runs_have_no_interval():
    none = resample_runs({}, mean)
    assert (none.kind, none.n, none.samples, none.interval()) == ("none", 0, [], None)
    assert math.isnan(none.value)


def test_undefined_samples_are_placed_or_dropped():
    samples = [1.0, math.nan, 3.0]
    assert run_interval("range", samples) == (1.0, 3.0)
    assert run_interval("range", samples, -math.inf) == (-math.inf, 3.0)
    assert run_interval("range", [math.nan]) is None
    assert run_interval("bootstrap", [0.0] * 99 + [math.nan], math.inf) == (0.0, 0.0)
    assert run_interval("bootstrap", [0.0] * 90 + [math.nan] * 10, math.inf) == (0.0, math.inf)
    assert run_interval("given", samples) is None and run_interval("range", []) is None


@pytest.mark.parametrize("first", ["rankcollapse.stats", "rankcollapse.claims",
                                   "rankcollapse.claims.e1", "rankcollapse.claims.e4",
                                   "rankcollapse.experiments.init_fits",
                                   "rankcollapse.experiments.trained"])
def test_no_import_circle(first):
    """Each module imports first in a fresh process; the statistics need neither torch, pandas
    nor the claims."""
    src = str(Path(rankcollapse.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    code = (f"import sys, {first}, rankcollapse.claims, rankcollapse.claims.e1, "
            "rankcollapse.claims.e4, rankcollapse.experiments.init_fits, "
            "rankcollapse.experiments.trained\n"
            if first != "rankcollapse.stats" else
            "import sys, rankcollapse.stats\n"
            "assert not {'torch', 'pandas', 'rankcollapse.claims'} & set(sys.modules)\n")
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
