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
# The original set-up: a pair of tokens on opposite arcs of a circle (1000 points, radius 0.3;
# the data are the 499 pairs (p_i, p_{i+499})), one transformer layer trained (MSE) to map the
# pair to the next pair, then applied recurrently from a start pair. `ln*` setups are the
# original protocol: input Linear + LayerNorm, a post-LN layer with biases that keeps its own
# residual and LayerNorm in every variant, optionally a post-LN MLP, BERT initialisation, Adam
# at a constant rate. "skip" is a residual in the recurrence, x_{t+1} = x_t + f(x_t). `attn*`
# setups are ours: truly attention-only (no LayerNorm, no residual inside the layer, no MLP).
# Unlike the original code: no dropout, a mean (not summed) squared error, random batches, and
# the skip trained as the residual recurrence it is rolled out as.
# A roll-out **collapses** when the two tokens meet in one point and stay there, or when the
# trajectory shrinks to a point (each token stays put for longer than moving at the data's
# speed would allow), with the threshold of `rankcollapse.experiments.circle.COLLAPSE_FRACTION`; a trained
# layer's time to collapse is the upper median over its start pairs.

# %% tags=["parameters"]
experiment = "E3"
tables = None  # name -> table: papermill injects the run's; None: the default config's
settings = None  # block -> config block: papermill injects the run's; None: the default's
figures_dir = "report/figures/E3"
numbers_path = "results/numbers/E3.json"

# %%
from rankcollapse.notebooks import defaults

tables, settings = defaults(experiment, tables, settings)

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from rankcollapse import io, plotting, references
from rankcollapse.experiments.circle import COLLAPSE_FRACTION, circle_task, collapse_steps
from rankcollapse.claims import e3 as e3_claims
from rankcollapse.notebooks import section

plotting.use_style()
table = io.read_parquet(tables["circle"])
c = settings["circle"]
setups = [s for s in ("ln", "ln_skip", "ln_mlp", "ln_skip_mlp", "attn", "attn_skip")
          if s in set(table.setup)]
widths = sorted(int(w) for w in table.width.unique())
T = int(table.step.max())
radius = float(table.data_radius.iloc[0])
threshold = COLLAPSE_FRACTION * 2 * radius
LABELS = {"ln": "no skip", "ln_skip": "skip", "ln_mlp": "no skip + MLP",
          "ln_skip_mlp": "skip + MLP", "attn": "no skip, attention only (ours)",
          "attn_skip": "skip, attention only (ours)"}
rollouts = collapse_steps(table)
layers = e3_claims.layer_times(rollouts)
B = 1000
print(f"{len(table)} rows: setups {setups}, widths {widths}, {table.seed.nunique()} seeds, "
      f"{table.start.nunique()} start pairs, {T} steps")

# %% [markdown]
# ## Trajectories
# One panel per setup and width, as in the paper's figure (each row: a setup without and with
# skip, each at every width): the two training arcs in light grey, the roll-out of each token of the first trained layer from the original
# start pair (red and blue; o start, x end) and, faint, those of the other trained layers. The
# panel's title counts the trained layers that collapse. Axes as the paper's (±0.56); a
# trajectory that leaves them is clipped.

