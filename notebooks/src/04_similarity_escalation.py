# ---
# jupyter:
#   kernelspec:
#     display_name: Python (rankcollapse)
#     language: python
#     name: rankcollapse
# ---

# %% [markdown]
# # E4 — Token similarity escalation (Yu & Zhang, arXiv 2312.06182)
#
# Yu & Zhang measure token similarity t_sim(X) = ‖Π₁X‖²_F / ‖X‖²_F (Π₁ = (1/n)11ᵀ, the share of
# the stream's energy in the "all tokens equal" direction) and its complement t_div = 1 − t_sim.
# A row-stochastic attention matrix keeps span{1} invariant with eigenvalue 1 and contracts the
# rest roughly by its second eigenvalue modulus |λ₂|, so t_sim escalates layer after layer, at a
# "linear rate" in the optimisation sense (t_div shrinking by a constant factor per layer); some
# summaries read it as t_sim growing linearly in depth. We fit both readings. De-escalation,
# Y ← (I − τΠ₁)Y after self-attention, removes the excess similarity.
#
# Three views of the same variants: at initialisation on random Gaussian sequences (E1's table),
# at initialisation on the task's test images, and after training (this experiment's jobs).
# Ours are small models on 8×8 digits; the paper's are ViTs on CIFAR-10 and Transformer-XL.
#
# **No blank tokens.** With raw pixels about a quarter of the digits' 2×2 patches are blank:
# their embeddings are exactly zero (the patch embedding has no bias), so those tokens differ
# only by their 0.02-scale positional vectors and t_sim is high at layer 0 for a reason of the
# data. The digits patches are therefore centred by default (the per-pixel training mean
# subtracted); below, layer-0 t_sim with raw and with centred patches, and a check that no
# token is blank. **Per sublayer.** The trace also records the stream after each block's
# attention sublayer (before its MLP), so where t_sim rises — in attention or in the MLP — is
# visible per layer.

# %% tags=["parameters"]
experiment = "E4"
tables = None  # name -> table: papermill injects the run's; None: the default config's
settings = None  # block -> config block: papermill injects the run's; None: the default's
figures_dir = "report/figures/E4"
numbers_path = "results/numbers/E4.json"

# %%
from rankcollapse.notebooks import defaults

tables, settings = defaults(experiment, tables, settings)

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from rankcollapse import io, plotting
from rankcollapse.claims import e4 as e4_claims
from rankcollapse.notebooks import section
from rankcollapse.experiments.trained import blank_patch_share, escalation_fits, layer0_similarity

plotting.use_style()
esc = settings["escalation"]
metrics = io.read_parquet(tables["metrics"])
metrics = metrics[(metrics.task == esc["task"]) & (metrics.depth == esc["depth"])]
e1 = io.read_parquet(tables["init"])
variants = [v for v in esc["variants"] if v in set(metrics.variant)]
VIEWS = {  # name -> (table, title)
    "init_gaussian": (e1[e1.variant.isin(variants)],
                      f"at init, Gaussian input (E1, depth {int(e1.layer.max())})"),
    "init_task": (metrics[metrics.stage == "init"], f"at init, {esc['task']} test images"),
    "trained": (metrics[metrics.stage == "trained"], f"after training, {esc['task']}"),
}
# Below these t_div is round-off: E1 runs in float64, the task models in float32.
FLOORS = {"init_gaussian": 1e-12, "init_task": 1e-6, "trained": 1e-6}
EPS32 = float(np.finfo(np.float32).eps)
B = 1000
diverged = sorted(set(metrics[metrics.diverged].variant))
print(f"variants {variants}; depth {esc['depth']}; seeds {sorted(metrics.seed.unique())}; "
      f"diverged: {diverged or 'none'}")

# %% [markdown]
# ## t_sim and t_div per layer
# Median over the test sequences of all seeds; band = 10–90 % quantiles. Layer 0 is the
# embedded input. Bottom row: t_div = 1 − t_sim on a log scale, where a constant per-layer
# factor (the optimisation-sense linear rate) is a straight line; the dotted line marks float32
# round-off (the task models run in float32), below which t_div is drawn at 10⁻⁹.

# %%
def band(ax, t, value, variant, log=False):
    q = t.groupby("layer")[value].quantile([0.1, 0.5, 0.9]).unstack()
    if log:
        q = q.clip(lower=1e-9)
    color = plotting.variant_color(variant)
    ax.plot(q.index, q[0.5], color=color, lw=1.8, label=plotting.variant_label(variant))
    ax.fill_between(q.index, q[0.1], q[0.9], color=color, alpha=0.18, lw=0)


