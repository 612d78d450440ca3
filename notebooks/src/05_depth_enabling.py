# ---
# jupyter:
#   kernelspec:
#     display_name: Python (rankcollapse)
#     language: python
#     name: rankcollapse
# ---

# %% [markdown]
# # E5 — Depth-enabling: post-norm, pre-norm and de-escalation (Yu & Zhang, arXiv 2312.06182)
#
# Yu & Zhang find that deep post-norm ("classic") transformers fail to train because token
# similarity escalates, and that de-escalating the attention output, Y ← (I − τΠ₁)Y, lets them
# go deep, approaching pre-norm. We train every variant at every depth of the grid with the
# same budget (steps, learning rate, schedule) and several seeds. The paper's own runs are ViT
# on CIFAR-10 and Transformer-XL on WikiText-103; ours are small-scale analogues (8×8 digits
# and integer sorting, a few hundred CPU steps). A diverged run (non-finite loss) is a result:
# it is drawn with a cross and counted at chance accuracy.

# %% tags=["parameters"]
experiment = "E5"
tables = {"metrics": "results/tables/E5_metrics.parquet",
          "history": "results/tables/E5_history.parquet"}
settings = {
    "depth_grid": {"tasks": ["digits"], "variants": ["post_ln", "pre_ln", "post_ln_deesc"],
                   "depths": [2, 4, 8, 16, 32], "seeds": [0, 1]},
    "train": {"width": 32, "heads": 2, "steps": 400, "lr": 0.002},
    "tasks": {},
}
figures_dir = "report/figures/E5"
numbers_path = "results/numbers/E5.json"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from rankcollapse import io, plotting
from rankcollapse.claims import Claim
from rankcollapse.notebooks import section
from rankcollapse.analysis import bootstrap_over_seeds
from rankcollapse.trained import final_accuracy

plotting.use_style()
grid, train = settings["depth_grid"], settings["train"]
metrics = io.read_parquet(tables["metrics"])
history = io.read_parquet(tables["history"])
runs = final_accuracy(metrics)
variants = [v for v in grid["variants"] if v in set(runs.variant)]
tasks = [t for t in grid["tasks"] if t in set(runs.task)]
depths = sorted(runs.depth.unique())
L_min, L_max = int(depths[0]), int(depths[-1])
B = 1000
print(f"{len(runs)} runs: tasks {tasks}, variants {variants}, depths {depths}, "
      f"seeds {sorted(runs.seed.unique())}; diverged: {int(runs.diverged.sum())}")

# %% [markdown]
# ## Final test accuracy against depth
# Mean over seeds (line) and each seed (dots); crosses mark diverged runs, counted at chance.

# %%
fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False,
                         constrained_layout=True)
for ax, task in zip(axes[0], tasks):
    t = runs[runs.task == task]
    for i, variant in enumerate(variants):
        tv = t[t.variant == variant]
        color = plotting.variant_color(variant)
        mean = tv.groupby("depth").accuracy.mean()
        ax.plot(mean.index, mean.values, "-", color=color, lw=1.8,
                label=plotting.variant_label(variant))
        jitter = 1 + 0.04 * (i - (len(variants) - 1) / 2)  # spread overlapping seeds apart
        ok = tv[~tv.diverged]
        ax.scatter(ok.depth * jitter, ok.accuracy, s=14, color=color, alpha=0.7, lw=0)
        bad = tv[tv.diverged]
        ax.scatter(bad.depth * jitter, bad.accuracy, s=40, marker="x", color=color)
    ax.axhline(t.chance.iloc[0], color="grey", ls=":", lw=1)
    ax.text(L_max, t.chance.iloc[0] + 0.01, "chance", color="grey", fontsize=8, va="bottom",
            ha="right")
    ax.set_xscale("log", base=2)
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("depth L (blocks)")
    ax.set_ylabel("final test accuracy")
    ax.set_title(f"{task}: {train.get('steps')} steps, lr {train.get('lr')}")
handles, labels = axes[0, 0].get_legend_handles_labels()
fig.legend(handles, labels, frameon=False, loc="outside lower center", ncol=len(variants))
fig_acc = plotting.save(fig, figures_dir, "accuracy_vs_depth")

