"""Experiment E6 [KGR26]: the parameter points of the particle studies, one point's table, and
the analysis of the collected tables.

A *study* is one family of simulations; a *point* is one job of it, named ``[A-Za-z0-9_.-]+``.
:func:`plan` turns the workflow config into ``{study: {point: params}}``; :func:`run_point`
computes one point's table from its params (a plain JSON dict holding its seed), so a changed
setting reruns exactly the points it changes. A point batches a whole grid of parameter values,
so that a job is not mostly interpreter and torch start-up.

Studies (collected table in brackets), all in the paper's conventions (head average, Gaussian
law (G) with ``sigma^2 = 1/d``, ballistic time ``t = L eta``, diffusive time ``tau = L eta^2/H``):

* ``homog_ballistic``, ``homog_diffusive`` [homog]: one shared start, depths L under the scaling
  of ``cor:ode1`` / ``cor:SDE`` at fixed H, and the limit (``X(t) = X(0)``; the SDE
  ``eq:Diffusive_gaussian_case`` by Euler-Maruyama). ``homog_heads`` [homog]: the diffusive
  scaling with ``H = ceil(L^p)`` heads, ``p < 1/3`` (the theorem's ``H = o(L^{1/3})``).
* ``small_beta`` [small_beta]: ``thm:clustering_small_beta``; equal positive overlaps with a
  fixed ``m(0)``, sweep of d and n at ``beta = 0`` and ``beta = d^{-1/2}``.
* ``simplex`` [simplex]: ``thm:clustering_random_init``; the simplex start, sweep of d, the ODE
  with f, g by Monte Carlo, printed and corrected.
* ``large_beta`` [large_beta]: ``thm:large_beta_meta``; a pair of tokens at ``beta_eff =
  infinity``, sweep of d; the kernel's drift coefficient; the printed limit SDE; ours: the
  exact kernel and coefficient per d, the derived limit SDE (exact) and the derived SDE per d
  (derivation note, section 7).
* ``map_dn``, ``map_beta_n`` [maps]: mean overlap at a few units of tau over (d, n) and
  (beta, n), fresh uniform starts.
* ``boundary``, ``antipodal`` [antipodal]: OUR heuristic exponent of an antipodal two-cluster
  state over (d, beta), and long-horizon runs at its sides (an extension, not the paper's).
* ``discrete`` [discrete]: the unscaled model (step 1) at E1's sizes, for E7.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from rankcollapse.experiments.homogenized.particles import (
    antipodal_exponents,
    derived_overlap_law,
    equal_overlap_tokens,
    logistic,
    mean_pairwise_inner,
    mean_token_norm_sq,
    meanfield_pair_kernel,
    overlap_for_mean,
    pair_coefficient_expansion,
    pair_coefficient_table,
    pair_drift_coefficient,
    pair_kernel_exact,
    pair_tokens,
    sample_derived_overlap,
    sample_weights,
    simplex_drift,
    simplex_fg,
    simulate_limit,
    simulate_meanfield_argmax,
    simulate_overlap_sde,
    simulate_pair_sde_exact,
    simulate_particles,
    solve_simplex_ode,
    step_size,
    uniform_tokens,
)
from rankcollapse.plan.particles import (  # noqa: F401 - re-exported: the plan, without torch
    BETA_RULES,
    BOUNDARY_TOKENS,
    TABLES,
    config_problems,
    heads_for_depth,
    layers_for,
    plan,
    point_seed,
    record_every,
    sub_seed,
)


def _shared_start(params: dict) -> torch.Tensor | None:
    """The initial configuration shared by every run and depth of a study, or None (fresh)."""
    if params.get("x0_seed") is None:
        return None
    g = torch.Generator().manual_seed(params["x0_seed"])
    return uniform_tokens(1, params["n"], params["d"], g)[0]


def _trajectory_rows(traj, **columns) -> pd.DataFrame:
    runs, records = traj.inner.shape
    return pd.DataFrame({
        **{k: v for k, v in columns.items()},
        "run": np.repeat(np.arange(runs), records),
        "layer": np.tile(traj.layers, runs),
        "t": np.tile(traj.t, runs),
        "inner": traj.inner.ravel(),
        "mean_norm_sq": traj.mean_norm_sq.ravel(),
    })


def drift_z(X0: torch.Tensor, H: int, beta: float, draws: int, seed: int,
            head_norm: str) -> float:
    """Largest ``|mean| / SE`` over the ``n d`` components of the one-layer head output from
    ``X0`` over ``draws`` independent weight draws (``lem:lemma_app``: its mean is 0)."""
    from rankcollapse.experiments.homogenized.particles import multihead_update

    g = torch.Generator().manual_seed(seed)
    n, d = X0.shape
    Q, K, V = sample_weights(draws, H, d, g)
    u = multihead_update(X0.expand(draws, n, d), Q, K, V, beta, head_norm)  # (draws, n, d)
    z = u.mean(0) / (u.std(0) / math.sqrt(draws))
    return float(z.abs().max())


def _run_homog(p: dict) -> pd.DataFrame:
    X0 = _shared_start(p)
    frames = []
    for L in p["depths"]:
        H = p["H"] or heads_for_depth(L, p["heads_exponent"])
        eta = step_size(p["regime"], L, H, p["T"], p["head_norm"])
        traj = simulate_particles(p["n"], p["d"], H, L, eta, p["beta"], p["runs"],
                                  sub_seed(p["seed"], L), record_every(L, p["records"]),
                                  p["head_norm"], X0)
        frames.append(_trajectory_rows(traj, kind="trajectory", L=L, H=H, eta=eta))
    if p["regime"] == "ballistic" and "drift_draws" in p:
        # the limit is X(t) = X(0) exactly (b = 0): one run is its whole law
        lim = simulate_limit(p["n"], p["d"], p["beta"], p["T"], 1, p["seed"], "ballistic",
                             p["records"], 1, X0=X0)
        frames.append(_trajectory_rows(lim, kind="limit", L=p["records"]))
        z = drift_z(X0, p["H"], p["beta"], p["drift_draws"], sub_seed(p["seed"], "drift"),
                    p["head_norm"])
        frames.append(pd.DataFrame({"kind": ["drift_check"], "value": [z],
                                    "draws": [p["drift_draws"]]}))
    if p["regime"] == "diffusive" and "limit_runs" in p:
        steps = p["limit_steps"]
        lim = simulate_limit(p["n"], p["d"], p["beta"], p["T"], p["limit_runs"],
                             sub_seed(p["seed"], "limit"), "diffusive", steps,
                             record_every(steps, p["records"]), p["limit_samples"], X0=X0)
        frames.append(_trajectory_rows(lim, kind="limit", L=steps))
    table = pd.concat(frames, ignore_index=True)
    for name in ("regime", "n", "d", "beta", "T", "head_norm"):
        table[name] = p[name]
    return table


def _run_small_beta(p: dict) -> pd.DataFrame:
    frames = []
    for d in p["d"]:
        beta = BETA_RULES[p["beta_rule"]](d)
        L = layers_for(p["T"], p["dtau_d"], d, p["records"])
        for n in p["n"]:
            if n > d:  # equal overlaps need d >= n
                continue
            X0 = equal_overlap_tokens(n, d, overlap_for_mean(p["m0"], n))
            eta = step_size("diffusive", L, 1, p["T"], p["head_norm"])
            traj = simulate_particles(n, d, 1, L, eta, beta, p["runs"],
                                      sub_seed(p["seed"], d, n), L // p["records"],
                                      p["head_norm"], X0)
            tau = traj.t * p["T"]
            frames.append(pd.DataFrame({
                "d": d, "n": n, "beta": beta, "L": L, "eta": eta,
                "run": np.repeat(np.arange(p["runs"]), len(tau)),
                "tau": np.tile(tau, p["runs"]),
                "m": traj.mean_norm_sq.ravel(),
                "u": np.tile(logistic(traj.mean_norm_sq[0, 0], tau), p["runs"]),
            }))
    table = pd.concat(frames, ignore_index=True)
    table.insert(0, "beta_rule", p["beta_rule"])
    table.insert(0, "kind", "trajectory")
    return table


def _run_simplex(p: dict) -> pd.DataFrame:
    frames = []
    n, gamma0 = p["n"], p["gamma0"]
    grid = np.linspace(max(-1.0 / (n - 1) + 1e-3, min(gamma0, 0.0) - 0.05), 0.999, p["fg_grid"])
    for d in p["d"]:
        beta = p["beta_sqrt_d"] * math.sqrt(d)
        g = torch.Generator().manual_seed(sub_seed(p["seed"], "fg", d))
        f, gg = simplex_fg(grid, n, d, beta, p["fg_samples"], g)
        L = layers_for(p["T"], p["dtau_d"], d, p["records"])
        eta = step_size("diffusive", L, 1, p["T"], p["head_norm"])
        traj = simulate_particles(n, d, 1, L, eta, beta, p["runs"], sub_seed(p["seed"], d),
                                  L // p["records"], p["head_norm"],
                                  equal_overlap_tokens(n, d, gamma0), record_gram=True)
        tau = traj.t * p["T"]
        printed = solve_simplex_ode(gamma0, tau, grid, f, gg)
        corrected = solve_simplex_ode(gamma0, tau, grid, f, gg, d=d)
        off = ~np.eye(n, dtype=bool)
        pairs = traj.gram[..., off]  # (runs, records, n(n-1))
        dev = np.abs(pairs - printed[None, :, None]).max(axis=-1)
        frames.append(pd.DataFrame({
            "kind": "trajectory", "d": d, "beta": beta, "L": L, "eta": eta,
            "run": np.repeat(np.arange(p["runs"]), len(tau)), "tau": np.tile(tau, p["runs"]),
            "overlap": pairs.mean(axis=-1).ravel(), "dev": dev.ravel()}))
        frames.append(pd.DataFrame({"kind": "ode", "d": d, "beta": beta, "tau": tau,
                                    "gamma_printed": printed, "gamma_corrected": corrected}))
        frames.append(pd.DataFrame({"kind": "fg", "d": d, "beta": beta, "gamma": grid, "f": f,
                                    "g": gg}))
        # the initial drift, measured on one layer (antithetic pairs, small step)
        mean, se = one_layer_drift(equal_overlap_tokens(n, d, gamma0), beta, p["drift_dtau"],
                                   p["drift_draws"], sub_seed(p["seed"], "drift", d),
                                   p["head_norm"])
        f0, g0 = np.interp(gamma0, grid, f), np.interp(gamma0, grid, gg)
        frames.append(pd.DataFrame({
            "kind": ["drift"], "d": [d], "beta": [beta], "drift": [mean], "drift_se": [se],
            "drift_printed": [simplex_drift(gamma0, f0, g0)],
            "drift_corrected": [simplex_drift(gamma0, f0, g0, d)], "draws": [p["drift_draws"]]}))
    table = pd.concat(frames, ignore_index=True)
    table["n"], table["gamma0"] = n, gamma0
    return table


def first_passage(values: np.ndarray, times: np.ndarray, start: np.ndarray,
                  move: float) -> np.ndarray:
    """Per run, the first recorded time at which ``|value - start| >= move`` (NaN: never).

    values: ``(runs, records)``; times: ``(records,)``; start: ``(runs,)``.
    """
    hit = np.abs(values - start[:, None]) >= move
    first = np.argmax(hit, axis=1)
    return np.where(hit.any(axis=1), times[first], np.nan)


def _sde_rows(label: str, coef: float, u0: float, t: np.ndarray, u: np.ndarray | None,
              paths: int, near: float, law: dict | None = None,
              **columns) -> list[pd.DataFrame]:
    """The ``sde`` rows (fractions and quantiles per recorded t) and the ``sde_hist`` rows (the
    density of u at the last t) of one overlap SDE from ``u0``: from paths ``u (paths, times)``,
    or from an exact ``law`` (p_near, p_pos, q10, q50, q90 per t) with ``u`` the exact draws
    at the last t only."""
    if law is None:
        law = {"p_near": (np.abs(u) >= near).mean(0), "p_pos": (u > 0).mean(0),
               **{f"q{q}": np.quantile(u, q / 100, axis=0) for q in (10, 50, 90)}}
        last = u[:, -1]
    else:
        last = u
    density, edges = np.histogram(last, bins=40, range=(-1, 1), density=True)
    return [pd.DataFrame({"kind": "sde", "sde": label, "coef": coef, "u0": u0, "t": t, **law,
                          "paths": paths, **columns}),
            pd.DataFrame({"kind": "sde_hist", "sde": label, "coef": coef, "u0": u0,
                          "bin_lo": edges[:-1], "bin_hi": edges[1:], "density": density,
                          **columns})]


def _derived_limit_sde(p: dict) -> list[pd.DataFrame]:
    """Ours (derivation note, 7.7): the derived limit du = -2u(1-u^2)dt + sqrt(2)(1-u^2)dB,
    exactly (u = tanh(artanh u0 + sqrt(2) B_t)): label ``derived``, k = 2."""
    t = np.linspace(0, p["t_end"], p["records"] + 1)
    frames = []
    for u0 in p["u0"]:
        law = derived_overlap_law(u0, t, p["near"])
        draws = sample_derived_overlap(u0, p["t_end"], p["sde_paths"],
                                       sub_seed(p["seed"], "sde", "derived", u0))
        frames += _sde_rows("derived", 2.0, u0, t, draws, p["sde_paths"], p["near"], law)
    return frames


def _derived_finite_d_sde(p: dict, d: int, coef: float) -> list[pd.DataFrame]:
    """Ours (derivation note, 7.5 and 7.7): the pair SDE at dimension d with the exact k_d(u),
    by Euler-Maruyama in artanh u with steps of at most ``dt`` in t: label
    ``derived_finite_d``, one set of rows per d (``coef``: the mean k_d over the overlaps).
    Descriptive only (no claim reads it), so a quarter of ``sde_paths`` paths."""
    table = pair_coefficient_table(d)
    paths = max(2, p["sde_paths"] // 4)
    frames = []
    for u0 in p["u0"]:
        t, u = simulate_pair_sde_exact(d, u0, p["t_end"], paths,
                                       sub_seed(p["seed"], "sde", "derived_finite_d", d, u0),
                                       dt=p["dt"], records=p["records"], table=table)
        frames += _sde_rows("derived_finite_d", coef, u0, t, u, paths, p["near"], d=d)
    return frames


def _run_large_beta(p: dict) -> pd.DataFrame:
    frames = []
    for d in p["d"]:
        tau_end = p["t_end"] * d
        # steps of at most dt in t = tau/d and at most dtau_max in tau (each token moves by about
        # sqrt(dtau) per layer, and the overlap's discretisation error grows with it)
        steps = max(math.ceil(p["t_end"] / p["dt"]), math.ceil(tau_end / p["dtau_max"]))
        steps = math.ceil(steps / p["records"]) * p["records"]
        eta = step_size("diffusive", steps, 1, tau_end, p["head_norm"])
        for u0 in p["u0"]:
            traj = simulate_meanfield_argmax(2, d, 1, steps, eta, p["runs"],
                                             sub_seed(p["seed"], d, u0), 1, p["head_norm"],
                                             pair_tokens(d, u0))
            tau = traj.t * tau_end
            R = traj.inner  # (runs, steps + 1): for two tokens the overlap itself
            passage = first_passage(R, tau, R[:, 0], p["move"])
            keep = np.arange(0, steps + 1, steps // p["records"])
            frames.append(pd.DataFrame({
                "kind": "trajectory", "d": d, "u0": u0, "L": steps,
                "run": np.repeat(np.arange(p["runs"]), len(keep)),
                "tau": np.tile(tau[keep], p["runs"]), "t": np.tile(tau[keep] / d, p["runs"]),
                "overlap": R[:, keep].ravel()}))
            frames.append(pd.DataFrame({"kind": "passage", "d": d, "u0": u0,
                                        "run": np.arange(p["runs"]), "tau_pass": passage}))
        g = torch.Generator().manual_seed(sub_seed(p["seed"], "kernel", d))
        overlaps = np.asarray(p["kernel_overlaps"], float)
        s, se = meanfield_pair_kernel(overlaps, d, p["kernel_samples"], g)
        k = pair_drift_coefficient(overlaps, s, d)
        k_se = (d - 2 + overlaps**2) * se / (overlaps * (1 - overlaps**2))  # dk/ds * se
        # ours (derivation note, section 7): the exact kernel and coefficient, by quadrature
        s_derived = pair_kernel_exact(overlaps, d)
        largest = pd.DataFrame({"kind": "kernel", "d": d, "overlap": overlaps, "s": s,
                                "s_se": se, "k": k, "k_se": k_se,
                                "samples": p["kernel_samples"], "s_derived": s_derived,
                                "k_derived": pair_drift_coefficient(overlaps, s_derived, d),
                                "k_expansion": pair_coefficient_expansion(overlaps, d)})
        frames.append(largest)
        frames += _derived_finite_d_sde(p, d, float(largest.k_derived.mean()))
    frames += _derived_limit_sde(p)
    # the printed limit (k = 1) and the same SDE with the coefficient measured at the largest d
    coefficients = {"printed": 1.0, "measured": float(largest.k.mean())}
    for label, coef in coefficients.items():
        for u0 in p["u0"]:
            t, u = simulate_overlap_sde(coef, u0, p["t_end"], p["sde_paths"],
                                        sub_seed(p["seed"], "sde", label, u0),
                                        records=p["records"])
            frames += _sde_rows(label, coef, u0, t, u, p["sde_paths"], p["near"])
    table = pd.concat(frames, ignore_index=True)
    table["t_end"], table["near"], table["move"] = p["t_end"], p["near"], p["move"]
    return table


def final_statistics(X: torch.Tensor) -> dict[str, np.ndarray]:
    """Per run of a final state ``(runs, n, d)``: the clustering statistics of the maps.

    ``inner`` (mean pairwise overlap; 1 = one cluster), ``mean_norm_sq`` (m) and
    ``min_abs_gram`` = min over pairs of ``|<x_i, x_j>|`` (near 1: every pair is either together
    or antipodal, i.e. one cluster or two antipodal clusters).
    """
    G = X @ X.transpose(-1, -2)  # (runs, n, n)
    return {
        "inner": mean_pairwise_inner(X).numpy(),
        "mean_norm_sq": mean_token_norm_sq(X).numpy(),
        "min_abs_gram": G.abs().amin(dim=(-2, -1)).numpy(),
    }


def _run_map(p: dict) -> pd.DataFrame:
    frames = []
    for d in p["d"]:
        for beta in p["beta"]:
            for n in p["n"]:
                L = p["layers"]
                eta = step_size("diffusive", L, 1, p["T"], p["head_norm"])
                traj = simulate_particles(n, d, 1, L, eta, beta, p["runs"],
                                          sub_seed(p["seed"], d, beta, n), L, p["head_norm"])
                m0 = traj.mean_norm_sq[:, 0]
                frames.append(pd.DataFrame({
                    "kind": "final", "d": d, "beta": beta, "n": n, "L": L, "T": p["T"],
                    "run": np.arange(p["runs"]), "m0": m0, "u": logistic(m0, p["T"]),
                    **final_statistics(traj.final)}))
    return pd.concat(frames, ignore_index=True)


def _run_antipodal(p: dict) -> pd.DataFrame:
    frames = []
    for d in p["d"]:
        L = p["layers"]
        eta = step_size("diffusive", L, 1, p["T"], p["head_norm"])
        traj = simulate_particles(p["n"], d, 1, L, eta, p["beta"], p["runs"],
                                  sub_seed(p["seed"], d), L, p["head_norm"])
        frames.append(pd.DataFrame({"kind": "final", "d": d, "beta": p["beta"], "n": p["n"],
                                    "L": L, "T": p["T"], "run": np.arange(p["runs"]),
                                    **final_statistics(traj.final)}))
    return pd.concat(frames, ignore_index=True)


def run_point(params: dict) -> pd.DataFrame:
    """One point's table (long format; see the module docstring for the studies).

    Returns, by ``params["kind"]``: ``homog`` (trajectory / limit rows per run and record, and
    one drift_check row), ``small_beta``, ``simplex``, ``large_beta``, ``map``, ``antipodal``
    (rows per run), ``boundary`` (one row per (d, beta): the exponent), ``trajectory`` (the
    unscaled discrete model).
    """
    kind = params["kind"]
    runners = {"homog": _run_homog, "small_beta": _run_small_beta, "simplex": _run_simplex,
               "large_beta": _run_large_beta, "map": _run_map, "antipodal": _run_antipodal}
    if kind in runners:
        return runners[kind](params)
    if kind == "boundary":
        frames = [pd.DataFrame({
            "kind": kind, "d": d, "n": params["n"], "beta": params["betas"],
            "exponent": antipodal_exponents(d, np.asarray(params["betas"]), params["n"],
                                            params["samples"], sub_seed(params["seed"], d))})
            for d in params["d"]]
        return pd.concat(frames, ignore_index=True)
    if kind == "trajectory":
        traj = simulate_particles(
            params["n"], params["d"], params["H"], params["L"], params["eta"], params["beta"],
            params["runs"], params["seed"], record_every=params["record_every"],
            head_norm=params["head_norm"], X0=_shared_start(params),
        )
        table = _trajectory_rows(traj)
        for i, name in enumerate(("kind", "regime", "n", "d", "H", "L", "eta", "beta",
                                  "head_norm")):
            table.insert(i, name, params[name])
        return table
    raise ValueError(f"unknown point kind {kind!r}")


def one_layer_drift(X0: torch.Tensor, beta: float, dtau: float, draws: int, seed: int,
                    head_norm: str = "mean") -> tuple[float, float]:
    """Mean one-layer change of the mean pairwise overlap from ``X0``, per unit of tau.

    One head, step ``eta = sqrt(dtau)``; antithetic pairs (V and -V share Q, K), which cancel
    the first-order noise. Returns (mean, standard error over the ``draws`` pairs).
    """
    from rankcollapse.experiments.homogenized.particles import (
        project_to_sphere,
        sample_projections,
        update_from_projections,
    )

    g = torch.Generator().manual_seed(seed)
    n, d = X0.shape
    X = X0.expand(draws, n, d)
    QX, KX, VX = sample_projections(X, 1, g)
    eta = step_size("diffusive", 1, 1, dtau, head_norm)
    start = mean_pairwise_inner(X0.unsqueeze(0))[0]
    change = torch.zeros(draws, dtype=X0.dtype)
    for sign in (1.0, -1.0):
        Y = project_to_sphere(X + eta * update_from_projections(QX, KX, sign * VX, beta,
                                                                head_norm))
        change += (mean_pairwise_inner(Y) - start) / (2 * dtau)
    return float(change.mean()), float(change.std() / math.sqrt(draws))


# --------------------------------------------------------------------------------------------
# analysis of the collected tables (pure functions; used by claims.e6 and the E6 notebook)
# --------------------------------------------------------------------------------------------


def loglog_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of log y against log x; NaN when a y is not positive and finite."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or not np.all(np.isfinite(y) & (y > 0)):
        return math.nan
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def run_matrix(table: pd.DataFrame, value: str, columns: str = "t") -> tuple[np.ndarray,
                                                                             np.ndarray]:
    """One cell's runs as ``(column values, (runs, columns) matrix)`` (runs in run order)."""
    wide = table.pivot(index="run", columns=columns, values=value).sort_index()
    return wide.columns.to_numpy(float), wide.to_numpy(float)


