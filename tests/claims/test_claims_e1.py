"""E1's claim statistics, fed synthetic sweeps built to land in each verdict."""

import math

import numpy as np
import pandas as pd
import pytest

from rankcollapse.claims import e1, judge, load_registry

from conftest import ROOT

REGISTRY = load_registry(ROOT / "src/rankcollapse/claims/claims.yaml")
FLOOR, MAX_R = 1e-13, 0.9


def sweep(ks: dict[str, list[float]], samples: int = 3, layers: int = 12) -> pd.DataFrame:
    """Residual sequences r_{l+1} = e^c r_l^k, one exponent k per (variant, seed)."""
    rng = np.random.default_rng(0)
    rows = []
    for variant, per_seed in ks.items():
        for seed, k in enumerate(per_seed):
            c = 0.0 if k > 1.05 else math.log(0.8)  # k ~ 1 needs a decay factor to move
            for sample in range(samples):
                r = 0.4 + 0.2 * rng.random()
                for layer in range(layers + 1):
                    rows.append({"variant": variant, "seed": seed, "sample": sample,
                                 "layer": layer, "r": max(r, 1e-300)})
                    r = math.exp(c) * r**k
    return pd.DataFrame(rows)


def verdicts(table: pd.DataFrame) -> dict[str, str]:
    return {m.id: judge(REGISTRY[m.id], m).verdict
            for m in e1.measure(table, "r", FLOOR, MAX_R, resamples=300)}


# Pooled fits weigh the fast-collapsing seeds most (they span more decades of r): these mixtures
# put the estimate inside the range and part of the bootstrap interval outside it.
SPREAD_LOW = [2.55, 3.5, 3.5, 3.5, 3.5, 2.55, 3.5, 3.5]
MOSTLY_SINGLE = [1.0] * 6 + [1.3] * 2
SOME_FAST = [1.0] * 7 + [1.25]
CASES = {  # claim: {verdict: per-seed exponents of the claim's variant}
    "E1.san_doubly_exponential": {"reproduced": [3.0] * 6, "partly": MOSTLY_SINGLE,
                                  "not reproduced": [0.9] * 6},
    "E1.san_cubic_rate": {"reproduced": [3.4] * 6, "partly": SPREAD_LOW,
                          "not reproduced": [2.2] * 6},
    "E1.skip_prevents": {"reproduced": [1.0] * 6, "partly": SOME_FAST,
                         "not reproduced": [2.0] * 6},
    "E1.mlp_does_not_prevent": {"reproduced": [2.5] * 6, "partly": MOSTLY_SINGLE,
                                "not reproduced": [0.8] * 6},
    "E1.layernorm_does_not_prevent": {"reproduced": [2.5] * 6, "partly": MOSTLY_SINGLE,
                                      "not reproduced": [0.8] * 6},
}


def test_ids_match_the_registry():
    assert set(e1.IDS) == {cid for cid, s in REGISTRY.items() if s.experiment == "E1"}


@pytest.mark.parametrize("claim", sorted(CASES))
@pytest.mark.parametrize("expected", ["reproduced", "partly", "not reproduced"])
def test_each_claim_lands_in_each_verdict(claim, expected):
    variant = e1.VARIANT[claim]
    table = sweep({variant: CASES[claim][expected], "other": [3.0] * 6})
    assert verdicts(table)[claim] == expected


def test_a_missing_variant_is_not_testable():
    got = verdicts(sweep({"other": [3.0] * 6}))
    assert set(got) == set(e1.IDS) and set(got.values()) == {"not testable"}


def test_with_fewer_than_five_seeds_the_interval_is_their_range():
    m = next(m for m in e1.measure(sweep({"san": [3.0, 3.2, 3.4]}), "r", FLOOR, MAX_R, 100)
             if m.id == "E1.san_cubic_rate")
    assert m.interval_kind == "range" and m.n == 3 and "range of 3 seeds" in m.method
    assert judge(REGISTRY[m.id], m).interval == pytest.approx((3.0, 3.4))


def test_the_fit_range_has_one_home():
    """The probe (which reads no config) fits E1's exponent over the range the workflow's config
    gives by default: both are claims.any_model.MAX_RESIDUAL."""
    import yaml

    from rankcollapse.claims import any_model

    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    default = schema["properties"]["fit"]["properties"]["max_residual"]["default"]
    shipped = yaml.safe_load((ROOT / "workflow/config/default.yaml").read_text())["fit"]
    assert default == shipped["max_residual"] == any_model.MAX_RESIDUAL
