# ---
# jupyter:
#   kernelspec:
#     display_name: Python (rankcollapse)
#     language: python
#     name: rankcollapse
# ---

# %% [markdown]
# # E5b — Rival depth fixes side by side
#
# Three fixes for deep post-norm transformers, each a switch of the same model, trained at the
# deepest digits depth of E5's grid. Each fix is an arm of E5: tuned on its own (E5's sweep on
# the tuning seed, selected on validation), then trained on the same fresh seeds; post-LN,
# pre-LN and de-escalation are E5's own runs at that depth:
# - **de-escalation** (Yu & Zhang): the attention output Y ← (I − τ·(1/n)11ᵀ)Y, τ = 1;
# - **centred attention** (Nait Saada, Naderi & Tanner, ICML 2025, "Mind the Gap"):
#   A ← A − (1/n)11ᵀ, removing the outlier eigenvalue that separates a random Markov attention
#   matrix's top singular value from the rest;
# - **scaled residual branches** (Noci et al., NeurIPS 2022): every branch × 1/√L;
# - **DeepNorm** (Wang et al. 2022, DeepNet): the residual × α = (2L)^¼ before each post-LN, and
#   the value, output and feed-forward weights initialised smaller by (8L)^¼ (the reference
#   code's rescaling of the default initialisation);
#
# with pre-LN and plain post-LN as references. (I − Π₁)A equals A − (1/n)11ᵀ only when A is
# doubly stochastic: de-escalation removes the token mean of the *output*, centred attention
# subtracts the uniform matrix from the *attention*, and the two differ for row-stochastic A.
# Token similarity at init comes from the same task models before training (digits).

# %% tags=["parameters"]
experiment = "E5b"
tables = None  # name -> table: papermill injects the run's; None: the default config's
settings = None  # block -> config block: papermill injects the run's; None: the default's
figures_dir = "report/figures/E5b"
numbers_path = "results/numbers/E5b.json"

# %%
from rankcollapse.notebooks import defaults

tables, settings = defaults(experiment, tables, settings)

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from rankcollapse import io, plotting
from rankcollapse.claims import e5b as e5b_claims
from rankcollapse.notebooks import section
from rankcollapse.experiments.trained import final_accuracy, selected_settings
from rankcollapse.training.selection import decisions

plotting.use_style()
rivals, grid = settings["rival_fixes"], settings["depth_grid"]
if isinstance(grid["steps"], dict):  # papermill passes the depths as strings
    grid["steps"] = {int(d): int(v) for d, v in grid["steps"].items()}
task = rivals["task"]
metrics = io.read_parquet(tables["metrics"])
metrics = metrics[metrics.task == task]
tuning = io.read_parquet(tables["tuning"])
chosen = selected_settings(tuning)
margins = decisions(tuning)
runs = final_accuracy(metrics)
rival_runs = runs[runs.variant.isin(rivals["variants"])]
L = int((rival_runs if len(rival_runs) else runs).depth.max())
runs = runs[runs.depth == L]
wanted = ["post_ln", "pre_ln", "post_ln_deesc", *rivals["variants"]]
variants = [v for v in wanted if v in set(runs.variant)]
B = 1000
print(f"{len(runs)} runs at depth {L}: {variants}")

# %%
fig, axes = plt.subplots(1, 3, figsize=(13, 4), constrained_layout=True)
ax = axes[0]
for i, variant in enumerate(variants):
    acc = runs[runs.variant == variant].accuracy
    color = plotting.variant_color(variant)
    ax.bar(i, acc.mean(), color=color, alpha=0.7)
    ax.scatter(np.full(len(acc), i), acc, color="k", s=12, zorder=3)
chance = float(runs.chance.iloc[0])
ax.axhline(chance, color="grey", ls=":", lw=1)
ax.text(len(variants) - 0.5, chance, "chance", ha="right", va="bottom", fontsize=8,
        color="grey")
ax.set_xticks(range(len(variants)), [plotting.variant_label(v) for v in variants], rotation=30,
              ha="right", fontsize=8)
ax.set_ylabel(f"test accuracy at depth {L}")
ax.set_ylim(0, 1.02)
ax.set_title(f"(a) accuracy after training, depth {L}")