# %% [markdown]
# ## Training loss
# Training loss per step (mean over seeds, smoothed over 20 steps), one panel per depth;
# dashed verticals mark the step where a run diverged.

# %%
task0 = tasks[0]
h = history[history.task == task0]
fig, axes = plt.subplots(1, len(depths), figsize=(3.2 * len(depths), 3.4), sharey=True,
                         constrained_layout=True, squeeze=False)
for ax, depth in zip(axes[0], depths):
    for variant in variants:
        hv = h[(h.variant == variant) & (h.depth == depth)]
        curve = hv.groupby("step").loss.mean().rolling(20, min_periods=1).mean()
        ax.plot(curve.index, curve.values, color=plotting.variant_color(variant), lw=1.4,
                label=plotting.variant_label(variant))
        for step in hv[hv.diverged].diverged_step.unique():
            ax.axvline(step, color=plotting.variant_color(variant), ls="--", lw=1)
    ax.set_title(f"L = {depth}")
    ax.set_xlabel("step")
axes[0, 0].set_ylabel(f"training loss ({task0})")
handles, labels = axes[0, 0].get_legend_handles_labels()
fig.legend(handles, labels, frameon=False, loc="outside lower center", ncol=len(variants))
fig_loss = plotting.save(fig, figures_dir, "training_loss")

# %% [markdown]
# ## Token similarity of trained models
# Per-layer t_sim on the fixed test batch, median over sequences and seeds, for each depth.

# %%
trained = metrics[(metrics.stage == "trained") & (metrics.task == task0)]
fig, axes = plt.subplots(1, len(depths), figsize=(3.2 * len(depths), 3.4), sharey=True,
                         constrained_layout=True, squeeze=False)
for ax, depth in zip(axes[0], depths):
    for variant in variants:
        tv = trained[(trained.variant == variant) & (trained.depth == depth)]
        if tv.token_similarity.notna().any():
            q = tv.groupby("layer").token_similarity.quantile([0.1, 0.5, 0.9]).unstack()
            color = plotting.variant_color(variant)
            ax.plot(q.index, q[0.5], color=color, lw=1.6, label=plotting.variant_label(variant))
            ax.fill_between(q.index, q[0.1], q[0.9], color=color, alpha=0.18, lw=0)
    ax.set_title(f"L = {depth}")
    ax.set_xlabel("layer l")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(-0.02, 1.02)
axes[0, 0].set_ylabel("t_sim after training")
handles, labels = axes[0, 0].get_legend_handles_labels()
fig.legend(handles, labels, frameon=False, loc="outside lower center", ncol=len(variants))
fig_tsim = plotting.save(fig, figures_dir, "tsim_trained")

# %%
summary = runs.groupby(["task", "variant", "depth"], sort=False).agg(
    mean=("accuracy", "mean"), sd=("accuracy", "std"), seeds=("seed", "nunique"),
    diverged=("diverged", "sum")).reset_index()
wide = summary.assign(cell=[f"{m:.3f} ± {s:.3f}" + (f" ({d} div.)" if d else "")
                            for m, s, d in zip(summary["mean"], summary.sd.fillna(0),
                                               summary.diverged)])
wide = wide.pivot(index=["task", "variant"], columns="depth", values="cell")
wide = wide.reset_index().assign(variant=lambda d: d.variant.map(plotting.variant_label))
wide.columns = [f"L = {c}" if isinstance(c, int | np.integer) else c for c in wide.columns]
table_html = wide.to_html(index=False, border=0, classes="data")
wide

# %% [markdown]
# ## Claims

# %%
def acc(d, variant, depth):
    return d[(d.variant == variant) & (d.depth == depth)].accuracy.mean()


def degradation(d):
    return acc(d, "post_ln", L_min) - acc(d, "post_ln", L_max)


def recovered(d):
    gap = acc(d, "pre_ln", L_max) - acc(d, "post_ln", L_max)
    return (acc(d, "post_ln_deesc", L_max) - acc(d, "post_ln", L_max)) / gap if gap > 0.05 \
        else np.nan


def pre_ln_change(d):
    return acc(d, "pre_ln", L_max) - acc(d, "pre_ln", L_min)


