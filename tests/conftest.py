"""Shared fixtures: a disposable copy of the workflow to run snakemake in."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def project_files(root: Path = ROOT) -> list[Path]:
    """Tracked and untracked-but-not-ignored files: what a clone (plus local edits) holds."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=root, capture_output=True, check=True,
        ).stdout.decode()
        return [root / p for p in out.split("\0") if p and (root / p).is_file()]
    except (OSError, subprocess.CalledProcessError):
        skip = {".venv", ".snakemake", "results", ".git", "__pycache__"}
        return [p for p in root.rglob("*") if p.is_file() and not skip & set(p.parts)]


def copy_project(dest: Path) -> Path:
    for path in project_files():
        target = dest / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return dest


def run_snakemake(workdir: Path, *args: str, check: bool = True, timeout: float = 900):
    """Run snakemake in workdir; return the CompletedProcess (stdout and stderr merged)."""
    if _REAL_RUNS_DESELECTED and not PLAN_ONLY & set(args):
        # The safety net of `make test-fast`: a test that runs the workflow for real but is not
        # marked `realrun` (a new fixture missing from REAL_RUN_FIXTURES) fails here, not silently.
        raise AssertionError(
            f"snakemake {' '.join(args)} would run the workflow for real, but this pytest run "
            "deselects real runs (-m 'not realrun'): mark the test `realrun`, or add the fixture "
            "that runs the workflow to REAL_RUN_FIXTURES in tests/conftest.py")
    proc = subprocess.run(
        [*SNAKEMAKE, *args], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-6000:]}")
    return proc


# Fixtures that run the workflow for real (not a dry-run). Every test that uses one, directly or
# through another fixture, is marked `realrun`, so `make test-fast` (-m "not realrun") leaves it out
# without a hand-kept list of tests. A new fixture of that kind is added here.
REAL_RUN_FIXTURES = frozenset({"ci_run", "slurm_run"})
PLAN_ONLY = frozenset({"-n", "--dry-run", "--dryrun", "--lint"})  # snakemake runs no job
_REAL_RUNS_DESELECTED = False  # set by pytest_configure from the -m expression


def pytest_configure(config: pytest.Config) -> None:
    global _REAL_RUNS_DESELECTED
    _REAL_RUNS_DESELECTED = "not realrun" in (config.getoption("markexpr") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        # fixturenames is the closure: fixtures requested by the fixtures a test requests, too
        if REAL_RUN_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.realrun)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh copy of the project in a temporary directory."""
    return copy_project(tmp_path / "project")


@pytest.fixture(scope="session")
def ci_run(tmp_path_factory) -> Path:
    """One real local run of the CI config in a fresh copy, shared by every test that reads it.

    Tests that modify files in it restore them before they finish.
    """
    work = copy_project(tmp_path_factory.mktemp("ci-run"))
    run_snakemake(work, "--workflow-profile", "workflow/profiles/ci")
    return work


def claims_in(run: Path) -> list[dict]:
    """Every claim a run's notebooks measured: {"id", "statement", "values"} per claim, the
    statement from the claims registry (TRANSITION: or from a notebook not yet moved to it) and
    "values" what must be identical between two runs of the same config."""
    import json

    from rankcollapse.claims import load_registry

    registry = load_registry(run / "workflow/claims.yaml")
    out = []
    for path in sorted((run / "results/numbers").glob("E*.json")):
        section = json.loads(path.read_text())
        for m in section.get("measurements", []):
            out.append({"id": m["id"], "statement": registry[m["id"]].statement,
                        "values": (m["value"], m["samples"], m["interval"], m["n"])})
        for c in section.get("claims", []):
            out.append({"id": c["id"], "statement": c["statement"],
                        "values": (c["measured"], c["interval"], c["verdict"])})
    return out
