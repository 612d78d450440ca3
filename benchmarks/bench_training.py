"""B1: one training step of our post-LN model vs torch.nn.TransformerEncoderLayer.

Same width, heads, depth, sequence length and batch; forward + backward + AdamW step, float32,
capture off (fused attention), on the CPU or on BENCH_DEVICE (the GPU check sets cuda).
Target: ours >= 0.9x the reference's tokens/s.
Also reports the cost of capture=True (materialised attention matrices) relative to capture off.
QUICK=1 (the GPU check's CPU mode): width 32, 2 heads, depth 2, 16 tokens, batch 8.
"""

from __future__ import annotations

import torch
from torch import nn

from rankcollapse.core.model import build
from rankcollapse.core.specs import PRESETS

try:
    from common import QUICK, bench_device, interleaved_times, record, synced
except ImportError:  # imported as benchmarks.bench_training
    from .common import QUICK, bench_device, interleaved_times, record, synced

WIDTH, HEADS, DEPTH, TOKENS, BATCH = (32, 2, 2, 16, 8) if QUICK else (128, 4, 6, 64, 32)


def reference_stack() -> nn.Module:
    layer = nn.TransformerEncoderLayer(WIDTH, HEADS, dim_feedforward=4 * WIDTH, dropout=0.0,
                                       activation="gelu", batch_first=True, norm_first=False)
    return nn.TransformerEncoder(layer, DEPTH, enable_nested_tensor=False)


def step_fn(model: nn.Module, forward, x: torch.Tensor):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward(x).pow(2).mean()
        loss.backward()
        opt.step()

    return synced(step, x.device)


def run() -> dict:
    torch.manual_seed(0)
    device = bench_device()
    x = torch.randn(BATCH, TOKENS, WIDTH, device=device)
    ours = build(PRESETS["post_ln"], width=WIDTH, heads=HEADS, depth=DEPTH).to(device).train()
    ref = reference_stack().to(device).train()
    t_ours, t_ref = interleaved_times(step_fn(ours, lambda x: ours(x)[0], x),
                                      step_fn(ref, ref, x))
    captured = step_fn(ours, lambda x: ours(x, capture=True)[0], x)
    t_capture, t_plain = interleaved_times(captured, step_fn(ours, lambda x: ours(x)[0], x))
    tokens = BATCH * TOKENS
    entry = {
        "what": f"training step (fwd+bwd+AdamW), post-LN, {device.type} float32",
        "shape": {"width": WIDTH, "heads": HEADS, "depth": DEPTH, "tokens": TOKENS,
                  "batch": BATCH},
        "ours_tokens_per_s": tokens / t_ours,
        "reference_tokens_per_s": tokens / t_ref,
        "ratio": t_ref / t_ours,  # ours' throughput / reference's
        "target": ">= 0.9",
        "met": t_ref / t_ours >= 0.9,
        "capture_cost": t_capture / t_plain,  # time with capture=True / without
    }
    return record("B1_training_step", entry)


if __name__ == "__main__":
    r = run()
    print(f"B1 training step: ours {r['ours_tokens_per_s']:.0f} tok/s, reference "
          f"{r['reference_tokens_per_s']:.0f} tok/s, ratio {r['ratio']:.2f} (target >= 0.9); "
          f"capture=True costs {r['capture_cost']:.2f}x")
