"""E6's claim statistics [KGR26]: one Measurement per registered E6 claim.

The unit of replication is an independent simulation run (fresh weights at every layer; for the
maps also a fresh start). Claims that compare cells (depths, dimensions, token counts) resample
run *indices*: runs with the same index in different cells are independent too, so resampling
index tuples is a bootstrap over independent runs. Ranges live in the
registry (claims.yaml); this module only measures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from statistics import NormalDist

import numpy as np
import pandas as pd

from rankcollapse.claims.measurement import Measurement, exact, not_testable, over_runs
from rankcollapse.experiments.homogenized.analysis import (
    final_overlaps,
    homog_finals,
    homog_limit_final,
    loglog_slope,
    passage_matrix,
    sde_final,
    simplex_cells,
    small_beta_cells,
)
from rankcollapse.stats import LEVEL

IDS: tuple[str, ...] = (
    "E6.drift_vanishes",
    "E6.ballistic_rate_printed",
    "E6.ballistic_rate_corrected",
    "E6.ballistic_deterministic",
    "E6.diffusive_limit",
    "E6.diffusive_common_noise",
    "E6.heads_limit",
    "E6.small_beta_gap",
    "E6.small_beta_spread",
    "E6.small_beta_n_free",
    "E6.simplex_tracks_ode",
    "E6.simplex_which_drift",
    "E6.large_beta_slowdown",
    "E6.large_beta_coefficient",
    "E6.large_beta_pm1",
    "E6.large_beta_arcsin",
    "E6.large_beta_coefficient_derived",
    "E6.large_beta_pm1_derived",
    "E6.large_beta_arcsin_derived",
    "E6.antipodal_heuristic",
)

RESAMPLES = 1000
UNIT = "independent simulation runs"


def _runs_measure(cid: str, columns: list[np.ndarray], statistic: Callable, note: str,
                  resamples: int) -> Measurement:
    """over_runs with the run index as the unit: a resample draws run indices and takes that
    run's entry of every column (cells of one study share run indices; all runs independent)."""
    runs = min((len(c) for c in columns), default=0)
    if runs == 0:
        return not_testable(cid, note or "no runs")
    units = {r: r for r in range(runs)}
    return over_runs(cid, units, lambda idx: statistic([c[np.asarray(idx)] for c in columns]),
                     resamples=resamples, unit=UNIT, note=note)


# --- homogenization (cor:ode1, cor:SDE) -------------------------------------------------------

def _drift(homog: pd.DataFrame | None) -> Measurement:
    cid = "E6.drift_vanishes"
    rows = None if homog is None else homog[homog.kind == "drift_check"]
    if rows is None or rows.empty:
        return not_testable(cid, "no drift check in this run")
    row = rows.iloc[0]
    return exact(cid, float(row.value), method=f"z-score over {int(row.draws)} independent "
                 "weight draws (no interval)", n=int(row.draws),
                 note="one layer from the homogenization study's start")


def _ballistic(homog: pd.DataFrame | None, fit_last: int, resamples: int) -> list[Measurement]:
    ids = ("E6.ballistic_rate_printed", "E6.ballistic_rate_corrected",
           "E6.ballistic_deterministic")
    finals = {} if homog is None else homog_finals(homog, "homog_ballistic")
    start = np.array([]) if homog is None else homog_limit_final(homog, "homog_ballistic")
    if len(finals) < 2 or len(start) == 0:
        return [not_testable(cid, "needs at least two ballistic depths and the start")
                for cid in ids]
    keys = sorted(finals)[-fit_last:]
    depths = np.array([L for L, _ in keys], float)
    columns = [finals[k] for k in keys]
    note = f"depths {', '.join(str(int(L)) for L in depths)}"

    def gap_slope(cols: list[np.ndarray]) -> float:
        return loglog_slope(depths, [abs(c.mean() - start[0]) for c in cols])

    def spread_slope(cols: list[np.ndarray]) -> float:
        return loglog_slope(depths, [c.std(ddof=1) if len(c) > 1 else math.nan for c in cols])

    gap_printed = _runs_measure(ids[0], columns, gap_slope, note, resamples)
    gap_corrected = replace(gap_printed, id=ids[1])
    return [gap_printed, gap_corrected,
            _runs_measure(ids[2], columns, spread_slope, note, resamples)]


