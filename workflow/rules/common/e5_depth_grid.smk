# Helpers of e5_depth_grid.smk: its input functions, parameters and benchmark records.


# E5 (and E5b's rival fixes): one tuned job per (task, variant, depth), or per (task, variant)
# over its shallow depths (depth_grid.merge_depths_up_to; rankcollapse.plan.tuned.tuned_jobs).
TUNED = {
    job.key: job for job in tunedplan.tuned_jobs(config, registry.tuned_runs(config))
}
# Each job's table of every kind E5 collects (the record's outputs; rule train_tuned writes
# them under these names) and its benchmark record.
TUNED_FILES = {
    kind: results(f"tuned/{{}}/{{}}/L{{}}/{kind}.parquet") for kind in outputs("E5")
} | {"train_benchmark": results("benchmarks/tuned/{}/{}/L{}.tsv")}


def tuned_files(kind):
    return [TUNED_FILES[kind].format(*key) for key in TUNED]


def tuned_tables(wildcards=None):
    """{kind: the per-job tables collected into E5's table of that name (its outputs)}."""
    return {kind: tuned_files(kind) for kind in outputs("E5")}


def tuned_job(wildcards):
    key = (wildcards.task, wildcards.variant, wildcards.depths)
    if key not in TUNED:
        raise ValueError(
            f"no tuned E5 job {key} in this config; planned: {sorted(TUNED)}"
        )
    return TUNED[key]


def tuned_params(wildcards):
    return tunedplan.tuned_job_params(config, tuned_job(wildcards))


def tuned_priority(wildcards):
    """The job's scheduling priority: its work (longest first; 0 for a job not planned)."""
    key = (wildcards.task, wildcards.variant, wildcards.depths)
    return tunedplan.tuned_job_priority(config, TUNED[key]) if key in TUNED else 0


def tuned_gpu_mb(wildcards):
    """GPU memory (MB) one tuned job declares (0 without GPU)."""
    key = (wildcards.task, wildcards.variant, wildcards.depths)
    return tunedplan.tuned_job_gpu_mb(config, TUNED[key]) if key in TUNED else 0


for _table in outputs("E5").values():
    BENCHMARKS[_table] = lambda: [
        *tuned_files("train_benchmark"),
        results("benchmarks/collect/E5.tsv"),
    ]
