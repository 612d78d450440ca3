"""E2's claims: which paths carry the computation (Dong et al. 2021, §4).

Input: E2's path table (one block of rows per trained network, `paths.measure_saved`). Dong et
al.'s network is the post-LN one with biases ("post_ln" rows with bias), judged by the original
sampled-path protocol; our exact path sums run on the LN-free, bias-free network ("ln_free").
Every quantity is a gain share (a − m) / (full − m): accuracy a above the majority-class rate m
of the evaluation labels, as a share of the full network's accuracy above it, each a mean over
trained networks. The unit of replication is the trained network (its seed); a resample whose
mean network is less than MIN_GAIN above m (or holds a diverged one) is undefined and counts
against the claim.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from rankcollapse import references
from rankcollapse.claims.measurement import Measurement, at_scale, not_testable, over_runs

TASKS = ("memorisation", "sorting", "hull")
PAPER_IDS = tuple(f"E2.{what}_{task}"
                  for what in ("sampled_short_paths", "sampled_long_paths", "full_model",
                               "exact_short_paths")
                  for task in TASKS)
# Diagnostics. The original code's networks (workflow/references/d21_original.yaml):
# claim -> (task, the reference's settings_match, statistic: short share or long drop).
REFERENCE = {
    "E2.reference_short_paths_hull": ("hull", "ours", "short"),
    "E2.reference_short_paths_hull_original_training": ("hull", "theirs", "short"),
    "E2.reference_long_paths_hull": ("hull", "ours", "drop"),
    "E2.reference_long_paths_hull_original_training": ("hull", "theirs", "drop"),
    "E2.reference_short_paths_sorting": ("sorting", "ours", "short"),
}
# Our networks trained at least LONG_STEPS batches: diagnostic -> the paper claim it restates.
LONG_STEPS = 2400
LONG_TRAINING = {
    **{f"E2.long_training_short_paths_{task}": f"E2.sampled_short_paths_{task}"
       for task in TASKS},
    "E2.long_training_long_paths_hull": "E2.sampled_long_paths_hull",
}
IDS = (*PAPER_IDS, *REFERENCE, *LONG_TRAINING)
SHORT = (1, 2)  # the short path lengths of the claims
SAMPLES = 20  # sampled paths summed: the larger of the original's two counts
MIN_GAIN = 0.05  # a network this close to the majority rate has no gain to share out


def gain_share(accuracy: float, full: float, majority: float) -> float:
    """(accuracy − majority) / (full − majority); NaN when full is < MIN_GAIN above majority."""
    gain = full - majority
    if not gain >= MIN_GAIN:
        return math.nan
    return float((accuracy - majority) / gain)


def _original(table: pd.DataFrame) -> pd.DataFrame:
    return table[(table.network == "post_ln") & table.bias.astype(bool)]


def _ln_free(table: pd.DataFrame) -> pd.DataFrame:
    return table[(table.network == "ln_free") & ~table.bias.astype(bool)]


def network_summary(rows: pd.DataFrame) -> dict:
    """The numbers of one trained network (its rows of the path table): full accuracy, the
    majority rate, the best sampled accuracy at a short length and the sampled accuracy at full
    length (SAMPLES paths), the exact accuracy of all paths of length <= 1 and <= 2 (LN-free
    networks), and the gain shares of the claims."""
    acc = rows.set_index(["protocol", "samples", "k"]).accuracy
    depth, majority = int(rows.depth.iloc[0]), float(rows.majority.iloc[0])
    full = float(acc.get(("full", 0, depth), math.nan))
    sampled = rows[(rows.protocol == "sampled") & (rows.samples == SAMPLES)]
    short = sampled[sampled.k.isin(SHORT)].accuracy
    best_short = float(short.max()) if len(short) else math.nan
    longest = float(acc.get(("sampled", SAMPLES, depth), math.nan))
    up_to = {k: float(acc.get(("exact_up_to", 0, k), math.nan)) for k in (1, 2)}
    best_up_to = {k: float(sampled[sampled.k <= k].accuracy.max()) if len(sampled) else math.nan
                  for k in (1, 2)}
    return {"full": full, "majority": majority, "sampled_best_short": best_short,
            "sampled_longest": longest, "sampled_best_up_to_1": best_up_to[1],
            "sampled_best_up_to_2": best_up_to[2], "exact_up_to_1": up_to[1],
            "exact_up_to_2": up_to[2],
            "short_share": gain_share(best_short, full, majority),
            "long_share": gain_share(longest, full, majority),
            "exact_share": gain_share(up_to[2], full, majority)}


def per_network(table: pd.DataFrame) -> pd.DataFrame:
    """network_summary of every trained network at each task's deepest depth: one row per
    (task, network, seed)."""
    out = []
    for (task, network), t in table.groupby(["task", "network"], sort=False):
        t = t[t.depth == t.depth.max()]
        for seed, rows in t.groupby("seed"):
            out.append({"task": task, "network": network, "depth": int(rows.depth.iloc[0]),
                        "seed": int(seed), "bias": bool(rows.bias.iloc[0]),
                        **network_summary(rows)})
    return pd.DataFrame(out)


def _means(runs: list[dict]) -> dict:
    return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}


def _share_of_means(key: str):
    """Gain share of the mean of `key` over the runs, against their mean full accuracy and
    majority rate (NaN when the mean network is less than MIN_GAIN above the majority)."""
    def statistic(runs: list[dict]) -> float:
        m = _means(runs)
        return gain_share(m[key], m["full"], m["majority"])
    return statistic


def _drop(runs: list[dict]) -> float:
    """Gain share of the best short paths minus that of the longest, from the runs' means."""
    short, longest = _share_of_means("sampled_best_short"), _share_of_means("sampled_longest")
    return short(runs) - longest(runs)


