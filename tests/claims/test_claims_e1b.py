"""E1b's claim statistics, fed synthetic per-layer residuals built to land in each verdict."""

import numpy as np
import pandas as pd
import pytest

from rankcollapse.claims import e1b, judge, load_registry

from conftest import ROOT

REGISTRY = load_registry(ROOT / "src/rankcollapse/claims/claims.yaml")


def realarch(values: dict[tuple[str, str, int], list[float]]) -> pd.DataFrame:
    """Rows of the realarch table: per (model, ablation, layer) one value per seed, spread over
    4 sequences around it (the sequence mean is the seed's value)."""
    rows = []
    for (model, ablation, layer), per_seed in values.items():
        for seed, v in enumerate(per_seed):
            for j, offset in enumerate((-0.01, 0.01, -0.005, 0.005)):
                rows.append({"model": model, "ablation": ablation, "layer": layer, "seed": seed,
                             "sample": j, "weights": "init", "input": "random",
                             "relative_residual_comp": max(v + offset * v, 0.0)})
    return pd.DataFrame(rows)


def around(centre: float, spread: float, seeds: int = 6) -> list[float]:
    return list(centre + spread * np.linspace(-1, 1, seeds))


def test_ids_match_the_registry():
    assert set(e1b.IDS) == {cid for cid, s in REGISTRY.items() if s.experiment == "E1b"}


@pytest.mark.parametrize("claim", e1b.IDS)
@pytest.mark.parametrize("expected", ["reproduced", "partly", "not reproduced", "not testable"])
def test_each_claim_lands_in_each_verdict(claim, expected):
    spec = REGISTRY[claim]
    low, high = spec.low, spec.high
    mid, width = (low + high) / 2, high - low
    values = {
        "reproduced": around(mid, 0.1 * width),
        # the mean sits just inside the upper end; some seeds lie above it
        "partly": around(high - 0.05 * width, 0.6 * width),
        "not reproduced": around(high + 0.5 * width, 0.05 * width),
    }
    key = e1b.WHAT[claim]
    table = realarch({key: values[expected]} if expected != "not testable" else
                     {("bert", "none", 3): [0.5] * 3})
    m = next(m for m in e1b.measure(table, resamples=400) if m.id == claim)
    assert judge(spec, m).verdict == expected


def test_sequences_are_not_the_unit_of_replication():
    """Two seeds with many sequences each give a range over 2 runs, not a tight interval."""
    table = realarch({("bert", "san_skip", 12): [0.40, 0.50]})
    m = next(m for m in e1b.measure(table) if m.id == "E1b.bert_san_skip")
    assert m.n == 2 and m.interval_kind == "range" and m.samples == pytest.approx([0.40, 0.50])