def homog_finals(homog: pd.DataFrame, study: str) -> dict[tuple[int, int], np.ndarray]:
    """``{(L, H): mean overlap at t = 1 per run}`` of a homogenization study's trajectories."""
    rows = homog[(homog.study == study) & (homog.kind == "trajectory")]
    end = rows[np.isclose(rows.t, 1.0)]
    return {(int(L), int(H)): g.sort_values("run").inner.to_numpy(float)
            for (L, H), g in end.groupby(["L", "H"])}


def homog_limit_final(homog: pd.DataFrame, study: str) -> np.ndarray:
    """Per run of the study's limit: the mean overlap at t = 1."""
    rows = homog[(homog.study == study) & (homog.kind == "limit")]
    return rows[np.isclose(rows.t, 1.0)].sort_values("run").inner.to_numpy(float)


def deviation_curves(m: np.ndarray, u: np.ndarray) -> dict[str, np.ndarray]:
    """Per recorded time: ``gap = |mean_r m - u|``, ``spread = std_r m`` and
    ``rms = sqrt(mean_r (m - u)^2)`` for runs ``m (runs, times)`` against a limit ``u (times)``."""
    return {"gap": np.abs(m.mean(0) - u), "spread": m.std(0, ddof=1),
            "rms": np.sqrt(((m - u) ** 2).mean(0))}


