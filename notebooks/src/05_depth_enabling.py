# ---
# jupyter:
#   kernelspec:
#     display_name: Python (rankcollapse)
#     language: python
#     name: rankcollapse
# ---

# %% [markdown]
# # E5 — Depth-enabling, every arm tuned: post-norm, pre-norm and de-escalation (Yu & Zhang, arXiv 2312.06182)
#
# Yu & Zhang find that deep post-norm ("classic") transformers fail to train because token
# similarity escalates, and that de-escalating the attention output, Y ← (I − τΠ₁)Y, lets them
# go deep, approaching pre-norm. One optimiser recipe for every variant and depth would measure
# the recipe as much as the architecture, so here **every arm (task, variant, depth) is tuned on
# its own**: a sweep of the peak learning rate on three tuning seeds, all settings trained as
# one batched ensemble and scored on a validation split carved from the training set, selected
# by the mean validation loss over the tuning seeds (successive halving: the best third of each
# rung goes on); then fresh seeds (never a tuning seed) train at the selected setting and are
# scored on the test split. A trainability verdict needs a control that has converged: every
# network trains a warmup-stable-decay schedule, and the fresh seeds are also evaluated at the
# budgets of a **budget curve**, each a complete run of that length (a cool-down branched off
# one run's stable phase), so the report shows the tuned metric against the training budget. Two tasks, the small-scale analogues of the paper's two: **digits** (8×8 images as 16
# patch tokens + a class token, ViT-style; test accuracy) and **text** (a causal character-level
# language model on the Python reference manual's topic texts that ship with the standard
# library, `pydoc_data.topics`, split into contiguous 90/5/5 train/validation/test blocks; test
# bits per character, lower is better). A diverged run (non-finite loss) is a result: counted at
# chance accuracy or at the bits of a uniform guess.
#
# **Causal attention.** The language model's attention is lower-triangular: token i attends to
# tokens 1..i. Every centring then uses the prefix mean (token i subtracts the mean of tokens
# 1..i), so de-escalation keeps the model causal. t_sim is read as for any sequence — the share
# of the stream's energy in its token mean, over all positions — and |λ₂| is the second-largest
# eigenvalue modulus of the row-stochastic lower-triangular matrix; its eigenvalues are its
# diagonal entries (token i's attention to itself), the first of which is always 1.

# %% tags=["parameters"]
experiment = "E5"
tables = None  # name -> table: papermill injects the run's; None: the default config's
settings = None  # block -> config block: papermill injects the run's; None: the default's
figures_dir = "report/figures/E5"
numbers_path = "results/numbers/E5.json"

# %%
from rankcollapse.notebooks import defaults

tables, settings = defaults(experiment, tables, settings)

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from rankcollapse import io, plotting
from rankcollapse.claims import e5 as e5_claims
from rankcollapse.notebooks import section
from rankcollapse.experiments.trained import (
    budget_runs,
    edge_mark,
    final_accuracy,
    grid_edges,
    last_rungs,
    seed_interval,
    selected_settings,
)
from rankcollapse.training.selection import decisions

plotting.use_style()
grid, train = settings["depth_grid"], settings["train"]
if isinstance(grid["steps"], dict):  # papermill passes the depths as strings
    grid["steps"] = {int(d): int(v) for d, v in grid["steps"].items()}
