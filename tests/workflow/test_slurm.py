"""The workflow through a real one-node SLURM cluster started on this machine.

The smoke config (every rule once) is submitted with sbatch by snakemake-executor-plugin-slurm
and run by slurmd; training jobs request one of the node's two (fake) GPUs. Its numbers must
equal a local run's: here the smoke run that was killed three times and resumed one job at a
time (tests/training/test_reliability.py checks that run against this one, too).
"""

from pathlib import Path

import pytest

from conftest import SMOKE_NAME, assert_same_results, report_file, results_dir

pytestmark = [pytest.mark.slurm, pytest.mark.workflow]


def logs(work: Path, stage: str) -> list[str]:
    folder = results_dir(work, SMOKE_NAME) / "logs" / stage
    return [p.read_text() for p in sorted(folder.rglob("*.log"))]


def test_jobs_ran_under_slurm(smoke_slurm):
    init = logs(smoke_slurm, "init")
    assert init and all("SLURM_JOB_ID=" in text for text in init)
    assert not any("SLURM_GPUS_ON_NODE" in text for text in init)  # CPU jobs ask for no GPU


@pytest.mark.parametrize("stage", ["train", "tuned"])  # E2/E4/E5b's jobs and E5's tuned ones
def test_training_jobs_were_scheduled_on_a_gpu(smoke_slurm, stage):
    train = logs(smoke_slurm, stage)
    assert train, f"no {stage} logs"
    for text in train:
        assert "SLURM_JOB_ID=" in text
        assert "SLURM_GPUS_ON_NODE=1" in text, text[:2000]


def test_report_and_numbers_match_a_local_run(smoke_slurm, smoke_killed):
    assert report_file(smoke_slurm, SMOKE_NAME).stat().st_size > 20_000
    assert_same_results(smoke_slurm, smoke_killed[0], SMOKE_NAME)