def _diffusive(homog: pd.DataFrame | None, resamples: int) -> list[Measurement]:
    ids = ("E6.diffusive_limit", "E6.diffusive_common_noise", "E6.heads_limit")
    if homog is None:
        return [not_testable(cid, "no homogenization table") for cid in ids]
    limit = homog_limit_final(homog, "homog_diffusive")
    out = []
    for cid, study, what in [(ids[0], "homog_diffusive", "mean"),
                             (ids[1], "homog_diffusive", "spread"),
                             (ids[2], "homog_heads", "mean")]:
        finals = homog_finals(homog, study)
        if not finals or len(limit) < 2:
            out.append(not_testable(cid, f"no {study} runs or no limit in this run"))
            continue
        (L, H) = max(finals)
        note = f"L = {L}, H = {H}, against the Euler–Maruyama limit"
        if what == "mean":
            def stat(cols): return float(cols[0].mean() - cols[1].mean())
        else:
            def stat(cols): return float(cols[0].std(ddof=1) / cols[1].std(ddof=1))
        out.append(_runs_measure(cid, [finals[(L, H)], limit], stat, note, resamples))
    return out


# --- thm:clustering_small_beta ----------------------------------------------------------------

def _line_slopes(x: np.ndarray, lines: list[np.ndarray], y: np.ndarray) -> float:
    """Largest least-squares slope of log y against log x over the lines (index arrays)."""
    slopes = []
    for js in lines:
        if not np.all(np.isfinite(y[js]) & (y[js] > 0)):
            return math.nan
        slopes.append(loglog_slope(x[js], y[js]))
    return float(max(slopes))


def _small_beta(table: pd.DataFrame | None, resamples: int) -> list[Measurement]:
    ids = ("E6.small_beta_gap", "E6.small_beta_spread", "E6.small_beta_n_free")
    if table is None or table.empty:
        return [not_testable(cid, "no small-temperature study") for cid in ids]
    cells = small_beta_cells(table)
    keys = sorted(cells)  # (beta_rule, n, d); every cell has the same recorded times
    runs = min(cells[k][1].shape[0] for k in keys)
    later = cells[keys[0]][0] > 0
    m = np.stack([cells[k][1][:runs][:, later] for k in keys], axis=1)  # (runs, cells, times)
    u = np.stack([cells[k][2][later] for k in keys])  # (cells, times)
    d = np.array([k[2] for k in keys], float)
    grouped: dict[tuple, list[int]] = {}
    for j, (rule, n, _) in enumerate(keys):
        grouped.setdefault((rule, n), []).append(j)
    lines = [np.asarray(js) for js in grouped.values() if len(js) >= 2]
    pairs = []  # per (rule, d): the cells at the smallest and the largest n
    for rule, dim in sorted({(k[0], k[2]) for k in keys}):
        js = sorted((k[1], j) for j, k in enumerate(keys) if k[0] == rule and k[2] == dim)
        if len(js) >= 2:
            pairs.append((js[0][1], js[-1][1]))

    def gap(cols):
        return np.abs(cols[0].mean(0) - u).max(-1)

    def spread(cols):
        return cols[0].std(0, ddof=1).max(-1)

    def n_ratio(cols):
        rms = np.sqrt(((cols[0] - u) ** 2).mean(0)).max(-1)
        return float(max(rms[hi] / rms[lo] for lo, hi in pairs))

    note = (f"d = {', '.join(map(str, sorted({k[2] for k in keys})))}; n = "
            f"{', '.join(map(str, sorted({k[1] for k in keys})))}; {len(keys)} cells of "
            f"{runs} runs")
    out = []
    for cid, stat, ok in [(ids[0], lambda c: _line_slopes(d, lines, gap(c)), bool(lines)),
                          (ids[1], lambda c: _line_slopes(d, lines, spread(c)), bool(lines)),
                          (ids[2], n_ratio, bool(pairs))]:
        out.append(_runs_measure(cid, [m], stat, note, resamples) if ok else
                   not_testable(cid, "needs two dimensions per line" if cid != ids[2]
                                else "needs two token counts at a common d"))
    return out


# --- thm:clustering_random_init ---------------------------------------------------------------