for ax, stage, title in ((axes[1], "init", f"(b) {task} model at init"),
                         (axes[2], "trained", f"(c) {task} model after training")):
    m = metrics[(metrics.stage == stage) & (metrics.depth == L)]
    for variant in variants:
        q = m[m.variant == variant].groupby("layer").token_similarity.mean()
        ax.plot(q.index, q.values, color=plotting.variant_color(variant),
                label=plotting.variant_label(variant), lw=1.8)
    ax.set_xlabel("layer")
    ax.set_ylabel("token similarity t_sim")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
axes[2].legend(fontsize=7.5, frameon=False, loc="best")
fig_rivals = plotting.save(fig, figures_dir, "rival_fixes")

# %%
def tsim_last(table: pd.DataFrame, variant: str, depth: int | None = None) -> float:
    t = table[table.variant == variant]
    layer = t.layer.max() if depth is None else depth
    return float(t[t.layer == layer].token_similarity.mean())


m_init = metrics[(metrics.stage == "init") & (metrics.depth == L)]
rows = []
for variant in variants:
    acc = runs[runs.variant == variant].accuracy
    sel = chosen[(chosen.task == task) & (chosen.variant == variant) & (chosen.depth == L)]
    dec = margins[(margins.task == task) & (margins.variant == variant) & (margins.depth == L)]
    rows.append({
        "variant": plotting.variant_label(variant),
        "selected lr": f"{sel.peak_lr.iloc[0]:g}" if len(sel) else "—",
        "margin over the runner-up (validation loss)": (
            f"{dec.margin.iloc[0]:.3f} over lr {dec.runner_up_lr.iloc[0]:g} (spread "
            f"{dec.spread.iloc[0]:.3f}; won {dec.wins.iloc[0]} of {dec.tuning_seeds.iloc[0]} seeds)"
            + (" NEAR TIE" if dec.near_tie.iloc[0] else "")
            if len(dec) and np.isfinite(dec.runner_up_lr.iloc[0]) else "—"),
        f"accuracy at depth {L} (mean; seeds)": f"{acc.mean():.3f} ("
        + ", ".join(f"{a:.3f}" for a in acc) + ")",
        f"t_sim at init, {task}, layer {L}": f"{tsim_last(m_init, variant):.3f}",
        "diverged runs": int(runs[runs.variant == variant].diverged.sum()),
    })
summary_table = pd.DataFrame(rows)
summary_table

# %% [markdown]
# ## Claims
# Registered in src/rankcollapse/claims/claims.yaml (kind `ours`: the papers do not compare these fixes);
# measured by `rankcollapse.claims.e5b`, resampling whole seeds so that the arms stay paired.

# %%
measurements = e5b_claims.measure(runs, m_init, B)
pd.DataFrame([m.to_dict() for m in measurements])[["id", "value", "method", "n"]]

# %%
steps = int(tuning[(tuning.role == "final") & (tuning.depth == L)].rung_steps.iloc[0])
description = (
    f"{len(variants)} variants at depth {L} on {task}, each tuned on its own as an arm of E5 "
    f"(peak lr {grid['lr']}, warm-up {grid['warmup']}, {steps} steps, selected on the mean "
    f"validation loss over tuning seeds {grid['tuning_seeds']}), {runs.seed.nunique()} fresh "
    "seeds each. Mean test accuracy: "
    + ", ".join(f"{plotting.variant_label(v)} {runs[runs.variant == v].accuracy.mean():.2f}"
                for v in variants) + "."
)
print(description)
io.write_json(section(
    experiment, description,
    figures=[{"name": "rival_fixes", **fig_rivals, "caption":
              f"(a) Test accuracy of each fix at depth {L}, each tuned on its own (bars: mean "
              "over seeds; dots: seeds; dotted: chance). (b, c) Token similarity t_sim per layer "
              f"of the same {task} models before and after training (mean over the fixed "
              "evaluation batch and seeds)."}],
    tables=[{"caption": f"Per fix: the selected learning rate and how clearly it was selected "
             "(margin in mean validation loss over the runner-up at the deciding rung, the "
             "spread of that margin over the tuning seeds, on how many seeds it won; NEAR TIE: "
             f"the margin lies inside the spread), accuracy at depth {L} and token similarity "
             "at the last layer at initialisation.", "html": summary_table.to_html(index=False, border=0,
                                                                       classes="data")}],
    measurements=measurements,
    numbers={"depth": L, "accuracy": runs.groupby("variant").accuracy.mean().to_dict()},
), numbers_path)
