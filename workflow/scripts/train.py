"""Training job: every member of one (task, variant, depth) ensemble -> ensemble.pt and
history.parquet (one history per member, with its identity columns)."""

import logging

from rankcollapse import io
from rankcollapse.ensemble import run_job

io.log_to(snakemake.log[0])
w = snakemake.wildcards
results = run_job(
    **snakemake.params.job,
    ensemble_path=snakemake.output.ensemble,
    history_path=snakemake.output.history,
    device=snakemake.params.device,
    threads=snakemake.threads,
    extra_columns={"task": w.task, "variant": w.variant, "depth": int(w.depth)},
)
for result in results:
    logging.info("diverged=%s test accuracy=%.4f", result.diverged, result.test_accuracy)
