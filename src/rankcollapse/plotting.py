"""One figure style for every notebook: colour-blind-safe colours, labelled axes, stable files."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Okabe & Ito's colour-blind-safe palette (black last, for references), wine from Paul Tol's.
# Yellow (#F0E442) is left out: too faint for lines on white.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#882255", "#000000"]

# Fixed colours per variant, so a variant looks the same in every figure.
VARIANT_COLORS = {
    "san": "#D55E00",
    "san_skip": "#0072B2",
    "san_mlp": "#E69F00",
    "san_skip_mlp": "#56B4E9",
    "san_ln": "#CC79A7",
    "post_ln": "#000000",
    "pre_ln": "#009E73",
    "post_ln_deesc": "#882255",  # Paul Tol's wine: yellow is unreadable as a line
    "post_ln_deesc_half": "#AA4499",
    "post_ln_deesc_mlp": "#44AA99",
    "post_ln_deesc_out": "#DDAA33",
    "post_ln_deesc_nomlp": "#117733",
    "post_ln_center": "#999933",
    "post_ln_scaled": "#CC6677",
    "post_ln_deepnorm": "#332288",  # Paul Tol's indigo
}

VARIANT_LABELS = {
    "san": "SAN (attention only)",
    "san_skip": "SAN + skip",
    "san_mlp": "SAN + MLP",
    "san_skip_mlp": "SAN + skip + MLP",
    "san_ln": "SAN + LayerNorm",
    "post_ln": "post-LN transformer",
    "pre_ln": "pre-LN transformer",
    "post_ln_deesc": "post-LN + de-escalation (τ=1)",
    "post_ln_deesc_half": "post-LN + de-escalation (τ=0.5)",
    "post_ln_deesc_mlp": "post-LN + de-escalation of attention and MLP",
    "post_ln_deesc_out": "post-LN + centring after each post-LN",
    "post_ln_deesc_nomlp": "post-LN + de-escalation, no MLP",
    "post_ln_center": "post-LN + centred attention",
    "post_ln_scaled": "post-LN + 1/√L branches",
    "post_ln_deepnorm": "post-LN + DeepNorm",
}


def variant_color(name: str) -> str:
    if name in VARIANT_COLORS:
        return VARIANT_COLORS[name]
    return PALETTE[sum(map(ord, name)) % (len(PALETTE) - 1)]  # stable for unknown names


def variant_label(name: str) -> str:
    return VARIANT_LABELS.get(name, name)


def use_style() -> None:
    plt.rcParams.update({
        "figure.dpi": 110,
        "savefig.dpi": 200,
        "font.size": 10,
        "axes.titlesize": 11,
        "axes.labelsize": 10,
        "legend.fontsize": 8.5,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "svg.hashsalt": "rankcollapse",
        "pdf.fonttype": 42,
    })


def save(fig, directory: str | os.PathLike, name: str,
         formats: tuple[str, ...] = ("png", "pdf", "svg"), tight: bool = True) -> dict[str, str]:
    """Write fig as PNG (for HTML), vector PDF (stand-alone) and SVG (vector, for the PDF report:
    WeasyPrint embeds SVG but not PDF images), without timestamps, so files are byte-stable.
    `formats` picks some of them (the probe writes PNG and PDF); tight=False keeps the figure's
    own margins (no second layout pass: the probe's figure is drawn in half the time)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    metadata = {"png": {"Software": None},
                "pdf": {"Creator": None, "Producer": None, "CreationDate": None},
                "svg": {"Creator": None, "Date": None}}
    out = {}
    for ext in formats:
        path = directory / f"{name}.{ext}"
        fig.savefig(path, bbox_inches="tight" if tight else None, metadata=metadata[ext])
        out[ext] = str(path)
    plt.close(fig)
    return out
