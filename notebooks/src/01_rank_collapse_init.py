# ---
# jupyter:
#   kernelspec:
#     display_name: Python (rankcollapse)
#     language: python
#     name: rankcollapse
# ---

# %% [markdown]
# # E1 — Rank collapse at initialisation (Dong, Cordonnier & Loukas, ICML 2021)
#
# For each architecture variant and seed, one random network of depth L_max is applied to random
# Gaussian sequences in float64, and every layer's output is measured (the workflow's `init_sweep`
# rule; this notebook only reads its table). Dong et al. prove that pure self-attention (SAN)
# loses rank doubly exponentially with depth: the residual res(X) = X − 1x̄ᵀ obeys
# ‖res(SAN(X))‖ ≤ C ‖res(X)‖³ per layer, a cubic rate, so log r_{l+1} ≤ 3 log r_l + c. They
# argue that skip connections break this and that MLPs and LayerNorm alone do not; the claims
# are registered in src/rankcollapse/claims/claims.yaml and measured by `rankcollapse.claims.e1`.

# %% tags=["parameters"]
experiment = "E1"
tables = None  # name -> table: papermill injects the run's; None: the default config's
settings = None  # block -> config block: papermill injects the run's; None: the default's
figures_dir = "report/figures/E1"
numbers_path = "results/numbers/E1.json"

# %%
from rankcollapse.notebooks import defaults

tables, settings = defaults(experiment, tables, settings)

# %%
import matplotlib.pyplot as plt
import numpy as np

from rankcollapse import io, plotting
from rankcollapse.experiments.init_fits import collapse_summary, exponent_pairs
from rankcollapse.claims import e1 as e1_claims
from rankcollapse.notebooks import section

plotting.use_style()
fit = settings["fit"]
sweep = settings["init_sweep"]
table = io.read_parquet(tables["init"])
variants = list(dict.fromkeys(table.variant))  # config order
seeds = table.seed.nunique()
L = int(table.layer.max())
METRIC = "relative_residual_comp"  # what Dong et al. plot: composite l1,inf norm, mean-centred
EPS = float(np.finfo(np.float64).eps)
print(f"{len(table)} rows: {len(variants)} variants x {seeds} seeds x "
      f"{table['sample'].nunique()} sequences x {L + 1} layers")

# %% [markdown]
# ## Relative residual against depth
# Median over all sequences of all seeds, band = 10–90 % quantiles. The dotted line is float64's
# machine epsilon: below it the "residual" is round-off, so fits stop at the `floor` setting.

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
for variant in variants:
    t = table[table.variant == variant]
    q = t.groupby("layer")[METRIC].quantile([0.1, 0.5, 0.9]).unstack()
    color, label = plotting.variant_color(variant), plotting.variant_label(variant)
    for ax in axes:
        ax.plot(q.index, q[0.5], color=color, label=label, lw=1.8)
        ax.fill_between(q.index, q[0.1], q[0.9], color=color, alpha=0.2, lw=0)
for ax, (ylim, title) in zip(axes, [((1e-17, 2), "all layers (log scale)"),
                                    ((0, 1.05), "linear scale")]):
    ax.set_xlabel("layer l (depth)")
    ax.set_ylabel("relative residual r_l  (composite ℓ1,∞ norm)")
    ax.set_title(title)
    ax.set_ylim(*ylim)
axes[0].set_yscale("log")
axes[0].axhline(EPS, color="grey", ls=":", lw=1)
axes[0].text(L, EPS * 3, "float64 eps", ha="right", va="bottom", fontsize=8, color="grey")
axes[1].legend(loc="upper right", frameon=False)
fig.suptitle(f"Residual of random-init networks (width {sweep['width']}, {sweep['heads']} heads, "
             f"n = {sweep['tokens']} tokens; {seeds} seeds)")
fig_residual = plotting.save(fig, figures_dir, "residual_vs_depth")

# %% [markdown]
# ## Trained against random init
# When the training grid (E5) is part of the run, its per-layer metrics of the trained networks
# (digits, the deepest depth of the grid) are drawn next to the same networks at their
# initialisation and to this sweep's random-init curves of the same variants (random Gaussian
# inputs). Median over test images and seeds; Frobenius relative residual.

# %%
trained_figures = []
if "trained" in tables:
    grid = io.read_parquet(tables["trained"])
    grid = grid[grid.depth == grid.depth.max()]
    shared = list(dict.fromkeys(grid.variant))
    fig, ax = plt.subplots(figsize=(8.5, 4.2), constrained_layout=True)
    for variant in shared:
        color, label = plotting.variant_color(variant), plotting.variant_label(variant)
        for stage, ls in (("trained", "-"), ("init", "--")):
            t = grid[(grid.variant == variant) & (grid.stage == stage)]
            med = t.groupby("layer").relative_residual.median()
            ax.plot(med.index, med.values, ls, color=color, lw=1.6,
                    label=f"{label}: {stage} (digits)")
        if variant in variants:
            t = table[(table.variant == variant) & (table.layer <= grid.depth.max())]
            med = t.groupby("layer").relative_residual.median()
            ax.plot(med.index, med.values, ":", color=color, lw=1.2,
                    label=f"{label}: init (Gaussian inputs, E1)")
    ax.set_xlabel("layer l")
    ax.set_ylabel("relative residual (Frobenius)")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Trained (E5 grid, depth {grid.depth.max()}) vs random init")
    ax.legend(fontsize=6.5, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1))
    trained_figures = [{"name": "trained_vs_init", **plotting.save(fig, figures_dir,
                                                                    "trained_vs_init"),
                        "caption": "Relative residual per layer of the trained networks of the "
                        "E5 grid (solid) against the same networks at initialisation on the same "
                        "digits (dashed) and this sweep's random-init networks on Gaussian "
                        "inputs (dotted); median over sequences and seeds."}]
