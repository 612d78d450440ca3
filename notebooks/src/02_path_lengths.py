# ---
# jupyter:
#   kernelspec:
#     display_name: Python (rankcollapse)
#     language: python
#     name: rankcollapse
# ---

# %% [markdown]
# # E2 — Which paths carry the computation (Dong, Cordonnier & Loukas, ICML 2021, §4)
#
# A network of attention layers with skip connections is an ensemble of paths through subsets
# of its layers, one head in each; a path's length is the number of layers it passes through.
# **Original protocol** (the primary measurement): Dong et al.'s network — attention + skip +
# post-LayerNorm with biases, no MLP, depth 6 — trained on memorisation, sorting and convex
# hull; a path of length k is k random layers with one random head each, run without their
# residual and with a LayerNorm that has no learned gain or bias; 5 or 20 such paths are summed
# and classified, 5 repeats. **Extension (ours)**: the same tasks on an LN-free, bias-free
# network with skips, where the output is exactly the sum of its paths once the attention
# matrices of the full forward pass are fixed; we count every path of each length by a dynamic
# programme (caveat: attention is not recomputed per path). Unlike the original code: no
# dropout, no LayerNorm on the embedding, positions learned for every task, our read-out's
# LayerNorm (with its gain and bias) on the sum of paths, our optimiser, random tokens for
# memorisation and points uniform in the unit square for the convex hull.

# %% tags=["parameters"]
experiment = "E2"
tables = None  # name -> table: papermill injects the run's; None: the default config's
settings = None  # block -> config block: papermill injects the run's; None: the default's
figures_dir = "report/figures/E2"
numbers_path = "results/numbers/E2.json"

# %%
from rankcollapse.notebooks import defaults

tables, settings = defaults(experiment, tables, settings)

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from rankcollapse import io, plotting, references
from rankcollapse.claims import e2 as e2_claims
from rankcollapse.notebooks import section
from rankcollapse.experiments.paths import PAPER_REFERENCE

plotting.use_style()
table = io.read_parquet(tables["paths"])
table = table[table.depth == table.groupby("task").depth.transform("max")]
tasks = [t for t in ("memorisation", "sorting", "hull") if t in set(table.task)]
TASK_LABELS = {"memorisation": "memorisation", "sorting": "sorting", "hull": "convex hull"}
BASELINE_LABELS = {"memorisation": "random predictor", "sorting": "random predictor",
                   "hull": "majority predictor"}
original = table[(table.network == "post_ln") & table.bias]
ln_free = table[(table.network == "ln_free") & ~table.bias]
counts = sorted(c for c in table.samples.unique() if c > 0)
B = 1000
runs = e2_claims.per_network(table)
reference = references.load(tables["reference"]) if tables.get("reference") else None
ref_curves = references.e2_curves(reference) if reference else pd.DataFrame()
print(f"{len(table)} rows: tasks {tasks}, networks {sorted(set(table.network))}, "
      f"{table.seed.nunique()} seeds, sampled-path counts {counts}")

# %% [markdown]
# ## Accuracy against path length (original protocol)
# One panel per task, as in the paper's figure: token accuracy of 5 and 20 summed sampled
# paths of length k (mean over trained networks of the mean over repeats; bars: the spread of
# the networks' means, min–max), the full network (solid line: ours, mean over networks) and
# the baseline (dashed: the majority-class rate of the evaluation labels). Thin dotted lines:
# the paper's reference values for its entire model and its baseline.

# %%
def per_length(t, count):
    s = t[(t.protocol == "sampled") & (t.samples == count)]
    return s.groupby("k").accuracy.agg(["mean", "min", "max"]).reset_index()


fig, axes = plt.subplots(1, len(tasks), figsize=(4.3 * len(tasks), 4.6),
                         constrained_layout=True, squeeze=False)