metrics = io.read_parquet(tables["metrics"])
history = io.read_parquet(tables["history"])
tuning = io.read_parquet(tables["tuning"])
runs = final_accuracy(metrics)
curve = budget_runs(tuning, metrics)  # every final network at every budget of its curve
tasks = [t for t in grid["tasks"] if t in set(runs.task)]
placements = [v for v in grid.get("placements", []) if v in set(runs.variant)]
variants = [v for v in grid["variants"] if v in set(runs.variant)]
# Other arms at the deepest depth: E5b's rival fixes, tuned here as E5 arms (E5b compares them).
others = sorted(set(runs.variant) - set(variants) - set(placements))
METRIC = {"digits": ("accuracy", "test accuracy"), "text": ("bpc", "test bits per character")}
chosen = selected_settings(tuning)
margins = decisions(tuning)  # each arm's runner-up, margin and spread at its deciding rung
B = 1000
n_seeds = runs.seed.nunique()
print(f"{len(runs)} final runs: tasks {tasks}, variants {variants} + placements {placements}, "
      f"seeds {sorted(runs.seed.unique())}; diverged: {int(runs.diverged.sum())}; "
      f"{int((tuning.role == 'sweep').sum())} sweep members; "
      f"{int(margins.near_tie.sum())} of {len(margins)} selections a near tie")

# %% [markdown]
# ## The sweep
# Validation loss (the selection metric, mean over the tuning seeds) of every setting against
# its peak learning rate, one line per depth, a panel per arm, each setting at the last rung it
# reached; the star marks the selected setting of each depth, larger with a red edge when the
# selection lies on an edge of the grid that arm's sweep tried (its smallest or largest
# learning rate, warm-up or swept weight decay): the optimum may then lie outside the grid.
# Diverged members are left out of the means (the ranking counts them as infinitely bad). On
# text the validation and test blocks are different parts of the manual, so their losses differ
# in level; the selection compares settings on one block only.

# %%
# Arms whose selected setting is the smallest or largest value their sweep tried (all rungs).
edges = grid_edges(tuning)
edges["grid_edge"] = [edge_mark(r) for _, r in edges.iterrows()]
on_edge = {(r.task, r.variant, r.depth) for r in edges[edges.grid_edge != ""].itertuples()}
sweep = last_rungs(tuning)  # with successive halving: each setting at the last rung it reached
sweep = sweep.assign(val_loss=sweep.val_loss.where(~sweep.diverged.astype(bool)))
arms = variants + placements + others
# One panel per arm that trained on a task (placements and rivals only where they ran).
panels = [(task, a) for task in tasks for a in arms
          if len(sweep[(sweep.task == task) & (sweep.variant == a)])]
ncols = min(5, len(panels))
nrows = -(-len(panels) // ncols)
fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 3.0 * nrows), squeeze=False,
                         constrained_layout=True, sharex=True)
cmap = plt.get_cmap("viridis")
for ax in axes.flat[len(panels):]:
    ax.axis("off")
for k, (ax, (task, variant)) in enumerate(zip(axes.flat, panels)):
    s = sweep[sweep.task == task]
    depths = sorted(s.depth.unique())
    sv = s[s.variant == variant]
    for i, depth in enumerate(depths):
        color = cmap(i / max(1, len(depths) - 1))
        c = sv[sv.depth == depth].groupby(["peak_lr", "rung_steps"], as_index=False).val_loss.mean()
        if len(c):
            ax.plot(c.peak_lr, c.val_loss, "-", color=color, lw=1.4, marker=".",
                    label=f"L = {depth}")
        best = chosen[(chosen.task == task) & (chosen.variant == variant)
                      & (chosen.depth == depth)]
        for _, b in best.iterrows():
            edge = (task, variant, depth) in on_edge  # red-edged: on a grid edge
            ax.plot(b.peak_lr, b.val_loss, "*", color=color, ms=14 if edge else 11,
                    mec="tab:red" if edge else "k", mew=1.8 if edge else 0.5)
    if any((task, variant, d) in on_edge for d in depths):
        ax.plot([], [], "*", color="w", ms=12, mec="tab:red", mew=1.8,
                label="selected on a grid edge")
    ax.set_xscale("log")
    ax.set_title(f"{task}: {plotting.variant_label(variant)}", fontsize=8)
    ax.set_xlabel("peak learning rate")
    if k % ncols == 0 or panels[k - 1][0] != task:
        ax.set_ylabel("validation loss (nats)")
    ax.legend(frameon=False, fontsize=7)
