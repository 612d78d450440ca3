"""What the probe leaves: the figure (one panel per metric, a line per ablation, bands over
seeds or sequences), layers.parquet and layers.csv, probe.json, and the terminal's summary.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from rankcollapse.probe.spec import METRICS, PROBE_OUTPUTS, ProbeError
from rankcollapse.probe.verdicts import RESIDUAL_FLOOR

if TYPE_CHECKING:
    from rankcollapse.probe.flow import Result


LABELS = {"san": "SAN (attention only)", "san_mlp": "SAN + MLP", "san_skip": "SAN + skip",
          "transformer": "transformer (unmodified)",
          "transformer_deesc": "transformer + de-escalation (τ=1)",
          "san_skip_2021": "SAN + skip (2021 code's ablation)"}
PANELS = (  # metric, title, log scale
    ("relative_residual_comp", "relative residual, composite ℓ1,∞ norm", True),
    ("relative_residual", "relative residual, Frobenius norm", True),
    ("token_similarity", "token similarity t_sim", False),
    ("mean_cosine", "mean cosine similarity of tokens", False),
    ("effective_rank", "effective rank", True),
    ("attn_lambda2", "attention |λ₂| (mean over heads)", False),
)


def _colour(ablation: str) -> str:
    from rankcollapse import plotting

    return {"transformer": "#000000",
            "transformer_deesc": plotting.variant_color("post_ln_deesc"),
            "san_skip_2021": plotting.variant_color("san_skip_mlp")}.get(
        ablation, plotting.variant_color(ablation))


def curves(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per (ablation, layer): the line and its band. Over seeds (several random networks): the
    mean of the per-seed means over sequences, band the range of the seeds; one network: the
    mean over sequences, band their 10th to 90th percentile."""
    t = table[table[metric].notna()]
    if t.seed.nunique() > 1:
        per_seed = t.groupby(["ablation", "layer", "seed"])[metric].mean()
        g = per_seed.groupby(["ablation", "layer"])
        return pd.DataFrame({"mid": g.mean(), "low": g.min(), "high": g.max()}).reset_index()
    g = t.groupby(["ablation", "layer"])[metric]
    return pd.DataFrame({"mid": g.mean(), "low": g.quantile(0.1),
                         "high": g.quantile(0.9)}).reset_index()


def band_text(info: dict, seeds: int) -> str:
    return (f"lines: mean over sequences and seeds; bands: range of the {seeds} seeds' means"
            if seeds > 1 else
            "lines: mean over sequences; bands: their 10th–90th percentile (one network)")


