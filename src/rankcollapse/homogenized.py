"""Experiment E6 [KGR26]: the parameter points of the particle studies and one point's table.

A *study* is one family of simulations (one figure's worth); a *point* is one job of it, named
``[A-Za-z0-9_.-]+`` so that it is a safe file name. :func:`plan` turns the workflow config into
``{study: {point: params}}``; :func:`run_point` computes one point's table from its params.
Everything a job needs is in its params (a plain JSON dict), so a changed setting reruns exactly
the points it changes.

Studies (table they are collected into):

* ``homog_stochastic``, ``homog_deterministic`` (``homog``): one shared initial configuration,
  depths ``L`` under the regime's scaling (:func:`rankcollapse.particles.step_size`) and the limit
  equation (point ``limit``); statistics recorded on a common grid of depth fractions ``t``.
* ``tradeoff_dn``, ``tradeoff_beta_n`` (``tradeoff``): stochastic regime at a fixed time, fresh
  uniform tokens per run; one row per run with its final statistics.
* ``boundary`` (``boundary``): the derived heuristic exponent
  :func:`rankcollapse.particles.antipodal_exponent` over a fine grid of beta, one point per d.
* ``discrete`` (``discrete``): the unscaled particle model (step 1, E1's n, d, heads, depth), to
  compare with E1's ``san_skip`` networks at initialisation.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pandas as pd
import torch

from .particles import (
    antipodal_exponent,
    mean_pairwise_inner,
    mean_token_norm_sq,
    simulate_limit,
    simulate_particles,
    step_size,
    uniform_tokens,
)

TABLES: dict[str, tuple[str, ...]] = {
    "homog": ("homog_stochastic", "homog_deterministic"),
    "tradeoff": ("tradeoff_dn", "tradeoff_beta_n"),
    "boundary": ("boundary",),
    "discrete": ("discrete",),
}

BOUNDARY_TOKENS = 2  # balanced antipodal groups: the exponent does not depend on n (even n)


def point_seed(seed: int, study: str, point: str) -> int:
    """A stable, distinct seed per (base seed, study, point); independent of the grid's order."""
    key = zlib.crc32(f"{study}/{point}".encode())
    return int(np.random.SeedSequence([seed, key]).generate_state(1, dtype=np.uint64)[0] >> 2)


def record_every(steps: int, records: int) -> int:
    """Record every this many steps so that ``t = k / steps`` lies on the grid ``j / records``.

    With ``g = gcd(steps, records)`` the recorded fractions are ``j / g``, a subset of the
    ``1 / records`` grid, so curves of different depths share time points.
    """
    return steps // math.gcd(steps, records)


def beta_name(beta: float) -> str:
    return f"{beta:g}"