fig_sweep = plotting.save(fig, figures_dir, "sweep")

# %% [markdown]
# ## Tuned test metric against depth
# Mean over the final seeds (line) with its 95% percentile bootstrap interval over seeds (band;
# the range of the seeds when fewer than 5), and each seed (dots); crosses mark diverged runs.

# %%
def arm_summary(d):
    rows = []
    for (task, variant, depth), g in d.groupby(["task", "variant", "depth"], sort=False):
        key = METRIC[task][0]
        mean, lo, hi, method = seed_interval(g.sort_values("seed")[key], B)
        rows.append({"task": task, "variant": variant, "depth": int(depth), "mean": mean,
                     "low": lo, "high": hi, "seeds": int(g.seed.nunique()),
                     "diverged": int(g.diverged.sum()), "method": method})
    return pd.DataFrame(rows)


summary = arm_summary(runs)
fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False,
                         constrained_layout=True)
for ax, task in zip(axes[0], tasks):
    key, label = METRIC[task]
    t, st = runs[runs.task == task], summary[summary.task == task]
    depths = sorted(t.depth.unique())
    for i, variant in enumerate(variants):
        sv = st[st.variant == variant].sort_values("depth")
        color = plotting.variant_color(variant)
        ax.plot(sv.depth, sv["mean"], "-", color=color, lw=1.8,
                label=plotting.variant_label(variant))
        ax.fill_between(sv.depth, sv.low, sv.high, color=color, alpha=0.15, lw=0)
        jitter = 1 + 0.04 * (i - (len(variants) - 1) / 2)
        tv = t[t.variant == variant]
        ok, bad = tv[~tv.diverged], tv[tv.diverged]
        ax.scatter(ok.depth * jitter, ok[key], s=12, color=color, alpha=0.7, lw=0)
        ax.scatter(bad.depth * jitter, bad[key], s=40, marker="x", color=color)
    for variant in placements:
        pv = st[st.variant == variant]
        if len(pv):
            ax.errorbar(pv.depth * 1.12, pv["mean"], yerr=[pv["mean"] - pv.low,
                                                            pv.high - pv["mean"]],
                        fmt="D", ms=5, color=plotting.variant_color(variant), capsize=2,
                        label=plotting.variant_label(variant))
    ax.set_xscale("log", base=2)
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.set_xlabel("depth L (blocks)")
    ax.set_ylabel(f"tuned {label}")
    ax.set_title(f"{task}: each arm tuned, {n_seeds} seeds")
    ax.legend(frameon=False, fontsize=7)
fig_acc = plotting.save(fig, figures_dir, "tuned_vs_depth")

# %% [markdown]
# ## The budget curve at the deepest depth
# The tuned test metric of every arm at the deepest depth of each task against the training
# budget: each point a complete run of that many steps (a cool-down branched off the stable
# phase of one warmup-stable-decay run, at the learning rate selected for the arm's own budget;
# the curve's variants run past it, the others up to it). Mean over the fresh seeds (line), its
# 95% interval (band), the default budget dotted. The control-converged check reads pre-LN's
# move from the default budget to the next longer one.

# %%
def curve_summary(c):
    rows = []
    for (task, variant, depth, budget), g in c.groupby(["task", "variant", "depth", "budget"]):
        mean, lo, hi, how = seed_interval(g.sort_values("seed")[METRIC[task][0]], B)
        rows.append({"task": task, "variant": variant, "depth": int(depth), "budget": int(budget),
                     "mean": mean, "low": lo, "high": hi, "seeds": int(g.seed.nunique()),
                     "method": how})
    return pd.DataFrame(rows, columns=["task", "variant", "depth", "budget", "mean", "low",
                                       "high", "seeds", "method"])


budget_table = curve_summary(curve)
deciding = e5_claims.deciding_budgets(curve)
fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False,
                         constrained_layout=True)