def _simplex(table: pd.DataFrame | None, horizon_fraction: float,
             resamples: int) -> list[Measurement]:
    ids = ("E6.simplex_tracks_ode", "E6.simplex_which_drift")
    if table is None or table.empty:
        return [not_testable(cid, "no simplex study") for cid in ids]
    cells = simplex_cells(table)
    ds = sorted(cells)
    runs = min(cells[d]["overlap"].shape[0] for d in ds)
    overlap = np.stack([cells[d]["overlap"][:runs] for d in ds], axis=1)  # (runs, d, times)
    dev = np.stack([cells[d]["dev"][:runs] for d in ds], axis=1)
    tau = cells[ds[0]]["tau"]
    printed = np.stack([cells[d]["printed"] for d in ds])  # (d, times)
    step = np.stack([cells[d]["corrected"] for d in ds]) - printed
    horizon = horizon_fraction * float(tau.max())
    early = (tau > 0) & (tau <= horizon + 1e-12)

    def tracks(cols):
        rms = np.sqrt((cols[1].max(axis=-1) ** 2).mean(0))  # per d
        return loglog_slope(np.asarray(ds, float), rms)

    def which(cols):
        sim = cols[0].mean(0)
        den = float(np.sum(step[:, early] ** 2))
        return float(np.sum((sim - printed)[:, early] * step[:, early]) / den) if den else math.nan

    note = f"d = {', '.join(map(str, ds))}"
    first = (not_testable(ids[0], "needs at least two dimensions") if len(ds) < 2
             else _runs_measure(ids[0], [overlap, dev], tracks, note, resamples))
    return [first, _runs_measure(ids[1], [overlap, dev], which, f"{note}; τ ≤ {horizon:g}",
                                 resamples)]


# --- thm:large_beta_meta ----------------------------------------------------------------------

def _large_beta(table: pd.DataFrame | None, resamples: int) -> list[Measurement]:
    ids = ("E6.large_beta_slowdown", "E6.large_beta_coefficient", "E6.large_beta_pm1",
           "E6.large_beta_arcsin")
    if table is None or table.empty:
        return [not_testable(cid, "no large-temperature study") for cid in ids]
    out = []
    ds, passage = passage_matrix(table, 0.0)
    if len(ds) < 2:
        out.append(not_testable(ids[0], "needs at least two dimensions and pairs from R = 0"))
    else:
        out.append(_runs_measure(
            ids[0], [passage[:, j] for j in range(len(ds))],
            lambda cols: loglog_slope(ds, [np.median(c) for c in cols]),
            f"d = {', '.join(str(int(d)) for d in ds)}; move {table.move.iloc[0]:g}", resamples))

    kernel = table[table.kind == "kernel"]
    if kernel.empty:
        out.append(not_testable(ids[1], "no kernel estimate"))
    else:
        top = kernel[kernel.d == kernel.d.max()]
        value = float(top.k.mean())
        se = float(np.sqrt((top.k_se**2).sum()) / len(top))
        out.append(Measurement(
            ids[1], value, f"mean ± 1.96 standard errors over {int(top.samples.iloc[0])} "
            "independent draws of A per overlap", int(top.samples.iloc[0]), "given",
            interval=(value - 1.96 * se, value + 1.96 * se),
            note=f"d = {int(top.d.iloc[0])}; overlaps "
                 f"{', '.join(f'{u:g}' for u in top.overlap)}"))

    out += _fractions(table, "printed", ids[2:], resamples)
    return out


def _fractions(table: pd.DataFrame, label: str, ids: tuple[str, str],
               resamples: int) -> list[Measurement]:
    """The pairs' fraction near ±1 from R(0) = 0 and with R > 0 from R(0) = 1/2 at the last
    time, largest d, minus those of the overlap SDE ``label`` (its rows in the table)."""
    out = []
    near = float(table.near.iloc[0]) if "near" in table else 0.9
    for cid, u0, event, column in [(ids[0], 0.0, lambda r: np.abs(r) >= near, "p_near"),
                                   (ids[1], 0.5, lambda r: r > 0, "p_pos")]:
        finals = final_overlaps(table, u0)
        sde = (table[(table.kind == "sde") & (table.sde == label) & np.isclose(table.u0, u0)]
               if "sde" in table else table.iloc[:0])
        if not finals or sde.empty:
            out.append(not_testable(cid, f"no pairs or no {label} SDE from R(0) = {u0:g}"))
            continue
        d = max(finals)
        predicted = float(sde_final(table, label, u0)[column])
        out.append(_runs_measure(
            cid, [finals[d]], lambda cols, e=event, p=predicted: float(e(cols[0]).mean() - p),
            f"d = {d}, τ = {table.t_end.iloc[0]:g}·d; {label} SDE: {predicted:.3f}", resamples))
    return out


# --- ours: diagnostics of thm:large_beta_meta (derivation note, section 7) ---------------------