def small_beta_cells(table: pd.DataFrame) -> dict[tuple[str, int, int], tuple[np.ndarray,
                                                                               np.ndarray,
                                                                               np.ndarray]]:
    """``{(beta_rule, n, d): (tau, m (runs, times), u (times))}`` of the small-beta study."""
    out = {}
    for (rule, n, d), g in table.groupby(["beta_rule", "n", "d"]):
        tau, m = run_matrix(g, "m", "tau")
        u = g.groupby("tau").u.first().reindex(tau).to_numpy(float)
        out[(rule, int(n), int(d))] = (tau, m, u)
    return out


def small_beta_summary(cells: dict, runs: slice | np.ndarray | None = None) -> pd.DataFrame:
    """Per cell: the sup over tau > 0 of the gap, spread and rms deviation from the logistic.

    ``runs`` selects (or resamples) the runs of every cell alike.
    """
    rows = []
    for (rule, n, d), (tau, m, u) in cells.items():
        sub = m if runs is None else m[runs]
        curves = deviation_curves(sub[:, tau > 0], u[tau > 0])
        rows.append({"beta_rule": rule, "n": n, "d": d,
                     **{k: float(v.max()) for k, v in curves.items()}})
    return pd.DataFrame(rows)


def slopes_over_d(summary: pd.DataFrame, quantity: str) -> pd.DataFrame:
    """Fitted slope of log(quantity) against log d per (beta_rule, n) line (>= 2 values of d)."""
    rows = []
    for (rule, n), g in summary.groupby(["beta_rule", "n"]):
        if g.d.nunique() >= 2:
            g = g.sort_values("d")
            rows.append({"beta_rule": rule, "n": n, "slope": loglog_slope(g.d, g[quantity]),
                         "d_values": len(g)})
    return pd.DataFrame(rows, columns=["beta_rule", "n", "slope", "d_values"])