def plan(particles: dict, init_sweep: dict) -> dict[str, dict[str, dict]]:
    """``{study: {point: params}}`` for the config's ``particles`` block (E1's ``init_sweep`` sets
    the discrete comparison). Every params dict is JSON-serialisable and holds its seed."""
    base = particles["seed"]
    h = particles["homogenization"]
    out: dict[str, dict[str, dict]] = {}
    for regime in ("stochastic", "deterministic"):
        study = f"homog_{regime}"
        common = {"regime": regime, "n": h["n"], "d": h["d"], "beta": h["beta"], "T": h["T"],
                  "x0_seed": base}
        points = {}
        for L in h["depths"]:
            points[f"L{L}"] = {
                **common, "kind": "trajectory", "H": h["heads"], "L": L,
                "eta": step_size(regime, L, h["heads"], h["T"], h["head_norm"]),
                "head_norm": h["head_norm"], "runs": h["runs"],
                "record_every": record_every(L, h["records"]),
            }
        steps = h["limit_steps"]
        points["limit"] = {
            **common, "kind": "limit", "H": None, "L": steps, "eta": None, "head_norm": None,
            # the deterministic limit is X(t) = X0 exactly: one run is the whole law
            "runs": h["limit_runs"] if regime == "stochastic" else 1,
            "record_every": record_every(steps, h["records"]),
            "samples_per_step": h["limit_samples"],
        }
        out[study] = points

    t = particles["tradeoff"]
    eta = step_size("stochastic", t["depth"], t["heads"], t["T"])
    final = {"kind": "final", "regime": "stochastic", "H": t["heads"], "L": t["depth"],
             "eta": eta, "T": t["T"], "runs": t["runs"], "head_norm": "sum"}
    out["tradeoff_dn"] = {
        f"d{d}_n{n}": {**final, "n": n, "d": d, "beta": t["beta_at"]}
        for d in t["d"] for n in t["n"]
    }
    out["tradeoff_beta_n"] = {
        f"b{beta_name(beta)}_n{n}": {**final, "n": n, "d": t["d_at"], "beta": beta}
        for beta in t["beta"] for n in t["n"]
    }
    betas = np.linspace(0.0, max(t["beta"]), t["boundary_betas"]).tolist()
    out["boundary"] = {
        f"d{d}": {"kind": "boundary", "d": d, "n": BOUNDARY_TOKENS, "betas": betas,
                  "samples": t["boundary_samples"]}
        for d in sorted(set(t["d"]) | {t["d_at"]})
    }
    out["discrete"] = {
        "e1": {"kind": "trajectory", "regime": "unscaled", "n": init_sweep["tokens"],
               "d": init_sweep["width"], "H": init_sweep["heads"], "L": init_sweep["depth"],
               "eta": 1.0, "beta": init_sweep.get("temperature", 1.0), "T": None,
               "head_norm": "sum", "runs": particles["discrete_runs"], "record_every": 1,
               "x0_seed": None}
    }
    for study, points in out.items():
        for point, params in points.items():
            params["seed"] = point_seed(base, study, point)
    return out


def _shared_start(params: dict) -> torch.Tensor | None:
    """The initial configuration shared by every run and depth of a study, or None (fresh)."""
    if params.get("x0_seed") is None:
        return None
    g = torch.Generator().manual_seed(params["x0_seed"])
    return uniform_tokens(1, params["n"], params["d"], g)[0]


def _trajectory_rows(traj) -> pd.DataFrame:
    runs, records = traj.inner.shape
    return pd.DataFrame({
        "run": np.repeat(np.arange(runs), records),
        "layer": np.tile(traj.layers, runs),
        "t": np.tile(traj.t, runs),
        "inner": traj.inner.ravel(),
        "mean_norm_sq": traj.mean_norm_sq.ravel(),
    })


def final_statistics(X: torch.Tensor) -> dict[str, np.ndarray]:
    """Per run of a final state ``(runs, n, d)``: the clustering statistics of the trade-off maps.

    ``inner`` (mean pairwise inner product; 1 = one cluster), ``mean_norm_sq`` and
    ``min_abs_gram`` = min over pairs of ``|<x_i, x_j>|`` (near 1: every pair is either together
    or antipodal, i.e. one cluster or two antipodal clusters).
    """
    gram = X @ X.transpose(-1, -2)  # (runs, n, n)
    return {
        "inner": mean_pairwise_inner(X).numpy(),
        "mean_norm_sq": mean_token_norm_sq(X).numpy(),
        "min_abs_gram": gram.abs().amin(dim=(-2, -1)).numpy(),
    }