for ax, task in zip(axes[0], tasks):
    t = original[original.task == task]
    for i, count in enumerate(counts):
        c = per_length(t, count)
        shift = 0.08 * (i - (len(counts) - 1) / 2)
        ax.errorbar(c.k + shift, c["mean"], yerr=[c["mean"] - c["min"], c["max"] - c["mean"]],
                    fmt="o-", ms=4, lw=1.2, capsize=2, color=plotting.PALETTE[i],
                    label=f"{count} paths")
    r = ref_curves[(ref_curves.task == task) & (ref_curves.samples == max(counts))
                   & (ref_curves.settings_match == "ours")] if len(ref_curves) else ref_curves
    if len(r):
        ax.plot(r.k, r.accuracy, "D--", ms=4, lw=0.9, mfc="white", color=plotting.PALETTE[3],
                label=f"original code, our settings ({max(counts)} paths, "
                      f"{int(r.seeds.max())} networks)")
    full = t[t.protocol == "full"].accuracy.mean()
    ax.axhline(full, color="black", lw=1.2, label=f"entire model (ours, {full:.2f})")
    ax.axhline(t.majority.mean(), color="grey", lw=1.2, ls="--",
               label=f"majority predictor (ours, {t.majority.mean():.2f})")
    if task in PAPER_REFERENCE:
        paper_full, paper_base = PAPER_REFERENCE[task]
        ax.axhline(paper_full, color="black", lw=0.8, ls=":",
                   label=f"paper: entire model {paper_full:.2f}")
        ax.axhline(paper_base, color="grey", lw=0.8, ls=":",
                   label=f"paper: {BASELINE_LABELS[task]} {paper_base:.2f}")
    ax.set_title(f"{TASK_LABELS.get(task, task)} (depth {int(t.depth.max())}, "
                 f"{t.seed.nunique()} networks)")
    ax.set_xlabel("path length k")
    ax.set_ylabel("token accuracy")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=6.5, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16),
              ncol=2)
fig.suptitle("Sampled paths of Dong et al.'s post-LN network (original protocol)", fontsize=10)
fig_original = plotting.save(fig, figures_dir, "accuracy_vs_path_length")

# %% [markdown]
# ## Extension (ours): every path, exactly, in an LN-free network
# Same tasks and sizes, LN-free and bias-free network with skips: accuracy of all paths of
# length ≤ k (solid) and of exactly k (dashed) by the exact path sums, and of 20 sampled paths
# of length k (markers, the original protocol on this network); mean over networks, band
# min–max. Black: the full network; grey dashed: the majority rate.

# %%
if len(ln_free):
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.3 * len(tasks), 4.4),
                             constrained_layout=True, squeeze=False)
    for ax, task in zip(axes[0], tasks):
        t = ln_free[ln_free.task == task]
        for protocol, style, label in (("exact_up_to", "-o", "all paths ≤ k (exact)"),
                                       ("exact_exactly", "--", "all paths = k (exact)")):
            c = t[t.protocol == protocol].groupby("k").accuracy.agg(["mean", "min", "max"])
            ax.plot(c.index, c["mean"], style, ms=3, color=plotting.PALETTE[0], label=label)
            ax.fill_between(c.index, c["min"], c["max"], color=plotting.PALETTE[0], alpha=0.12,
                            lw=0)
        if max(counts, default=0):
            c = per_length(t, max(counts))
            ax.plot(c.k, c["mean"], "s", ms=4, mfc="white", color=plotting.PALETTE[1],
                    label=f"{max(counts)} sampled paths = k")
        ax.axhline(t[t.protocol == "full"].accuracy.mean(), color="black", lw=1.2,
                   label="full network")
        ax.axhline(t.majority.mean(), color="grey", lw=1.2, ls="--", label="majority")
        ax.set_title(f"{TASK_LABELS.get(task, task)}: LN-free (ours)")
        ax.set_xlabel("path length k")
        ax.set_ylabel("token accuracy")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=6.5, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16),
                  ncol=2)
    fig_exact = plotting.save(fig, figures_dir, "exact_path_sums")
