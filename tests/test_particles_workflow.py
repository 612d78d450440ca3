"""E6 wiring: the parameter plan, one real job per point kind, the analysis helpers, dry-run."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from snakemake.utils import validate

from rankcollapse.homogenized import (
    TABLES,
    cluster_fractions,
    homogenization_summary,
    plan,
    record_every,
    run_point,
    zero_crossings,
)

from conftest import ROOT, run_snakemake

CONFIGS = ["default", "ci", "paper"]
POINT = re.compile(r"[A-Za-z0-9_.-]+")  # the `point` wildcard constraint in common.smk


def config_of(name: str) -> dict:
    return yaml.safe_load((ROOT / "workflow" / "config" / f"{name}.yaml").read_text())


def small_settings() -> dict:
    """A complete `particles` block (as the schema's defaults would fill it), tiny sizes."""
    return {
        "seed": 0, "discrete_runs": 3,
        "homogenization": {"n": 4, "d": 3, "heads": 2, "beta": 1.0, "T": 2.0, "head_norm": "sum",
                           "depths": [2, 8], "runs": 6, "records": 4, "limit_runs": 6,
                           "limit_steps": 8, "limit_samples": 2},
        "tradeoff": {"T": 3.0, "depth": 4, "heads": 1, "runs": 5, "d": [2, 3], "n": [2, 3],
                     "beta": [0.0, 0.5], "beta_at": 1.0, "d_at": 3, "boundary_betas": 3,
                     "boundary_samples": 200},
    }


INIT = {"tokens": 5, "width": 4, "heads": 2, "depth": 3, "temperature": 1.0}


def test_plan_names_are_safe_unique_and_json():
    p = plan(small_settings(), INIT)
    assert set(p) == {s for studies in TABLES.values() for s in studies}
    seeds = [params["seed"] for points in p.values() for params in points.values()]
    assert len(set(seeds)) == len(seeds)  # every point draws its own random numbers
    for points in p.values():
        for name, params in points.items():
            assert POINT.fullmatch(name), name
            json.dumps(params, allow_nan=False)  # snakemake params -> papermill/log safe


def test_plan_is_stable_under_grid_extension():
    """Adding a grid value must not change (and so not rerun) the existing points."""
    small = small_settings()
    bigger = small_settings()
    bigger["tradeoff"]["n"] = [2, 3, 7]
    a, b = plan(small, INIT), plan(bigger, INIT)
    for point, params in a["tradeoff_dn"].items():
        assert b["tradeoff_dn"][point] == params


@pytest.mark.parametrize(("steps", "records"), [(4, 16), (1024, 16), (10, 16), (64, 64), (7, 3)])
def test_recorded_times_lie_on_the_common_grid(steps: int, records: int):
    every = record_every(steps, records)
    t = np.arange(0, steps + 1, every) / steps
    assert t[-1] == 1.0
    np.testing.assert_allclose(t * records, np.round(t * records), atol=1e-9)


def test_every_point_kind_runs_and_analyses():
    p = plan(small_settings(), INIT)
    homog = pd.concat([run_point(params).assign(study=s, point=name)
                       for s in TABLES["homog"] for name, params in p[s].items()])
    assert set(homog.kind) == {"trajectory", "limit"}
    assert homog[homog.t == 0].groupby("regime").inner.nunique().max() == 1  # shared start
    summary, slopes = homogenization_summary(homog, "inner", fit_depths=2, resamples=20)
    assert len(summary) == 4 and len(slopes) == 4
    det = summary[summary.regime == "deterministic"]
    assert (det.limit_spread == 0).all()  # the deterministic limit is X(t) = X(0) exactly

    trade = pd.concat([run_point(params).assign(study=s, point=name)
                       for s in TABLES["tradeoff"] for name, params in p[s].items()])
    frac = cluster_fractions(trade)
    assert ((frac.one_cluster + frac.two_clusters) <= 1).all()
    bound = run_point(p["boundary"]["d3"])
    assert len(bound) == 3 and np.isfinite(bound.exponent).all()
    discrete = run_point(p["discrete"]["e1"])
    assert discrete.layer.max() == INIT["depth"] and (discrete.eta == 1.0).all()


def test_zero_crossings():
    x = np.array([0.0, 1.0, 2.0, 3.0])
    assert zero_crossings(x, np.array([-1.0, 1.0, 3.0, -1.0])) == [0.5, 2.75]
    assert zero_crossings(x, np.array([0.0, -1.0, -2.0, -1.0])) == [0.0]
    assert zero_crossings(x, np.ones(4)) == []


@pytest.mark.parametrize("name", CONFIGS)
def test_configs_list_e6(name: str):
    config = config_of(name)
    assert "E6" in config["report"]["experiments"]
    assert "particles" in config


def test_notebook_parameters_cell_matches_the_workflow():
    nb = json.loads((ROOT / "notebooks" / "06_homogenized.ipynb").read_text())
    tagged = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1
    source = "".join(tagged[0]["source"])
    for name in ("experiment", "tables", "settings", "figures_dir", "numbers_path"):
        assert re.search(rf"^{name} = ", source, re.M), name
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - our own notebook's literal assignments
    json.dumps({k: namespace[k] for k in ("experiment", "tables", "settings")}, allow_nan=False)


@pytest.mark.workflow
def test_dry_run_includes_every_particle_job(project):
    out = run_snakemake(project, "-n", "--quiet", "rules", "--configfile",
                        "workflow/config/ci.yaml").stdout
    config = config_of("ci")
    validate(config, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"))  # fills defaults
    points = plan(config["particles"], config["init_sweep"])
    expected = sum(len(of_study) for of_study in points.values())
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out, re.M))
    assert "notebook" in counts
    assert int(counts["collect_particles"]) == len(TABLES)
    assert int(counts["particles"]) == expected
