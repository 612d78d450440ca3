"""B4: path-length decomposition, dynamic programme vs explicit enumeration of all 2^L paths.

Both start from the same captured forward pass (the stack's input and every layer's attention
matrices, `paths.capture`), which the decomposition is defined on. Ours (what the E2 path rule
does): `paths.decompose`, one batched map per layer over all path lengths so far (O(L^2) maps).
Reference: `paths.enumerate_captured`, every one of the 2^L layer subsets run explicitly. Both
produce the same contributions per length (checked here, float64); target at L = 8: ours >= 20x
faster. The entry also records the ratio with the capturing forward pass included in both.
"""

from __future__ import annotations

import torch

from rankcollapse.core.specs import PRESETS
from rankcollapse.core.tasks import make_task
from rankcollapse.experiments import paths
from rankcollapse.training.train import new_model

try:
    from common import interleaved_times, record
except ImportError:
    from .common import interleaved_times, record

SETTINGS = dict(width=48, heads=2, depth=8)  # Dong et al.'s sorting model, 8 layers
BATCH, SEED = 64, 0


def _setup():
    data = make_task("sorting", train_size=BATCH, test_size=BATCH)
    model = new_model(data.spec, PRESETS["san_skip"], SETTINGS, SEED).double().eval()
    return model, data.x_test


def run() -> dict:
    model, x = _setup()
    captured = paths.capture(model, x)
    ours, reference = paths.decompose(model, captured), paths.enumerate_captured(model, captured)
    torch.testing.assert_close(ours, reference, rtol=1e-10, atol=1e-12)  # the same numbers
    max_error = float((ours - reference).abs().max())
    t_ours, t_ref = interleaved_times(lambda: paths.decompose(model, captured),
                                      lambda: paths.enumerate_captured(model, captured),
                                      repeats=5, warmup=1)
    t_forward, _ = interleaved_times(lambda: paths.capture(model, x), lambda: None, repeats=5,
                                     warmup=1)
    entry = {
        "what": f"contribution of every path length 0..{SETTINGS['depth']}, san_skip on sorting "
                f"inputs, {BATCH} sequences, float64",
        "settings": {**SETTINGS, "batch": BATCH},
        "ours_s": t_ours,
        "reference_s": t_ref,
        "max_abs_difference": max_error,
        "forward_s": t_forward,
        "speedup": t_ref / t_ours,
        "speedup_with_forward": (t_ref + t_forward) / (t_ours + t_forward),
        "target": ">= 20",
        "met": t_ref / t_ours >= 20,
    }
    return record("B4_paths", entry)


if __name__ == "__main__":
    r = run()
    print(f"B4 paths (L={SETTINGS['depth']}): DP {r['ours_s'] * 1e3:.1f} ms, 2^L enumeration "
          f"{r['reference_s'] * 1e3:.1f} ms, speed-up {r['speedup']:.1f}x (target >= 20), "
          f"max |difference| {r['max_abs_difference']:.1e}")
