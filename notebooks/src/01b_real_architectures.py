# ---
# jupyter:
#   kernelspec:
#     display_name: Python (rankcollapse)
#     language: python
#     name: rankcollapse
# ---

# %% [markdown]
# # E1b — Real architectures at initialisation (Dong, Cordonnier & Loukas 2021, Fig. 2)
#
# BERT-base, ALBERT-base and XLNet-base (Hugging Face `transformers`, built from their
# configurations, random initialisation) with their paths ablated by swapping modules: **SAN**
# (no attention skip — its LayerNorm kept — and no feed-forward block), **SAN + MLP**,
# **SAN + skip** and the unmodified **transformer**. Every layer's output (layer 0 is the input
# to the first layer) is measured with the relative residual in the composite ℓ1,∞ norm with
# token-mean centring, what the paper plots. Inputs: `batch` sequences of `tokens` random token
# ids per seed (the paper: 32 × 128 through one network), and — as a second input, first seed only — text that ships with scikit-learn (its data
# sets' descriptions), split into words and punctuation.
#
# **The pretrained half** needs weights, which are never downloaded here: a user who has them
# names a local checkpoint folder per model (`realarch.checkpoints`, checked when the workflow is
# planned); its rows carry `weights = pretrained` and are drawn in a second figure below (one
# network per model: bands over sequences). Without checkpoints only the random-init half is
# measured. The measurement is `rankcollapse.probe`'s, the one behind `rankcollapse probe`.

# %% tags=["parameters"]
experiment = "E1b"
tables = None  # name -> table: papermill injects the run's; None: the default config's
settings = None  # block -> config block: papermill injects the run's; None: the default's
figures_dir = "report/figures/E1b"
numbers_path = "results/numbers/E1b.json"

# %%
from rankcollapse.notebooks import defaults

tables, settings = defaults(experiment, tables, settings)

# %%
from importlib import metadata

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from rankcollapse import io, plotting
from rankcollapse.claims import e1b as e1b_claims
from rankcollapse.notebooks import section

plotting.use_style()
table = io.read_parquet(tables["realarch"])
init = table[table.weights == "init"]
METRIC = "relative_residual_comp"
MODELS = [m for m in ("bert", "albert", "xlnet") if m in set(init.model)]
NAMES = {"bert": "BERT-base", "albert": "ALBERT-base", "xlnet": "XLNet-base"}
ABLATIONS = ["san", "san_mlp", "san_skip", "transformer"]
LABELS = {"san": "SAN", "san_mlp": "SAN + MLP", "san_skip": "SAN + skip",
          "transformer": "transformer", "san_skip_2021": "SAN + skip (2021 code's ablation)"}
COLORS = {"san": plotting.variant_color("san"), "san_mlp": plotting.variant_color("san_mlp"),
          "san_skip": plotting.variant_color("san_skip"), "transformer": "#000000",
          "san_skip_2021": plotting.variant_color("san_skip_mlp")}
L = int(init.layer.max())
seeds = sorted(init.seed.unique())
FLOOR = 1e-9  # float32 forward passes: below ~1e-7 the residual is round-off
TRANSFORMERS = metadata.version("transformers")
print(f"{len(table)} rows; models {MODELS}; seeds {seeds}; inputs {sorted(init.input.unique())}; "
      f"transformers {TRANSFORMERS}")

# %% [markdown]
# ## Residual per layer
# Solid: random token ids, mean ± std over all sequences of all seeds. Dashed: the packaged text
# (first seed). Log scale; the float32 forward passes put a floor near 1e-7.

# %%
def curve(t):
    g = t.groupby("layer")[METRIC]
    return g.mean(), g.std()


fig, axes = plt.subplots(1, len(MODELS), figsize=(4.2 * len(MODELS), 3.9), sharey=True,
                         constrained_layout=True, squeeze=False)
for ax, model in zip(axes[0], MODELS, strict=True):
    m = init[init.model == model]
    for ablation in ABLATIONS + ["san_skip_2021"]:
        rand = m[(m.ablation == ablation) & (m.input == "random")]
        if rand.empty:
            continue
        mean, std = curve(rand)
        color = COLORS[ablation]
        ls = ":" if ablation == "san_skip_2021" else "-"
        ax.plot(mean.index, mean.clip(lower=FLOOR), color=color, ls=ls, lw=1.8,
                label=LABELS[ablation], marker="o", ms=3)
        ax.fill_between(mean.index, (mean - std).clip(lower=FLOOR), mean + std, color=color,
                        alpha=0.18, lw=0)
        text = m[(m.ablation == ablation) & (m.input == "text")]
        if not text.empty and ablation != "san_skip_2021":
            text_mean = curve(text)[0].clip(lower=FLOOR)
            ax.plot(text_mean.index, text_mean, color=color, ls="--", lw=1.1, alpha=0.9)
    ax.set_yscale("log")
    ax.set_ylim(FLOOR / 2, 2)
    ax.set_xticks(range(0, L + 1, 2))
    ax.set_xlabel("layer")
    ax.set_title(f"{NAMES[model]} (random init)")
