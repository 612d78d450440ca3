"""Atomic writes, run identity (config hash, code version) and the provenance record."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path

import pandas as pd

from rankcollapse import __version__


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Call write(tmp) on a temporary file beside `path`, then rename it onto `path`.

    A job killed mid-write leaves either the old file or none, never a truncated one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are ordinary files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


CHECKSUM_HEADER = b"rankcollapse-sha256:"


def save_checked(obj, path: str | os.PathLike) -> Path:
    """torch.save(obj) behind a SHA-256 header, atomically: damage anywhere is detectable."""
    import io as _io

    import torch

    buffer = _io.BytesIO()
    torch.save(obj, buffer)
    payload = buffer.getvalue()
    digest = hashlib.sha256(payload).hexdigest().encode()
    return atomic_write(path, lambda tmp: tmp.write_bytes(CHECKSUM_HEADER + digest + b"\n"
                                                          + payload))


def load_checked(path: str | os.PathLike, map_location=None):
    """Load what save_checked wrote; ValueError if the file is truncated or altered."""
    import io as _io

    import torch

    raw = Path(path).read_bytes()
    header, _, payload = raw.partition(b"\n")
    if not header.startswith(CHECKSUM_HEADER):
        raise ValueError(f"{path}: no checksum header")
    if hashlib.sha256(payload).hexdigest().encode() != header[len(CHECKSUM_HEADER):]:
        raise ValueError(f"{path}: checksum mismatch (truncated or altered)")
    return torch.load(_io.BytesIO(payload), map_location=map_location, weights_only=False)


def write_parquet(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    return atomic_write(path, lambda tmp: df.to_parquet(tmp, index=False))


def write_json(obj, path: str | os.PathLike) -> Path:
    text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=True, default=str) + "\n"
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def read_parquet(path: str | os.PathLike) -> pd.DataFrame:
    """Read a results table; a missing or damaged file raises an error that names it."""
    try:
        return pd.read_parquet(path)
    except Exception as err:  # pyarrow raises several types for truncated files
        raise RuntimeError(f"cannot read results table {path}: {err}") from err


def concat_parquet(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    frames = [read_parquet(p) for p in paths]
    if not frames:
        raise ValueError("no tables to concatenate")
    return pd.concat(frames, ignore_index=True)


def config_hash(obj) -> str:
    """A short, stable hash of a JSON-serialisable config (key order does not matter)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def git_commit(cwd: str | os.PathLike | None = None) -> str:
    """The current git commit (with '-dirty' for local changes), or 'unknown' outside git."""
    if cwd is None:
        cwd = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=cwd, capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd, capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def code_version() -> str:
    """Package version plus git commit: the code identity stored in every results row."""
    return f"{__version__}+{git_commit()}"


PACKAGES = ("torch", "numpy", "pandas", "snakemake", "papermill", "matplotlib", "weasyprint")


def provenance(packages: Iterable[str] = PACKAGES) -> dict:
    """What ran: code version, interpreter, platform, devices, package versions, and the
    machine's speed reference (float32 GFLOP/s on one thread, measured now: the wall times
    printed beside it are comparable across machines only through it)."""
    import torch

    from rankcollapse.runtime import speed_reference

    versions = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    cuda = torch.cuda.is_available()
    return {
        "code_version": code_version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "speed_reference_gflops": speed_reference(),
        "cuda_available": cuda,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if cuda
        else [],
        "packages": versions,
    }


SCHEDULER_ENV = ("SLURM_JOB_ID", "SLURM_JOB_PARTITION", "SLURM_CPUS_PER_TASK", "SLURM_GPUS_ON_NODE",
                 "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")


def log_to(path: str | os.PathLike) -> None:
    """Send this process's stdout, stderr and Python warnings/logging to the job's log file."""
    import logging
    import sys

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    stream = open(path, "w", buffering=1)  # noqa: SIM115 - lives as long as the job
    sys.stdout = sys.stderr = stream
    logging.basicConfig(stream=stream, level=logging.INFO, force=True,
                        format="%(asctime)s %(levelname)s %(message)s")
    logging.captureWarnings(True)
    # Where the job ran: on a cluster these say which allocation (and GPUs) it got.
    placed = {k: os.environ[k] for k in SCHEDULER_ENV if k in os.environ}
    if placed:
        logging.info("scheduler: %s", " ".join(f"{k}={v}" for k, v in placed.items()))
