"""The particle studies of the `particles` block [KGR26]: their parameter points, planned from
the config. :func:`plan` turns the workflow config into ``{study: {point: params}}`` (the
studies: docs/e6_homogenized.md) and :func:`config_problems` checks the block's cross-field
settings.
"""

from __future__ import annotations

import math
import zlib

import numpy as np

TABLES: dict[str, tuple[str, ...]] = {
    "homog": ("homog_ballistic", "homog_diffusive", "homog_heads"),
    "small_beta": ("small_beta",),
    "simplex": ("simplex",),
    "large_beta": ("large_beta",),
    "maps": ("map_dn", "map_beta_n"),
    "antipodal": ("boundary", "antipodal"),
    "discrete": ("discrete",),
}

BETA_RULES = {"zero": lambda d: 0.0, "inv_sqrt_d": lambda d: 1.0 / math.sqrt(d)}
BOUNDARY_TOKENS = 2  # balanced antipodal groups: the exponent does not depend on n (even n)


def point_seed(seed: int, study: str, point: str) -> int:
    """A stable, distinct seed per (base seed, study, point); independent of the grid's order."""
    key = zlib.crc32(f"{study}/{point}".encode())
    return int(np.random.SeedSequence([seed, key]).generate_state(1, dtype=np.uint64)[0] >> 2)


def sub_seed(seed: int, *keys: int | str) -> int:
    """A seed per sub-simulation of a point (e.g. per d), stable under grid extension."""
    parts = [zlib.crc32(str(k).encode()) for k in keys]
    return int(np.random.SeedSequence([seed, *parts]).generate_state(1, dtype=np.uint64)[0] >> 2)


def record_every(steps: int, records: int) -> int:
    """Record every this many steps so that ``t = k / steps`` lies on the grid ``j / records``.

    With ``g = gcd(steps, records)`` the recorded fractions are ``j / g``, a subset of the
    ``1 / records`` grid, so curves of different depths share time points.
    """
    return steps // math.gcd(steps, records)


def heads_for_depth(L: int, exponent: float) -> int:
    """``H = ceil(L^exponent)``: heads growing with depth; ``exponent < 1/3`` keeps the diffusive
    theorem's ``H = o(L^{1/3})``."""
    return max(1, math.ceil(L**exponent - 1e-9))


def layers_for(T: float, dtau_d: float, d: int, records: int) -> int:
    """Layers reaching time ``T`` with steps ``dtau <= dtau_d / d`` (discretisation error of the
    overlaps stays below their ``1/d`` scale), rounded up to a multiple of ``records``."""
    L = math.ceil(T * d / dtau_d)
    return records * math.ceil(L / records)


def config_problems(particles: dict) -> list[str]:
    """Cross-field problems of a schema-valid ``particles`` block, one line each."""
    problems = []
    s, x, h = (particles.get(k, {}) for k in ("small_beta", "simplex", "homogenization"))
    if s.get("n") and s.get("d") and min(s["n"]) > min(s["d"]):
        problems.append(f"particles.small_beta.n: the smallest n ({min(s['n'])}) exceeds the "
                        f"smallest d ({min(s['d'])}); equal overlaps need d >= n")
    if s.get("n") and "m0" in s and s["m0"] <= 1 / min(s["n"]):
        problems.append(f"particles.small_beta.m0={s['m0']} must exceed 1/n = "
                        f"{1 / min(s['n']):.3g} for every n (positive overlaps)")
    if x.get("d") and "n" in x and x["n"] > min(x["d"]):
        problems.append(f"particles.simplex.n={x['n']} exceeds the smallest "
                        f"particles.simplex.d={min(x['d'])}: the simplex start needs d >= n")
    if "n" in x and "gamma0" in x and x["gamma0"] <= -1 / (x["n"] - 1):
        problems.append(f"particles.simplex.gamma0={x['gamma0']} must lie in "
                        f"({-1 / (x['n'] - 1):.3g}, 1) for n = {x['n']}")
    if h.get("depths") and h.get("fit_last", 0) > len(h["depths"]):
        problems.append(f"particles.homogenization.fit_last={h['fit_last']} exceeds the "
                        f"{len(h['depths'])} depths")
    return problems


