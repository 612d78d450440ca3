"""E5's claims: depth-enabling with every arm tuned, per task (digits: test accuracy; text: test
bits per character, lower is better); the checks that the control converged at the default
budget and the long-training diagnostics, both read off the budget curve.

Units of replication: the final seeds. Every arm (variant, depth) trains the same fresh seeds
at its own selected setting; a resample draws whole seeds, each with every arm's network of that
seed, so differences between arms stay paired. The claims are stated over the whole depth grid:
the worst loss of an arm against its own shallowest model, and the recovered share at every depth
where post-LN falls short of pre-LN.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from rankcollapse.claims.measurement import Measurement, not_testable, over_runs
from rankcollapse.plan.tuned import grid_budgets
from rankcollapse.training.selection import SELECTION_RULE

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
# Diagnostics: post-hoc readings of the text grid, and the claims of both tasks
# restated in a run that trains every network at least LONG_STEPS steps (digits too).
MEASURABLE_GAP = 0.2  # bits per character: 4 x the margin
LONG_STEPS = 1000
LONG_TRAINING = {f"E5.{task}.long_training_{name}": f"E5.{task}.{name}"
                 for task in ("text", "digits")
                 for name in ("deescalation_trains_deep", "deescalation_recovers",
                              "pre_ln_trains_deep")}
DIAGNOSTICS = ("E5.text.recovery_where_gap_is_measurable",
               "E5.text.deescalation_degrades_like_pre_ln", *LONG_TRAINING)
# Checks: the control (pre-LN) converged at the deepest depth's default budget.
CONVERGED = {f"E5.{task}.control_converged": task for task in ("digits", "text")}
IDS = (*PAPER_IDS, *DIAGNOSTICS, *CONVERGED)
ARM = {"post_ln_degrades": "post_ln", "pre_ln_trains_deep": "pre_ln",
       "deescalation_trains_deep": "post_ln_deesc"}
CONTROL = "pre_ln"


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


def measure(runs: pd.DataFrame, resamples: int = 1000, curve: pd.DataFrame | None = None
            ) -> list[Measurement]:
    """runs: one row per final network (task, variant, depth, seed, accuracy, bpc; a diverged
    network counted at chance, see trained.final_accuracy); curve: the same networks at every
    budget of their budget curve (trained.budget_runs: budget, default, accuracy, bpc), which
    decides the control-converged checks and the long-training diagnostics. One Measurement per
    id in IDS, in that order."""
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
    curve = curve if curve is not None else runs.iloc[:0].assign(budget=[], default=[])
    out.update(_measure_long(curve, resamples))
    for cid, task in CONVERGED.items():
        out[cid] = control_converged(cid, curve, task, resamples)
    return [out[cid] for cid in IDS]


def long_runs(curve: pd.DataFrame, task: str) -> tuple[pd.DataFrame | None, str]:
    """(every network of the grid's arms on `task` at its shortest budget of at least LONG_STEPS
    steps, as `runs`; or None when a network has none) and a note naming the budgets used or
    what is missing."""
    arms = curve[(curve.task == task) & curve.variant.isin(ARM.values())]
    if not len(arms):
        return None, f"no {task} networks of {sorted(ARM.values())}"
    networks = arms.groupby(["variant", "depth", "seed"]).budget.max()
    short = networks[networks < LONG_STEPS]
    if len(short):
        v, d, _ = short.index[0]
        return None, (f"{len(short)} {task} networks train fewer than {LONG_STEPS:,} steps "
                      f"(e.g. {v} at depth {d}: {int(short.iloc[0])}, its longest budget); "
                      f"depth_grid.steps or depth_grid.budget_curve must reach {LONG_STEPS:,}")
    long = arms[arms.budget >= LONG_STEPS].sort_values("budget", kind="stable")
    picked = long.groupby(["variant", "depth", "seed"], as_index=False).first()
    budgets = sorted(int(b) for b in picked.budget.unique())
    return picked.assign(task=task), (f"every network at {', '.join(map(str, budgets))} steps "
                                      "(its budget curve; the learning rate selected at its "
                                      "default budget)")


def _measure_long(curve: pd.DataFrame, resamples: int) -> dict[str, Measurement]:
    """The long-training diagnostics: each restates its paper claim on the networks trained at
    least LONG_STEPS steps (the budget curve), not testable where one has no such budget."""
    out = {}
    for task in TASKS:
        runs, note = long_runs(curve, task)
        measured = {m.id: m for m in _measure_paper(runs, resamples)} if runs is not None else {}
        for cid, paper in LONG_TRAINING.items():
            if not cid.startswith(f"E5.{task}."):
                continue
            if runs is None:
                out[cid] = not_testable(cid, note)
            else:
                m = measured[paper]
                out[cid] = replace(m, id=cid, note=f"{note}; {m.note}" if m.note else note)
    return out


def control_converged(cid: str, curve: pd.DataFrame, task: str, resamples: int) -> Measurement:
    """How far the control's tuned test metric moves from its default budget to the next longer
    budget of its curve, at the task's deepest depth: sign * (metric(longer) - metric(default))
    per seed, mean over seeds (positive: the longer budget is better)."""
    value, sign = METRIC[task]
    pre = curve[(curve.task == task) & (curve.variant == CONTROL)]
    if not len(pre):
        return not_testable(cid, f"needs {CONTROL} on {task}")
    deepest = int(pre.depth.max())
    at = pre[pre.depth == deepest]
    default = int(at[at.default].budget.iloc[0]) if at.default.any() else None
    longer = sorted(int(b) for b in at.budget.unique() if default and b > default)
    if not longer:
        return not_testable(cid, f"needs {CONTROL}'s budget curve at {task} depth {deepest} to "
                                 f"go past its default budget ({default} steps): a "
                                 "depth_grid.budget_curve budget above it, for pre_ln")
    by_seed = at.pivot_table(index="seed", columns="budget", values=value, aggfunc="mean")
    units = {int(seed): {"longer": float(row[longer[0]]), "default": float(row[default])}
             for seed, row in by_seed.iterrows()}
    return over_runs(cid, units, lambda r: sum(sign * (u["longer"] - u["default"]) for u in r)
                     / len(r), resamples, note=f"{CONTROL} at {task} depth {deepest}: "
                                           f"{default} → {longer[0]} steps, {value}")


def deciding_budgets(curve: pd.DataFrame) -> dict[str, dict]:
    """Per task: the deepest depth of the control, its default budget and the next longer one
    of its curve (None when there is none): what the abstract's budget phrase names."""
    out = {}
    for task in curve.task.unique():
        pre = curve[(curve.task == task) & (curve.variant == CONTROL)]
        if not len(pre) or not pre.default.any():
            continue
        deepest = int(pre.depth.max())
        at = pre[pre.depth == deepest]
        default = int(at[at.default].budget.iloc[0])
        longer = sorted(int(b) for b in at.budget.unique() if b > default)
        out[str(task)] = {"depth": deepest, "steps": default,
                          "longer": longer[0] if longer else None}
    return out