def simplex_cells(table: pd.DataFrame) -> dict[int, dict[str, np.ndarray]]:
    """Per d of the simplex study: tau, overlap and dev ``(runs, times)``, the two ODE curves."""
    out = {}
    traj, ode = table[table.kind == "trajectory"], table[table.kind == "ode"]
    for d, g in traj.groupby("d"):
        tau, overlap = run_matrix(g, "overlap", "tau")
        _, dev = run_matrix(g, "dev", "tau")
        o = ode[ode.d == d].set_index("tau").reindex(tau)
        out[int(d)] = {"tau": tau, "overlap": overlap, "dev": dev,
                       "printed": o.gamma_printed.to_numpy(float),
                       "corrected": o.gamma_corrected.to_numpy(float)}
    return out


def drift_ratio(cells: dict[int, dict[str, np.ndarray]], horizon: float,
                runs: np.ndarray | None = None) -> float:
    """Where the mean overlap lies between the printed ODE (0) and the corrected one (1).

    Least-squares coefficient of (simulated mean - printed) on (corrected - printed), pooled over
    d and the recorded times ``0 < tau <= horizon``.
    """
    num = den = 0.0
    for c in cells.values():
        keep = (c["tau"] > 0) & (c["tau"] <= horizon + 1e-12)
        sim = (c["overlap"] if runs is None else c["overlap"][runs]).mean(0)[keep]
        step = (c["corrected"] - c["printed"])[keep]
        num += float(np.sum((sim - c["printed"][keep]) * step))
        den += float(np.sum(step**2))
    return num / den if den > 0 else math.nan


