# ---
# jupyter:
#   kernelspec:
#     display_name: Python (rankcollapse)
#     language: python
#     name: rankcollapse
# ---

# %% [markdown]
# # E3 — Circular trajectories (Dong, Cordonnier & Loukas, ICML 2021, §4)
#
# One attention layer, applied recurrently with shared weights, is trained (MSE) to map a pair of
# points on a circle (radius 0.3, 1000 points; the two tokens on opposite arcs) to the next pair,
# then rolled out for many steps. "skip" is a residual in the recurrence, x_{t+1} = x_t + f(x_t).
# `ln*` setups follow the original code: the layer keeps its own residual and LayerNorm (and an
# input LayerNorm) in every variant. `attn*` setups are ours: truly attention-only (no LayerNorm,
# no residual inside the layer). Rank collapse here means both tokens converge to one point: the
# pair's relative residual ‖X − 1x̄ᵀ‖/‖X‖ goes to 0.

# %% tags=["parameters"]
experiment = "E3"
tables = {"circle": "results/tables/E3_circle.parquet"}
settings = {"circle": {"radius": 0.3, "rollout": 300}}
figures_dir = "report/figures/E3"
numbers_path = "results/numbers/E3.json"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from rankcollapse import io, plotting
from rankcollapse.claims import Claim
from rankcollapse.notebooks import section

plotting.use_style()
table = io.read_parquet(tables["circle"])
setups = list(dict.fromkeys(table.setup))
widths = sorted(table.width.unique())
seeds = table.seed.nunique()
T = int(table.step.max())
radius = settings["circle"]["radius"]
COLLAPSED = 0.05  # a pair with relative residual below this has (nearly) merged
LABELS = {"ln": "no skip (original)", "ln_skip": "skip (original)",
          "ln_mlp": "no skip + MLP (original)", "ln_skip_mlp": "skip + MLP (original)",
          "attn": "no skip, attention only (ours)", "attn_skip": "skip, attention only (ours)"}
print(f"{len(table)} rows: setups {setups}, widths {widths}, {seeds} seeds, {T} steps")

# %% [markdown]
# ## Rolled-out trajectories
# One panel per setup (rows) and width (columns): the first start pair of the first seed, the two
# tokens in two colours, the true circle in grey; the cross marks where each token ends.

# %%
fig, axes = plt.subplots(len(setups), len(widths), figsize=(2.6 * len(widths), 2.4 * len(setups)),
                         constrained_layout=True, squeeze=False)
angle = np.linspace(0, 2 * np.pi, 200)
first = table[(table.seed == table.seed.min()) & (table.start == 0)]
for row, setup in enumerate(setups):
    for col, width in enumerate(widths):
        ax = axes[row][col]
        t = first[(first.setup == setup) & (first.width == width)]
        ax.plot(radius * np.cos(angle), radius * np.sin(angle), color="grey", lw=0.8)
        for token, color in zip((0, 1), plotting.PALETTE[:2]):
            tt = t[t.token == token].sort_values("step")
            ax.plot(tt.x, tt.y, ".", ms=1.5, color=color)
            ax.plot(tt.x.iloc[-1], tt.y.iloc[-1], "x", color="black", ms=6)
            ax.plot(tt.x.iloc[0], tt.y.iloc[0], "o", color=color, ms=4)
        lim = max(0.45, float(np.nanmax(np.abs(t[["x", "y"]].to_numpy()))) * 1.1)
        lim = min(lim, 3.0)
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        ax.tick_params(labelsize=6)
        ax.set_title(f"{LABELS.get(setup, setup)}\nd = {width}", fontsize=7.5)
fig.suptitle(f"Rollouts of {T} steps (dots: token positions; o start, x end)", fontsize=9)
fig_traj = plotting.save(fig, figures_dir, "trajectories")

# %% [markdown]
# ## Relative residual of the generated pair against rollout step
# Median over start pairs and seeds (band 10–90 %), per setup; one panel per width.

