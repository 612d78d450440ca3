"""Faults a long sweep meets: killed runs, damaged files, hostile wildcards, reruns."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from rankcollapse import io, notebooks
from rankcollapse.model import PRESETS
from rankcollapse.sweep import init_sweep

from conftest import SNAKEMAKE, claims_in, copy_project, run_snakemake

CI_PROFILE = ("--workflow-profile", "workflow/profiles/ci")


def tables_of(work: Path) -> dict[str, pd.DataFrame]:
    return {p.name: pd.read_parquet(p) for p in sorted((work / "results/tables").glob("*.parquet"))}


def claims_of(work: Path) -> list:
    return [(c["id"], c["values"]) for c in claims_in(work)]


def assert_same_results(a: Path, b: Path) -> None:
    ta, tb = tables_of(a), tables_of(b)
    assert ta.keys() == tb.keys() and ta
    for name in ta:
        pd.testing.assert_frame_equal(ta[name], tb[name], check_exact=True, obj=name)
    assert claims_of(a) == claims_of(b)


def run_until(work: Path, marker_dir: str, timeout: float = 600) -> bool:
    """Start the CI workflow; SIGKILL its whole process tree once marker_dir has a file.

    Returns False if the run finished before the marker appeared.
    """
    proc = subprocess.Popen([*SNAKEMAKE, *CI_PROFILE], cwd=work, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            marker = work / marker_dir
            if marker.exists() and any(p.is_file() for p in marker.rglob("*")):
                time.sleep(0.5)  # let the job get going
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return True
            if proc.poll() is not None:
                return False
            time.sleep(0.05)
        raise TimeoutError(f"{marker_dir} never appeared")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.workflow
@pytest.mark.slow
def test_killed_three_times_then_rerun_gives_the_uninterrupted_results(tmp_path, ci_run):
    work = copy_project(tmp_path / "project")
    killed = []
    for stage in ("results/logs/init", "results/logs/train", "results/logs/notebooks"):
        if run_until(work, stage):
            killed.append(stage)
        # What a user does after a crash: release the stale lock, run the same command again.
        run_snakemake(work, "--unlock", *CI_PROFILE)
    assert killed, "the workflow finished before any kill point"
    run_snakemake(work, *CI_PROFILE)
    assert "Nothing to be done" in run_snakemake(work, "-n", *CI_PROFILE).stdout
    assert_same_results(work, ci_run)


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
def test_two_training_jobs_at_once_give_the_numbers_of_one_at_a_time(tmp_path, ci_run):
    """ci_run trains with --cores 2 (two jobs at once); here the same jobs run one by one."""
    work = copy_project(tmp_path / "project")
    targets = ["results/tables/E5_metrics.parquet", "results/tables/E5_history.parquet"]
    run_snakemake(work, *CI_PROFILE, "--cores", "1", *targets)
    for target in targets:
        pd.testing.assert_frame_equal(pd.read_parquet(work / target),
                                      pd.read_parquet(ci_run / target), check_exact=True)
