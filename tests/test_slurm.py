"""The CI config end to end through a real one-node SLURM cluster started on this machine.

Jobs are submitted with sbatch by snakemake-executor-plugin-slurm and run by slurmd; training
jobs request one of the node's two (fake) GPUs. The numbers must equal a local --cores run's.
"""

import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, claims_in, copy_project, run_snakemake

pytestmark = [pytest.mark.slurm, pytest.mark.workflow]
CLUSTER = ROOT / "tests" / "cluster"


@pytest.fixture(scope="module")
def slurm_conf(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("starting slurmctld/slurmd/munged needs root")
    state = tmp_path_factory.mktemp("slurm")
    up = subprocess.run([CLUSTER / "slurm-up.sh", state], capture_output=True, text=True,
                        timeout=900)
    if up.returncode != 0:
        subprocess.run([CLUSTER / "slurm-down.sh", state], check=False)
        raise AssertionError(f"could not start the test cluster:\n{up.stdout}\n{up.stderr}")
    try:
        yield str(state / "slurm.conf")
    finally:
        subprocess.run([CLUSTER / "slurm-down.sh", state], check=False, timeout=120)


@pytest.fixture(scope="module")
def slurm_run(slurm_conf, tmp_path_factory):
    work = copy_project(tmp_path_factory.mktemp("slurm-run"))
    os.environ["SLURM_CONF"] = slurm_conf  # for the executor's sbatch/squeue calls
    try:
        run_snakemake(
            work,
            "--workflow-profile", "workflow/profiles/slurm",
            "--configfile", "workflow/config/ci.yaml",
            # The test cluster has no accounting database: poll squeue, submit without account.
            "--slurm-status-command", "squeue", "--slurm-no-account",
            "--slurm-init-seconds-before-status-checks", "2",
            "--seconds-between-status-checks", "2",  # a test cluster answers at once
            "--jobs", "8",
            # A bundle of N tiny jobs asks for N CPUs; the test node declares 4 per core.
            "--group-components", "init=2", "particles=2", "metrics=2",
            # The local run trains with 1 thread; the same thread count gives the same floats.
            "--set-threads", "train=1",
            timeout=1800,
        )
    finally:
        os.environ.pop("SLURM_CONF", None)
    return work


def logs(work: Path, stage: str) -> list[str]:
    return [p.read_text() for p in sorted((work / "results/logs" / stage).rglob("*.log"))]


def test_jobs_ran_under_slurm(slurm_run):
    init = logs(slurm_run, "init")
    assert init and all("SLURM_JOB_ID=" in text for text in init)
    assert not any("SLURM_GPUS_ON_NODE" in text for text in init)  # CPU jobs ask for no GPU


def test_training_jobs_were_scheduled_on_a_gpu(slurm_run):
    train = logs(slurm_run, "train")
    assert train, "no training logs"
    for text in train:
        assert "SLURM_JOB_ID=" in text
        assert "SLURM_GPUS_ON_NODE=1" in text, text[:2000]


def test_report_and_numbers_match_a_local_run(slurm_run, ci_run):
    assert (slurm_run / "report/report.pdf").stat().st_size > 20_000
    tables = sorted(p.relative_to(ci_run) for p in (ci_run / "results/tables").glob("*.parquet"))
    assert tables
    for rel in tables:
        local, cluster = pd.read_parquet(ci_run / rel), pd.read_parquet(slurm_run / rel)
        pd.testing.assert_frame_equal(local, cluster, check_exact=True, obj=str(rel))
    local, cluster = claims_in(ci_run), claims_in(slurm_run)
    assert local and [(c["id"], c["values"]) for c in local] == [
        (c["id"], c["values"]) for c in cluster]