else:
    print("no trained-network table in this run: the comparison is skipped")

# %% [markdown]
# ## The collapse exponent
# Each point is one pair of consecutive layers (r_l, r_{l+1}) of one sequence, restricted to
# r_l ≤ `max_residual` and r_{l+1} ≥ `floor`. A slope k = 3 on these log–log axes is the cubic,
# doubly exponential rate of the bound; k = 1 is a plain exponential decay.

# %%
summary = collapse_summary(table, METRIC, fit["floor"], fit["max_residual"], fit["bootstrap"])
summary_fro = collapse_summary(table, "relative_residual", fit["floor"], fit["max_residual"],
                               fit["bootstrap"]).set_index("variant")
fig, ax = plt.subplots(figsize=(5.5, 4.5), constrained_layout=True)
for row in summary.itertuples():
    pairs = exponent_pairs(table[table.variant == row.variant], METRIC, fit["floor"],
                           fit["max_residual"])
    color = plotting.variant_color(row.variant)
    ax.scatter(pairs.r, pairs.r_next, s=4, alpha=0.25, color=color, lw=0)
    ax.plot([], [], "o", color=color, label=f"{plotting.variant_label(row.variant)}: k = {row.k:.2f}")
grid = np.logspace(np.log10(fit["floor"]), 0, 50)
ax.plot(grid, grid**3, "k--", lw=1, label="k = 3 (cubic, through 1)")
ax.plot(grid, grid, "k:", lw=1, label="k = 1 (r_{l+1} = r_l)")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlim(fit["floor"], 1.2)
ax.set_ylim(fit["floor"], 1.2)
ax.set_xlabel("r_l")
ax.set_ylabel("r_{l+1}")
ax.set_title("One layer's map of the residual")
ax.legend(fontsize=7, frameon=False, loc="lower right")
fig_exponent = plotting.save(fig, figures_dir, "collapse_exponent")

# %%
def ci(value, lo, hi, digits=2):
    return f"{value:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


rows = []
for row in summary.itertuples():
    fro = summary_fro.loc[row.variant]
    rows.append({
        "variant": plotting.variant_label(row.variant),
        "exponent k (composite)": ci(row.k, row.k_lo, row.k_hi),
        "exponent k (Frobenius)": ci(fro.k, fro.k_lo, fro.k_hi),
        "per-layer factor ρ": ci(row.rho, row.rho_lo, row.rho_hi, 3),
        f"median r at layer {L}": f"{row.final:.2e}",
        "first layer with r < 1e-6": "never" if np.isnan(row.collapse_layer)
        else f"{row.collapse_layer:.0f}",
        "fitted pairs (sequences)": f"{row.pairs} ({row.sequences})",
    })
import pandas as pd  # noqa: E402

table_html = pd.DataFrame(rows).to_html(index=False, border=0, classes="data")
interval_method = summary.interval.iloc[0]
pd.DataFrame(rows)

# %% [markdown]
# ## Claims
# Measured by `rankcollapse.claims.e1` against the ranges registered in src/rankcollapse/claims/claims.yaml;
# the report judges them and writes the sentences that state conclusions.

# %%
measurements = e1_claims.measure(table, METRIC, fit["floor"], fit["max_residual"],
                                 fit["bootstrap"])
pd.DataFrame([m.to_dict() for m in measurements])[["id", "value", "method", "n", "note"]]

# %%
san = summary.set_index("variant").loc["san"] if "san" in set(summary.variant) else None
description = (
    f"{len(variants)} variants × {seeds} random networks each (depth {L}, width "
    f"{sweep['width']}, {sweep['heads']} heads, n = {sweep['tokens']} tokens, float64) on random "
    f"Gaussian sequences. The exponent k is the slope of log r_(l+1) against log r_l over every "
    f"layer transition above the round-off floor {fit['floor']:g} and below "
    f"r = {fit['max_residual']:g}; intervals: {interval_method}."
    + (f" Pure attention's residual falls below 10⁻⁶ at layer {san.collapse_layer:.0f} (median "
       f"over sequences); k = {san.k:.2f} from {san.pairs} transitions of {san.sequences} "
       "sequences." if san is not None and np.isfinite(san.collapse_layer) else "")
)
print(description)
io.write_json(section(
    experiment, description,
    figures=[
        {"name": "residual_vs_depth", **fig_residual, "caption":
         "Relative residual ‖X_l − 1x̄ᵀ‖/‖X_l‖ (composite ℓ1,∞ norm, as Dong et al. plot) of "
         "random-init networks against depth, per variant: median over sequences and seeds, "
         "band 10–90 %. Left: log scale, where pure attention hits float64 round-off within a few "
         "layers; right: linear scale."},
        {"name": "collapse_exponent", **fig_exponent, "caption":
         "One layer's map of the residual, r_l → r_{l+1}, for every sequence and layer in the fit "
         "range. Slope 3 (dashed) is the cubic rate of Dong et al.'s bound; slope 1 (dotted) a "
         "plain exponential."},
        *trained_figures,
    ],
    tables=[{"caption": "Collapse exponent k (slope of log r_{l+1} against log r_l) and per-layer "
             f"factor ρ per variant; intervals: {interval_method}.", "html": table_html}],
    measurements=measurements,
    numbers={
        "exponents": summary.to_dict(orient="records"),
        "identity_max_error": float(np.max(np.abs(
            table.relative_residual**2 - (1 - table.token_similarity)))),
        "seeds": seeds, "depth": L,
    },
), numbers_path)