# %%
pairs = table[table.token == 0]
fig, axes = plt.subplots(1, len(widths), figsize=(4.6 * len(widths), 3.6), constrained_layout=True,
                         squeeze=False, sharey=True)
for ax, width in zip(axes[0], widths):
    for i, setup in enumerate(setups):
        t = pairs[(pairs.setup == setup) & (pairs.width == width)]
        q = t.groupby("step").relative_residual.quantile([0.1, 0.5, 0.9]).unstack()
        color = plotting.PALETTE[i % len(plotting.PALETTE)]
        ls = "-" if "skip" in setup else "--"
        ax.plot(q.index, q[0.5], ls, color=color, label=LABELS.get(setup, setup))
        ax.fill_between(q.index, q[0.1], q[0.9], color=color, alpha=0.12, lw=0)
    ax.axhline(COLLAPSED, color="grey", ls=":", lw=1)
    ax.set_title(f"width d = {width}")
    ax.set_xlabel("rollout step t")
    ax.set_ylabel("relative residual of the pair")
    ax.set_ylim(0, 1.05)
axes[0][-1].legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1))
fig_res = plotting.save(fig, figures_dir, "residual_vs_step")

# %% [markdown]
# ## Numbers and claims
# Per (setup, width): share of rollouts (start pairs × seeds) whose pair has collapsed (relative
# residual < 0.05) at the last step, the first step where the median residual falls below 0.05,
# the median final radius and the test MSE of one step.

# %%
last = pairs[pairs.step == T]


def first_collapse(t):
    med = t.groupby("step").relative_residual.median()
    below = med.index[med < COLLAPSED]
    return float(below[0]) if len(below) else np.nan


rows = []
for (setup, width), t in pairs.groupby(["setup", "width"], sort=False):
    fin = last[(last.setup == setup) & (last.width == width)]
    rows.append({"setup": setup, "width": width, "skip": bool(fin.skip.iloc[0]),
                 "protocol": fin.protocol.iloc[0],
                 "collapsed_share": float((fin.relative_residual < COLLAPSED).mean()),
                 "final_residual": float(fin.relative_residual.median()),
                 "collapse_step": first_collapse(t),
                 "final_radius": float(table[(table.setup == setup) & (table.width == width)
                                             & (table.step == T)].radius.median()),
                 "test_mse": float(fin.test_mse.mean()), "rollouts": len(fin)})
summary = pd.DataFrame(rows)
table_html = summary.round(4).to_html(index=False, border=0, classes="data")
summary

# %%
def share_claim(cid, statement, mask, low, high, what):
    s = summary[mask]
    fin = last.merge(s[["setup", "width"]], on=["setup", "width"])
    if fin.empty:
        return Claim(cid, statement, "Dong et al. 2021, §4 (circle experiment)", what, None, None,
                     low, high, reason="setups not in this run")
    collapsed = (fin.relative_residual < COLLAPSED).to_numpy(float)
    rng = np.random.default_rng(0)
    boot = [rng.choice(collapsed, len(collapsed)).mean() for _ in range(1000)]
    return Claim(cid, statement, "Dong et al. 2021, §4 (circle experiment)",
                 f"{what} ({len(collapsed)} rollouts; 95% bootstrap interval over rollouts)",
                 float(collapsed.mean()), tuple(np.quantile(boot, [0.025, 0.975]).tolist()),
                 low, high, reason=", ".join(f"{r.setup} d={r.width}: {r.collapsed_share:.2f}"
                                             for r in s.itertuples()))