for ax, task in zip(axes[0], tasks):
    key, label = METRIC[task]
    bt = budget_table[budget_table.task == task]
    deepest = int(bt.depth.max()) if len(bt) else 0
    bt = bt[bt.depth == deepest]
    for variant in arms:
        bv = bt[bt.variant == variant].sort_values("budget")
        if len(bv):
            color = plotting.variant_color(variant)
            ax.plot(bv.budget, bv["mean"], "-o", ms=3.5, color=color, lw=1.6,
                    label=plotting.variant_label(variant))
            ax.fill_between(bv.budget, bv.low, bv.high, color=color, alpha=0.15, lw=0)
    if task in deciding:
        ax.axvline(deciding[task]["steps"], color="grey", ls=":", lw=1)
        ax.text(deciding[task]["steps"], ax.get_ylim()[0], " default budget", color="grey",
                fontsize=7, va="bottom", rotation=90)
    ax.set_xscale("log", base=2)
    budgets = sorted(bt.budget.unique())
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.set_xlabel("training budget (steps per network)")
    ax.set_ylabel(f"tuned {label}")
    ax.set_title(f"{task}, L = {deepest}: the metric against the budget")
legend = {}
for ax in axes[0]:
    for handle, name in zip(*ax.get_legend_handles_labels()):
        legend.setdefault(name, handle)
fig.legend(legend.values(), legend.keys(), frameon=False, fontsize=7.5, ncol=4,
           loc="outside lower center")
fig_budget = plotting.save(fig, figures_dir, "budget_curve")

# %% [markdown]
# ## Learning curves at the deepest depth
# Each arm's fresh seeds at the deepest depth of each task, step by step: training loss (20-step
# running mean, mean over seeds; top) and the test metric at the evaluation steps of its run
# (mean and range over seeds; bottom; the last point is the end of the cool-down).

# %%
fig, axes = plt.subplots(2, len(tasks), figsize=(5.5 * len(tasks), 6.2), squeeze=False,
                         constrained_layout=True, sharex="col")
for col, task in enumerate(tasks):
    key, label = METRIC[task]
    h = history[history.task == task]
    deepest = int(h.depth.max()) if len(h) else 0
    h = h[h.depth == deepest]
    for variant in arms:
        hv = h[h.variant == variant]
        if not len(hv):
            continue
        color = plotting.variant_color(variant)
        loss = hv.groupby("step").loss.mean().rolling(20, min_periods=1).mean()
        axes[0, col].plot(loss.index, loss.values, color=color, lw=1.2,
                          label=plotting.variant_label(variant))
        ev = hv[hv.test_loss.notna()].assign(
            accuracy=lambda d: d.test_accuracy, bpc=lambda d: d.test_loss / np.log(2))
        if len(ev):
            stats = ev.groupby("step")[key].agg(["mean", "min", "max"])
            axes[1, col].plot(stats.index, stats["mean"], "-o", ms=3, color=color, lw=1.2)
            axes[1, col].fill_between(stats.index, stats["min"], stats["max"], color=color,
                                      alpha=0.15, lw=0)
    axes[0, col].set_title(f"{task}, L = {deepest}")
    axes[0, col].set_ylabel("training loss")
    axes[1, col].set_ylabel(label)
    axes[1, col].set_xlabel("step")
    axes[0, col].legend(frameon=False, fontsize=7)
fig_learning = plotting.save(fig, figures_dir, "learning_curves")

# %% [markdown]
# ## Token similarity of the trained models
# Per-layer t_sim after each block on the fixed test batch, median over sequences and seeds, at
# the deepest depth of each task; dotted: after the attention sublayer (before the MLP).

# %%
trained = metrics[metrics.stage == "trained"]
fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.6), squeeze=False,
                         constrained_layout=True)
