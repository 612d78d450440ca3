"""Shared fixtures: disposable copies of the workflow to run snakemake in, and the real runs the
suite shares:

- `ci_run`: the CI config run locally (every figure and the report, PDF included), read by every
  test that checks what the workflow builds;
- `smoke_slurm`: the smoke config (every rule once, tiny) through a real one-node SLURM cluster
  started on this machine;
- `smoke_killed`: the smoke config run locally one job at a time, SIGKILLed three times and
  resumed; compared with `smoke_slurm` (or, without root for SLURM, with `smoke_local`).

Each real run that a selected test needs starts in a background thread as soon as the tests are
collected (`pytest_collection_finish`), so that the runs and the unit tests overlap on the
machine's cores; a fixture waits for its run's result.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rankcollapse.plan.config import config_name, output_roots

# One thread per process for torch, OpenMP and BLAS, here and in every process a test starts: the
# real runs below share the machine's cores with the unit tests, and an oversubscribed OpenMP
# runtime spins (CI measured unit tests 15x slower than alone). Jobs still set their own torch
# thread count (rankcollapse.runtime.setup); a test that needs more sets it itself.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]

# Each config writes under its own name (rankcollapse.plan.config.output_roots): the default config
# in results/ and report/report.{html,pdf}, ci.yaml in results/ci/ and report/ci.{html,pdf}, the
# smoke config (ci.yaml, then smoke.yaml) in results/smoke/ and report/smoke.{html,pdf}.
CI = config_name([ROOT / "workflow/config/ci.yaml"])
SMOKE_NAME = config_name([ROOT / "workflow/config/ci.yaml", ROOT / "workflow/config/smoke.yaml"])


def results_dir(run: Path, name: str) -> Path:
    """The results folder of the config `name` in the project copy `run`."""
    return run / output_roots({"name": name}).results


def report_file(run: Path, name: str, suffix: str = ".html") -> Path:
    """The report (suffix .html or .pdf) of the config `name` in the project copy `run`."""
    return run / (output_roots({"name": name}).report + suffix)


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


def run_snakemake(workdir: Path, *args: str, check: bool = True, timeout: float = 900,
                  nice: int = 0):
    """Run snakemake in workdir; return the CompletedProcess (stdout and stderr merged).

    nice: run it (and the jobs it starts) at this lower CPU priority (see LOW_PRIORITY)."""
    if _REAL_RUNS_DESELECTED and not PLAN_ONLY & set(args):
        # The safety net of `make test-fast`: a test that runs the workflow for real but is not
        # marked `realrun` (a new fixture missing from REAL_RUN_FIXTURES) fails here, not silently.
        raise AssertionError(
            f"snakemake {' '.join(args)} would run the workflow for real, but this pytest run "
            "deselects real runs (-m 'not realrun'): mark the test `realrun`, or add the fixture "
            "that runs the workflow to REAL_RUN_FIXTURES in tests/conftest.py")
    if threading.current_thread() is threading.main_thread() and not nice:
        proc = _fork_server().run(workdir, list(args), timeout)
    else:  # the background runs: one process each, so that they run at the same time
        proc = subprocess.run(
            [*_niced(nice), *SNAKEMAKE, *args], cwd=workdir, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, timeout=timeout,
        )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-6000:]}")
    return proc


# The tests' snakemake calls (dry-runs, lint, bad configs, small real runs) each start the same
# CLI, and importing snakemake costs about 1.2 s of CPU, more than most of those calls do. A fork
# server imports it once; each call is a fork of it that runs `snakemake.cli.main(args)`, the
# entry point of `python -m snakemake`, in its own process (own cwd, environment, output and
# process group), so the calls stay as independent as separate processes.
_FORK_SERVER = r"""
import json, os, signal, sys, time
import snakemake.cli