else:
    fig_exact = None

# %% [markdown]
# ## Numbers per task
# Mean over trained networks (± standard deviation over networks). Sampled accuracies are the
# best over lengths ≤ 1 and ≤ 2 and the accuracy at full length, with 20 summed paths.

# %%
def fmt(values):
    values = np.asarray(values, float)
    return f"{np.nanmean(values):.2f} ± {np.nanstd(values):.2f}" if len(values) else "—"


rows = []
for task in tasks:
    o = runs[(runs.task == task) & (runs.network == "post_ln")]
    e = runs[(runs.task == task) & (runs.network == "ln_free")]
    paper_full, paper_base = PAPER_REFERENCE.get(task, (np.nan, np.nan))
    rows.append({
        "task": TASK_LABELS.get(task, task), "networks": len(o),
        "full (ours)": fmt(o.full), "full (paper)": f"{paper_full:.2f}",
        "baseline (ours: majority)": fmt(o.majority),
        "baseline (paper)": f"{paper_base:.2f} ({BASELINE_LABELS[task].split()[0]})",
        "sampled, best k ≤ 1": fmt(o.sampled_best_up_to_1),
        "sampled, best k ≤ 2": fmt(o.sampled_best_up_to_2),
        "sampled, k = L": fmt(o.sampled_longest),
        "LN-free: full": fmt(e.full), "LN-free: exact ≤ 1": fmt(e.exact_up_to_1),
        "LN-free: exact ≤ 2": fmt(e.exact_up_to_2),
    })
summary = pd.DataFrame(rows)
table_html = summary.to_html(index=False, border=0, classes="data")
summary

# %% [markdown]
# ## Beside the original code
# Dong et al.'s own code (twistedcubic/attention-rank-collapse), run outside this project at our
# default settings and at theirs (`workflow/references/d21_original.yaml`, with its provenance):
# per task and settings, the mean over its trained networks of the full accuracy, the majority
# rate of its evaluation labels and the 20-path sampled accuracy per length, beside ours.

# %%
def reference_rows():
    out = []
    for task in tasks:
        o = runs[(runs.task == task) & (runs.network == "post_ln")]
        ours_curve = per_length(original[original.task == task], max(counts)).set_index("k")
        out.append({"task": TASK_LABELS.get(task, task), "code": "ours", "settings": "ours",
                    "networks": len(o), "full": f"{o.full.mean():.3f}",
                    "majority": f"{o.majority.mean():.3f}",
                    **{f"k = {k}": f"{ours_curve.loc[k, 'mean']:.3f}"
                       for k in ours_curve.index}})
        if not len(ref_curves):
            continue
        for match in ("ours", "theirs"):
            r = ref_curves[(ref_curves.task == task) & (ref_curves.settings_match == match)
                           & (ref_curves.samples == max(counts))].set_index("k")
            if len(r):
                out.append({"task": TASK_LABELS.get(task, task), "code": "original",
                            "settings": match, "networks": int(r.seeds.max()),
                            "full": f"{r.full.iloc[0]:.3f}", "majority": f"{r.majority.iloc[0]:.3f}",
                            **{f"k = {k}": f"{r.loc[k, 'accuracy']:.3f}" for k in r.index}})
    return pd.DataFrame(out).fillna("—")


reference_table = reference_rows()
hull_ref = ref_curves[ref_curves.task == "hull"] if len(ref_curves) else ref_curves
hull_baselines = (
    f" Convex hull's baseline: majority rate {runs[runs.task == 'hull'].majority.mean():.2f} "
    f"(ours), {hull_ref.majority.mean():.2f} (original code); the paper's figure draws "
    f"{PAPER_REFERENCE['hull'][1]:.2f}." if "hull" in tasks and len(hull_ref) else "")
reference_html = reference_table.to_html(index=False, border=0, classes="data")
reference_table

