"""E5's claims: depth-enabling with every arm tuned, per task (digits: test accuracy; text: test
bits per character, lower is better).

Units of replication: the final seeds. Every arm (variant, depth) trains the same fresh seeds
at its own selected setting; a resample draws whole seeds, each with every arm's network of that
seed, so differences between arms stay paired. The claims are stated over the whole depth grid:
the worst loss of an arm against its own shallowest model, and the recovered share at every depth
where post-LN falls short of pre-LN.
"""

from __future__ import annotations

import math

import pandas as pd

from rankcollapse.claims.measurement import Measurement, at_scale, not_testable, over_runs

TASKS = ("digits", "text")
# The metric of each task and its sign: +1 when higher is better.
METRIC = {"digits": ("accuracy", 1.0), "text": ("bpc", -1.0)}
MARGIN = 0.05  # accuracy on digits, bits per character on text (the registry's margins)
GRID = ("post_ln_degrades", "pre_ln_trains_deep", "deescalation_trains_deep",
        "deescalation_recovers")
PLACEMENTS = {"placement_mlp_trains_deep": "post_ln_deesc_mlp",
              "placement_out_trains_deep": "post_ln_deesc_out"}
PAPER_IDS = tuple([f"E5.{task}.{name}" for task in TASKS for name in GRID]
                  + [f"E5.digits.{name}" for name in PLACEMENTS])
# Diagnostics: post-hoc readings of the text grid (issue 28), and the claims of both tasks
# restated in a run that trains every network at least LONG_STEPS steps (digits: issue 34).
MEASURABLE_GAP = 0.2  # bits per character: 4 x the margin
LONG_STEPS = 1000
LONG_TRAINING = {f"E5.{task}.long_training_{name}": f"E5.{task}.{name}"
                 for task in ("text", "digits")
                 for name in ("deescalation_trains_deep", "deescalation_recovers",
                              "pre_ln_trains_deep")}
DIAGNOSTICS = ("E5.text.recovery_where_gap_is_measurable",
               "E5.text.deescalation_degrades_like_pre_ln", *LONG_TRAINING)
IDS = (*PAPER_IDS, *DIAGNOSTICS)
ARM = {"post_ln_degrades": "post_ln", "pre_ln_trains_deep": "pre_ln",
       "deescalation_trains_deep": "post_ln_deesc"}


def _means(units: list[dict]) -> dict:
    """Mean over the given seeds of each arm's value (units: {(variant, depth): value})."""
    sums: dict = {}
    for u in units:
        for key, value in u.items():
            total, count = sums.get(key, (0.0, 0))
            sums[key] = (total + value, count + 1)
    return {k: t / c for k, (t, c) in sums.items()}


def worst_loss(units: list[dict], variant: str, sign: float) -> float:
    """Largest loss over the depth grid of `variant` against its own shallowest depth:
    max_L sign * (m(L_min) - m(L)) of the seed means m; positive = worse than shallow."""
    m = _means(units)
    depths = sorted(d for v, d in m if v == variant)
    if len(depths) < 2:
        return math.nan
    shallow = m[(variant, depths[0])]
    return float(max(sign * (shallow - m[(variant, d)]) for d in depths[1:]))


def recovered_min(units: list[dict], sign: float, margin: float = MARGIN) -> float:
    """Smallest over depths with a post-LN -> pre-LN gap >= margin of
    (de-escalation - post-LN) / (pre-LN - post-LN); NaN when no depth has a gap."""
    m = _means(units)
    shares = []
    for variant, depth in m:
        if variant != "post_ln":
            continue
        pre, deesc = m.get(("pre_ln", depth)), m.get(("post_ln_deesc", depth))
        if pre is None or deesc is None:
            continue
        post = m[("post_ln", depth)]
        if sign * (pre - post) >= margin:
            shares.append((deesc - post) / (pre - post))
    return float(min(shares)) if shares else math.nan


def excess_loss(units: list[dict], variant: str, reference: str, sign: float) -> float:
    """Largest over depths of the loss of `variant` against its shallowest depth minus that of
    `reference` at the same depth (seed means; positive = `variant` loses more); NaN when the
    two arms share fewer than two depths."""
    m = _means(units)
    depths = sorted(d for v, d in m if v == variant and (reference, d) in m)
    if len(depths) < 2:
        return math.nan
    def loss(v: str, d: int) -> float:
        return sign * (m[(v, depths[0])] - m[(v, d)])
    return float(max(loss(variant, d) - loss(reference, d) for d in depths[1:]))


