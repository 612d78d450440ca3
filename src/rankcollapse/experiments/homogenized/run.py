"""E6's jobs: one parameter point of a particle study -> its long table (:func:`run_point`).

A *study* is one family of simulations and a *point* one job of it; rankcollapse.plan.particles
plans them from the config without torch and seeds every point, so a changed setting reruns
exactly the points it changes. A point batches a whole grid of parameter values, so that a job
is not mostly interpreter and torch start-up. The studies, their tables and the theorem each
tests: docs/e6_homogenized.md. Rows computed with our own derivations or heuristic (ours.py):
``large_beta``'s ``*_derived`` columns and SDEs, ``boundary``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from rankcollapse.core.metrics import mean_token_norm_sq
from rankcollapse.experiments.homogenized.limits import (
    logistic,
    meanfield_pair_kernel,
    pair_drift_coefficient,
    simplex_drift,
    simplex_fg,
    simulate_limit,
    simulate_overlap_sde,
    solve_simplex_ode,
)
from rankcollapse.experiments.homogenized.model import (
    equal_overlap_tokens,
    mean_pairwise_inner,
    multihead_update,
    overlap_for_mean,
    pair_tokens,
    project_to_sphere,
    sample_projections,
    sample_weights,
    step_size,
    uniform_tokens,
    update_from_projections,
)
from rankcollapse.experiments.homogenized.ours import (
    antipodal_exponents,
    derived_overlap_law,
    pair_coefficient_expansion,
    pair_coefficient_table,
    pair_kernel_exact,
    sample_derived_overlap,
    simulate_pair_sde_exact,
)
from rankcollapse.experiments.homogenized.simulate import (
    simulate_meanfield_argmax,
    simulate_particles,
)
from rankcollapse.plan.particles import (
    BETA_RULES,
    heads_for_depth,
    layers_for,
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
    """One point's table (long format; the studies: docs/e6_homogenized.md).

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
