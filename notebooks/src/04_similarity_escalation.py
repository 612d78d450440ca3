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

# %% tags=["parameters"]
experiment = "E4"
tables = {"metrics": "results/tables/E4_metrics.parquet", "init": "results/tables/E1_init.parquet"}
settings = {
    "escalation": {"task": "digits", "variants": ["post_ln", "pre_ln", "san_skip", "post_ln_deesc"],
                   "depth": 16, "seeds": [0, 1]},
    "train": {"width": 32, "heads": 2, "steps": 400},
    "tasks": {},
}
figures_dir = "report/figures/E4"
numbers_path = "results/numbers/E4.json"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from rankcollapse import io, plotting
from rankcollapse.claims import Claim
from rankcollapse.notebooks import section
from rankcollapse.analysis import bootstrap_over_seeds
from rankcollapse.trained import escalation_fits

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
# ## Claims

# %%
def fit_claim(cid, statement, source, view, variant, key, quantity, low, high, paper, reason):
    t = VIEWS[view][0]
    t = t[t.variant == variant]
    if t.token_similarity.notna().sum() == 0:
        return Claim(cid, statement, source, quantity, None, None, low, high, paper,
                     reason=f"{variant} not measured ({view})")
    value, interval = bootstrap_over_seeds(t, lambda d: escalation_fits(d, FLOORS[view])[key], B)
    return Claim(cid, statement, source, f"{quantity} ({B} bootstrap resamples over seeds)",
                 value, interval, low, high, paper, reason=reason.format(v=value))


def gap_of_fits(d):
    f = escalation_fits(d)
    return f["log_r2"] - f["lin_r2"]


claims = [
    fit_claim("E4.escalation_post_ln_init",
              "Token similarity escalates with depth in the classic post-norm transformer: "
              "t_div shrinks by a constant factor per layer.",
              "Yu & Zhang, §3 (token similarity escalation)", "init_gaussian", "post_ln", "rho",
              "per-layer factor ρ of t_div, post-LN at init (E1 inputs)", 0.0, 0.99,
              "escalation at a linear rate", "t_div shrinks by ρ = {v:.3f} per layer"),
    fit_claim("E4.escalation_post_ln_trained",
              "Trained post-norm networks still show escalating token similarity.",
              "Yu & Zhang, §3 and §5", "trained", "post_ln", "rho",
              "per-layer factor ρ of t_div, trained post-LN", 0.0, 0.99, None,
              "after training t_div changes by ρ = {v:.3f} per layer"),
    fit_claim("E4.linear_rate_log_reading",
              "The rate is linear in the optimisation sense: log t_div is a straight line in "
              "depth (post-LN at init).",
              "Yu & Zhang, §3 (linear rate)", "init_gaussian", "post_ln", "log_r2",
              "R² of log t_div against layer, post-LN at init", 0.9, 1.0, "linear rate",
              "R² = {v:.3f}"),
]
t_post = VIEWS["init_gaussian"][0]
t_post = t_post[t_post.variant == "post_ln"]
if len(t_post):
    value, interval = bootstrap_over_seeds(t_post, gap_of_fits, B)
else:
    value, interval = None, None
claims.append(Claim(
    "E4.which_reading",
    "Of the two readings of 'linear rate', the optimisation sense (constant factor on t_div) "
    "fits better than t_sim growing linearly in depth.",
    "Yu & Zhang, §3; issue note on the two readings",
    f"R²(log t_div) − R²(t_sim linear), post-LN at init ({B} bootstrap resamples over seeds)",
    value, interval, 0.0, np.inf, None,
    reason="positive: the geometric (optimisation-sense) reading fits better"
    if value is not None and value > 0 else "the straight-line reading fits at least as well"))
claims.append(fit_claim(
    "E4.deescalation_holds_tdiv",
    "De-escalation (τ = 1) stops the escalation: t_div no longer shrinks with depth.",
    "Yu & Zhang, §4 (de-escalation)", "init_gaussian", "post_ln_deesc", "rho",
    "per-layer factor ρ of t_div, post-LN + de-escalation at init (E1 inputs)", 0.99, np.inf,
    None, "t_div changes by ρ = {v:.3f} per layer"))