def run_point(params: dict) -> pd.DataFrame:
    """One point's table; parameter columns are repeated on every row (long format).

    Returns, by ``params["kind"]``:
      * ``trajectory`` / ``limit``: one row per (run, recorded layer): run, layer, t, inner,
        mean_norm_sq (t = k / L, the fraction of the homogenized time T);
      * ``final``: one row per run: inner_start, inner, mean_norm_sq, min_abs_gram at time T;
      * ``boundary``: one row per beta: lambda (the derived heuristic exponent).
    """
    kind = params["kind"]
    seed = params["seed"]
    if kind == "trajectory":
        traj = simulate_particles(
            params["n"], params["d"], params["H"], params["L"], params["eta"], params["beta"],
            params["runs"], seed, record_every=params["record_every"],
            head_norm=params["head_norm"], X0=_shared_start(params),
        )
        table = _trajectory_rows(traj)
    elif kind == "limit":
        traj = simulate_limit(
            params["n"], params["d"], params["beta"], params["T"], params["runs"], seed,
            regime=params["regime"], num_steps=params["L"], record_every=params["record_every"],
            samples_per_step=params["samples_per_step"], X0=_shared_start(params),
        )
        table = _trajectory_rows(traj)
    elif kind == "final":
        traj = simulate_particles(
            params["n"], params["d"], params["H"], params["L"], params["eta"], params["beta"],
            params["runs"], seed, record_every=params["L"], head_norm=params["head_norm"],
        )
        table = pd.DataFrame({"run": np.arange(params["runs"]), "inner_start": traj.inner[:, 0],
                              **final_statistics(traj.final)})
    elif kind == "boundary":
        lam = [antipodal_exponent(params["d"], beta, n=params["n"], samples=params["samples"],
                                  seed=seed) for beta in params["betas"]]
        return pd.DataFrame({"kind": kind, "d": params["d"], "n": params["n"],
                             "beta": params["betas"], "exponent": lam})
    else:
        raise ValueError(f"unknown point kind {kind!r}")
    scalars = {k: params.get(k) for k in ("kind", "regime", "n", "d", "H", "L", "eta", "beta",
                                          "T", "head_norm")}
    # missing numbers (the limit has no H or eta) are NaN, so columns keep one numeric type
    scalars = {k: (np.nan if v is None and k not in ("regime", "head_norm") else v)
               for k, v in scalars.items()}
    for i, (name, value) in enumerate(scalars.items()):
        table.insert(i, name, value)
    return table


# --------------------------------------------------------------------------------------------
# analysis of the collected tables (pure functions; used by the E6 notebook)
# --------------------------------------------------------------------------------------------


def run_matrix(table: pd.DataFrame, stat: str) -> tuple[np.ndarray, np.ndarray]:
    """One point's trajectories as ``(t, values)`` with values ``(runs, records)``."""
    wide = table.pivot(index="run", columns="t", values=stat)
    return wide.columns.to_numpy(float), wide.to_numpy(float)