fig, axes = plt.subplots(2, 3, figsize=(13, 7), constrained_layout=True, sharey="row")
for col, (view, (t, title)) in enumerate(VIEWS.items()):
    for variant in variants:
        tv = t[t.variant == variant].assign(t_div=lambda d: 1 - d.token_similarity)
        if tv.token_similarity.notna().any():
            band(axes[0, col], tv, "token_similarity", variant)
            band(axes[1, col], tv, "t_div", variant, log=True)
    axes[0, col].set_title(title)
    axes[1, col].set_yscale("log")
    axes[1, col].set_ylim(5e-10, 2)
    axes[1, col].set_xlabel("layer l")
    axes[1, col].xaxis.set_major_locator(MaxNLocator(integer=True))
    if view != "init_gaussian":
        axes[1, col].axhline(EPS32, color="grey", ls=":", lw=1)
        axes[1, col].text(0, EPS32 * 2, "float32 eps", fontsize=8, color="grey")
axes[0, 0].set_ylabel("token similarity t_sim")
axes[1, 0].set_ylabel("t_div = 1 − t_sim (log)")
axes[0, 0].set_ylim(-0.02, 1.02)
axes[0, 2].legend(frameon=False, loc="best")
fig_tsim = plotting.save(fig, figures_dir, "tsim_per_layer")

# %% [markdown]
# ## Both readings of the "linear rate"
# Fits of the seed-mean t_sim of every layer against the layer index: log t_div = a + b·l
# (factor ρ = e^b per layer) and t_sim = a + b·l. The better reading has the higher R².
# log t_div is fitted only above the round-off floor (10⁻¹² in float64, 10⁻⁶ in float32).

# %%
rows = []
for view, (t, _) in VIEWS.items():
    for variant in variants:
        tv = t[t.variant == variant]
        if tv.token_similarity.notna().sum() == 0:
            continue
        fit = escalation_fits(tv, FLOORS[view])
        rows.append({"view": view, "variant": variant, **fit})
fits = pd.DataFrame(rows)
fits

# %%
def fmt_fits(df):
    out = df.assign(variant=df.variant.map(plotting.variant_label))
    out = out.rename(columns={"log_slope": "slope of log t_div", "rho": "ρ per layer",
                              "log_r2": "R² (log t_div)", "lin_slope": "slope of t_sim",
                              "lin_r2": "R² (t_sim linear)"})
    return out.to_html(index=False, border=0, classes="data", float_format=lambda v: f"{v:.3g}")


table_html = fmt_fits(fits)

# %% [markdown]
# ## At E5's deepest depth
# The same per-layer view for E5's tuned networks at the deepest depth of its grid on
# `escalation.task` (each arm tuned on its own, its fresh seeds; E5b's rival fixes included when
# they trained there): where post-LN's tokens grow alike and whether de-escalation stops it at
# the depth where post-LN's training fails. Shown when the report includes E5.

# %%
deep_depth, fig_deep = None, None
if "deep" in tables:
    deep = io.read_parquet(tables["deep"])
    deep = deep[deep.task == esc["task"]]
    deep_depth = int(deep.depth.max()) if len(deep) else None
if deep_depth is not None:
    deep = deep[deep.depth == deep_depth]
    deep_variants = [v for v in ("post_ln", "pre_ln", "post_ln_deesc") if v in set(deep.variant)]
    deep_variants += sorted(set(deep.variant) - set(deep_variants))
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.5), constrained_layout=True, sharey="row")
    for col, stage in enumerate(("init", "trained")):
        t = deep[deep.stage == stage]
        for variant in deep_variants:
            tv = t[t.variant == variant].assign(t_div=lambda d: 1 - d.token_similarity)
            if tv.token_similarity.notna().any():
                band(axes[0, col], tv, "token_similarity", variant)
                band(axes[1, col], tv, "t_div", variant, log=True)
        axes[0, col].set_title(f"{'at init' if stage == 'init' else 'after training'}, "
                               f"{esc['task']}, depth {deep_depth} (E5, tuned)")
        axes[1, col].set_yscale("log")
        axes[1, col].set_ylim(5e-10, 2)
        axes[1, col].axhline(EPS32, color="grey", ls=":", lw=1)
        axes[1, col].set_xlabel("layer l")
        axes[1, col].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0, 0].set_ylabel("token similarity t_sim")
    axes[1, 0].set_ylabel("t_div = 1 − t_sim (log)")
    axes[0, 0].set_ylim(-0.02, 1.02)
    axes[1, 1].legend(frameon=False, fontsize=7, loc="lower left")  # clear of the t_sim lines
    fig_deep = plotting.save(fig, figures_dir, "tsim_per_layer_deep")