# %%
data = circle_task(points=int(table.data_points.iloc[0]), radius=radius)
arcs = data.x_train.numpy()  # (pairs, 2 tokens, 2)
per_row = 2 if len(setups) > 2 else 1  # two setups side by side: without and with skip
n_rows = -(-len(setups) // per_row)
fig, axes = plt.subplots(n_rows, per_row * len(widths),
                         figsize=(2.4 * per_row * len(widths) + 0.3, 2.45 * n_rows),
                         constrained_layout=True, squeeze=False)
first_seed = int(table.seed.min())
start0 = table[table.start == 0]
COLORS = ("#D55E00", "#0072B2")
for ax in axes.flat[len(setups) * len(widths):]:
    ax.set_visible(False)
for i, setup in enumerate(setups):
    for j, width in enumerate(widths):
        ax = axes[i // per_row][(i % per_row) * len(widths) + j]
        for token in (0, 1):
            ax.plot(arcs[:, token, 0], arcs[:, token, 1], color="#DDDDDD", lw=4, zorder=0)
        t = start0[(start0.setup == setup) & (start0.width == width)]
        for seed in sorted(t.seed.unique()):
            ts = t[t.seed == seed]
            for token, color in zip((0, 1), COLORS):
                tt = ts[ts.token == token].sort_values("step")
                far = ~(np.hypot(tt.x, tt.y) < 2.0)  # off the panel or diverged: not drawn
                tt = tt.assign(x=tt.x.mask(far), y=tt.y.mask(far))
                main = seed == first_seed
                ax.plot(tt.x, tt.y, "-", lw=1.0 if main else 0.5, alpha=1.0 if main else 0.25,
                        color=color)
                if main:
                    ax.plot(tt.x.iloc[0], tt.y.iloc[0], "o", color=color, ms=4)
                    if not far.iloc[-1]:
                        ax.plot(tt.x.iloc[-1], tt.y.iloc[-1], "x", color="black", ms=6)
        lay = layers[(layers.setup == setup) & (layers.width == width)]
        ax.set_xlim(-0.56, 0.56)
        ax.set_ylim(-0.56, 0.56)
        ax.set_aspect("equal")
        ax.tick_params(labelsize=6)
        ax.set_title(f"{LABELS.get(setup, setup)}, d = {width}\n"
                     f"{int(lay.collapsed.sum())} of {len(lay)} layers collapse", fontsize=7.5)
fig.suptitle(f"Roll-outs of {T} steps (grey: the two training arcs)", fontsize=9)
fig_traj = plotting.save(fig, figures_dir, "trajectories")

# %% [markdown]
# ## Time to collapse
# (a) Share of roll-outs (trained layers × start pairs) that have collapsed by roll-out step t,
# per setup; one panel per width. (b) Each trained layer's time to collapse (the upper median
# over its start pairs), per setup, filled for the narrowest width and open for the widest; at
# the top, "none": no collapse within the roll-out.

# %%
fig, axes = plt.subplots(1, len(widths) + 1, figsize=(4.0 * (len(widths) + 1), 3.6),
                         constrained_layout=True, squeeze=False)
steps = np.arange(T + 1)
for ax, width in zip(axes[0], widths):
    for i, setup in enumerate(setups):
        r = rollouts[(rollouts.setup == setup) & (rollouts.width == width)]
        times = r.collapse_step.to_numpy(float)
        share = [(times <= t).mean() for t in steps]  # NaN (never) compares False
        ax.step(steps, share, where="post", color=plotting.PALETTE[i % len(plotting.PALETTE)],
                ls="-" if "skip" in setup else "--", label=LABELS[setup])
    ax.set_title(f"(a) width d = {width}")
    ax.set_xlabel("roll-out step t")
    ax.set_ylabel("share of roll-outs collapsed")
    ax.set_ylim(-0.02, 1.02)
axes[0][0].legend(fontsize=6.5, frameon=False, loc="center right")
ax = axes[0][-1]
for i, setup in enumerate(setups):
    for j, width in enumerate(widths):
        lay = layers[(layers.setup == setup) & (layers.width == width)]
        y = np.where(lay.collapsed, lay.time_to_collapse, T * 1.08)
        x = i + (j - (len(widths) - 1) / 2) * 0.3 + np.linspace(-0.08, 0.08, len(lay))
        color = plotting.PALETTE[i % len(plotting.PALETTE)]
        ax.plot(x, y, "o", ms=4, color=color, mfc=color if j == 0 else "white",
                label=f"d = {width}" if i == 0 else None)
ax.axhline(T, color="grey", lw=0.8, ls=":")
ax.set_xticks(range(len(setups)), setups, fontsize=7, rotation=30)
ax.set_yticks([0, 100, 200, 300, T * 1.08], ["0", "100", "200", "300", "none"])
ax.set_ylim(-10, T * 1.15)
ax.set_ylabel("time to collapse (steps)")
ax.set_title("(b) per trained layer (filled: d = %d, open: d = %d)" % (widths[0], widths[-1])
             if len(widths) > 1 else "(b) per trained layer", fontsize=8)
fig_time = plotting.save(fig, figures_dir, "collapse_times")

# %% [markdown]
# ## Numbers per setup and width

# %%
pairs = table[table.token == 0]
last = pairs[pairs.step == T]
rows = []
for setup in setups:
    for width in widths:
        lay = layers[(layers.setup == setup) & (layers.width == width)]
        r = rollouts[(rollouts.setup == setup) & (rollouts.width == width)]
        fin = last[(last.setup == setup) & (last.width == width)]
        points = table[(table.setup == setup) & (table.width == width) & (table.step == T)]
        times = lay.time_to_collapse.where(lay.collapsed)
        rows.append({
            "setup": setup, "protocol": lay.protocol.iloc[0], "width": width,
            "layers collapsed": f"{int(lay.collapsed.sum())} / {len(lay)}",
            "time to collapse (median of collapsed layers)":
                f"{times.median():.0f}" if times.notna().any() else "none",
            "times per layer": ", ".join("none" if not ok else f"{t:.0f}" for t, ok in
                                          zip(lay.time_to_collapse, lay.collapsed)),
            "roll-outs merged": f"{r.merge_step.notna().mean():.2f}",
            "roll-outs stalled": f"{r.stall_step.notna().mean():.2f}",
            "median final distance": f"{fin.pair_distance.median():.3g}",
            "median final radius": f"{points.radius.median():.3g}",
            "training MSE (median)": f"{fin.groupby('seed').train_mse.first().median():.2e}",
        })
summary = pd.DataFrame(rows)
table_html = summary.to_html(index=False, border=0, classes="data")
summary

# %% [markdown]
# ## Beside the original code
# Dong et al.'s own circle script, run outside this project at the same settings
# (`workflow/references/d21_original.yaml`): its trained layers judged by our collapse rule on 4
# start pairs, beside ours, per setup and width.

# %%
reference = references.load(tables["reference"]) if tables.get("reference") else None
theirs = references.e3_layers(reference) if reference else pd.DataFrame()


def collapse_row(lay, code, setup, width):
    times = lay.time_to_collapse.where(lay.collapsed)
    return {"setup": setup, "width": width, "code": code,
            "layers collapsed": f"{int(lay.collapsed.sum())} / {len(lay)}",
            "mean time to collapse": f"{lay.time_to_collapse.mean():.0f}",
            "median time (collapsed layers)":
                f"{times.median():.0f}" if times.notna().any() else "none"}


ref_rows = []
for setup in ("ln", "ln_mlp", "ln_skip", "ln_skip_mlp"):
    for width in widths:
        mine = layers[(layers.setup == setup) & (layers.width == width)]
        if len(mine):
            ref_rows.append(collapse_row(mine, "ours", setup, width))
        if len(theirs):
            lay = theirs[(theirs.setup == setup) & (theirs.width == width)]
            if len(lay):
                ref_rows.append(collapse_row(lay, "original", setup, width))
reference_table = pd.DataFrame(ref_rows)
reference_html = reference_table.to_html(index=False, border=0, classes="data")
reference_table

# %% [markdown]
# ## Claims
# Registered in src/rankcollapse/claims/claims.yaml and measured by `rankcollapse.claims.e3`, resampling
# whole trained layers (never the roll-outs of one layer).

# %%
measurements = e3_claims.measure(rollouts, B, reference=reference, steps=c.get("steps"))
pd.DataFrame([m.to_dict() for m in measurements])[["id", "value", "method", "n"]]

# %%
def time_text(setup, width):
    lay = layers[(layers.setup == setup) & (layers.width == width)]
    times = lay.time_to_collapse.where(lay.collapsed)
    median = f"median {times.median():.0f} steps" if times.notna().any() else "none"
    return f"d = {width}: {int(lay.collapsed.sum())} of {len(lay)} layers collapse ({median})"


description = (
    f"One recurrent layer per setup and width (widths {', '.join(map(str, widths))}), "
    f"{table.seed.nunique()} independently trained layers each, {c.get('steps')} Adam steps "
    f"at learning rate {c.get('lr'):g} in batches of {c.get('batch')}, then {T}-step roll-outs "
    f"from {table.start.nunique()} start pairs per layer. Collapse threshold: the two tokens "
    f"within {threshold:.3g} ({COLLAPSE_FRACTION:.0%} of the data's pair distance 2r) of each "
    "other, or each within that distance of its end point for the rest of the roll-out. "
    + "; ".join(f"{LABELS[s]}: " + ", ".join(time_text(s, w) for w in widths) for s in setups)
    + "."
)
print(description)
io.write_json(section(
    experiment, description,
    figures=[
        {"name": "trajectories", **fig_traj, "caption":
         "Roll-outs of the trained one-layer recurrence, one panel per setup and width (each "
         "row: a setup without and with skip), from the original start pair: the first trained layer's two tokens (red, blue; o "
         "start, x end) and, faint, the other layers'; grey: the two training arcs. Original "
         "protocol unless marked ours (attention only)."},
        {"name": "collapse_times", **fig_time, "caption":
         "(a) Share of roll-outs (trained layers × start pairs) collapsed by roll-out step t, "
         "per setup and width. (b) Each trained layer's time to collapse (upper median over "
         "its start pairs), filled for the narrowest width, open for the widest; \"none\": no "
         "collapse within the roll-out."},
    ],
    tables=[{"caption": "Per setup and width: trained layers that collapse, their time to "
             "collapse, the share of roll-outs whose tokens merge or whose trajectory stalls, "
             "the median final distance of the two tokens and radius, the training MSE.",
             "html": table_html},
            {"caption": "Beside Dong et al.'s original circle script ("
             + (references.provenance(reference) if reference else "not run")
             + "; same settings, 3 seeds per setup and width; its skip layers judged on the "
             "recurrence's state): trained layers that collapse by our rule, their mean time to "
             "collapse (no collapse counted as the roll-out's length + 1) and the median time "
             "of those that collapse.", "html": reference_html}],
    measurements=measurements,
    numbers={"layers": layers.to_dict(orient="records"), "steps": T,
             "threshold": threshold, "seeds": int(table.seed.nunique())},
), numbers_path)