def _common(t_a: np.ndarray, t_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the time points shared by two grids (to 1e-9)."""
    ia, ib = np.nonzero(np.isclose(t_a[:, None], t_b[None, :], rtol=0, atol=1e-9))
    return ia, ib


def sup_gap(t_a, runs_a, t_b, runs_b) -> float:
    """Sup over shared time points of the distance between the two mean curves."""
    ia, ib = _common(t_a, t_b)
    return float(np.max(np.abs(runs_a.mean(0)[ia] - runs_b.mean(0)[ib])))


def homogenization_summary(homog: pd.DataFrame, stat: str, fit_depths: int, resamples: int,
                           seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Gap to the limit and run-to-run spread per (regime, depth), with bootstrap intervals.

    gap = sup_t |mean over runs at depth L - mean over runs of the limit|; spread = standard
    deviation over runs at t = 1; noise = sup_t of the standard error of the difference of the
    two means (the level below which a gap is Monte Carlo noise). Runs are the unit of
    resampling (independent weight draws; each curve resampled on its own). Slopes are
    least-squares fits of log gap and log spread against log L over the `fit_depths` largest
    depths.

    Returns:
        (per_depth, slopes): per_depth has regime, L, gap, gap_lo, gap_hi, spread, spread_lo,
        spread_hi, noise, limit_spread; slopes has regime, quantity (gap|spread), slope, lo, hi.
    """
    rng = np.random.default_rng(seed)
    rows, slope_rows = [], []
    for regime, table in homog.groupby("regime", sort=False):
        t_lim, lim = run_matrix(table[table.kind == "limit"], stat)
        depths = sorted(table[table.kind == "trajectory"].L.unique())
        curves = {L: run_matrix(table[(table.kind == "trajectory") & (table.L == L)], stat)
                  for L in depths}
        boot_gap = np.empty((resamples, len(depths)))
        boot_spread = np.empty((resamples, len(depths)))
        for b in range(resamples):
            lim_b = lim[rng.integers(0, len(lim), len(lim))]
            for j, L in enumerate(depths):
                t, runs = curves[L]
                runs_b = runs[rng.integers(0, len(runs), len(runs))]
                boot_gap[b, j] = sup_gap(t, runs_b, t_lim, lim_b)
                boot_spread[b, j] = runs_b[:, -1].std(ddof=1)
        for j, L in enumerate(depths):
            t, runs = curves[L]
            ia, ib = _common(t, t_lim)
            se = np.sqrt(runs.var(0, ddof=1)[ia] / len(runs)
                         + (lim.var(0, ddof=1)[ib] / len(lim) if len(lim) > 1 else 0.0))
            rows.append({
                "regime": regime, "L": int(L), "gap": sup_gap(t, runs, t_lim, lim),
                "gap_lo": np.quantile(boot_gap[:, j], 0.025),
                "gap_hi": np.quantile(boot_gap[:, j], 0.975),
                "spread": runs[:, -1].std(ddof=1),
                "spread_lo": np.quantile(boot_spread[:, j], 0.025),
                "spread_hi": np.quantile(boot_spread[:, j], 0.975),
                "noise": float(se.max()),
                "limit_spread": lim[:, -1].std(ddof=1) if len(lim) > 1 else 0.0,
            })
        x = np.log(np.asarray(depths[-fit_depths:], float))
        for quantity, boot in (("gap", boot_gap), ("spread", boot_spread)):
            point = np.array([r[quantity] for r in rows[-len(depths):]])[-fit_depths:]
            slope = np.polyfit(x, np.log(point), 1)[0]
            boot_slopes = [np.polyfit(x, np.log(row[-fit_depths:]), 1)[0] for row in boot]
            slope_rows.append({"regime": regime, "quantity": quantity, "slope": float(slope),
                               "lo": float(np.quantile(boot_slopes, 0.025)),
                               "hi": float(np.quantile(boot_slopes, 0.975))})
    return pd.DataFrame(rows), pd.DataFrame(slope_rows)


def cluster_fractions(tradeoff: pd.DataFrame, collapsed: float = 0.99) -> pd.DataFrame:
    """Per (study, d, beta, n): fractions of runs in one cluster and in two antipodal clusters.

    One cluster: mean pairwise inner product > ``collapsed``. Two antipodal clusters: every
    pair has ``|<x_i, x_j>| > collapsed`` but the run is not one cluster.
    """
    one = tradeoff.inner > collapsed
    two = (tradeoff.min_abs_gram > collapsed) & ~one
    t = tradeoff.assign(one_cluster=one.astype(float), two_clusters=two.astype(float))
    return (t.groupby(["study", "d", "beta", "n"], sort=True)
            .agg(one_cluster=("one_cluster", "mean"), two_clusters=("two_clusters", "mean"),
                 inner=("inner", "mean"), runs=("run", "size"))
            .reset_index())


def zero_crossings(x: np.ndarray, y: np.ndarray) -> list[float]:
    """Linear-interpolated x where y changes sign (and exact zeros)."""
    out = []
    for i in range(len(x) - 1):
        if y[i] == 0:
            out.append(float(x[i]))
        elif y[i] * y[i + 1] < 0:
            out.append(float(x[i] - y[i] * (x[i + 1] - x[i]) / (y[i + 1] - y[i])))
    if len(y) and y[-1] == 0:
        out.append(float(x[-1]))
    return out
