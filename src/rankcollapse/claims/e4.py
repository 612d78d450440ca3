"""E4's claims: token-similarity escalation per layer (Yu & Zhang), the digits blank-token
confound and the MLP's re-injection of the shared component.

Units of replication: the networks of one seed (E1's random networks for the Gaussian views).
A resample draws whole seeds; each drawn seed keeps all of its sequences and layers.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from rankcollapse.claims.any_model import layer_fits, measure_escalation, seed_means
from rankcollapse.claims.measurement import Measurement, exact, not_testable, over_runs

FITS = {  # claim: (view, variant, fit key)
    "E4.escalation_post_ln_init": ("init_gaussian", "post_ln", "rho"),
    "E4.escalation_post_ln_trained": ("trained", "post_ln", "rho"),
    "E4.linear_rate_log_reading": ("init_gaussian", "post_ln", "log_r2"),
    "E4.deescalation_holds_tdiv": ("init_gaussian", "post_ln_deesc", "rho"),
    "E4.deescalation_holds_tdiv_trained": ("trained", "post_ln_deesc", "rho"),
}
# Diagnostics of the de-escalation claims, on E4's own networks (digits test images):
# claim -> (view, variant, which t_sim: after the block, or after the attention sublayer).
DIAGNOSTICS = {
    "E4.deesc_after_attention_init": ("init_task", "post_ln_deesc", "after_attention"),
    "E4.deesc_after_attention_trained": ("trained", "post_ln_deesc", "after_attention"),
    "E4.deesc_both_branches_init": ("init_task", "post_ln_deesc_mlp", "block"),
    "E4.deesc_both_branches_trained": ("trained", "post_ln_deesc_mlp", "block"),
    "E4.deesc_without_mlp_init": ("init_task", "post_ln_deesc_nomlp", "block"),
    "E4.deesc_without_mlp_trained": ("trained", "post_ln_deesc_nomlp", "block"),
}
IDS = (*FITS, "E4.which_reading", "E4.spectral_gap", "E4.no_blank_tokens",
       "E4.centring_removes_layer0_similarity", "E4.mlp_reinjects_similarity", *DIAGNOSTICS)


def _seeds(table: pd.DataFrame) -> dict:
    return {int(seed): t for seed, t in table.groupby("seed")}


def _pooled(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """The resampled seeds' tables as one, each draw its own seed (a seed drawn twice counts
    twice in every mean)."""
    return pd.concat([t.assign(seed=i) for i, t in enumerate(tables)], ignore_index=True)


def reading_gap(units: list[tuple]) -> float:
    """R²(log t_div) − R²(t_sim linear) of the seeds' per-layer mean t_sim."""
    f = layer_fits(units, 1e-12)
    return f["log_r2"] - f["lin_r2"]


def median_lambda2(tables: list[pd.DataFrame]) -> float:
    return float(_pooled(tables).attn_lambda2.median())


def reinjection(tables: list[pd.DataFrame]) -> float:
    """Mean over layers >= 1 of t_sim after the block minus t_sim after its attention sublayer."""
    t = _pooled(tables)
    t = t[t.layer > 0]
    return float((t.token_similarity - t.token_similarity_after_attention).mean())


def similarity_ratio(units: list[dict]) -> float:
    """mean centred / mean raw of layer-0 t_sim (units: {"centred": t, "raw": t} per seed)."""
    centred = np.mean([u["centred"] for u in units])
    raw = np.mean([u["raw"] for u in units])
    return float(centred / raw) if raw > 0 else math.nan


def measure(views: dict[str, pd.DataFrame], floors: dict[str, float], blank_share: float | None,
            layer0: pd.DataFrame | None, resamples: int = 1000) -> list[Measurement]:
    """views: {"init_gaussian", "init_task", "trained"} per-layer tables (variant, seed, layer,
    token_similarity, attn_lambda2, token_similarity_after_attention for the task views);
    floors: t_div round-off floor per view; blank_share: share of all-zero digits patches with
    the configured features (None: not measured); layer0: per seed and features (centred / raw)
    the layer-0 t_sim of post-LN models at init (seed, features, token_similarity)."""
    out = []
    for cid, (view, variant, key) in FITS.items():
        t = views[view]
        t = t[t.variant == variant]
        if t.token_similarity.notna().sum() == 0:
            out.append(not_testable(cid, f"{variant} not measured ({view})"))
            continue
        out.append(measure_escalation(cid, t, key, floors[view], resamples,
                                      note=f"{variant}, {view}"))
    t = views["init_gaussian"]
    t = t[t.variant == "post_ln"]
    out.append(over_runs("E4.which_reading", seed_means(t), reading_gap, resamples)
               if len(t) else not_testable("E4.which_reading", "post_ln not measured at init"))
    # |λ₂| of a network whose tokens have collapsed is trivially 0 (uniform, rank-one attention),
    # so the spectral gap is measured on a variant that trains at every depth: pre-LN.
    t = views["trained"]
    t = t[(t.variant == "pre_ln") & (t.layer > 0)]
    out.append(over_runs("E4.spectral_gap", _seeds(t), median_lambda2, resamples)
               if len(t) and t.attn_lambda2.notna().any()
               else not_testable("E4.spectral_gap", "trained pre_ln not measured"))
    out.append(exact("E4.no_blank_tokens", blank_share, "exact count over every patch")
               if blank_share is not None
               else not_testable("E4.no_blank_tokens", "the task is not digits"))
    if layer0 is None or not {"centred", "raw"} <= set(layer0.features):
        out.append(not_testable("E4.centring_removes_layer0_similarity",
                                "needs layer-0 t_sim with centred and raw patches"))
    else:
        means = layer0.groupby(["seed", "features"]).token_similarity.mean()
        units = {int(s): means.loc[s].to_dict() for s in means.index.get_level_values(0).unique()}
        out.append(over_runs("E4.centring_removes_layer0_similarity", units, similarity_ratio,
                             resamples, note="post-LN models at init, digits test images"))
    t = views["init_task"]
    t = t[t.variant == "post_ln_deesc"]
    after = "token_similarity_after_attention"
    if after not in t or not t[after].notna().any():
        out.append(not_testable("E4.mlp_reinjects_similarity",
                                "post_ln_deesc's per-sublayer t_sim not measured"))
    else:
        out.append(over_runs("E4.mlp_reinjects_similarity", _seeds(t), reinjection, resamples,
                             note="post_ln_deesc at init on the task's test images"))
    for cid, (view, variant, where) in DIAGNOSTICS.items():
        t = views[view]
        t = t[t.variant == variant] if len(t) else t
        if where == "after_attention":  # the stream after each attention sublayer, layers >= 1
            if after not in t or not t[after].notna().any():
                out.append(not_testable(cid, f"{variant}'s per-sublayer t_sim not measured "
                                             f"({view})"))
                continue
            t = t[t.layer > 0].assign(token_similarity=t[after])
        if not len(t) or t.token_similarity.notna().sum() == 0:
            out.append(not_testable(cid, f"{variant} not in this run's E4 ({view}; add it to "
                                         "escalation.variants)"))
            continue
        out.append(measure_escalation(cid, t, "rho", floors[view], resamples,
                                      note=f"{variant}, {view}, t_sim "
                                           + ("after the attention sublayer" if where ==
                                              "after_attention" else "after the block")))
    return out
