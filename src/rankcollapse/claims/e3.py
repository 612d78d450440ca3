"""E3's claims: circular trajectories of one layer applied recurrently (Dong et al. 2021, §4).

Input: the per-roll-out collapse times (`circle.collapse_steps`). A trained layer (setup,
width, seed) is the unit of replication; its time to collapse is the upper median over its
start pairs, a roll-out that does not collapse counting as its length + 1, so a layer has
collapsed when more than half of its roll-outs have.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rankcollapse import references
from rankcollapse.claims.measurement import Measurement, at_scale, not_testable, over_runs

PAPER_IDS = ("E3.no_skip_collapses", "E3.skip_prevents_collapse", "E3.mlp_counteracts",
             "E3.wider_collapses_faster", "E3.no_skip_collapses_attention_only",
             "E3.skip_prevents_collapse_attention_only")
# Diagnostics: the original code's layers (workflow/references/d21_original.yaml) ...
REFERENCE = ("E3.reference_mlp_counteracts", "E3.reference_no_skip_collapses")
# ... and ours trained at least LONG_STEPS steps: diagnostic -> the paper claim it restates.
LONG_STEPS = 3570
LONG_TRAINING = {"E3.long_training_mlp_counteracts": "E3.mlp_counteracts",
                 "E3.long_training_no_skip_collapses": "E3.no_skip_collapses"}
IDS = (*PAPER_IDS, *REFERENCE, *LONG_TRAINING)
# claim -> the setups whose layers it pools (every width)
SHARE_SETUPS = {
    "E3.no_skip_collapses": ("ln",),
    "E3.skip_prevents_collapse": ("ln_skip", "ln_skip_mlp"),
    "E3.no_skip_collapses_attention_only": ("attn",),
    "E3.skip_prevents_collapse_attention_only": ("attn_skip",),
}
NO_SKIP_ORIGINAL = ("ln", "ln_mlp")


def layer_times(rollouts: pd.DataFrame) -> pd.DataFrame:
    """One row per trained layer (setup, width, seed): time_to_collapse (the upper median over
    its start pairs, no collapse = last step + 1), collapsed (that time within the roll-out),
    and the share of its start pairs that collapsed."""
    rows = []
    for (setup, width, seed), t in rollouts.groupby(["setup", "width", "seed"], sort=False):
        last = int(t.last_step.max())
        times = t.collapse_step.fillna(last + 1).to_numpy(float)
        time = float(np.quantile(times, 0.5, method="higher"))
        rows.append({"setup": setup, "width": int(width), "seed": int(seed),
                     "protocol": t.protocol.iloc[0], "skip": bool(t.skip.iloc[0]),
                     "mlp": bool(t.mlp.iloc[0]), "time_to_collapse": time,
                     "collapsed": time <= last, "share_collapsed": float(t.collapse_step.notna()
                                                                         .mean()),
                     "last_step": last})
    return pd.DataFrame(rows)


def _share(runs: list) -> float:
    return float(np.mean(runs))


def _ratio(num: str, den: str):
    """Mean time of the `num` entries over the mean of the `den` entries, over runs that are
    dicts holding both."""
    def statistic(runs: list[dict]) -> float:
        both = [r for r in runs if num in r and den in r]
        if not both:
            return float("nan")
        return float(np.mean([r[num] for r in both]) / np.mean([r[den] for r in both]))
    return statistic


def measure(rollouts: pd.DataFrame, resamples: int = 1000, reference: dict | None = None,
            steps: int | None = None) -> list[Measurement]:
    """rollouts: circle.collapse_steps of E3's table; reference: the original code's figures
    (references.load; None: their diagnostics are not testable); steps: the steps each circle
    layer trained in this run (circle.steps). One Measurement per id in IDS, in order."""
    out = _measure_layers(layer_times(rollouts), resamples)
    theirs = references.e3_layers(reference) if reference else pd.DataFrame()
    source = references.provenance(reference) if reference else ""
    for cid, measured in zip(REFERENCE, (
            mlp_delay(theirs, resamples, "E3.reference_mlp_counteracts", "layers of the "
                      "original code", source),
            collapse_share(theirs, ("ln",), resamples, "E3.reference_no_skip_collapses",
                           "layers of the original code", source)), strict=True):
        out[cid] = measured
    for cid, paper in LONG_TRAINING.items():
        out[cid] = at_scale(cid, out[paper], steps, LONG_STEPS, "the circle layers' training "
                                                                "(steps)")
    return [out[cid] for cid in IDS]


def collapse_share(layers: pd.DataFrame, setups: tuple, resamples: int, cid: str,
                   unit: str = "trained layers", source: str = "") -> Measurement:
    """Share of the layers of `setups` (every width) that collapse, over layers."""
    mine = layers[layers.setup.isin(setups)] if len(layers) else layers
    if mine.empty:
        return not_testable(cid, f"setups {list(setups)} not in this run")
    units = {(r.setup, r.width, r.seed): float(r.collapsed) for r in mine.itertuples()}
    return over_runs(cid, units, _share, resamples, unit=unit,
                     note=f"{', '.join(setups)} at widths {sorted(mine.width.unique())}"
                          + (f"; {source}" if source else ""))


def mlp_delay(layers: pd.DataFrame, resamples: int, cid: str,
              unit: str = "seed × width pairs of layers", source: str = "") -> Measurement:
    """Mean time to collapse of ln_mlp layers over that of ln layers, paired by seed and width."""
    if not len(layers) or not {"ln", "ln_mlp"} <= set(layers.setup):
        return not_testable(cid, "needs setups ln and ln_mlp")
    mine = layers[layers.setup.isin(("ln", "ln_mlp"))]
    units = {key: dict(zip(t.setup, t.time_to_collapse, strict=True))
             for key, t in mine.groupby(["width", "seed"])}
    return over_runs(cid, units, _ratio("ln_mlp", "ln"), resamples,
                     unit=unit if "pairs" in unit else f"seed × width pairs of {unit}",
                     note=f"widths {sorted(mine.width.unique())}"
                          + (f"; {source}" if source else ""))


def _measure_layers(layers: pd.DataFrame, resamples: int) -> dict[str, Measurement]:
    """The paper's and our own E3 claims (PAPER_IDS) from our layers."""
    out = {}
    for cid, setups in SHARE_SETUPS.items():
        out[cid] = collapse_share(layers, setups, resamples, cid)
    out["E3.mlp_counteracts"] = mlp_delay(layers, resamples, "E3.mlp_counteracts")
    cid = "E3.wider_collapses_faster"
    mine = layers[layers.setup.isin(NO_SKIP_ORIGINAL)]
    widths = sorted(mine.width.unique())
    if len(widths) < 2:
        out[cid] = not_testable(cid, "needs at least two widths of a no-skip original setup")
    else:
        narrow, wide = widths[0], widths[-1]
        units = {}
        for seed, t in mine.groupby("seed"):
            by_width = t.groupby("width").time_to_collapse.mean()
            if {narrow, wide} <= set(by_width.index):
                units[int(seed)] = {"wide": by_width[wide], "narrow": by_width[narrow]}
        out[cid] = (over_runs(cid, units, _ratio("wide", "narrow"), resamples,
                              note=f"d = {wide} over d = {narrow}; "
                                   f"{', '.join(sorted(set(mine.setup)))}")
                    if units else not_testable(cid, "no seed trained at both widths"))
    return out


def method_note(config: dict) -> str:
    """The report's methods paragraph on what E3's claims rest on (a definition, never a
    finding). The collapse threshold is the simulation's own (imported here, with torch)."""
    from rankcollapse.experiments.circle import COLLAPSE_FRACTION

    return (
        "Collapse (E3). A roll-out collapses when its two tokens come within "
        f"{COLLAPSE_FRACTION:.0%} of the data's pair distance 2r of each other and stay "
        "there, or when each token stays that close to its end point for at least three "
        "times as many steps as the data's own motion takes to cover that distance (the "
        "trajectory has shrunk to a point). The share is chosen from the paper's figure: "
        "at its scale (axes ±0.56 for r = 0.3) two points that close are drawn as one, "
        "while the data's two tokens stay 2r apart at every step. A trained layer's time to "
        "collapse is the upper median over its start pairs, a roll-out without collapse "
        "counting as its length + 1.")