claims.append(fit_claim(
    "E4.deescalation_holds_tdiv_trained",
    "After training, de-escalated post-norm networks keep t_div from shrinking with depth.",
    "Yu & Zhang, §4–5", "trained", "post_ln_deesc", "rho",
    "per-layer factor ρ of t_div, trained post-LN + de-escalation", 0.99, np.inf,
    None, "t_div changes by ρ = {v:.3f} per layer"))

# |λ₂| of a network whose tokens have already collapsed is trivially 0 (uniform, rank-one
# attention), so the claim is measured on a variant that trains at every depth: pre-LN.
median_lambda2 = (metrics[(metrics.stage == "trained") & (metrics.layer > 0)]
                  .groupby("variant").attn_lambda2.median())
trained_pre = metrics[(metrics.stage == "trained") & (metrics.variant == "pre_ln")
                      & (metrics.layer > 0)]
if trained_pre.attn_lambda2.notna().any():
    value, interval = bootstrap_over_seeds(trained_pre, lambda d: d.attn_lambda2.median(), B)
else:
    value, interval = None, None
claims.append(Claim(
    "E4.spectral_gap",
    "Attention matrices have a large spectral gap: |λ₂| is well below 1, so everything "
    "outside span{1} contracts each layer.",
    "Yu & Zhang, §3 (spectral gap of row-stochastic attention)",
    f"median |λ₂| of trained pre-LN attention, all layers ({B} bootstrap resamples over seeds)",
    value, interval, 0.0, 0.9, "large gap",
    reason=(f"median |λ₂| = {value:.3f} (trained post-LN: {median_lambda2.get('post_ln', np.nan):.3f})"
            if value is not None else "pre-LN not measured")))
pd.DataFrame([c.to_dict() for c in claims])[["id", "measured", "interval", "criterion", "verdict"]]

# %%
by = fits.set_index(["view", "variant"])


def fit_text(view, variant):
    if (view, variant) not in by.index:
        return "not measured"
    r = by.loc[(view, variant)]
    return (f"ρ = {r.rho:.3f} per layer (R² {r.log_r2:.2f} for log t_div vs "
            f"{r.lin_r2:.2f} for t_sim linear)")


summary_text = (
    f"Token similarity of post-LN networks at init (E1's Gaussian inputs): "
    f"{fit_text('init_gaussian', 'post_ln')}; after training on {esc['task']} at depth "
    f"{esc['depth']}: {fit_text('trained', 'post_ln')}. With de-escalation at init: "
    f"{fit_text('init_gaussian', 'post_ln_deesc')}. "
    + ("The data favour the optimisation-sense reading of the linear rate. "
       if claims[3].measured is not None and claims[3].measured > 0
       else "The data do not favour the optimisation-sense reading over a straight line. ")
    + "Small-scale analogue of Yu & Zhang's ViT/Transformer-XL experiments."
)
print(summary_text)
io.write_json(section(
    experiment, "Token similarity escalation", "Yu & Zhang (arXiv 2312.06182)", summary_text,
    figures=[
        {"name": "tsim_per_layer", **fig_tsim, "caption":
         "Token similarity t_sim (top) and t_div = 1 − t_sim (bottom, log scale) per layer, "
         "median and 10–90 % band over sequences and seeds: at init on Gaussian sequences (E1), "
         f"at init on {esc['task']} test images, and after training (depth {esc['depth']})."},
        {"name": "attention_lambda2", **fig_gap, "caption":
         "Second eigenvalue modulus |λ₂| of the attention matrices (mean over heads) per layer at "
         "init and after training, and its distribution over all layers after training. The "
         "spectral gap is 1 − |λ₂|."},
    ],
    tables=[{"caption": "Fits of the seed-mean t_sim per layer: log t_div = a + b·l (ρ = e^b "
             "per layer) and t_sim = a + b·l, with R² of each.", "html": table_html}],
    claims=claims,
    numbers={"fits": fits.to_dict(orient="records"), "diverged_variants": diverged,
             "median_lambda2_trained": median_lambda2.to_dict(),
             "depth": esc["depth"], "seeds": int(metrics.seed.nunique())},
), numbers_path)
