# ---
# jupyter:
#   kernelspec:
#     display_name: Python (rankcollapse)
#     language: python
#     name: rankcollapse
# ---

# %% [markdown]
# # E7 — Cross-checks: three collapse statistics on the same runs
#
# Each paper measures "tokens growing alike" its own way:
#
# - Dong et al. (D21): the relative residual r(X) = ‖X − 1x̄ᵀ‖ / ‖X‖, plotted in the composite
#   norm √(‖·‖₁‖·‖∞); r_F in the Frobenius norm;
# - Yu & Zhang (YZ): token similarity t_sim(X) = ‖Π₁X‖²_F / ‖X‖²_F with Π₁ = (1/n)11ᵀ;
# - Koubbi, Geshkovski & Rigollet (KGR26): clustering on the sphere, the mean pairwise inner
#   product of the tokens — for network states, the mean cosine of the normalised tokens.
#
# Algebra links them: Π₁X = 1x̄ᵀ and (I − Π₁)X ⟂ Π₁X, so r_F² = 1 − t_sim exactly; and when all
# tokens have the same norm, t_sim = 1/n + (1 − 1/n)·(mean cosine). This notebook checks both
# numerically and measures how far the three statistics agree (rank correlations across variants
# and layers, and the direction of each layer's change) on the runs the other experiments made:
# E1's random-init networks, E4/E5's trained networks (and the same networks at init), and E6's
# unscaled particle model at E1's sizes. It reads existing tables only.

# %% tags=["parameters"]
experiment = "E7"
tables = None  # name -> table: papermill injects the run's; None: the default config's
settings = None  # block -> config block: papermill injects the run's; None: the default's
figures_dir = "report/figures/E7"
numbers_path = "results/numbers/E7.json"

# %%
from rankcollapse.notebooks import defaults

tables, settings = defaults(experiment, tables, settings)

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from rankcollapse import io, plotting
from rankcollapse.claims import e7 as e7_claims
from rankcollapse.claims.e7 import STATS, medians, spearman
from rankcollapse.notebooks import section

plotting.use_style()
B = int(settings["fit"].get("bootstrap", 1000))
n_tokens = int(settings["init_sweep"]["tokens"])
KEYS = ["task", "variant", "depth", "seed", "stage", "sample", "layer"]

init = io.read_parquet(tables["init"])
init = init.assign(source="init_gaussian", depth=int(init.layer.max()))
trained_parts = [io.read_parquet(tables[k]) for k in ("trained_e4", "trained_e5") if k in tables]
if trained_parts:
    # E4 and E5 can share training runs (same task, variant, depth, seed): keep each once.
    grid = pd.concat(trained_parts, ignore_index=True).drop_duplicates(KEYS)
    grid = grid[~grid.diverged]
    grid = grid[grid.depth == grid.depth.max()]  # the deepest networks: the longest curves
else:
    grid = pd.DataFrame(columns=[*KEYS, *STATS])
particles = None
if "particles" in tables:
    particles = io.read_parquet(tables["particles"])
    particles = particles[particles.kind == "trajectory"]
    # Unit tokens: t_sim = ‖x̄‖², r_F² = 1 − t_sim, mean cosine = mean pairwise inner product.
    particles = particles.assign(
        token_similarity=particles.mean_norm_sq, mean_cosine=particles.inner,
        relative_residual=np.sqrt(np.clip(1 - particles.mean_norm_sq, 0, None)),
        relative_residual_comp=np.nan, variant="particles", seed=particles.run,
        sample=0)
print(f"init: {len(init)} rows; trained grid: {len(grid)} rows; "
      f"particles: {0 if particles is None else len(particles)} rows")

# %% [markdown]
# ## The three statistics side by side
# Per layer, median over sequences and seeds. Top: random-init networks on Gaussian sequences
# (E1), with the unscaled particle model of E6 at the same n, d and heads (grey, dash-dotted).
# Bottom: the trained networks of E4/E5 (solid) and the same networks at initialisation
# (dashed), on digits test images.

# %%
COLUMNS = [("relative_residual_comp", "Dong et al.: relative residual r (composite norm)"),
           ("token_similarity", "Yu & Zhang: token similarity t_sim"),
           ("mean_cosine", "KGR26: mean cosine of normalised tokens")]
rows = 2 if len(grid) else 1
fig, axes = plt.subplots(rows, 3, figsize=(11, 3.4 * rows), constrained_layout=True,
                         squeeze=False)
for variant, t in init.groupby("variant", sort=False):
    med = t.groupby("layer")[STATS].median()
    for ax, (col, _) in zip(axes[0], COLUMNS):
        ax.plot(med.index, med[col], color=plotting.variant_color(variant), lw=1.5,
                label=plotting.variant_label(variant))