def figure(result: Result):
    """One panel per metric, a line per ablation, bands over seeds or sequences (caption)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    from rankcollapse import plotting

    plotting.use_style()
    table, info = result.table, result.info
    floor = RESIDUAL_FLOOR[info["dtype"]] / 100
    fig, axes = plt.subplots(2, 3, figsize=(12.5, 7.2))
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.11, top=0.9, wspace=0.22, hspace=0.32)
    ablations = list(dict.fromkeys(table.ablation))
    limits = {"token_similarity": (-0.02, 1.02), "mean_cosine": (-0.1, 1.02),
              "attn_lambda2": (-0.02, 1.02)}
    for ax, (metric, title, log) in zip(axes.flat, PANELS, strict=True):
        c = curves(table, metric)
        for ablation in ablations:
            a = c[c.ablation == ablation]
            if a.empty:
                continue
            clip = (lambda s: s.clip(lower=floor)) if log else (lambda s: s)  # noqa: E731
            ax.plot(a.layer, clip(a.mid), color=_colour(ablation), lw=1.6, marker="o", ms=2.5,
                    label=LABELS.get(ablation, ablation))
            ax.fill_between(a.layer, clip(a.low), clip(a.high), color=_colour(ablation),
                            alpha=0.18, lw=0)
        if log:  # decades only: minor tick labels cost more to lay out than the curves
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0), numticks=7))
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # no mathtext
        if metric in limits:
            ax.set_ylim(*limits[metric])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(title)
        ax.set_xlabel("layer")
    axes.flat[0].legend(frameon=False, loc="lower left")
    seeds = table.seed.nunique()
    weights = ("checkpoint" if info["weights"] == "checkpoint" else
               f"random init, {seeds} seed{'s' if seeds > 1 else ''}")
    name = info["model"] if info["model"] == info["model_type"] else \
        f"{info['model']} ({info['model_type']})"
    fig.suptitle(f"{name}, {weights}: {info['depth']} layers, width {info['width']} — "
                 f"{info['input']}", fontsize=10.5)
    fig.text(0.5, 0.015, f"{band_text(info, seeds)}. |λ₂|: {info['spectrum']}. Layer 0 is the "
             "input to the first layer.", ha="center", va="bottom", fontsize=8.5)
    return fig


def outputs(out: str | Path) -> list[Path]:
    return [Path(out) / name for name in PROBE_OUTPUTS]


def write(result: Result, out: str | Path, force: bool = False) -> list[Path]:
    """Write the figure (PNG, PDF, SVG), layers.parquet, layers.csv and probe.json into `out`;
    refuses to overwrite any of them unless force."""
    from rankcollapse import io, plotting

    existing = [p for p in outputs(out) if p.exists()]
    if existing and not force:
        raise ProbeError(f"{out} already holds {[p.name for p in existing]}; nothing was "
                         "overwritten (use --force, or another --out)")
    out = Path(out)
    fig = figure(result)
    with plt_rc({"savefig.dpi": 100}):  # a small PNG: six panels need no print resolution
        saved = plotting.save(fig, out, "probe", formats=("png", "pdf"), tight=False)
    io.write_parquet(result.table, out / "layers.parquet")
    io.atomic_write(out / "layers.csv", lambda tmp: result.table.to_csv(tmp, index=False))
    record = {**result.info, "figure": {k: Path(v).name for k, v in saved.items()},
              "caption": band_text(result.info, result.table.seed.nunique()),
              "verdicts": result.verdicts,
              "verdict_rule": _verdict_rule()}
    io.write_json(json.loads(json.dumps(record, default=_jsonable)), out / "probe.json")
    return outputs(out)


def plt_rc(settings: dict):
    import matplotlib.pyplot as plt

    return plt.rc_context(settings)


def _jsonable(value):
    if isinstance(value, float | np.floating) and not math.isfinite(float(value)):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def _verdict_rule() -> str:
    from rankcollapse.claims import VERDICT_RULE

    return VERDICT_RULE


def summary(result: Result, layers: Iterable[int] | None = None) -> str:
    """The terminal's table: the metrics at the first, middle and last layer per ablation (mean
    over sequences and seeds), then the verdicts' sentences."""
    table, info = result.table, result.info
    depth = int(table.layer.max())
    layers = sorted(set(layers or (0, depth // 2, depth)))
    seeds = table.seed.nunique()
    weights = ("checkpoint, one network" if info["weights"] == "checkpoint" else
               f"random init, {seeds} seed{'s' if seeds > 1 else ''}")
    lines = [f"{info['model']} ({info['model_type']}, {weights}): {depth} layers, width "
             f"{info['width']}, {info['heads']} heads, {info['parameters'] / 1e6:.1f}M "
             "parameters",
             f"input: {info['input']}; {info['dtype']} on {info['device']}",
             f"mean over sequences{' and seeds' if seeds > 1 else ''}; |λ₂| over "
             f"{info['spectrum']}", ""]
    header = (f"{'ablation':<18} {'layer':>5} {'r (ℓ1,∞)':>10} {'r (F)':>10} {'t_sim':>7} "
              f"{'cos':>7} {'eff.rank':>9} {'|λ₂|':>6}")
    lines += [header, "-" * len(header)]
    means = table.groupby(["ablation", "layer"], sort=False)[list(METRICS)].mean()
    for ablation in dict.fromkeys(table.ablation):
        for i, layer in enumerate(layers):
            v = means.loc[(ablation, layer)]
            lam = "—" if math.isnan(v.attn_lambda2) else f"{v.attn_lambda2:.3f}"
            lines.append(f"{ablation if i == 0 else '':<18} {layer:>5} "
                         f"{v.relative_residual_comp:>10.3g} {v.relative_residual:>10.3g} "
                         f"{v.token_similarity:>7.3f} {v.mean_cosine:>7.3f} "
                         f"{v.effective_rank:>9.2f} {lam:>6}")
    lines += ["", "Verdicts (claims registered in src/rankcollapse/claims/claims.yaml, judged by "
              "rankcollapse.claims on this model):"]
    lines += [f"  - {v['on_model']}" for v in result.verdicts]
    return "\n".join(lines)