def simplex_deviation(cells: dict[int, dict[str, np.ndarray]],
                      runs: np.ndarray | None = None) -> pd.DataFrame:
    """Per d: RMS over runs of ``sup_tau max_{i<j} |R_ij(tau) - gamma(tau)|`` (printed ODE)."""
    rows = []
    for d, c in sorted(cells.items()):
        dev = (c["dev"] if runs is None else c["dev"][runs]).max(axis=1)
        rows.append({"d": d, "rms_dev": float(np.sqrt((dev**2).mean()))})
    return pd.DataFrame(rows)


def passage_matrix(table: pd.DataFrame, u0: float) -> tuple[np.ndarray, np.ndarray]:
    """``(d values, (runs, d) passage times)`` of the large-beta pair from overlap ``u0``;
    a pair that never moved far enough within the horizon counts as +inf."""
    rows = table[(table.kind == "passage") & np.isclose(table.u0, u0)]
    wide = rows.pivot(index="run", columns="d", values="tau_pass").sort_index()
    return wide.columns.to_numpy(float), np.nan_to_num(wide.to_numpy(float), nan=np.inf)


def final_overlaps(table: pd.DataFrame, u0: float) -> dict[int, np.ndarray]:
    """``{d: overlap at the last recorded time, per run}`` of the large-beta pair from ``u0``."""
    rows = table[(table.kind == "trajectory") & np.isclose(table.u0, u0)]
    last = rows[np.isclose(rows.t, rows.t.max())]
    return {int(d): g.sort_values("run").overlap.to_numpy(float) for d, g in last.groupby("d")}