axes[0][0].set_ylabel("relative residual (composite ℓ1,∞ norm)")
axes[0][0].plot([], [], color="grey", ls="--", label="packaged text (first seed)")
legend = {}  # every panel's entries once (the 2021-code ablation exists for ALBERT only)
for ax in axes[0]:
    for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
        legend.setdefault(label, handle)
fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncol=6, frameon=False,
           fontsize=8)
fig_curves = plotting.save(fig, figures_dir, "real_architectures")

# %% [markdown]
# ## Pretrained checkpoints
# Drawn only when the run has `realarch.checkpoints`: each model's one pretrained network, mean
# ± std over its sequences (solid: random ids; dashed: the packaged text).

# %%
pretrained = table[table.weights == "pretrained"]
PRETRAINED = [m for m in ("bert", "albert", "xlnet") if m in set(pretrained.model)]
pretrained_figures = []
if PRETRAINED:
    fig, axes = plt.subplots(1, len(PRETRAINED), figsize=(4.2 * len(PRETRAINED), 3.9),
                             sharey=True, constrained_layout=True, squeeze=False)
    for ax, model in zip(axes[0], PRETRAINED, strict=True):
        m = pretrained[pretrained.model == model]
        for ablation in ABLATIONS + ["san_skip_2021"]:
            for kind, ls in (("random", "-"), ("text", "--")):
                t = m[(m.ablation == ablation) & (m.input == kind)]
                if t.empty:
                    continue
                mean, std = curve(t)
                ax.plot(mean.index, mean.clip(lower=FLOOR), color=COLORS[ablation], ls=ls,
                        lw=1.8 if kind == "random" else 1.1, marker="o" if kind == "random"
                        else None, ms=3, label=LABELS[ablation] if kind == "random" else None)
                if kind == "random":
                    ax.fill_between(mean.index, (mean - std).clip(lower=FLOOR), mean + std,
                                    color=COLORS[ablation], alpha=0.18, lw=0)
        ax.set_yscale("log")
        ax.set_ylim(FLOOR / 2, 2)
        ax.set_xlabel("layer")
        ax.set_title(f"{NAMES[model]} (pretrained)")
    axes[0][0].set_ylabel("relative residual (composite ℓ1,∞ norm)")
    axes[0][0].legend(frameon=False, fontsize=8)
    pretrained_figures = [{"name": "real_architectures_pretrained",
                           **plotting.save(fig, figures_dir, "real_architectures_pretrained"),
                           "caption": "Relative residual (composite ℓ1,∞ norm) of every layer of "
                           "the pretrained checkpoints given in realarch.checkpoints ("
                           + ", ".join(NAMES[m] for m in PRETRAINED) + "), for the path "
                           "ablations: one network per model, mean ± std over its random-token "
                           "sequences (solid) and the packaged text (dashed). Compare the "
                           "paper's Fig. 2, pretrained half."}]

# %% [markdown]
# ## Layer-12 values next to the paper's
# The paper's values are read off its random-init curves (one seed, real text, approximate).

# %%
PAPER = {  # (model, ablation): (layer, value read off Fig. 2's init curves)
    ("bert", "san"): (1, 0.02), ("bert", "san_skip"): (12, 0.45),
    ("bert", "transformer"): (12, 0.35),
    ("albert", "san"): (1, 0.0), ("albert", "san_skip"): (12, 0.26),
    ("albert", "transformer"): (12, 0.26),
    ("xlnet", "san"): (1, 0.0), ("xlnet", "san_skip"): (12, 0.93),
    ("xlnet", "transformer"): (12, 0.74),
}
TOL = 0.10  # absolute: values read off a printed curve of one seed on different inputs

# Per-seed means: the unit of uncertainty is the random network, not the sequence.
per_seed = (init.groupby(["model", "input", "ablation", "seed", "layer"])[METRIC].mean()
            .rename("r").reset_index())
rng = np.random.default_rng(0)


