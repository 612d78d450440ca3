"""Tuned training job (E5): sweep on the tuning seeds, select on validation, train the final
seeds -> ensemble.pt (final members), history.parquet, tuning.parquet (every member); then the
final members' per-layer metrics, trained and at init, on the CPU -> metrics.parquet."""

import logging

from rankcollapse import io
from rankcollapse.ensemble import write_metrics
from rankcollapse.tuning import run_tuned_job

io.log_to(snakemake.log[0])
w = snakemake.wildcards
chosen = run_tuned_job(
    **snakemake.params.job,
    ensemble_path=snakemake.output.ensemble,
    history_path=snakemake.output.history,
    tuning_path=snakemake.output.tuning,
    device=snakemake.params.device,
    threads=snakemake.threads,
    extra_columns={"task": w.task, "variant": w.variant, "depth": int(w.depth)},
)
logging.info("selected %s", chosen)
table = write_metrics(snakemake.output.ensemble, snakemake.output.metrics,
                      eval_size=snakemake.params.eval_size, threads=snakemake.threads,
                      identity={"task": w.task, "variant": w.variant})
logging.info("measured %d metric rows", len(table))
