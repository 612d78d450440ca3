"""B2: the depth sweep at initialisation, one captured pass vs a fresh network per depth.

Ours (what the init_sweep rule does): one forward pass of a depth-L_max network recording every
layer, metrics on each of the L_max + 1 hidden states. Reference: for each depth l = 1..L_max,
build a fresh depth-l network (same seed, so the same first l blocks) and measure its output
only. Both produce the same numbers (checked here); target at L_max = 32: ours >= 10x faster.
"""

from __future__ import annotations

import torch

from rankcollapse.core.metrics import layer_metrics
from rankcollapse.core.model import build
from rankcollapse.core.specs import PRESETS
from rankcollapse.experiments.init_sweep import init_sweep

try:
    from common import interleaved_times, record
except ImportError:
    from .common import interleaved_times, record

SETTINGS = dict(width=64, heads=2, tokens=32, batch=16, dtype="float64")
L_MAX, SEED, VARIANT = 32, 0, "post_ln"


def one_pass() -> list[dict]:
    table = init_sweep(PRESETS[VARIANT], seed=SEED, depth=L_MAX, **SETTINGS)
    return [table[table.layer == layer] for layer in range(1, L_MAX + 1)]


@torch.no_grad()
def per_depth() -> list[dict]:
    gen = torch.Generator().manual_seed(SEED + 1_000_003)  # the inputs init_sweep uses
    x = torch.randn(SETTINGS["batch"], SETTINGS["tokens"], SETTINGS["width"], generator=gen,
                    dtype=torch.float64)
    out = []
    for depth in range(1, L_MAX + 1):
        torch.manual_seed(SEED)
        model = build(PRESETS[VARIANT], depth=depth, width=SETTINGS["width"],
                      heads=SETTINGS["heads"]).double().eval()
        _, trace = model(x, capture=True)
        out.append(layer_metrics(trace.hidden[-1], trace.attention[-1]))
    return out


def forward_only(one: bool):
    """The forward passes alone: one captured depth-L_max pass, or a network per depth."""
    x = torch.randn(SETTINGS["batch"], SETTINGS["tokens"], SETTINGS["width"],
                    dtype=torch.float64)

    @torch.no_grad()
    def go():
        for depth in ([L_MAX] if one else range(1, L_MAX + 1)):
            torch.manual_seed(SEED)
            model = build(PRESETS[VARIANT], depth=depth, width=SETTINGS["width"],
                          heads=SETTINGS["heads"]).double().eval()
            model(x, capture=True)

    return go


def run() -> dict:
    # Same numbers both ways (the premise of the comparison).
    sweep, fresh = one_pass(), per_depth()
    for layer_rows, metrics in zip(sweep, fresh, strict=True):
        torch.testing.assert_close(
            torch.tensor(layer_rows["relative_residual"].to_numpy()),
            metrics["relative_residual"], rtol=1e-9, atol=1e-12)
    t_ours, t_ref = interleaved_times(one_pass, per_depth, repeats=5, warmup=1)
    f_ours, f_ref = interleaved_times(forward_only(True), forward_only(False), repeats=5,
                                      warmup=1)
    entry = {
        "what": f"metrics of every depth 1..{L_MAX} at init, {VARIANT}, float64",
        "settings": {**SETTINGS, "L_max": L_MAX},
        "ours_s": t_ours,
        "reference_s": t_ref,
        "speedup": t_ref / t_ours,
        "target": ">= 10",
        "met": t_ref / t_ours >= 10,
        # The same comparison without the metrics, which cost the same per layer both ways
        # (|lambda_2| needs LAPACK eigenvalues of every attention matrix) and bound the ratio.
        "forward_only_speedup": f_ref / f_ours,
    }
    return record("B2_depth_sweep", entry)


if __name__ == "__main__":
    r = run()
    print(f"B2 depth sweep (L_max={L_MAX}): one pass {r['ours_s'] * 1e3:.0f} ms, per-depth "
          f"networks {r['reference_s'] * 1e3:.0f} ms, speed-up {r['speedup']:.1f}x (target >= 10); "
          f"forward passes alone {r['forward_only_speedup']:.1f}x")
