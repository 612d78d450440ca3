"""E6 wiring: the parameter plan, one real job per point kind, the analysis helpers, dry-run."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from snakemake.utils import validate

from rankcollapse.experiments.homogenized.analysis import (
    cluster_fractions,
    small_beta_cells,
    small_beta_summary,
    zero_crossings,
)
from rankcollapse.experiments.homogenized.run import first_passage, run_point
from rankcollapse.plan.config import ConfigError, check_config
from rankcollapse.plan.particles import (
    TABLES,
    config_problems,
    heads_for_depth,
    plan,
    record_every,
)

from conftest import ROOT, run_snakemake

CONFIGS = ["default", "ci", "paper"]
POINT = re.compile(r"[A-Za-z0-9_.-]+")  # the `point` wildcard constraint in common.smk


def config_of(name: str) -> dict:
    return yaml.safe_load((ROOT / "workflow" / "config" / f"{name}.yaml").read_text())


def small_settings() -> dict:
    """A complete `particles` block (as the schema's defaults would fill it), tiny sizes."""
    return {
        "seed": 0, "head_norm": "mean", "discrete_runs": 3,
        "homogenization": {"n": 4, "d": 3, "heads": 2, "beta": 1.0, "T": 2.0, "depths": [2, 8],
                           "fit_last": 2, "runs": 6, "ballistic_runs": 6, "records": 4,
                           "drift_draws": 50, "limit_runs": 6, "limit_steps": 8,
                           "limit_samples": 2, "heads_depths": [2, 16], "heads_exponent": 0.25,
                           "heads_runs": 6},
        "small_beta": {"d": [4, 6], "n": [2, 4], "m0": 0.6, "T": 1.0, "records": 2, "runs": 5,
                       "dtau_d": 2.0, "beta_rules": ["zero", "inv_sqrt_d"]},
        "simplex": {"n": 3, "d": [4, 6], "gamma0": 0.0, "beta_sqrt_d": 1.0, "T": 1.0,
                    "records": 3, "runs": 5, "dtau_d": 2.0, "fg_grid": 5, "fg_samples": 100,
                    "drift_dtau": 0.01, "drift_draws": 50, "drift_horizon": 0.5},
        "large_beta": {"d": [3, 4], "u0": [0.0, 0.5], "t_end": 0.5, "dt": 0.1, "dtau_max": 1.0,
                       "move": 0.1, "near": 0.9, "runs": 5, "records": 5,
                       "kernel_overlaps": [0.5], "kernel_samples": 200, "sde_paths": 20},
        "maps": {"T": 1.0, "layers": 4, "runs": 3, "d": [2, 3], "n": [2, 3], "beta": [0.0, 1.0],
                 "beta_at": 0.5, "d_at": 3},
        "antipodal": {"d": [3, 4], "n": 2, "beta": 1.0, "T": 1.0, "layers": 4, "runs": 3,
                      "collapsed": 0.99, "boundary_beta_max": 1.0, "boundary_betas": 2,
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


def test_cells_keep_their_numbers_when_the_grid_grows():
    """A point batches a grid, but every cell has its own seed: adding a d changes no cell."""
    small, bigger = small_settings(), small_settings()
    bigger["small_beta"]["d"] = [4, 6, 8]
    a = run_point(plan(small, INIT)["small_beta"]["zero"])
    b = run_point(plan(bigger, INIT)["small_beta"]["zero"])
    pd.testing.assert_frame_equal(a, b[b.d.isin(a.d.unique())].reset_index(drop=True))


@pytest.mark.parametrize(("steps", "records"), [(4, 16), (1024, 16), (10, 16), (64, 64), (7, 3)])
def test_recorded_times_lie_on_the_common_grid(steps: int, records: int):
    every = record_every(steps, records)
    t = np.arange(0, steps + 1, every) / steps
    assert t[-1] == 1.0
    np.testing.assert_allclose(t * records, np.round(t * records), atol=1e-9)


def test_heads_grow_inside_the_theorems_range():
    depths = [16, 64, 256, 1024, 4096]
    heads = [heads_for_depth(L, 0.25) for L in depths]
    assert heads == [2, 3, 4, 6, 8]
    assert all(H**3 < L for H, L in zip(heads, depths, strict=True))  # H = o(L^{1/3})


def test_first_passage():
    values = np.array([[0.0, 0.1, 0.3, 0.2], [0.0, -0.05, -0.1, 0.05]])
    times = np.array([0.0, 1.0, 2.0, 3.0])
    out = first_passage(values, times, values[:, 0], 0.25)
    assert out[0] == 2.0 and np.isnan(out[1])


def test_every_point_kind_runs_and_analyses():
    p = plan(small_settings(), INIT)
    tables = {}
    for name, studies in TABLES.items():
        tables[name] = pd.concat([run_point(params).assign(study=s, point=point)
                                  for s in studies for point, params in p[s].items()],
                                 ignore_index=True)
    homog = tables["homog"]
    assert set(homog.kind) == {"trajectory", "limit", "drift_check"}
    traj = homog[homog.kind == "trajectory"]
    assert traj[traj.t == 0].groupby("study").inner.nunique().max() == 1  # shared start
    assert set(homog[homog.study == "homog_heads"].H.dropna()) == {2.0}  # ceil(2^.25), 16^.25
    cells = small_beta_cells(tables["small_beta"])
    assert {k[2] for k in cells} == {4, 6} and all(k[1] <= k[2] for k in cells)
    for _tau, m, u in cells.values():
        np.testing.assert_allclose(m[:, 0], u[0])  # every run starts at m(0) = u(0)
    assert len(small_beta_summary(cells)) == len(cells)
    simplex = tables["simplex"]
    assert set(simplex.kind) == {"trajectory", "ode", "fg", "drift"}
    large = tables["large_beta"]
    assert {"trajectory", "passage", "kernel", "sde", "sde_hist"} <= set(large.kind)
    frac = cluster_fractions(tables["maps"])
    assert ((frac.one_cluster + frac.two_clusters) <= 1).all()
    assert {"logistic_gap", "m", "u"} <= set(frac.columns)
    boundary = tables["antipodal"][tables["antipodal"].kind == "boundary"]
    assert len(boundary) == 3 * 2 and np.isfinite(boundary.exponent).all()  # d in {2, 3, 4}
    discrete = tables["discrete"]
    assert discrete.layer.max() == INIT["depth"] and (discrete.eta == 1.0).all()
    # the claim statistics run on these tables (values at these sizes are noise)
    from rankcollapse.claims.e6 import IDS, measure

    assert [m.id for m in measure(tables, small_settings(), resamples=20)] == list(IDS)


@pytest.mark.parametrize(("block", "change", "fragment"), [
    ("simplex", {"n": 9}, "particles.simplex.n=9"),
    ("simplex", {"gamma0": -0.6}, "particles.simplex.gamma0"),
    ("small_beta", {"m0": 0.2}, "particles.small_beta.m0"),
    ("small_beta", {"n": [8]}, "particles.small_beta.n"),
    ("homogenization", {"fit_last": 9}, "particles.homogenization.fit_last"),
])
def test_config_problems_name_the_key(block, change, fragment):
    settings = small_settings()
    assert config_problems(settings) == []
    settings[block] |= change
    problems = config_problems(settings)
    assert len(problems) == 1 and fragment in problems[0]
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        check_config({"particles": settings})


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
    assert int(counts["collect_particles"]) == 1  # one job writes every table of TABLES
    assert int(counts["particles"]) == expected
