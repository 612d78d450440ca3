"""Faults a long sweep meets: killed runs, damaged files, hostile wildcards, reruns."""

import json
from pathlib import Path

import pandas as pd
import pytest

from rankcollapse import io, notebooks
from rankcollapse.core.specs import PRESETS
from rankcollapse.experiments.init_sweep import init_sweep

from conftest import SMOKE, SMOKE_NAME, assert_same_results, results_dir, run_snakemake


@pytest.mark.workflow
@pytest.mark.slow
def test_killed_three_times_then_rerun_gives_the_uninterrupted_results(smoke_killed,
                                                                        smoke_reference):
    """Killed during the init sweep, the training and the notebooks (whole process tree,
    SIGKILL), unlocked and rerun each time: the same tables and claims as an uninterrupted run
    (through SLURM where this machine can start a cluster)."""
    work, killed = smoke_killed
    assert killed, "the workflow finished before any kill point"
    assert "Nothing to be done" in run_snakemake(work, "-n", *SMOKE, "--cores", "1").stdout
    assert_same_results(work, smoke_reference, SMOKE_NAME)


@pytest.mark.workflow
@pytest.mark.parametrize("target", [
    "results/init/../../etc/seed0.parquet",
    "results/init/san/sub/seed0.parquet",
    "results/init/san/seed0x.parquet",
    "results/init/..san/seed0.parquet",
])
def test_wildcards_cannot_escape_results(project, target):
    proc = run_snakemake(project, "-n", "--cores", "1", target, check=False)
    assert proc.returncode != 0
    assert "MissingRuleException" in proc.stdout or "No rule to produce" in proc.stdout


def test_same_seed_same_numbers_other_seed_other_numbers():
    args = dict(depth=6, width=16, heads=2, tokens=8, batch=3)
    a = init_sweep(PRESETS["post_ln"], seed=4, **args)
    b = init_sweep(PRESETS["post_ln"], seed=4, **args)
    c = init_sweep(PRESETS["post_ln"], seed=5, **args)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert not a.relative_residual.equals(c.relative_residual)


def test_truncated_table_is_named(tmp_path):
    path = tmp_path / "E1_init.parquet"
    io.write_parquet(pd.DataFrame({"layer": range(100), "value": 0.5}), path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(RuntimeError, match="E1_init.parquet"):
        io.read_parquet(path)


def test_atomic_write_leaves_old_file_when_writer_dies(tmp_path):
    path = tmp_path / "out.json"
    io.write_json({"ok": 1}, path)

    def dies(tmp):
        tmp.write_text("partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        io.atomic_write(path, dies)
    assert json.loads(path.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary left behind


def test_notebook_parameters_must_be_plain_json(tmp_path):
    with pytest.raises(TypeError, match="JSON"):
        notebooks.run("unused.ipynb", tmp_path / "out.ipynb", {"path": Path("x")})
    with pytest.raises(TypeError, match="JSON"):
        notebooks.run("unused.ipynb", tmp_path / "out.ipynb", {"x": float("nan")})


@pytest.mark.workflow
@pytest.mark.slow
def test_jobs_run_one_at_a_time_give_the_numbers_of_jobs_run_together(smoke_killed,
                                                                       smoke_reference):
    """smoke_killed runs one job at a time (--cores 1); the reference runs several at once
    (SLURM submits up to 8, or --cores 2 locally): the training tables must agree exactly."""
    work, _ = smoke_killed
    tables, reference = results_dir(work, SMOKE_NAME) / "tables", results_dir(
        smoke_reference, SMOKE_NAME) / "tables"
    names = sorted(p.name for p in tables.glob("E*_*.parquet")
                   if p.name.split("_")[0] in {"E2", "E4", "E5", "E5b"})
    assert names, "no training tables in the smoke run"
    for name in names:
        pd.testing.assert_frame_equal(pd.read_parquet(tables / name),
                                      pd.read_parquet(reference / name),
                                      check_exact=True, obj=name)