def placement_difference(units: list[dict], placement: str, depth: int, sign: float) -> float:
    """sign * (placement - post_ln_deesc) of the seed means at `depth`."""
    m = _means(units)
    a, b = m.get((placement, depth)), m.get(("post_ln_deesc", depth))
    return math.nan if a is None or b is None else float(sign * (a - b))


def _per_seed(runs: pd.DataFrame, value: str) -> dict:
    means = runs.groupby(["seed", "variant", "depth"])[value].mean()
    out: dict = {}
    for (seed, variant, depth), v in means.items():
        out.setdefault(int(seed), {})[(variant, int(depth))] = float(v)
    return out


def measure(runs: pd.DataFrame, resamples: int = 1000, steps: int | None = None
            ) -> list[Measurement]:
    """runs: one row per final network (task, variant, depth, seed, accuracy, bpc; a diverged
    network counted at chance, see trained.final_accuracy); steps: the steps each E5 network
    trained in this run (depth_grid.steps). One Measurement per id in IDS, in that order."""
    out = {m.id: m for m in _measure_paper(runs, resamples)}
    value, sign = METRIC["text"]
    t = runs[runs.task == "text"]
    units = _per_seed(t, value) if len(t) else {}
    note = f"text, depths {sorted(int(d) for d in t.depth.unique())}, {value}" if len(t) else ""
    three = {"post_ln", "pre_ln", "post_ln_deesc"} <= set(t.variant) if len(t) else False
    cid = "E5.text.recovery_where_gap_is_measurable"
    out[cid] = (over_runs(cid, units, lambda r: recovered_min(r, sign, MEASURABLE_GAP),
                          resamples, note=note + f"; depths with a gap of at least "
                                                 f"{MEASURABLE_GAP} bits")
                if three else not_testable(cid, "needs post_ln, pre_ln and post_ln_deesc on "
                                                "text"))
    cid = "E5.text.deescalation_degrades_like_pre_ln"
    pair = {"pre_ln", "post_ln_deesc"} <= set(t.variant) if len(t) else False
    out[cid] = (over_runs(cid, units, lambda r: excess_loss(r, "post_ln_deesc", "pre_ln", sign),
                          resamples, note=note)
                if pair else not_testable(cid, "needs pre_ln and post_ln_deesc on text"))
    for cid, paper in LONG_TRAINING.items():
        out[cid] = at_scale(cid, out[paper], steps, LONG_STEPS, "E5's training (steps per "
                                                                "network)")
    return [out[cid] for cid in IDS]


def _measure_paper(runs: pd.DataFrame, resamples: int) -> list[Measurement]:
    """The paper's and our own E5 claims (PAPER_IDS)."""
    out = []
    for task in TASKS:
        value, sign = METRIC[task]
        t = runs[runs.task == task]
        units = _per_seed(t, value) if len(t) else {}
        depths = sorted(t.depth.unique()) if len(t) else []
        note = f"{task}, depths {[int(d) for d in depths]}, {value}"
        for name, variant in ARM.items():
            cid = f"E5.{task}.{name}"
            arm = t[t.variant == variant]
            if arm.depth.nunique() < 2:
                out.append(not_testable(cid, f"needs {variant} on {task} at two depths"))
            else:
                out.append(over_runs(cid, units, lambda r, v=variant, s=sign: worst_loss(r, v, s),
                                     resamples, note=note))
        cid = f"E5.{task}.deescalation_recovers"
        if not {"post_ln", "pre_ln", "post_ln_deesc"} <= set(t.variant):
            out.append(not_testable(cid, f"needs post_ln, pre_ln and post_ln_deesc on {task}"))
        else:
            out.append(over_runs(cid, units, lambda r, s=sign: recovered_min(r, s), resamples,
                                 note=note))
    t = runs[runs.task == "digits"]
    for name, placement in PLACEMENTS.items():
        cid = f"E5.digits.{name}"
        if not len(t) or placement not in set(t.variant) or "post_ln_deesc" not in set(t.variant):
            out.append(not_testable(cid, f"needs {placement} and post_ln_deesc on digits"))
            continue
        deepest = int(t[t.variant == placement].depth.max())
        units = _per_seed(t[t.depth == deepest], "accuracy")
        out.append(over_runs(cid, units, lambda r, p=placement, d=deepest:
                             placement_difference(r, p, d, 1.0), resamples,
                             note=f"digits at depth {deepest}"))
    return out