def plan(particles: dict, init_sweep: dict) -> dict[str, dict[str, dict]]:
    """``{study: {point: params}}`` for the config's ``particles`` block (the ``init_sweep``
    block sets the discrete comparison). Every params dict is JSON-serialisable and holds its
    seed."""
    base = particles["seed"]
    norm = particles["head_norm"]
    h = particles["homogenization"]
    common = {"n": h["n"], "d": h["d"], "beta": h["beta"], "T": h["T"], "x0_seed": base,
              "head_norm": norm, "records": h["records"]}
    out: dict[str, dict[str, dict]] = {
        "homog_ballistic": {"all": {
            **common, "kind": "homog", "regime": "ballistic", "H": h["heads"],
            "depths": h["depths"], "runs": h["ballistic_runs"],
            "drift_draws": h["drift_draws"]}},
        "homog_diffusive": {"all": {
            **common, "kind": "homog", "regime": "diffusive", "H": h["heads"],
            "depths": h["depths"], "runs": h["runs"], "limit_runs": h["limit_runs"],
            "limit_steps": h["limit_steps"], "limit_samples": h["limit_samples"]}},
        "homog_heads": {"all": {
            **common, "kind": "homog", "regime": "diffusive", "H": None,
            "heads_exponent": h["heads_exponent"], "depths": h["heads_depths"],
            "runs": h["heads_runs"]}},
    }
    s = particles["small_beta"]
    out["small_beta"] = {
        rule: {"kind": "small_beta", "beta_rule": rule, "head_norm": norm,
               **{k: s[k] for k in ("d", "n", "m0", "T", "records", "runs", "dtau_d")}}
        for rule in s["beta_rules"]
    }
    x = particles["simplex"]
    out["simplex"] = {"all": {"kind": "simplex", "head_norm": norm, **x}}
    b = particles["large_beta"]
    out["large_beta"] = {"all": {"kind": "large_beta", "head_norm": norm, **b}}
    m = particles["maps"]
    grid = {"T": m["T"], "layers": m["layers"], "runs": m["runs"], "head_norm": norm}
    out["map_dn"] = {"all": {"kind": "map", **grid, "d": m["d"], "n": m["n"],
                             "beta": [m["beta_at"]]}}
    out["map_beta_n"] = {"all": {"kind": "map", **grid, "d": [m["d_at"]], "n": m["n"],
                                 "beta": m["beta"]}}
    a = particles["antipodal"]
    out["boundary"] = {"all": {
        "kind": "boundary", "d": sorted(set(a["d"]) | set(m["d"])), "n": BOUNDARY_TOKENS,
        "betas": np.linspace(0.0, a["boundary_beta_max"], a["boundary_betas"]).tolist(),
        "samples": a["boundary_samples"]}}
    out["antipodal"] = {"all": {
        "kind": "antipodal", "head_norm": norm,
        **{k: a[k] for k in ("d", "n", "beta", "T", "layers", "runs")}}}
    out["discrete"] = {
        "e1": {"kind": "trajectory", "regime": "unscaled", "n": init_sweep["tokens"],
               "d": init_sweep["width"], "H": init_sweep["heads"], "L": init_sweep["depth"],
               "eta": 1.0, "beta": init_sweep.get("temperature", 1.0), "T": None,
               # the init sweep's networks add their heads (concatenation, output projection)
               "head_norm": "sum", "runs": particles["discrete_runs"], "record_every": 1,
               "x0_seed": None}
    }
    for study, points in out.items():
        for point, params in points.items():
            params["seed"] = point_seed(base, study, point)
    return out


# --------------------------------------------------------------------------------------------
# running one point
# --------------------------------------------------------------------------------------------