if particles is not None:
    med = particles.groupby("layer")[STATS].median()
    for ax, col in zip(axes[0], ["relative_residual", "token_similarity", "mean_cosine"]):
        ax.plot(med.index, med[col], color="0.45", ls=(0, (5, 2, 1, 2)), lw=1.6,
                label="KGR26 particles (r in Frobenius norm)" if col.startswith("rel") else
                "KGR26 particles")
if rows == 2:
    for (variant, stage), t in grid.groupby(["variant", "stage"], sort=False):
        med = t.groupby("layer")[STATS].median()
        for ax, (col, _) in zip(axes[1], COLUMNS):
            ax.plot(med.index, med[col], "-" if stage == "trained" else "--",
                    color=plotting.variant_color(variant), lw=1.5 if stage == "trained" else 1.0,
                    label=f"{plotting.variant_label(variant)}, {stage}")
for r in range(rows):
    for ax, (col, title) in zip(axes[r], COLUMNS):
        ax.set_xlabel("layer l")
        ax.set_title(title, fontsize=9)
        ax.set_ylim(-0.05 if col == "mean_cosine" else 0, 1.05)
    axes[r][0].set_ylabel(["random init, Gaussian inputs", "trained on digits (E4/E5)"][r])
handles, labels = axes[0][0].get_legend_handles_labels()
axes[0][2].legend(handles, labels, fontsize=7, frameon=False, loc="center left",
                  bbox_to_anchor=(1.02, 0.5))
if rows == 2:
    axes[1][2].legend(fontsize=7, frameon=False, loc="center left", bbox_to_anchor=(1.02, 0.5))
fig_side = plotting.save(fig, figures_dir, "three_statistics")

# %% [markdown]
# ## Where they agree and where they diverge
# Rank correlations (Spearman) over the per-(variant, layer) medians of each set of runs; the
# two identities checked on every row; and the share of layer steps of single sequences in which
# Dong's residual and the clustering statistic move in opposite directions (a step counts when
# both change by more than 10⁻⁹).

# %%
def opposite_steps(t: pd.DataFrame, residual: str) -> float:
    """Share of layer steps where the residual and the mean cosine move the same way
    (one says 'more collapsed', the other 'less')."""
    keys = [k for k in ("variant", "depth", "stage", "seed", "sample") if k in t]
    t = t.sort_values([*keys, "layer"])
    d_res = t.groupby(keys)[residual].diff()
    d_cos = t.groupby(keys)["mean_cosine"].diff()
    moved = (d_res.abs() > 1e-9) & (d_cos.abs() > 1e-9)
    return float(((np.sign(d_res) == np.sign(d_cos)) & moved).sum() / max(moved.sum(), 1))


# name -> (rows, tokens n where recorded, machine epsilon of the precision the run used)
EPS64, EPS32 = float(np.finfo(np.float64).eps), float(np.finfo(np.float32).eps)
init_eps = float(np.finfo(settings["init_sweep"].get("dtype", "float64")).eps)
SETS = {"random init, Gaussian inputs (E1)": (init, n_tokens, init_eps)}
if len(grid):  # the task models run in float32
    SETS["trained on digits (E4/E5)"] = (grid[grid.stage == "trained"], None, EPS32)
    SETS["the same networks at init, digits"] = (grid[grid.stage == "init"], None, EPS32)
if particles is not None:
    SETS["KGR26 particles, E1's sizes (E6)"] = (particles, int(particles.n.iloc[0]), EPS64)

rows, numbers = [], {}
for name, (t, n, eps) in SETS.items():
    m = medians(t)
    identity = float((t.relative_residual**2 - (1 - t.token_similarity)).abs().max())
    equal_norm = (float((t.token_similarity - (1 / n + (1 - 1 / n) * t.mean_cosine)).abs().max())
                  if n else float("nan"))
    residual = "relative_residual" if t.relative_residual_comp.isna().all() \
        else "relative_residual_comp"
    stats = {
        "points": len(m),
        "rho_comp_fro": spearman(m.relative_residual_comp.to_numpy(),
                                 m.relative_residual.to_numpy()),
        "rho_res_tsim": spearman(m[residual].to_numpy(), 1 - m.token_similarity.to_numpy()),
        "rho_res_cos": spearman(m[residual].to_numpy(), 1 - m.mean_cosine.to_numpy()),
        "rho_tsim_cos": spearman(m.token_similarity.to_numpy(), m.mean_cosine.to_numpy()),
        "identity_error": identity,
        "identity_error_eps": identity / eps,
        "equal_norm_gap": equal_norm,
        "opposite_steps_comp": opposite_steps(t, "relative_residual_comp")
        if residual == "relative_residual_comp" else float("nan"),
        "opposite_steps_fro": opposite_steps(t, "relative_residual"),
    }
    numbers[name] = stats
    fmt = lambda v, spec: "—" if not np.isfinite(v) else format(v, spec)  # noqa: E731
    rows.append({
        "runs": name,
        "variant × layer points": stats["points"],
        "ρ(r_comp, r_F)": fmt(stats["rho_comp_fro"], ".3f"),
        "ρ(r, 1 − t_sim)": fmt(stats["rho_res_tsim"], ".3f"),
        "ρ(r, 1 − cos)": fmt(stats["rho_res_cos"], ".3f"),
        "ρ(t_sim, cos)": fmt(stats["rho_tsim_cos"], ".3f"),
        "max |r_F² − (1 − t_sim)|": fmt(identity, ".1e"),
        "max |t_sim − 1/n − (1 − 1/n)·cos|": fmt(equal_norm, ".1e"),
        "steps r_comp, cos disagree": fmt(100 * stats["opposite_steps_comp"], ".1f") + " %"
        if np.isfinite(stats["opposite_steps_comp"]) else "—",
        "steps r_F, cos disagree": fmt(100 * stats["opposite_steps_fro"], ".1f") + " %",
    })