# %% [markdown]
# ## The spectral gap of attention
# |λ₂| of every attention matrix (averaged over heads) per layer, at init and after training on
# the task's test images; 1 − |λ₂| is the spectral gap. Right: all layers pooled after training.

# %%
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), constrained_layout=True)
for ax, stage in zip(axes[:2], ["init", "trained"]):
    t = metrics[(metrics.stage == stage) & (metrics.layer > 0)]
    for variant in variants:
        tv = t[t.variant == variant]
        if tv.attn_lambda2.notna().any():
            band(ax, tv, "attn_lambda2", variant)
    ax.set_title(f"{'at init' if stage == 'init' else 'after training'}")
    ax.set_xlabel("layer l")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("|λ₂| of attention")
    ax.set_ylim(0, 1.02)
t = metrics[(metrics.stage == "trained") & (metrics.layer > 0)]
bins = np.linspace(0, 1, 41)
for variant in variants:
    values = t[t.variant == variant].attn_lambda2.dropna()
    if len(values):
        axes[2].hist(values, bins=bins, histtype="step", lw=1.6, density=True,
                     color=plotting.variant_color(variant), label=plotting.variant_label(variant))
axes[2].set_xlabel("|λ₂| (all layers, trained)")
axes[2].set_ylabel("density")
axes[2].set_title("distribution after training")
axes[2].legend(frameon=False, fontsize=7)
fig_gap = plotting.save(fig, figures_dir, "attention_lambda2")

# %% [markdown]
# ## t_sim after the attention sublayer and after the MLP
# Per layer, median over sequences and seeds, at init and after training on the task's test
# images: solid after the whole block, dotted after its attention sublayer (before the MLP). A
# block whose solid point lies above its dotted one has had its t_sim raised by the MLP.

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), constrained_layout=True, sharey=True)
for ax, stage in zip(axes, ["init", "trained"]):
    t = metrics[(metrics.stage == stage)]
    for variant in variants:
        tv = t[t.variant == variant]
        if not tv.token_similarity.notna().any():
            continue
        color = plotting.variant_color(variant)
        block = tv.groupby("layer").token_similarity.median()
        ax.plot(block.index, block.values, color=color, lw=1.6,
                label=plotting.variant_label(variant))
        if "token_similarity_after_attention" in tv:
            mid = tv[tv.layer > 0].groupby("layer").token_similarity_after_attention.median()
            ax.plot(mid.index, mid.values, ":", color=color, lw=1.4, marker=".", ms=3)
    ax.set_title(f"{esc['task']}, {'at init' if stage == 'init' else 'after training'} "
                 "(solid: block, dotted: after attention)")
    ax.set_xlabel("layer l")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(-0.02, 1.02)
axes[0].set_ylabel("t_sim")
axes[1].legend(frameon=False, fontsize=7)
fig_sublayer = plotting.save(fig, figures_dir, "tsim_per_sublayer")

# %% [markdown]
# ## The blank-token confound: layer 0 with raw and with centred patches
# t_sim of the embedded test images (the stack's input, layer 0) of post-LN models at init, one
# per E4 seed, with raw pixels and with the configured (centred) patches; and the share of
# patches whose features are all zero.

# %%
task_options = dict(settings["tasks"].get(esc["task"], {}))
is_digits = esc["task"] == "digits"
model_options = {k: settings["train"][k] for k in ("width", "heads", "mlp_ratio")
                 if k in settings["train"]}
if is_digits:
    layer0 = layer0_similarity(task_options, {"skip": True, "mlp": True, "norm": "post"},
                               {**model_options, "depth": 1}, esc["seeds"],
                               features=["raw", task_options.get("features", "centred")])
    blank = {f: blank_patch_share({**task_options, "features": f})
             for f in ("raw", task_options.get("features", "centred"))}
    layer0_table = layer0.groupby("features").token_similarity.agg(["mean", "min", "max"])
    layer0_table["blank patches"] = [blank[f] for f in layer0_table.index]