for ax, task in zip(axes[0], tasks):
    t = trained[trained.task == task]
    deepest = int(t.depth.max())
    t = t[t.depth == deepest]
    for variant in arms:
        tv = t[t.variant == variant]
        if tv.token_similarity.notna().any():
            color = plotting.variant_color(variant)
            q = tv.groupby("layer").token_similarity.median()
            ax.plot(q.index, q.values, color=color, lw=1.6, label=plotting.variant_label(variant))
            a = tv[tv.layer > 0].groupby("layer").token_similarity_after_attention.median()
            ax.plot(a.index, a.values, ":", color=color, lw=1.2)
    ax.set_title(f"{task}, L = {deepest}, trained")
    ax.set_xlabel("layer l")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("t_sim")
    ax.legend(frameon=False, fontsize=7)
fig_tsim = plotting.save(fig, figures_dir, "tsim_trained")

# %% [markdown]
# ## Training loss of the final seeds
# Mean over seeds, 20-step running mean, one panel per (task, depth).

# %%
panels = [(task, d) for task in tasks for d in sorted(history[history.task == task].depth.unique())]
fig, axes = plt.subplots(1, len(panels), figsize=(2.6 * len(panels), 3.0), squeeze=False,
                         constrained_layout=True)
for ax, (task, depth) in zip(axes[0], panels):
    h = history[(history.task == task) & (history.depth == depth)]
    for variant in arms:
        hv = h[h.variant == variant]
        if len(hv):
            smooth = hv.groupby("step").loss.mean().rolling(20, min_periods=1).mean()
            ax.plot(smooth.index, smooth.values, color=plotting.variant_color(variant), lw=1.2,
                    label=plotting.variant_label(variant))
    ax.set_title(f"{task}, L = {depth}", fontsize=8)
    ax.set_xlabel("step")
axes[0, 0].set_ylabel("training loss")
handles, labels = axes[0, 0].get_legend_handles_labels()
fig.legend(handles, labels, frameon=False, loc="outside lower center", ncol=len(arms))
fig_loss = plotting.save(fig, figures_dir, "training_loss")

# %% [markdown]
# ## Tables: selected settings and tuned test numbers

# %%
def fmt(row):
    d = "" if not row.diverged else f" ({row.diverged} div.)"
    return f"{row['mean']:.3f} [{row.low:.3f}, {row.high:.3f}]{d}"


def margin_text(row):
    """The selection's margin over its runner-up at the deciding rung (validation loss), the
    spread of that margin over tuning seeds, and the near-tie mark."""
    if not np.isfinite(row.runner_up_lr):
        return "—"
    spread = f"{row.spread:.3f}" if np.isfinite(row.spread) else "—"
    tie = " NEAR TIE" if row.near_tie else ""
    return (f"{row.margin:.3f} over lr {row.runner_up_lr:g} (spread {spread}; won {row.wins} of "
            f"{row.tuning_seeds} seeds; {row.rung_steps} steps){tie}")


table = summary.merge(chosen, on=["task", "variant", "depth"], how="left").merge(
    edges, on=["task", "variant", "depth"], how="left").merge(
    margins.drop(columns=["metric"]), on=["task", "variant", "depth"], how="left")
edge_columns = ["lr_edge", "warmup_edge", "weight_decay_edge", "grid_edge"]
table[edge_columns] = table[edge_columns].fillna("")
table = table.assign(
    arm=table.variant.map(plotting.variant_label), test=[fmt(r) for _, r in table.iterrows()],
    lr=table.peak_lr.map(lambda v: f"{v:g}"), warmup=table.warmup.astype("Int64"),
    selection=[margin_text(r) for r in table.itertuples()],
    steps=[int(curve[(curve.task == r.task) & (curve.variant == r.variant)
                     & (curve.depth == r.depth) & curve.default].budget.iloc[0])
           for r in table.itertuples()])
shown = table[["task", "arm", "depth", "steps", "lr", "selection", "grid_edge", "test",
               "seeds"]].rename(
    columns={"test": "test metric, mean [95% interval]", "lr": "selected lr",
             "selection": "margin over the runner-up (validation loss)",
             "grid_edge": "grid edge", "steps": "budget (steps)"})