def estimate(model, ablation, layer, kind="random"):
    """Mean over seeds of the per-seed mean, and a 95% bootstrap interval over seeds."""
    v = per_seed[(per_seed.model == model) & (per_seed.ablation == ablation)
                 & (per_seed.layer == layer) & (per_seed.input == kind)].r.to_numpy()
    if v.size == 0:
        return None, None
    boot = rng.choice(v, size=(2000, v.size)).mean(axis=1)
    return float(v.mean()), (float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975)))


def seq_stats(model, ablation, layer, kind, rows=init):
    v = rows[(rows.model == model) & (rows.ablation == ablation) & (rows.layer == layer)
             & (rows.input == kind)][METRIC]
    return "–" if v.empty else f"{v.mean():.3g} ± {v.std():.2g}"


rows = []
for model in MODELS:
    for ablation in ABLATIONS + ["san_skip_2021"]:
        if init[(init.model == model) & (init.ablation == ablation)].empty:
            continue
        layer, paper = PAPER.get((model, ablation), (None, None))
        rows.append({
            "model": NAMES[model], "curve": LABELS[ablation],
            "ours, layer 1 (random)": seq_stats(model, ablation, 1, "random"),
            f"ours, layer {L} (random)": seq_stats(model, ablation, L, "random"),
            f"ours, layer {L} (text)": seq_stats(model, ablation, L, "text"),
            **({f"pretrained, layer {L} (random)": seq_stats(model, ablation, L, "random",
                                                             pretrained)}
               if PRETRAINED else {}),
            "paper (init)": "–" if paper is None else
            (f"≈{paper:g} at layer 1, then ≈0" if layer == 1 else f"≈{paper:g} at layer {layer}"),
        })
values = pd.DataFrame(rows)
table_html = values.to_html(index=False, border=0, classes="data")
values

# %% [markdown]
# ## Claims
# Registered in src/rankcollapse/claims/claims.yaml (ranges: the paper's value ± 0.10, "≈ 0" below 0.01);
# measured by `rankcollapse.claims.e1b` over seeds (independent random networks).

# %%
measurements = e1b_claims.measure(table)
pd.DataFrame([m.to_dict() for m in measurements])[["id", "value", "method", "n"]]

# %%
def at_last(model, ablation):
    v = e1b_claims.per_seed(table)
    v = v[(v.model == model) & (v.ablation == ablation) & (v.layer == L)]
    return v[METRIC].mean()


summary_parts = []
for model in MODELS:
    s, k, t = (at_last(model, a) for a in ("san", "san_skip", "transformer"))
    summary_parts.append(f"{NAMES[model]}: SAN {s:.1e}, SAN + skip {k:.2f}, transformer {t:.2f}")
shape = settings["realarch"]
description = (
    f"Random initialisation (transformers {TRANSFORMERS}, {len(seeds)} seeds, "
    f"{shape['batch']} × {shape['tokens']} random token ids per seed). Layer-{L} residuals, mean "
    "over seeds: " + "; ".join(summary_parts) + ". ALBERT's SAN + skip is also measured ablated as "
    "the 2021 code did (its feed-forward maps replaced by identities, which leaves "
    "LN(gelu(a) + a) in every layer). Dashed curves: the packaged text (scikit-learn's data set "
    "descriptions). "
    + (f"Pretrained checkpoints (realarch.checkpoints): {', '.join(NAMES[m] for m in PRETRAINED)}"
       ", one network each, in their own figure."
       if PRETRAINED else "Only the random-init half of Fig. 2 is measured: no pretrained "
       "checkpoints were given (realarch.checkpoints).")
)
print(description)
io.write_json(section(
    experiment, description,
    figures=[{"name": "real_architectures", **fig_curves, "caption":
              "Relative residual (composite ℓ1,∞ norm, token-mean centring) of every layer of "
              "BERT-base, ALBERT-base and XLNet-base at random initialisation, for the four "
              f"path ablations: mean ± std over {shape['batch']} random-token sequences per "
              f"seed and all {len(seeds)} seeds (solid), "
              "the packaged text (dashed, first seed) and, for ALBERT, SAN + skip ablated as in "
              "the original code (dotted). Log scale; compare the paper's Fig. 2, init half."}]
    + pretrained_figures,
    tables=[{"caption": "Our residuals (mean ± std over sequences and seeds) next to the "
             "paper's, read off its random-init curves.", "html": table_html}],
    measurements=measurements,
    numbers={
        "transformers_version": TRANSFORMERS, "seeds": len(seeds), "depth": L,
        "layer_last": {f"{m}/{a}": at_last(m, a) for m in MODELS
                       for a in ABLATIONS + ["san_skip_2021"]
                       if not init[(init.model == m) & (init.ablation == a)].empty},
        "pretrained_rows": int((table.weights == "pretrained").sum()),
    },
), numbers_path)
