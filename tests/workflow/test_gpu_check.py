"""The GPU check's CPU mode (`make bench-gpu QUICK=1`), as CI runs it: every step runs and the
table for benchmarks/README.md is printed. On a GPU machine the same command measures."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow


def test_make_bench_gpu_quick_runs_every_step_and_prints_the_table():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["make", "--no-print-directory", "bench-gpu", "QUICK=1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    for step in ("B1: ok", "B7: ok", "B9: ok", "workflow (CI config, dry-run): ok"):
        assert f"gpu-check: {step}" in out, out[-4000:]
    table = (ROOT / "results/gpu_check/table.md").read_text()
    assert "| B1 |" in table and "| B7 |" in table and "QUICK=1" in table
    assert "| 2 | eager | float32 | 4 |" in table  # B9's rows, per engine and precision
    assert "| 2 | eager | bf16 | 4 |" in table
    assert "| 2 | compile | float32 | 4 |" in table
    # B6's projection of paper.yaml per experiment (the reference step models on a CPU)
    assert "B6, paper.yaml's training on one GPU" in out, out[-4000:]
    b6 = out.split("B6, paper.yaml's training on one GPU")[1]
    for row in ("| eager |", "| graph |", "| target |"):
        assert row in b6 and " h** |" in b6.split(row)[1].splitlines()[0], b6

