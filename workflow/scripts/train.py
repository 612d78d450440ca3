"""Training job: one (task, variant, depth, seed) -> model.pt and history.parquet."""

import logging

from rankcollapse import io
from rankcollapse.train import run_job

io.log_to(snakemake.log[0])
job, w = snakemake.params.job, snakemake.wildcards
result = run_job(
    **job,
    seed=int(w.seed),
    model_path=snakemake.output.model,
    history_path=snakemake.output.history,
    device=snakemake.params.device,
    threads=snakemake.threads,
    extra_columns={"task": w.task, "variant": w.variant, "depth": int(w.depth)},
)
logging.info("diverged=%s test accuracy=%.4f", result.diverged, result.test_accuracy)
