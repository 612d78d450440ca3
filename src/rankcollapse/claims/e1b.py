"""E1b's claims: residuals of real architectures at random initialisation against the values
read off Dong et al.'s Fig. 2. The unit of replication is the random network (seed): each seed's
value is its mean over sequences of random token ids."""

from __future__ import annotations

import pandas as pd

from rankcollapse.claims.measurement import Measurement, not_testable, over_runs

METRIC = "relative_residual_comp"
LAST = 12  # every model here (BERT-, ALBERT-, XLNet-base) has 12 layers
# claim id -> (model, ablation, layer)
WHAT = {
    "E1b.bert_san_layer1": ("bert", "san", 1),
    "E1b.bert_san_collapses": ("bert", "san", LAST),
    "E1b.bert_san_skip": ("bert", "san_skip", LAST),
    "E1b.bert_transformer": ("bert", "transformer", LAST),
    "E1b.albert_san_collapses": ("albert", "san", LAST),
    "E1b.albert_san_skip": ("albert", "san_skip", LAST),
    "E1b.albert_transformer": ("albert", "transformer", LAST),
    "E1b.xlnet_san_collapses": ("xlnet", "san", LAST),
    "E1b.xlnet_san_skip": ("xlnet", "san_skip", LAST),
    "E1b.xlnet_transformer": ("xlnet", "transformer", LAST),
    "E1b.albert_san_skip_2021_ablation": ("albert", "san_skip_2021", LAST),
}
IDS = tuple(WHAT)


def per_seed(table: pd.DataFrame, metric: str = METRIC) -> pd.DataFrame:
    """Mean over the random-id sequences of each (model, ablation, seed, layer), random init."""
    t = table[(table.weights == "init") & (table.input == "random")]
    return t.groupby(["model", "ablation", "seed", "layer"], as_index=False)[metric].mean()


def measure(table: pd.DataFrame, resamples: int = 1000) -> list[Measurement]:
    """One Measurement per E1b claim from the realarch table (columns model, ablation, weights,
    input, seed, layer, relative_residual_comp)."""
    seeds = per_seed(table)
    out = []
    for cid, (model, ablation, layer) in WHAT.items():
        t = seeds[(seeds.model == model) & (seeds.ablation == ablation) & (seeds.layer == layer)]
        if t.empty:
            out.append(not_testable(cid, f"{model} / {ablation} at layer {layer} is not in "
                                         "this run"))
            continue
        units = dict(zip(t.seed, t[METRIC], strict=True))
        out.append(over_runs(cid, units, lambda v: sum(v) / len(v), resamples,
                             note=f"{model}, {ablation}, layer {layer}"))
    return out