# The abstract's phrase on the control, by the check's verdict (fixed text, never typed).
CONVERGED_PHRASES = {
    "reproduced": "the control (pre-LN) had converged there",
    "partly": "the control (pre-LN) had converged there by the estimate, not by its interval",
    "not reproduced": "the control (pre-LN) had not converged there",
    "not testable": "whether the control (pre-LN) had converged there was not checked",
}


def headline_note(row: dict, rows: list[dict], section: dict | None) -> str:
    """The sentence the abstract adds to an E5 headline claim's verdict: the deepest depth's
    training budget and whether the control converged there (the check's verdict), generated
    from the ledger rows and E5's section numbers (`deciding_budgets`)."""
    task = row["id"].split(".")[1]
    budgets = ((section or {}).get("numbers") or {}).get("budgets", {}).get(task)
    check = next((r for r in rows if r["id"] == f"E5.{task}.control_converged"), None)
    if not budgets or check is None:
        return ""
    phrase = CONVERGED_PHRASES[check["verdict"]]
    numbers = (f" (a budget of {budgets['longer']:,} steps moved its test {METRIC[task][0]} "
               f"by {check['value']}; holds if {check['criterion']})"
               if check["verdict"] != "not testable" else "")
    return (f"At {task} depth {budgets['depth']}, where it is decided, every network trained "
            f"{budgets['steps']:,} steps; {phrase}{numbers}.")


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
            out.append(not_testable(cid, f"needs {placement} and post_ln_deesc on digits "
                                         "(depth_grid.placements: workflow/config/"
                                         "diagnostics.yaml trains them)"))
            continue
        deepest = int(t[t.variant == placement].depth.max())
        units = _per_seed(t[t.depth == deepest], "accuracy")
        out.append(over_runs(cid, units, lambda r, p=placement, d=deepest:
                             placement_difference(r, p, d, 1.0), resamples,
                             note=f"digits at depth {deepest}"))
    return out


def method_note(config: dict) -> str:
    """The methods paragraph on what E5's and E5b's verdicts rest on: the selection rule, the
    budgets, the budget curve and the checks read off it (definitions, never findings)."""
    g = config.get("depth_grid", {})
    budgets = grid_budgets(g) if g else {}
    budget = (f"{next(iter(budgets.values()))} at every depth" if len(set(budgets.values())) == 1
              else ", ".join(f"{s} at depth {d}" for d, s in budgets.items()))
    curve = (g.get("budget_curve") or {}).get("budgets", [])
    return (
        f"E5 and E5b. {SELECTION_RULE} Training budgets (steps per network, every arm at one "
        f"depth alike): {budget}; the schedule is {g.get('schedule', 'wsd')} (warm-up, the "
        f"peak rate, then a linear cool-down over the last {g.get('cooldown', 0.2):g} of the "
        "steps). "
        + (f"The budget curve evaluates the fresh seeds of every arm at "
           f"{', '.join(map(str, curve))} steps as well, each a complete run of that length "
           "(a cool-down branched off the stable phase of one run, which gives the same "
           "network as a run of that length), at "
           "the learning rate selected for the arm's own budget. The control-converged checks "
           "compare pre-LN at the deepest depth at its budget with the curve's next longer "
           "budget; the long-training diagnostics restate the paper claims on every network at "
           f"its curve's budget of at least {LONG_STEPS:,} steps. " if curve else "")
        + "Intervals resample whole seeds, every arm's network of a seed together.")