else:
    layer0, blank, layer0_table = None, {}, pd.DataFrame()
layer0_table

# %% [markdown]
# ## Claims
# Registered in src/rankcollapse/claims/claims.yaml before the runs; measured by `rankcollapse.claims.e4`,
# resampling whole seeds (the range of the seeds when fewer than 5).

# %%
views = {name: t for name, (t, _) in VIEWS.items()}
measurements = e4_claims.measure(
    views, FLOORS, blank.get(task_options.get("features", "centred")) if is_digits else None,
    layer0, B)
median_lambda2 = (metrics[(metrics.stage == "trained") & (metrics.layer > 0)]
                  .groupby("variant").attn_lambda2.median())
pd.DataFrame([m.to_dict() for m in measurements])[["id", "value", "method", "n"]]

# %%
by = fits.set_index(["view", "variant"])


def fit_text(view, variant):
    if (view, variant) not in by.index:
        return "not measured"
    r = by.loc[(view, variant)]
    return (f"ρ = {r.rho:.3f} per layer (R² {r.log_r2:.2f} for log t_div vs "
            f"{r.lin_r2:.2f} for t_sim linear)")


layer0_text = (
    f" Layer-0 t_sim of post-LN models at init on {esc['task']}: raw pixels "
    f"{layer0_table.loc['raw', 'mean']:.3f} ({blank['raw']:.1%} of patches blank), "
    f"{task_options.get('features', 'centred')} "
    f"{layer0_table.loc[task_options.get('features', 'centred'), 'mean']:.3f} "
    f"({blank[task_options.get('features', 'centred')]:.1%} blank)."
    if is_digits else "")
summary_text = (
    f"Token similarity of post-LN networks at init (E1's Gaussian inputs): "
    f"{fit_text('init_gaussian', 'post_ln')}; after training on {esc['task']} at depth "
    f"{esc['depth']}: {fit_text('trained', 'post_ln')}. With de-escalation at init: "
    f"{fit_text('init_gaussian', 'post_ln_deesc')}." + layer0_text
    + " Small-scale analogue of Yu & Zhang's ViT/Transformer-XL experiments."
)
print(summary_text)
io.write_json(section(
    experiment, summary_text,
    figures=[
        {"name": "tsim_per_layer", **fig_tsim, "caption":
         "Token similarity t_sim (top) and t_div = 1 − t_sim (bottom, log scale) per layer, "
         "median and 10–90 % band over sequences and seeds: at init on Gaussian sequences (E1), "
         f"at init on {esc['task']} test images, and after training (depth {esc['depth']})."},
        {"name": "attention_lambda2", **fig_gap, "caption":
         "Second eigenvalue modulus |λ₂| of the attention matrices (mean over heads) per layer at "
         "init and after training, and its distribution over all layers after training. The "
         "spectral gap is 1 − |λ₂|."},
        {"name": "tsim_per_sublayer", **fig_sublayer, "caption":
         "t_sim per layer after the whole block (solid) and after its attention sublayer "
         "(dotted), median over sequences and seeds, at init and after training."},
    ] + ([{"name": "tsim_per_layer_deep", **fig_deep, "caption":
           f"t_sim (top) and t_div (bottom, log scale) per layer of E5's tuned {esc['task']} "
           f"networks at its deepest depth, {deep_depth}, at init and after training: median "
           "and 10–90 % band over sequences and the fresh seeds; dotted: float32 round-off."}]
         if fig_deep else []),
    tables=[{"caption": "Fits of the seed-mean t_sim per layer: log t_div = a + b·l (ρ = e^b "
             "per layer) and t_sim = a + b·l, with R² of each.", "html": table_html}]
    + ([{"caption": "Layer-0 t_sim of post-LN models at init (mean, min and max over seeds) "
         "and the share of blank (all-zero) patches, raw and centred.",
         "html": layer0_table.to_html(border=0, classes="data", float_format="{:.3f}".format)}]
       if is_digits else []),
    measurements=measurements,
    numbers={"fits": fits.to_dict(orient="records"), "diverged_variants": diverged,
             "median_lambda2_trained": median_lambda2.to_dict(),
             "depth": esc["depth"], "seeds": int(metrics.seed.nunique()),
             "deep_depth": deep_depth,
             "blank_share": blank,
             "layer0_tsim": layer0_table["mean"].to_dict() if is_digits else {}},
), numbers_path)
