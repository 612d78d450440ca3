"""B8: the default run's workflow wall time (set-up apart), read from a finished run.

This benchmark starts nothing: it reads the records of a run that has already finished, in the
folder given by B8_RUN_DIR (default: this checkout), e.g. after `make reproduce` on a fresh
clone on an otherwise quiet machine. It reads the default config's records (results/benchmarks;
a config with another `name` writes under results/<name>/), but Snakemake's logs under
.snakemake/log are shared by every config: run it on a folder holding a *default-config* run.

- From Snakemake's own log of the run (B8_LOG, or the complete log under .snakemake/log with
  the most steps, the latest among equals): its "Elapsed time" (start to end of the workflow,
  after the virtual environment existed: set-up is not in it).
- From the `benchmark:` records under results/benchmarks: the span from the earliest job start
  (file time minus its wall time) to the last job end, and the summed job wall and CPU times
  (CPU time does not grow when other work shares the machine; wall time does).

Target: workflow wall time <= 20 minutes on 2 cores.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

try:
    from common import record
except ImportError:
    from .common import record

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 20 * 60


def snakemake_log(run_dir: Path) -> tuple[Path, float, int] | None:
    """(log, elapsed seconds, steps) of the complete run with the most steps, if any."""
    if os.environ.get("B8_LOG"):
        candidates = [Path(os.environ["B8_LOG"])]
    else:
        candidates = sorted((run_dir / ".snakemake/log").glob("*.snakemake.log"))
    best = None
    for path in candidates:
        text = path.read_text(errors="replace")
        elapsed = re.search(r"Elapsed time: (?:(\d+) days?, )?(\d+):(\d+):(\d+(?:\.\d+)?)", text)
        done = re.findall(r"(\d+) of (\d+) steps \(100%\) done", text)
        if not (elapsed and done):
            continue
        days, h, m, s = elapsed.groups()
        seconds = int(days or 0) * 86400 + int(h) * 3600 + int(m) * 60 + float(s)
        steps = int(done[-1][1])
        if best is None or steps >= best[2]:
            best = (path, seconds, steps)
    return best


def benchmark_records(run_dir: Path) -> dict | None:
    """Span and sums of the run's per-job benchmark records."""
    starts, ends, wall, cpu, jobs = [], [], 0.0, 0.0, 0
    for path in sorted((run_dir / "results/benchmarks").rglob("*.tsv")):
        lines = path.read_text().splitlines()
        if len(lines) < 2:
            continue
        header, values = lines[0].split("\t"), lines[1].split("\t")
        row = dict(zip(header, values, strict=False))
        seconds = float(row["s"])
        end = path.stat().st_mtime
        starts.append(end - seconds)
        ends.append(end)
        wall += seconds
        cpu += float(row.get("cpu_time", "nan") or "nan")
        jobs += 1
    if not jobs:
        return None
    return {"jobs": jobs, "span_s": max(ends) - min(starts), "job_wall_s": wall,
            "job_cpu_s": cpu}


def run() -> dict:
    run_dir = Path(os.environ.get("B8_RUN_DIR", ROOT)).resolve()
    log = snakemake_log(run_dir)
    records = benchmark_records(run_dir)
    if log is None and records is None:
        return record("B8_run_time", {
            "what": f"no finished run in {run_dir} (B8 reads a run, it never starts one: run "
                    "`make reproduce` there first, or set B8_RUN_DIR)", "met": None})
    wall = log[1] if log is not None else records["span_s"]
    entry = {
        "what": "default run's workflow wall time (set-up apart), read from a finished run",
        "run_dir": str(run_dir),
        "snakemake_log": str(log[0]) if log else None,
        "log_elapsed_s": log[1] if log else None,
        "log_steps": log[2] if log else None,
        "records": records,
        "wall_s": wall,
        "source": "snakemake log" if log is not None else "benchmark records (span)",
        "target": "<= 1200",
        "met": wall <= TARGET_S,
    }
    return record("B8_run_time", entry)


if __name__ == "__main__":
    r = run()
    if r.get("wall_s") is None:
        print("B8:", r["what"])
    else:
        rec = r["records"] or {}
        job_wall, job_cpu = rec.get("job_wall_s", float("nan")), rec.get("job_cpu_s", float("nan"))
        print(f"B8 default run: {r['wall_s'] / 60:.1f} min workflow wall time ({r['source']}; "
              f"target <= 20 min): {rec.get('jobs')} job records, summed job wall "
              f"{job_wall:.0f} s, CPU {job_cpu:.0f} s")
