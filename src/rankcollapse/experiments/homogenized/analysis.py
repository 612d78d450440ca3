"""E6's analysis: summaries of the collected tables that rankcollapse.claims.e6 and the E6
notebook read (pure functions of pandas tables; no torch).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


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