for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            null = os.open(os.devnull, os.O_RDONLY)
            out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(null, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            sys.argv = ["snakemake", *request["args"]]
            try:
                snakemake.cli.main(request["args"])
            except SystemExit as exit_:
                if exit_.code is None or isinstance(exit_.code, int):
                    code = exit_.code or 0
                else:
                    print(exit_.code, file=sys.stderr)
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline, timed_out = time.monotonic() + request["timeout"], False
    while not (done := os.waitpid(pid, os.WNOHANG))[0]:
        if time.monotonic() > deadline:  # the call's whole process group, jobs included
            os.killpg(pid, signal.SIGKILL)
            done, timed_out = os.waitpid(pid, 0), True
            break
        time.sleep(0.02)
    print(json.dumps({"rc": os.waitstatus_to_exitcode(done[1]), "timed_out": timed_out}),
          flush=True)
"""


class ForkServer:
    """`run(workdir, args, timeout)`: what subprocess.run([*SNAKEMAKE, *args]) returns."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen([sys.executable, "-c", _FORK_SERVER], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)

    def run(self, workdir: Path, args: list[str], timeout: float):
        import json
        import tempfile

        with tempfile.NamedTemporaryFile("r", suffix=".log") as log:
            request = {"cwd": str(workdir), "args": args, "env": dict(os.environ),
                       "out": log.name, "timeout": timeout}
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()  # the server enforces the timeout
            if not line:
                raise RuntimeError(f"the snakemake fork server exited ({self._proc.poll()})")
            reply = json.loads(line)
            if reply["timed_out"]:
                raise subprocess.TimeoutExpired([*SNAKEMAKE, *args], timeout, log.read())
            return subprocess.CompletedProcess([*SNAKEMAKE, *args], reply["rc"], log.read())

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait(60)


_SERVER: list[ForkServer] = []


def _fork_server() -> ForkServer:
    if not _SERVER:
        _SERVER.append(ForkServer())
    return _SERVER[0]


# The smoke runs (through SLURM, and killed and resumed) run at a lower CPU priority than the CI
# config's run and the unit tests: the CI run is the longest chain of jobs and the report's tests
# wait for it, while the smoke runs have slack; niced, they fill the cores the others leave idle.
# A SLURM job inherits the priority of the sbatch that submitted it (the test cluster's
# PropagatePrioProcess=1). Priorities change how the cores are shared, never a result.
LOW_PRIORITY = 10


def _niced(nice: int) -> list[str]:
    return ["nice", "-n", str(nice)] if nice else []


# Fixtures that run the workflow for real (not a dry-run). Every test that uses one, directly or
# through another fixture, is marked `realrun`, so `make test-fast` (-m "not realrun") leaves it out
# without a hand-kept list of tests. A new fixture of that kind is added here.
REAL_RUN_FIXTURES = frozenset({"ci_run", "smoke_slurm", "smoke_killed", "smoke_local",
                               "smoke_reference"})
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
    # Real runs last, so that the unit tests overlap with the background SLURM run; the tests
    # of one shared run together, so that each run's copy is made once.
    order = {"ci_run": 1, "smoke_killed": 2, "smoke_local": 2, "smoke_reference": 3,
             "smoke_slurm": 3}

    def rank(item: pytest.Item) -> int:
        names = set(getattr(item, "fixturenames", ()))
        return min((order[n] for n in names & set(order)), default=0)

    items.sort(key=rank)  # stable: file order kept within a rank


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start, in background threads, every real run that a selected test needs."""
    needed = set().union(*(set(getattr(item, "fixturenames", ())) for item in session.items))
    slurm = os.geteuid() == 0  # starting the daemons of a test cluster needs root
    if needed & {"smoke_slurm", "smoke_reference"} and slurm:
        BACKGROUND["slurm"] = Background(_slurm_smoke_run, session.config)
    if "ci_run" in needed:
        BACKGROUND["ci_run"] = Background(_ci_run, session.config)
    if "smoke_killed" in needed:
        BACKGROUND["smoke_killed"] = Background(_smoke_killed_run, session.config)
    if "smoke_local" in needed or ("smoke_reference" in needed and not slurm):
        BACKGROUND["smoke_local"] = Background(_smoke_local_run, session.config)


def pytest_terminal_summary(terminalreporter) -> None:
    """When each background run ended, counted from the end of collection: what CI waits on."""
    if BACKGROUND:
        start = min(run.started for run in BACKGROUND.values())
        ends = ", ".join(f"{name} {run.finished - start:.0f} s" if run.finished else f"{name} -"
                         for name, run in BACKGROUND.items())
        terminalreporter.write_line(f"background runs finished after: {ends}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    for run in BACKGROUND.values():
        run.close()
    for server in _SERVER:
        server.close()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh copy of the project in a temporary directory."""
    return copy_project(tmp_path / "project")


def _ci_run(config: pytest.Config, cleanups: list) -> Path:
    work = copy_project(_scratch(config, "ci-run"))
    run_snakemake(work, "--workflow-profile", "workflow/profiles/ci", timeout=3600)
    return work


@pytest.fixture(scope="session")
def ci_run() -> Path:
    """One real local run of the CI config in a fresh copy, shared by every test that reads it
    (started at collection, see above).

    Tests that modify files in it restore them before they finish.
    """
    return _background("ci_run")


# --- the smoke config and the runs made of it --------------------------------------------------

# ci.yaml, then smoke.yaml's overrides: every rule once, at the smallest sizes that still work.
SMOKE = ("--workflow-profile", "workflow/profiles/ci", "--configfile", "workflow/config/ci.yaml",
         "workflow/config/smoke.yaml")
CLUSTER = ROOT / "tests" / "cluster"
BACKGROUND: dict[str, Background] = {}


class Background:
    """A real run made in a thread while the other tests go on; `result()` waits for it."""

    def __init__(self, target, config: pytest.Config):
        self._target, self._config = target, config
        self._value = self._error = None
        self._cleanups: list = []
        self.started, self.finished = time.monotonic(), None
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self._value = self._target(self._config, self._cleanups)
        except BaseException as err:  # noqa: BLE001 - reported by result()
            self._error = err
        self.finished = time.monotonic()

    def result(self, timeout: float = 3600):
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the background run did not finish")
        if isinstance(self._error, pytest.skip.Exception):
            pytest.skip(str(self._error))
        if self._error is not None:
            raise self._error
        return self._value

    def close(self) -> None:
        self._thread.join(3600)
        for cleanup in reversed(self._cleanups):
            cleanup()


_SCRATCH_LOCK = threading.Lock()  # the background runs make their folders at the same time


def _scratch(config: pytest.Config, name: str) -> Path:
    with _SCRATCH_LOCK:
        return config._tmp_path_factory.mktemp(name)  # noqa: SLF001 - pytest's own factory


def _slurm_smoke_run(config: pytest.Config, cleanups: list) -> Path:
    """Start a one-node SLURM cluster here and run the smoke config through it."""
    if os.geteuid() != 0:
        raise pytest.skip.Exception("starting slurmctld/slurmd/munged needs root")
    state = _scratch(config, "slurm")
    up = subprocess.run([CLUSTER / "slurm-up.sh", state], capture_output=True, text=True,
                        timeout=900)
    cleanups.append(lambda: subprocess.run([CLUSTER / "slurm-down.sh", state], check=False,
                                           timeout=120))
    if up.returncode != 0:
        raise AssertionError(f"could not start the test cluster:\n{up.stdout}\n{up.stderr}")
    work = copy_project(_scratch(config, "smoke-slurm"))
    env = {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}  # for sbatch and squeue
    proc = subprocess.run(
        [*_niced(LOW_PRIORITY), *SNAKEMAKE, "--workflow-profile", "workflow/profiles/slurm",
         "--configfile", "workflow/config/ci.yaml", "workflow/config/smoke.yaml",
         # The test cluster has no accounting database: poll squeue, submit without account.
         "--slurm-status-command", "squeue", "--slurm-no-account",
         "--slurm-init-seconds-before-status-checks", "1",
         "--seconds-between-status-checks", "1",  # a test cluster answers at once
         "--jobs", "8",
         # A bundle of N tiny jobs asks for N CPUs; the test node declares 4 per core.
         "--group-components", "init=2", "particles=2",
         # The local runs use 1 thread per job; the same thread count gives the same floats.
         "--set-threads", "train=1"],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=3600)
    if proc.returncode != 0:
        raise AssertionError(f"the smoke run through SLURM failed:\n{proc.stdout[-6000:]}")
    return work


def _background(name: str):
    if name not in BACKGROUND:
        pytest.skip(f"the {name} run was not started at collection time")
    return BACKGROUND[name].result()


@pytest.fixture(scope="session")
def smoke_slurm() -> Path:
    """The smoke config run through a real SLURM cluster (started at collection, see above)."""
    if os.geteuid() != 0:
        pytest.skip("starting slurmctld/slurmd/munged needs root")
    return _background("slurm")


def run_until(work: Path, marker_dir: str, args: tuple[str, ...], timeout: float = 1800,
              nice: int = 0) -> bool:
    """Start the workflow; SIGKILL its whole process tree once marker_dir has a file.

    Returns False if the run finished before the marker appeared.
    """
    proc = subprocess.Popen([*_niced(nice), *SNAKEMAKE, *args], cwd=work, stdout=subprocess.DEVNULL,
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


KILL_POINTS = tuple(f"{output_roots({'name': SMOKE_NAME}).results}/logs/{stage}"
                    for stage in ("init", "train", "notebooks"))


def _smoke_killed_run(config: pytest.Config, cleanups: list) -> tuple[Path, list[str]]:
    work = copy_project(_scratch(config, "smoke-killed"))
    args = (*SMOKE, "--cores", "1")
    killed = []
    for stage in KILL_POINTS:
        if run_until(work, stage, args, nice=LOW_PRIORITY):
            killed.append(stage)
        # What a user does after a crash: release the stale lock, run the same command again.
        run_snakemake(work, "--unlock", *args, nice=LOW_PRIORITY)
    run_snakemake(work, *args, nice=LOW_PRIORITY, timeout=3600)
    return work, killed


@pytest.fixture(scope="session")
def smoke_killed() -> tuple[Path, list[str]]:
    """The smoke config run locally one job at a time (--cores 1), SIGKILLed (whole process
    tree) during the init sweep, the training and the notebooks, each time unlocked and run
    again as a user would, then run to the end (started at collection, see above). Returns the
    folder and the stages killed."""
    return _background("smoke_killed")


def _smoke_local_run(config: pytest.Config, cleanups: list) -> Path:
    work = copy_project(_scratch(config, "smoke-local"))
    run_snakemake(work, *SMOKE, nice=LOW_PRIORITY)
    return work


@pytest.fixture(scope="session")
def smoke_local() -> Path:
    """The smoke config run locally without interruption (the reference where SLURM is not
    available; started at collection, see above)."""
    return _background("smoke_local")


@pytest.fixture(scope="session")
def smoke_reference(request) -> Path:
    """An uninterrupted run of the smoke config: the SLURM one where this machine can start a
    cluster (root), else a local one."""
    if os.geteuid() == 0:
        return request.getfixturevalue("smoke_slurm")
    return request.getfixturevalue("smoke_local")


def assert_same_results(a: Path, b: Path, name: str) -> None:
    """Two runs of one config (named `name`) give identical tables (exactly) and claim
    measurements."""
    import pandas as pd

    ta = {p.name: pd.read_parquet(p)
          for p in sorted((results_dir(a, name) / "tables").glob("*.parquet"))}
    tb = {p.name: pd.read_parquet(p)
          for p in sorted((results_dir(b, name) / "tables").glob("*.parquet"))}
    assert ta.keys() == tb.keys() and ta
    for table in ta:
        pd.testing.assert_frame_equal(ta[table], tb[table], check_exact=True, obj=table)
    ca, cb = claims_in(a, name), claims_in(b, name)
    assert ca and [(c["id"], c["values"]) for c in ca] == [(c["id"], c["values"]) for c in cb]


def claims_in(run: Path, name: str) -> list[dict]:
    """Every claim the notebooks of a run of the config `name` measured: {"id", "statement",
    "values"} per claim, the statement from the claims registry and "values" what must be
    identical between two runs of the same config."""
    import json

    from rankcollapse.claims import load_registry

    registry = load_registry(run / "src/rankcollapse/claims/claims.yaml")
    out = []
    for path in sorted((results_dir(run, name) / "numbers").glob("E*.json")):
        section = json.loads(path.read_text())
        for m in section.get("measurements", []):
            out.append({"id": m["id"], "statement": registry[m["id"]].statement,
                        "values": (m["value"], m["samples"], m["interval"], m["n"])})
    return out