table_html = shown.to_html(index=False, border=0, classes="data")
edge_arms = table[table.grid_edge != ""]
edge_count = (f"{len(edge_arms)} of {len(table)} arms selected a setting on an edge of the "
              "grid their sweep tried")
edge_list = "; ".join(f"{r.task} {r.arm} L = {r.depth} ({r.grid_edge})"
                      for r in edge_arms.itertuples())
edge_line = f"{edge_count}: {edge_list}" if len(edge_arms) else edge_count
ties = table[table.near_tie.fillna(False).astype(bool)]
tie_line = (f"{len(ties)} of {len(table)} selections are near ties (margin inside the spread)"
            + (": " + "; ".join(f"{r.task} {r.arm} L = {r.depth}" for r in ties.itertuples())
               if len(ties) else ""))
print(edge_line)
print(tie_line)
shown

# %% [markdown]
# Per task and depth: the gap between tuned post-LN and tuned pre-LN (positive: pre-LN better)
# and the share of it that de-escalation recovers, (de-escalation − post-LN) / (pre-LN −
# post-LN), from the means over seeds; the recovery claim counts the depths whose gap is at
# least the margin, its post-hoc diagnostic those with a gap of at least 4 × the margin.

# %%
gap_rows = []
for task in tasks:
    sign = e5_claims.METRIC[task][1]
    m = summary[summary.task == task].set_index(["variant", "depth"])["mean"]
    for depth in sorted(summary[summary.task == task].depth.unique()):
        keys = [(v, depth) for v in ("post_ln", "pre_ln", "post_ln_deesc")]
        if not all(k in m.index for k in keys):
            continue
        post, pre, deesc = (m[k] for k in keys)
        gap = sign * (pre - post)
        gap_rows.append({
            "task": task, "depth": int(depth), "post-LN": f"{post:.3f}", "pre-LN": f"{pre:.3f}",
            "de-escalation": f"{deesc:.3f}", "gap (pre-LN better by)": f"{gap:.3f}",
            "recovered share": f"{(deesc - post) / (pre - post):.2f}" if gap > 0 else "—",
            "counted by the claim": "yes" if gap >= e5_claims.MARGIN else "no",
            "counted by the post-hoc diagnostic":
                "yes" if gap >= e5_claims.MEASURABLE_GAP else "no"})
gaps = pd.DataFrame(gap_rows)
gaps_html = gaps.to_html(index=False, border=0, classes="data")
gaps

# %% [markdown]
# ## Claims
# Registered in src/rankcollapse/claims/claims.yaml before the runs; measured by `rankcollapse.claims.e5`,
# resampling whole seeds (every arm's network of a seed together, so arms stay paired).

# %%
measurements = e5_claims.measure(runs, B, curve=curve)
pd.DataFrame([m.to_dict() for m in measurements])[["id", "value", "method", "n"]]

# %%
def deepest_text(task):
    st = table[table.task == task]
    deepest = int(st.depth.max())
    parts = [f"{plotting.variant_label(r.variant)} {r['mean']:.3f} [{r.low:.3f}, {r.high:.3f}] "
             f"(lr {r.peak_lr:g})" for _, r in st[st.depth == deepest].iterrows()]
    return f"{task} at depth {deepest} ({METRIC[task][1]}): " + "; ".join(parts)


def budgets_text():
    """Each depth's budget, as the runs trained it."""
    steps = curve[curve.default].groupby("depth").budget.first()
    return (f"{steps.iloc[0]} at every depth" if steps.nunique() == 1 else
            ", ".join(f"{v} at depth {d}" for d, v in steps.items()))


