"""B10: `rankcollapse probe` on a 12-layer base model, wall time including start-up.

Ours: the command in a fresh process (interpreter, torch and transformers start-up, loading the
checkpoint, every metric of every layer, the verdicts, the figure and the tables), on a BERT-base
checkpoint folder (random init, saved with save_pretrained beforehand, not timed), 16 sequences
of 128 random token ids, 5 ablations (san, san_mlp, san_skip, transformer, transformer_deesc),
default settings otherwise (|λ₂| on the first 4 sequences). Target: <= 60 s.

Reference: the floor of the same work, the 5 forward passes alone (one per ablation, the same
inputs, no capture and no metrics) in this process. The ratio ours / reference says what the
probe adds to the forward passes it cannot avoid (start-up, metrics, verdicts, figure).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

try:
    from common import record
except ImportError:
    from .common import record

ROOT = Path(__file__).resolve().parents[1]
FAMILY, BATCH, TOKENS = "bert", 16, 128
ABLATIONS = ("san", "san_mlp", "san_skip", "transformer", "transformer_deesc")


def command(checkpoint: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "rankcollapse.cli", "probe", str(checkpoint), "--random-ids",
            "--batch", str(BATCH), "--tokens", str(TOKENS), "--ablations", ",".join(ABLATIONS),
            "--device", "cpu", "--out", str(out), "--force", "--quiet"]


@torch.no_grad()
def forward_passes(checkpoint: Path) -> float:
    """Seconds of the 5 bare forward passes (one per ablation) on the probe's inputs."""
    from rankcollapse import probe

    net = probe.load(checkpoint)
    ids = probe.random_ids(BATCH, TOKENS, net.config.vocab_size, seed=0)
    nets = [probe.ablate(net, FAMILY, a) for a in ABLATIONS]
    nets[0](input_ids=ids)  # warm-up
    start = time.perf_counter()
    for ablated in nets:
        ablated(input_ids=ids)
    return time.perf_counter() - start


def run() -> dict:
    from rankcollapse import probe

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep
           + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint, out = Path(tmp) / FAMILY, Path(tmp) / "out"
        probe.build(FAMILY, seed=0).save_pretrained(checkpoint)  # not timed: the user's folder
        start = time.perf_counter()
        proc = subprocess.run(command(checkpoint, out), capture_output=True, text=True, env=env)
        ours = time.perf_counter() - start
        if proc.returncode:
            raise RuntimeError(f"the probe failed: {proc.stderr[-2000:]}")
        inside = json.loads((out / "probe.json").read_text())["wall_s"]
        reference = forward_passes(checkpoint)
    entry = {
        "what": f"rankcollapse probe on a {FAMILY}-base checkpoint (12 layers, width 768), "
                f"{BATCH} x {TOKENS} random ids, {len(ABLATIONS)} ablations, fresh process",
        "wall_s": ours,
        "probe_run_s": inside,  # loading, forward passes, metrics and verdicts (probe.run)
        "forward_passes_s": reference,
        "ratio": ours / reference,
        "target": "<= 60 s",
        "met": ours <= 60,
        "summary": proc.stdout.splitlines()[:3],
    }
    return record("B10_probe", entry)


if __name__ == "__main__":
    r = run()
    print(f"B10 probe: {r['wall_s']:.1f} s wall including start-up (target <= 60 s; "
          f"{r['probe_run_s']:.1f} s inside probe.run); the 5 forward passes alone "
          f"{r['forward_passes_s']:.1f} s: ratio {r['ratio']:.2f}")