agreement = pd.DataFrame(rows)
table_html = agreement.to_html(index=False, border=0, classes="data")
agreement

# %% [markdown]
# Per variant at random init: the largest gap to the equal-norm relation shows which
# architectures let token norms spread (then the cosine and t_sim part ways), and the share of
# layer steps in which each residual moves against the cosine.

# %%
gap_by_variant = (init.assign(gap=(init.token_similarity
                                   - (1 / n_tokens + (1 - 1 / n_tokens) * init.mean_cosine)).abs())
                  .groupby("variant", sort=False).gap.max())
steps_by_variant = pd.DataFrame({
    residual: {v: opposite_steps(t, residual) for v, t in init.groupby("variant", sort=False)}
    for residual in ("relative_residual_comp", "relative_residual")})
pd.concat([gap_by_variant.rename("equal-norm gap"), steps_by_variant], axis=1)

# %% [markdown]
# ## Claims
# Registered in src/rankcollapse/claims/claims.yaml: the two identities are checks of our code; the agreement
# of the orderings is ours. Measured by `rankcollapse.claims.e7`.

# %%
measurements = e7_claims.measure(
    {name: (t, eps) for name, (t, _, eps) in SETS.items()}, init,
    grid[grid.stage == "trained"] if len(grid) else grid, particles, B)
pd.DataFrame([m.to_dict() for m in measurements])[["id", "value", "method", "n"]]

# %%
worst_variant = gap_by_variant.idxmax()
worst_steps = steps_by_variant.relative_residual_comp.idxmax()
init_steps = numbers["random init, Gaussian inputs (E1)"]
description = (
    f"The statistics are compared on {len(SETS)} sets of runs (Table above). The gap between "
    f"t_sim and the equal-norm relation is largest for {plotting.variant_label(worst_variant)} "
    f"({gap_by_variant.max():.3f}). Layer by layer at random init, Dong et al.'s composite-norm "
    f"residual moves in the opposite sense to the clustering statistic in "
    f"{100 * init_steps['opposite_steps_comp']:.0f} % of steps (most for "
    f"{plotting.variant_label(worst_steps)}, "
    f"{100 * steps_by_variant.relative_residual_comp.max():.0f} %), the Frobenius residual in "
    f"{100 * init_steps['opposite_steps_fro']:.1f} %."
)
print(description)
io.write_json(section(
    experiment, description,
    figures=[{"name": "three_statistics", **fig_side, "caption":
              "Dong et al.'s relative residual (composite norm), Yu & Zhang's token similarity "
              "t_sim and KGR26's clustering statistic (mean cosine of the normalised tokens) per "
              "layer, on the same runs; median over sequences and seeds. Top: random-init "
              "networks on Gaussian sequences (E1) and E6's unscaled particle model at the same "
              "sizes (grey, dash-dotted; its residual in the Frobenius norm). Bottom: E4/E5's trained "
              "networks (solid) and the same networks at initialisation (dashed), on digits."}],
    tables=[{"caption": "Agreement of the three statistics per set of runs: Spearman rank "
             "correlations over variant × layer medians (r is the composite residual where "
             "available, Frobenius for particles), the two identities' largest deviations "
             "(the equal-norm relation is exact only when all tokens have the same norm; "
             "— where n is not recorded), and the share of single-sequence layer steps in which "
             "r and the mean cosine move in opposite senses of collapse.", "html": table_html}],
    measurements=measurements,
    numbers={"agreement": numbers,
             "equal_norm_gap_by_variant": gap_by_variant.to_dict(),
             "opposite_steps_by_variant": steps_by_variant.to_dict(orient="index")},
), numbers_path)