def sde_final(table: pd.DataFrame, label: str, u0: float) -> pd.Series:
    """The summary row (p_near, p_pos, quantiles) of an overlap SDE at its last time."""
    rows = table[(table.kind == "sde") & (table.sde == label) & np.isclose(table.u0, u0)]
    return rows.loc[rows.t.idxmax()]


def cluster_fractions(final: pd.DataFrame, collapsed: float = 0.99) -> pd.DataFrame:
    """Per (study, d, beta, n): fractions of runs in one cluster and in two antipodal clusters,
    and the means of m, of the logistic u and of their difference.

    One cluster: mean pairwise overlap > ``collapsed``. Two antipodal clusters: every pair has
    ``|<x_i, x_j>| > collapsed`` but the run is not one cluster.
    """
    one = final.inner > collapsed
    two = (final.min_abs_gram > collapsed) & ~one
    extra = {"one_cluster": one.astype(float), "two_clusters": two.astype(float)}
    if "u" in final:
        extra["logistic_gap"] = final.mean_norm_sq - final.u
    t = final.assign(**extra)
    aggregations = {"one_cluster": ("one_cluster", "mean"),
                    "two_clusters": ("two_clusters", "mean"), "m": ("mean_norm_sq", "mean"),
                    "runs": ("run", "size")}
    if "u" in final:
        aggregations |= {"u": ("u", "mean"), "logistic_gap": ("logistic_gap", "mean")}
    return t.groupby(["study", "d", "beta", "n"], sort=True).agg(**aggregations).reset_index()


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