def grid_claim(cid, statement, source, statistic, needs, quantity, low, high, paper, reason):
    d = runs[runs.task == task0]
    if not set(needs) <= set(variants) or L_min == L_max:
        return Claim(cid, statement, source, quantity, None, None, low, high, paper,
                     reason=f"needs variants {needs} at two depths")
    value, interval = bootstrap_over_seeds(d, statistic, B)
    quantity = f"{quantity} ({task0}, {B} bootstrap resamples over seeds)"
    return Claim(cid, statement, source, quantity, value, interval, low, high, paper,
                 reason=reason.format(v=value))


gap_now = acc(runs[runs.task == task0], "pre_ln", L_max) - acc(runs[runs.task == task0],
                                                                "post_ln", L_max)
claims = [
    grid_claim("E5.post_ln_degrades",
               "Deep post-norm transformers degrade with depth (they become hard to train).",
               "Yu & Zhang, §1 and §5", degradation, ["post_ln"],
               f"post-LN accuracy at L = {L_min} minus at L = {L_max}", 0.1, np.inf,
               "deep post-norm fails to train",
               "post-LN loses {v:.3f} accuracy from the shallowest to the deepest model"),
    grid_claim("E5.deescalation_recovers",
               "De-escalation recovers most of the gap between deep post-norm and pre-norm.",
               "Yu & Zhang, §5 (ViT on CIFAR-10, Transformer-XL on WikiText-103)", recovered,
               ["post_ln", "pre_ln", "post_ln_deesc"],
               f"share of the pre-LN − post-LN accuracy gap recovered by de-escalation at "
               f"L = {L_max}", 0.5, np.inf, "deep post-norm + de-escalation approaches pre-norm",
               "de-escalation recovers {v:.0%} of the gap"
               if gap_now > 0.05 else "no gap to recover at this scale"),
    grid_claim("E5.pre_ln_trains_deep",
               "Pre-norm transformers keep training well at depth (within 5 points of shallow).",
               "Yu & Zhang, §5 (pre-norm baseline)", pre_ln_change, ["pre_ln"],
               f"pre-LN accuracy at L = {L_max} minus at L = {L_min}", -0.05, np.inf, None,
               "pre-LN changes by {v:+.3f} from shallowest to deepest"),
]
pd.DataFrame([c.to_dict() for c in claims])[["id", "measured", "interval", "criterion", "verdict"]]

# %%
deep = summary[(summary.task == task0) & (summary.depth == L_max)].set_index("variant")
deep_text = ", ".join(f"{plotting.variant_label(v)} {deep.loc[v, 'mean']:.3f}"
                      for v in variants if v in deep.index)
summary_text = (
    f"Test accuracy on {task0} at depth {L_max} (mean over {runs.seed.nunique()} seeds): "
    f"{deep_text}. Post-LN changes by {-degradation(runs[runs.task == task0]):+.3f} from depth "
    f"{L_min} to {L_max}; {int(runs.diverged.sum())} of {len(runs)} runs diverged. "
    "A small-scale analogue of Yu & Zhang's ViT/CIFAR-10 and Transformer-XL experiments."
)
print(summary_text)
io.write_json(section(
    experiment, "Depth-enabling: post-norm, pre-norm and de-escalation",
    "Yu & Zhang (arXiv 2312.06182)", summary_text,
    figures=[
        {"name": "accuracy_vs_depth", **fig_acc, "caption":
         "Final test accuracy against depth per variant: mean over seeds (line), single seeds "
         "(dots), diverged runs (crosses, counted at chance); dotted: chance accuracy."},
        {"name": "training_loss", **fig_loss, "caption":
         f"Training loss on {task0} per step (mean over seeds, 20-step running mean), one panel "
         "per depth; dashed verticals mark divergence."},
        {"name": "tsim_trained", **fig_tsim, "caption":
         "Per-layer token similarity t_sim of the trained models on a fixed test batch, median "
         "and 10–90 % band over sequences and seeds, one panel per depth."},
    ],
    tables=[{"caption": "Final test accuracy, mean ± standard deviation over seeds (diverged "
             "runs counted at chance).", "html": table_html}],
    claims=claims,
    numbers={"accuracy": summary.to_dict(orient="records"),
             "runs": runs.drop(columns=["test_loss"]).to_dict(orient="records"),
             "depths": [int(d) for d in depths]},
), numbers_path)