def _coefficient_derived(table: pd.DataFrame) -> Measurement:
    """Largest over d of |mean Monte Carlo k(d) − mean derived k_d| with a joint 95% interval:
    per d a normal interval of the gap (Bonferroni over the d's), the bounds of |gap| combined
    by the maximum."""
    cid = "E6.large_beta_coefficient_derived"
    kernel = table[table.kind == "kernel"] if "kind" in table else table.iloc[:0]
    if kernel.empty or "k_derived" not in kernel:
        return not_testable(cid, "no kernel estimate or no derived coefficient")
    rows = []
    for d, g in kernel.groupby("d"):
        se = float(np.sqrt((g.k_se**2).sum()) / len(g))
        rows.append((int(d), float(g.k.mean() - g.k_derived.mean()), se))
    z = NormalDist().inv_cdf(1 - (1 - LEVEL) / (2 * len(rows)))
    value = max(abs(gap) for _, gap, _ in rows)
    lows, highs = [], []
    for _, gap, se in rows:
        lo, hi = gap - z * se, gap + z * se
        lows.append(0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi)))
        highs.append(max(abs(lo), abs(hi)))
    samples = int(kernel.samples.min())
    return Measurement(
        cid, value, f"joint 95% interval: per d mean ± {z:.2f} standard errors (Bonferroni over "
        f"{len(rows)} dimensions) over {samples} independent draws of A per overlap, bounds of "
        "|gap| combined by the maximum", samples, "given", interval=(max(lows), max(highs)),
        note="gap per d: " + ", ".join(f"d = {d}: {gap:+.3f}" for d, gap, _ in rows)
             + f"; overlaps {', '.join(f'{u:g}' for u in sorted(kernel.overlap.unique()))}")


def _large_beta_derived(table: pd.DataFrame | None, resamples: int) -> list[Measurement]:
    ids = ("E6.large_beta_coefficient_derived", "E6.large_beta_pm1_derived",
           "E6.large_beta_arcsin_derived")
    if table is None or table.empty:
        return [not_testable(cid, "no large-temperature study") for cid in ids]
    return [_coefficient_derived(table)] + _fractions(table, "derived", ids[1:], resamples)


# --- ours: the antipodal heuristic ------------------------------------------------------------

def _antipodal(table: pd.DataFrame | None, collapsed: float, resamples: int) -> Measurement:
    cid = "E6.antipodal_heuristic"
    if table is None or table.empty or "exponent" not in table:
        return not_testable(cid, "no antipodal study")
    final, boundary = table[table.kind == "final"], table[table.kind == "boundary"]
    if final.empty or boundary.empty:
        return not_testable(cid, "no antipodal runs or exponents")
    beta = float(final.beta.iloc[0])
    grid = boundary.beta.unique()
    nearest = grid[np.argmin(np.abs(grid - beta))]
    sign = boundary[np.isclose(boundary.beta, nearest)].set_index("d").exponent
    two = {int(d): ((g.min_abs_gram > collapsed) & (g.inner <= collapsed)).to_numpy(float)
           for d, g in final.sort_values("run").groupby("d")}
    negative = [d for d in two if sign.get(d, np.nan) < 0]
    positive = [d for d in two if sign.get(d, np.nan) > 0]
    if not negative or not positive:
        return not_testable(cid, f"needs dimensions on both sides of the exponent's sign change "
                            f"at β = {nearest:g}")
    columns = [two[d] for d in negative + positive]
    k = len(negative)

    def stat(cols):
        return float(np.mean([c.mean() for c in cols[:k]]) - np.mean([c.mean() for c in cols[k:]]))

    return _runs_measure(cid, columns, stat, f"exponent < 0 at d = {negative}, > 0 at d = "
                         f"{positive} (β = {beta:g})", resamples)


def measure(tables: dict[str, pd.DataFrame | None], settings: dict | None = None,
            resamples: int = RESAMPLES) -> list[Measurement]:
    """One Measurement per id in IDS, from E6's collected tables.

    tables: "homog", "small_beta", "simplex", "large_beta", "antipodal" (a missing or empty
    table makes its claims not testable). settings: the config's ``particles`` block (read:
    ``homogenization.fit_last``, ``simplex.drift_horizon``, ``antipodal.collapsed``).
    """
    settings = settings or {}
    hom = settings.get("homogenization", {})
    simplex = settings.get("simplex", {})
    antipodal = settings.get("antipodal", {})
    out = [_drift(tables.get("homog"))]
    out += _ballistic(tables.get("homog"), hom.get("fit_last", 4), resamples)
    out += _diffusive(tables.get("homog"), resamples)
    out += _small_beta(tables.get("small_beta"), resamples)
    out += _simplex(tables.get("simplex"), simplex.get("drift_horizon", 1 / 3), resamples)
    out += _large_beta(tables.get("large_beta"), resamples)
    out += _large_beta_derived(tables.get("large_beta"), resamples)
    out.append(_antipodal(tables.get("antipodal"), antipodal.get("collapsed", 0.99), resamples))
    assert tuple(m.id for m in out) == IDS, [m.id for m in out]
    return out
