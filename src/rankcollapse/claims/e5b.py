"""E5b's claims: rival depth fixes at the deepest depth (ours: a comparison the papers do not
make). Units of replication: the trained networks of one seed (every variant of a seed is
resampled together, so the comparison stays paired)."""

from __future__ import annotations

import math

import pandas as pd

from rankcollapse.claims.measurement import Measurement, not_testable, over_runs

FIXES = ("post_ln_deesc", "post_ln_center", "post_ln_scaled", "post_ln_deepnorm")
IDS = tuple(f"E5b.{fix}_{what}" for fix in FIXES
            for what in ("trains_deep", "less_similar_at_init"))
MIN_GAP = 0.05  # a post-LN -> pre-LN gap below this leaves nothing to recover (undefined)


def _means(units: list[dict]) -> dict:
    """Mean over the given runs of each variant's value (runs: {variant: value})."""
    keys = set().union(*units) if units else set()
    return {k: sum(u[k] for u in units if k in u) / max(1, sum(k in u for u in units))
            for k in keys}


def recovered_share(units: list[dict], fix: str) -> float:
    """(fix − post-LN) / (pre-LN − post-LN) of mean accuracy over the runs (seeds) given, each
    {variant: accuracy}; NaN when the gap is < MIN_GAP."""
    mean = _means(units)
    gap = mean.get("pre_ln", math.nan) - mean.get("post_ln", math.nan)
    if not gap >= MIN_GAP:
        return math.nan
    return float((mean.get(fix, math.nan) - mean["post_ln"]) / gap)


def similarity_ratio(units: list[dict], fix: str) -> float:
    """Mean t_sim at the last layer at initialisation, fix / post-LN (runs: {variant: t_sim})."""
    mean = _means(units)
    return float(mean.get(fix, math.nan) / mean.get("post_ln", math.nan))


def _per_seed(table: pd.DataFrame, value: str) -> dict:
    means = table.groupby(["seed", "variant"])[value].mean()
    return {seed: means.loc[seed].to_dict() for seed in means.index.get_level_values(0).unique()}


def measure(runs: pd.DataFrame, init: pd.DataFrame, resamples: int = 1000
            ) -> list[Measurement]:
    """runs: one row per trained network at the deepest depth (variant, seed, accuracy; see
    trained.final_accuracy); init: per-layer metrics of the same networks at initialisation
    (variant, seed, layer, token_similarity)."""
    out = []
    for fix in FIXES:
        cid = f"E5b.{fix}_trains_deep"
        present = set(runs.variant)
        if not {fix, "post_ln", "pre_ln"} <= present:
            out.append(not_testable(cid, f"needs {fix}, post_ln and pre_ln trained"))
        else:
            out.append(over_runs(cid, _per_seed(runs, "accuracy"),
                                 lambda r, fix=fix: recovered_share(r, fix),
                                 resamples, note=f"{fix} at depth {int(runs.depth.max())}"))
        cid = f"E5b.{fix}_less_similar_at_init"
        if not {fix, "post_ln"} <= set(init.variant):
            out.append(not_testable(cid, f"needs {fix} and post_ln at initialisation"))
        else:
            last = init[init.layer == init.layer.max()]
            out.append(over_runs(cid, _per_seed(last, "token_similarity"),
                                 lambda r, fix=fix: similarity_ratio(r, fix), resamples))
    return out