# %% [markdown]
# ## Claims
# Registered in src/rankcollapse/claims/claims.yaml and measured by `rankcollapse.claims.e2`: gain shares
# (accuracy above the majority rate as a share of the full network's), resampling whole
# trained networks.

# %%
measurements = e2_claims.measure(table, B, reference=reference,
                                 steps=settings["paths"]["train"]["steps"])
pd.DataFrame([m.to_dict() for m in measurements])[["id", "value", "method", "n"]]

# %%
paths_cfg = settings["paths"]
depths = sorted(int(d) for d in table.depth.unique())


def sizes(task):
    o = original[original.task == task]
    return (f"{TASK_LABELS.get(task, task)} (width {int(o.width.iloc[0])}, "
            f"{int(o.heads.iloc[0])} heads)") if len(o) else TASK_LABELS.get(task, task)


networks = [name for name, rows in (("Dong et al.'s post-LN network with biases", original),
                                    ("our LN-free network", ln_free)) if len(rows)]
description = (
    f"{' and '.join(networks)}, depth "
    f"{', '.join(map(str, depths))}, {table.seed.nunique()} independently trained networks "
    f"each, on {', '.join(sizes(t) for t in tasks)}. Sampled-path protocol: "
    f"{' and '.join(map(str, counts))} paths summed per evaluation, {paths_cfg['repeats']} "
    f"repeats, on {paths_cfg['eval_size']} evaluation examples (for memorisation: sequences it "
    "was trained on). The task sizes follow the original code where the budget allows and are "
    "scaled down where it does not (see the configuration); the training recipe is ours. "
    "Full-network token accuracy per task (ours, mean over networks; the paper's in "
    "brackets): " + "; ".join(
        f"{TASK_LABELS.get(t, t)} {runs[(runs.task == t) & (runs.network == 'post_ln')].full.mean():.2f}"
        f" ({PAPER_REFERENCE[t][0]:.2f})" for t in tasks if t in PAPER_REFERENCE) + "."
)
print(description)
figures = [{"name": "accuracy_vs_path_length", **fig_original, "caption":
            "Original protocol on Dong et al.'s post-LN network: token accuracy of 5 and 20 "
            "summed sampled paths of length k (mean over trained networks, bars min–max), the "
            "full network (solid) and the majority-class rate (dashed); dotted: the paper's "
            "entire-model and baseline values; open diamonds: Dong et al.'s original code run at "
            "our settings (20 paths, mean over its networks; "
            + (references.provenance(reference) if reference else "not run") + ")."}]
if fig_exact is not None:
    figures.append({"name": "exact_path_sums", **fig_exact, "caption":
                    "Extension (ours), LN-free network: accuracy of all paths of length ≤ k "
                    "(solid) and exactly k (dashed) by exact path sums with the attention of "
                    "the full forward pass (band min–max over networks), and of 20 sampled "
                    "paths of length k (squares)."})
io.write_json(section(
    experiment, description, figures=figures,
    tables=[{"caption": "Per task: full-network accuracy and baseline, ours and the paper's; "
             "best sampled-path accuracy over lengths ≤ 1 and ≤ 2 and at full length (20 "
             "paths); the LN-free network's full and exact ≤ 1, ≤ 2 accuracies. Mean ± standard "
             "deviation over trained networks.", "html": table_html},
            {"caption": "Beside Dong et al.'s original code ("
             + (references.provenance(reference) if reference else "not run")
             + "), run at our default settings and at its own (README: 65–70 epochs): mean over "
             "trained networks of the full accuracy, the majority rate of the evaluation labels "
             "and the accuracy of 20 summed sampled paths of length k." + hull_baselines,
             "html": reference_html}],
    measurements=measurements,
    numbers={"per_network": runs.to_dict(orient="records"), "depths": depths,
             "seeds": int(table.seed.nunique())},
), numbers_path)
