"""Training job: every member of one (task, variant, depth) ensemble -> ensemble.pt and
history.parquet (one history per member, with its identity columns), then the per-layer metrics
of every member, trained and at init, measured on the CPU -> metrics.parquet."""

import logging

from rankcollapse import io
from rankcollapse.training.ensemble import run_job, write_metrics

io.log_to(snakemake.log[0])
w = snakemake.wildcards
results = run_job(
    **snakemake.params.job,
    ensemble_path=snakemake.output.ensemble,
    history_path=snakemake.output.history,
    device=snakemake.params.device,
    threads=snakemake.threads,
    extra_columns={"task": w.task, "variant": w.variant, "depth": int(w.depth)},
    gpu_mb=snakemake.resources.gpu_mb,  # room claimed on a shared GPU
)
for result in results:
    logging.info("diverged=%s test accuracy=%.4f", result.diverged, result.test_accuracy)
table = write_metrics(snakemake.output.ensemble, snakemake.output.metrics,
                      eval_size=snakemake.params.eval_size, threads=snakemake.threads,
                      identity={"task": w.task, "variant": w.variant})
logging.info("measured %d metric rows", len(table))