method = summary.method.iloc[0] if len(summary) else ""
curve_budgets = (grid.get("budget_curve") or {}).get("budgets", [])
description = (
    f"Every arm tuned over peak lr {grid['lr']} (warm-up {grid['warmup']}) on tuning seeds "
    f"{grid['tuning_seeds']}, selected by "
    f"{' / '.join(sorted(chosen.tuned_by.unique()))} on the mean validation loss, then "
    f"{n_seeds} fresh seeds at the selected setting (batch {grid['batch']}, width "
    f"{train.get('width')}); budgets (steps per network): {budgets_text()}"
    + (f"; the fresh seeds also at budgets {curve_budgets}" if curve_budgets else "")
    + f"; intervals: {method}. "
    + ". ".join(deepest_text(t) for t in tasks)
    + f". {int(runs.diverged.sum())} of {len(runs)} final runs diverged. {edge_count}. "
    f"{tie_line}."
)
print(description)
io.write_json(section(
    experiment, description,
    figures=[
        {"name": "sweep", **fig_sweep, "caption":
         "The sweep: validation loss (the selection metric, mean over the tuning seeds) against "
         "peak learning rate for each depth (colour), a panel per task and arm, each setting at "
         "the last rung it reached; stars: the selected setting; larger red-edged stars: a "
         "selection on an edge of the grid the arm's sweep tried, whose optimum may lie "
         "outside the grid."},
        {"name": "tuned_vs_depth", **fig_acc, "caption":
         f"Tuned test metric against depth per variant, each depth at its own budget: mean over "
         f"{n_seeds} fresh seeds (line), {method} (band), single seeds (dots), diverged runs "
         "(crosses); diamonds: the de-escalation placements at the deepest depth."},
        {"name": "budget_curve", **fig_budget, "caption":
         "The budget curve at each task's deepest depth: the tuned test metric of every arm "
         "against the training budget, each point a complete warmup-stable-decay run of that "
         f"many steps at the arm's selected learning rate; mean over {n_seeds} fresh seeds "
         f"(line), {method} (band); dotted: the default budget, where the claims are judged."},
        {"name": "learning_curves", **fig_learning, "caption":
         "Learning curves of every arm at each task's deepest depth: training loss (20-step "
         "running mean, mean over seeds) and the test metric at the evaluation steps (mean and "
         "range over seeds)."},
        {"name": "tsim_trained", **fig_tsim, "caption":
         "Per-layer token similarity of the trained models at each task's deepest depth, "
         "median over sequences and seeds; solid: after the block, dotted: after its "
         "attention sublayer."},
        {"name": "training_loss", **fig_loss, "caption":
         "Training loss of the final seeds (mean over seeds, 20-step running mean)."},
    ],
    tables=[{"caption": "Per arm: its training budget, the selected learning rate, how clearly "
             "it was selected (its margin in mean validation loss over the runner-up at the "
             "deciding rung, the spread of that margin over the tuning seeds, on how many "
             "seeds it won, the rung's steps; NEAR TIE: the margin lies inside the spread, "
             "another seed or CPU could flip the choice), grid edge (a selected value that is "
             "the smallest or largest value the arm's sweep tried) and its tuned test metric "
             f"(mean over seeds [{method}]). {edge_line}. {tie_line}.", "html": table_html},
            {"caption": "Per task and depth: tuned test metric of post-LN, pre-LN and "
             "de-escalation (mean over seeds), the post-LN → pre-LN gap, the share of it that "
             "de-escalation recovers, and whether the registered recovery claim (gap ≥ "
             f"{e5_claims.MARGIN:g}) and its post-hoc diagnostic (gap ≥ "
             f"{e5_claims.MEASURABLE_GAP:g}) count that depth.", "html": gaps_html}],
    measurements=measurements,
    numbers={"arms": table.drop(columns=["arm", "test"]).to_dict(orient="records"),
             "grid_edges": edge_arms[["task", "variant", "depth", *edge_columns]].to_dict(
                 orient="records"),
             "budgets": deciding,
             "budget_curve": budget_table.to_dict(orient="records"),
             "runs": runs.drop(columns=["test_loss"]).to_dict(orient="records")},
), numbers_path)