original = summary.protocol == "original"
ours = summary.protocol == "attention_only"
claims = [
    share_claim("E3.no_skip_collapses_original",
                "Without skip connections the rollout collapses to a point (original protocol).",
                original & ~summary.skip, 0.8, 1.0,
                "share of no-skip rollouts (ln, ln_mlp) collapsed at the last step"),
    share_claim("E3.skip_keeps_circle_original",
                "With skip connections the trajectories do not collapse (original protocol).",
                original & summary.skip, 0.0, 0.2,
                "share of skip rollouts (ln_skip, ln_skip_mlp) collapsed at the last step"),
    share_claim("E3.no_skip_collapses_ours",
                "Without skip connections the rollout collapses (ours: attention only).",
                ours & ~summary.skip, 0.8, 1.0,
                "share of attention-only no-skip rollouts collapsed at the last step"),
    share_claim("E3.skip_keeps_circle_ours",
                "With skip connections the trajectories do not collapse (ours: attention only).",
                ours & summary.skip, 0.0, 0.2,
                "share of attention-only skip rollouts collapsed at the last step"),
]
# Width: no-skip collapse step at the largest vs the smallest width (ratio < 1: faster).
ns = summary[~summary.skip]
steps = ns.set_index(["setup", "width"]).collapse_step.unstack().reindex(columns=widths)
if len(widths) >= 2 and steps[[widths[0], widths[-1]]].notna().all(axis=1).any():
    ok = steps[[widths[0], widths[-1]]].dropna()
    ratio = (ok[widths[-1]] / ok[widths[0]]).to_numpy()
    claims.append(Claim(
        "E3.wider_collapses_faster",
        "Without skip connections, larger width collapses faster.",
        "Dong et al. 2021, §4 (circle experiment, widths 32 to 128)",
        f"collapse step at d = {widths[-1]} / at d = {widths[0]}, mean over no-skip setups "
        "(interval min–max)", float(ratio.mean()), (float(ratio.min()), float(ratio.max())),
        0.0, 0.9, reason=", ".join(f"{s}: {r:.2f}" for s, r in zip(ok.index, ratio))))
else:
    claims.append(Claim(
        "E3.wider_collapses_faster", "Without skip connections, larger width collapses faster.",
        "Dong et al. 2021, §4 (circle experiment, widths 32 to 128)",
        "collapse step ratio (largest / smallest width)", None, None, 0.0, 0.9,
        reason="no no-skip setup collapses at both widths in this run"))
pd.DataFrame([c.to_dict() for c in claims])[["id", "measured", "interval", "criterion", "verdict"]]

# %%
def describe(setup):
    s = summary[summary.setup == setup]
    return (f"{LABELS.get(setup, setup)}: " + ", ".join(
        f"d={r.width} {r.collapsed_share:.0%} collapsed (median final residual "
        f"{r.final_residual:.2f})" for r in s.itertuples()))


summary_text = (
    f"One recurrent layer, {T}-step rollouts from {int(summary.rollouts.iloc[0])} start pairs per "
    "setup and width. " + "; ".join(describe(s) for s in setups) + ". Verdicts: "
    + "; ".join(f"{c.id.split('.', 1)[1]} {c.verdict}" for c in claims) + "."
)
print(summary_text)
io.write_json(section(
    experiment, "Circular trajectories", "Dong, Cordonnier & Loukas (ICML 2021)", summary_text,
    figures=[
        {"name": "trajectories", **fig_traj, "caption":
         "Rollouts of the trained one-layer recurrence per setup (rows) and width (columns); the "
         "grey circle is the data. ln*: original protocol (LayerNorm and the layer's own residual "
         "kept); attn*: ours, attention only."},
        {"name": "residual_vs_step", **fig_res, "caption":
         "Relative residual of the generated pair against rollout step (median over start pairs "
         "and seeds, band 10–90 %); 0 means both tokens sit at one point. Dotted: the collapse "
         "threshold 0.05."},
    ],
    tables=[{"caption": "Per setup and width: collapsed share of rollouts at the last step, "
             "median final residual, first step the median falls below 0.05, median final radius, "
             "one-step test MSE.", "html": table_html}],
    claims=claims,
    numbers={"summary": summary.to_dict(orient="records"), "steps": T, "seeds": int(seeds)},
), numbers_path)