def _mean_full(runs: list[dict]) -> float:
    return _means(runs)["full"]


def measure(table: pd.DataFrame, resamples: int = 1000, reference: dict | None = None,
            steps: int | None = None) -> list[Measurement]:
    """table: E2's path table (task, network, bias, depth, seed, protocol, samples, k, accuracy,
    majority); reference: the original code's figures (references.load of
    workflow/references/d21_original.yaml; None: its diagnostics are not testable); steps: the
    batches E2's networks trained in this run (paths.train.steps). Returns one Measurement per id
    in IDS, in that order."""
    out = _measure_paper(table, resamples)
    for cid, (task, match, what) in REFERENCE.items():
        runs = references.e2_networks(reference, task, match) if reference else {}
        if not runs:
            out[cid] = not_testable(cid, f"no reference run of the original code on {task} "
                                         f"at {match} settings")
            continue
        stat = _share_of_means("sampled_best_short") if what == "short" else _drop
        out[cid] = over_runs(cid, runs, stat, resamples, unit="networks of the original code",
                             note=f"{task}, {match} settings, {references.provenance(reference)}")
    for cid, paper in LONG_TRAINING.items():
        out[cid] = at_scale(cid, out[paper], steps, LONG_STEPS, "E2's training length (batches)")
    return [out[cid] for cid in IDS]


def _measure_paper(table: pd.DataFrame, resamples: int) -> dict[str, Measurement]:
    """The paper's and our own E2 claims (PAPER_IDS) from our path table."""
    original, ln_free = _original(table), _ln_free(table)
    out = {}
    for task in TASKS:
        mine = original[original.task == task]
        ids = {what: f"E2.{what}_{task}" for what in ("sampled_short_paths",
                                                      "sampled_long_paths", "full_model")}
        if mine.empty:
            for cid in ids.values():
                out[cid] = not_testable(cid, f"no post-LN network with biases trained on {task}")
        else:
            runs = {int(s): network_summary(r) for s, r in
                    mine[mine.depth == mine.depth.max()].groupby("seed")}
            depth = int(mine.depth.max())
            note = f"{task}, depth {depth}, {SAMPLES} sampled paths summed"
            has_samples = (mine.protocol.eq("sampled") & mine.samples.eq(SAMPLES)).any()
            for what, stat in (("sampled_short_paths", _share_of_means("sampled_best_short")),
                               ("sampled_long_paths", _drop)):
                cid = ids[what]
                out[cid] = (over_runs(cid, runs, stat, resamples, note=note) if has_samples
                            else not_testable(cid, f"no evaluation with {SAMPLES} sampled paths"))
            out[ids["full_model"]] = over_runs(ids["full_model"], runs, _mean_full,
                                               resamples, note=f"{task}, depth {depth}")
        cid = f"E2.exact_short_paths_{task}"
        mine = ln_free[(ln_free.task == task) & (ln_free.protocol == "exact_up_to")]
        if mine.empty:
            out[cid] = not_testable(cid, f"no LN-free network with exact path sums on {task}")
        else:
            rows = ln_free[(ln_free.task == task) & (ln_free.depth == mine.depth.max())]
            runs = {int(s): network_summary(r) for s, r in rows.groupby("seed")}
            out[cid] = over_runs(cid, runs, _share_of_means("exact_up_to_2"), resamples,
                                 note=f"{task}, depth {int(mine.depth.max())}")
    return out


def method_note(config: dict) -> str:
    """The report's methods paragraph on what E2's claims rest on (a definition, never a
    finding)."""
    return (
        "Path lengths (E2). A path of length k passes through k of the L layers, one head "
        "in each, and skips the others. The original protocol samples such paths (k random "
        "layers, one random head each), runs each active layer on the path's own input "
        "without its residual, through a LayerNorm without learned gain and bias, sums a "
        "few paths and classifies the sum with the network's read-out. Claims compare "
        "accuracies as gain shares (a − m)/(full − m): the accuracy a above the majority-"
        "class rate m of the evaluation labels (the best constant predictor) as a share of "
        "the full network's accuracy above it, from means over trained networks; a network "
        f"less than {MIN_GAIN:g} above m has no gain to share (undefined).")
