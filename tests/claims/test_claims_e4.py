"""E4's claim statistics on synthetic per-layer tables built to land in each verdict."""

import numpy as np
import pandas as pd
import pytest

from rankcollapse.claims import e4, judge, load_registry

from conftest import ROOT

REGISTRY = load_registry(ROOT / "src/rankcollapse/claims/claims.yaml")
SEEDS = 6
LAYERS = 9
FLOORS = {"init_gaussian": 1e-12, "init_task": 1e-6, "trained": 1e-6}


def layers(variant, seed, t_div, lambda2=0.5, after=None):
    rows = []
    for layer in range(LAYERS):
        t_sim = 1.0 - t_div(layer)
        rows.append({"variant": variant, "seed": seed, "layer": layer, "token_similarity": t_sim,
                     "attn_lambda2": lambda2 if layer else np.nan,
                     "token_similarity_after_attention":
                         (t_sim - after if after is not None else t_sim) if layer else np.nan})
    return rows


def table(variant, rhos=None, t_div=None, lambda2=None, after=None):
    rows = []
    for seed in range(SEEDS):
        f = t_div if t_div is not None else (lambda layer, r=rhos[seed]: 0.5 * r ** layer)
        rows += layers(variant, seed, f, 0.5 if lambda2 is None else lambda2[seed],
                       None if after is None else after[seed])
    return pd.DataFrame(rows)


def views(**tables):
    empty = pd.DataFrame(columns=["variant", "seed", "layer", "token_similarity",
                                  "attn_lambda2", "token_similarity_after_attention"])
    return {v: tables.get(v, empty) for v in ("init_gaussian", "init_task", "trained")}


def judged(cid, v, blank=None, layer0=None):
    m = next(m for m in e4.measure(v, FLOORS, blank, layer0, resamples=400) if m.id == cid)
    return judge(REGISTRY[m.id], m)


def test_ids_match_the_registry():
    assert set(e4.IDS) == {cid for cid, s in REGISTRY.items() if s.experiment == "E4"}


ESCALATES = {"reproduced": [0.8] * SEEDS, "partly": [0.8] + [1.0] * 5,
             "not reproduced": [1.0] * SEEDS}
HOLDS = {"reproduced": [1.0] * SEEDS, "partly": [0.96] + [1.0] * 5,
         "not reproduced": [0.8] * SEEDS}


@pytest.mark.parametrize("expected", ["reproduced", "partly", "not reproduced"])
@pytest.mark.parametrize("cid", [c for c in e4.FITS if e4.FITS[c][2] == "rho"])
def test_rate_claims_land_in_each_verdict(cid, expected):
    view, variant, _ = e4.FITS[cid]
    rhos = (HOLDS if "deescalation" in cid else ESCALATES)[expected]
    assert judged(cid, views(**{view: table(variant, rhos)})).verdict == expected


def test_log_reading_and_which_reading():
    geometric = views(init_gaussian=table("post_ln", [0.5] * SEEDS))
    straight = views(init_gaussian=table("post_ln", t_div=lambda layer: 0.9 - 0.1 * layer))
    zigzag = views(init_gaussian=table("post_ln", t_div=lambda layer: 0.5 if layer % 2 else 0.05))
    for cid in ("E4.linear_rate_log_reading", "E4.which_reading"):
        assert judged(cid, geometric).verdict == "reproduced"
    assert judged("E4.linear_rate_log_reading", zigzag).verdict == "not reproduced"
    assert judged("E4.which_reading", straight).verdict == "not reproduced"


@pytest.mark.parametrize("expected,values", [
    ("reproduced", [0.5] * SEEDS), ("partly", [0.5] * 4 + [0.95] * 2),
    ("not reproduced", [0.95] * SEEDS)])
def test_spectral_gap(expected, values):
    v = views(trained=table("pre_ln", [0.8] * SEEDS, lambda2=values))
    assert judged("E4.spectral_gap", v).verdict == expected


def test_blank_tokens_check():
    assert judged("E4.no_blank_tokens", views(), blank=0.0).verdict == "reproduced"
    assert judged("E4.no_blank_tokens", views(), blank=0.27).verdict == "not reproduced"
    assert judged("E4.no_blank_tokens", views()).verdict == "not testable"


@pytest.mark.parametrize("expected,centred", [
    ("reproduced", [0.05] * SEEDS), ("partly", [0.05] * 4 + [0.4] * 2),
    ("not reproduced", [0.35] * SEEDS)])
def test_centring_ratio(expected, centred):
    layer0 = pd.DataFrame([{"seed": s, "features": f, "token_similarity": v}
                           for s in range(SEEDS)
                           for f, v in (("centred", centred[s]), ("raw", 0.4))])
    cid = "E4.centring_removes_layer0_similarity"
    assert judged(cid, views(), layer0=layer0).verdict == expected
    assert judged(cid, views()).verdict == "not testable"


@pytest.mark.parametrize("expected,after", [
    ("reproduced", [0.1] * SEEDS), ("partly", [0.0] * 4 + [0.1] * 2),
    ("not reproduced", [0.0] * SEEDS)])
def test_mlp_reinjection(expected, after):
    v = views(init_task=table("post_ln_deesc", [0.9] * SEEDS, after=after))
    assert judged("E4.mlp_reinjects_similarity", v).verdict == expected


def test_missing_variants_are_not_testable():
    for m in e4.measure(views(), FLOORS, None, None, 50):
        assert judge(REGISTRY[m.id], m).verdict == "not testable", m.id


# --- diagnostics of the de-escalation claims ---------------------------------------

@pytest.mark.parametrize("expected", ["reproduced", "partly", "not reproduced"])
@pytest.mark.parametrize("cid", list(e4.DIAGNOSTICS))
def test_diagnostics_land_in_each_verdict(cid, expected):
    view, variant, where = e4.DIAGNOSTICS[cid]
    if where == "after_attention":
        # t_div after the block shrinks at 0.8 per layer in every case; only the stream after
        # the attention sublayer (t_sim lower by `after`) decides: its t_div = 0.5 rho^l + after
        t = table(variant, [0.8] * SEEDS, after=[0.0] * SEEDS)
        rho = HOLDS[expected]
        mid = [1.0 - 0.5 * rho[seed] ** layer for seed in range(SEEDS) for layer in range(LAYERS)]
        t["token_similarity_after_attention"] = np.where(t.layer > 0, mid, np.nan)
    else:
        t = table(variant, HOLDS[expected])
    other = table("post_ln_deesc", [0.5] * SEEDS) if variant != "post_ln_deesc" else None
    tables = {view: t if other is None else pd.concat([t, other], ignore_index=True)}
    assert judged(cid, views(**tables)).verdict == expected


def test_diagnostics_name_the_missing_variant():
    v = views(init_task=table("post_ln_deesc", [1.0] * SEEDS))
    r = judged("E4.deesc_both_branches_init", v)
    assert r.verdict == "not testable" and "escalation.variants" in r.measurement.note
    no_trace = table("post_ln_deesc", [1.0] * SEEDS).drop(
        columns="token_similarity_after_attention")
    r = judged("E4.deesc_after_attention_init", views(init_task=no_trace))
    assert r.verdict == "not testable" and "per-sublayer" in r.measurement.note
