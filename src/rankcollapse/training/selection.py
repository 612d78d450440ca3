"""How a tuned arm's setting is chosen from its sweep, and how clear the choice was: the ranking
rule (mean validation metric over the tuning seeds) and, at the rung that decides, the runner-up,
the margin between them and the seed-to-seed spread of that margin. Pure pandas: the tuning job
and the notebooks read the same rule."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

SELECT_BY = ("loss", "accuracy")
SETTING = ["peak_lr", "warmup", "weight_decay"]

SELECTION_RULE = (
    "Each arm's setting is chosen on the validation split, never on test: every setting of the "
    "sweep trains on each tuning seed, and the settings are ranked by their validation "
    "cross-entropy averaged over the tuning seeds (a diverged run counts as infinitely bad), "
    "ties broken by the smaller learning rate; successive halving keeps the best 1/eta of each "
    "rung for the next, and the rung that leaves one setting decides. Beside each selection the "
    "report gives the runner-up at that rung, the margin between the two means and the "
    "seed-to-seed spread of the margin (the standard deviation over tuning seeds of the paired "
    "difference): a margin inside that spread is a near tie, which another seed or another CPU "
    "could flip."
)


def _scored(rows: pd.DataFrame, by: str) -> pd.DataFrame:
    """rows with a `score` column, lower is better: the validation loss, or minus the validation
    accuracy; a diverged or unmeasured member scores +inf."""
    if by not in SELECT_BY:
        raise ValueError(f"select_by={by!r}: allowed values are {list(SELECT_BY)}")
    bad = rows.diverged.astype(bool) | rows[f"val_{by}"].isna()
    score = rows.val_loss if by == "loss" else -rows.val_accuracy
    return rows.assign(score=score.where(~bad, math.inf).astype(float))


def rank(rows: pd.DataFrame, by: str = "loss") -> list[dict]:
    """The settings {lr, warmup, weight_decay} of `rows` (sweep members: peak_lr, warmup,
    weight_decay, val_loss, val_accuracy, diverged), best first, by the mean over the tuning
    seeds of the validation loss (by="loss") or accuracy (by="accuracy"); ties broken by the
    mean validation loss, then the smaller learning rate, warm-up and weight decay, so the
    ranking is deterministic."""
    r = _scored(rows, by)
    r["loss_key"] = r.val_loss.where(~r.diverged.astype(bool) & r.val_loss.notna(), math.inf)
    means = r.groupby(SETTING, as_index=False)[["score", "loss_key"]].mean()
    ordered = means.sort_values(["score", "loss_key", *SETTING], kind="stable")
    return [{"lr": float(b.peak_lr), "warmup": int(b.warmup),
             "weight_decay": float(b.weight_decay)} for b in ordered.itertuples()]


def _matches(rows: pd.DataFrame, setting: dict) -> pd.Series:
    return ((rows.peak_lr == setting["lr"]) & (rows.warmup == setting["warmup"])
            & (rows.weight_decay == setting["weight_decay"]))


def decision(rows: pd.DataFrame, by: str = "loss") -> dict:
    """How clearly the deciding rung's `rows` (every setting of that rung on every tuning seed)
    chose its best setting: {selected, runner_up (None with one setting), margin (the runner-up's
    mean score minus the selected's, >= 0: validation loss, or accuracy for by="accuracy"),
    spread (the standard deviation over tuning seeds of the per-seed difference; NaN with one
    seed), wins (tuning seeds on which the selected beat the runner-up), seeds, near_tie (margin
    < spread)}."""
    ranked = rank(rows, by)
    out = {"selected": ranked[0], "runner_up": ranked[1] if len(ranked) > 1 else None,
           "margin": math.nan, "spread": math.nan, "wins": 0,
           "seeds": int(rows.seed.nunique()), "near_tie": False}
    if out["runner_up"] is None:
        return out
    r = _scored(rows, by)
    first = r[_matches(r, ranked[0])].groupby("seed").score.mean()
    second = r[_matches(r, ranked[1])].groupby("seed").score.mean()
    diff = (second - first).dropna()  # per seed, >= 0 where the selected was better
    with np.errstate(invalid="ignore"):
        margin = float(second.mean() - first.mean())
        spread = float(diff.std(ddof=1)) if len(diff) > 1 else math.nan
    out.update(margin=margin, spread=spread, wins=int((diff > 0).sum()),
               near_tie=bool(math.isfinite(spread) and margin < spread))
    return out


def decisions(tuning: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """One row per tuned arm (task, variant, depth) of a tuning table (the `sweep` rows of every
    rung): the deciding rung (the last one trained) and `decision` of it: selected and runner-up
    learning rates, margin, spread, wins, tuning_seeds, near_tie, and the rule's metric (`by`,
    default the table's own `metric` column)."""
    sweep = tuning[tuning.role == "sweep"]
    rung = sweep["rung"].fillna(0) if "rung" in sweep else pd.Series(0, index=sweep.index)
    rows = []
    for keys, arm in sweep.assign(rung_=rung).groupby(["task", "variant", "depth"], sort=False):
        deciding = arm[arm.rung_ == arm.rung_.max()]
        metric = by or (str(arm["metric"].iloc[0]) if "metric" in arm else "loss")
        d = decision(deciding, metric)
        runner = d["runner_up"]
        rows.append({"task": keys[0], "variant": keys[1], "depth": int(keys[2]),
                     "rung": int(deciding.rung_.iloc[0]),
                     "rung_steps": int(deciding.rung_steps.iloc[0])
                     if "rung_steps" in deciding else None,
                     "selected_lr": d["selected"]["lr"],
                     "runner_up_lr": runner["lr"] if runner else math.nan,
                     "margin": d["margin"], "spread": d["spread"], "wins": d["wins"],
                     "tuning_seeds": d["seeds"], "near_tie": d["near_tie"],
                     "metric": metric})
    return pd.DataFrame(rows)
