"""Tuned training job (E5): each of its arms (one depth, or several shallow ones of one task and
variant: depth_grid.merge_depths_up_to) tuned in turn, sweep on the tuning seeds, selected on
validation, the final seeds trained -> ensemble.pt (final members), history.parquet,
tuning.parquet (every member); the final members' per-layer metrics, trained and at init, on
the CPU -> metrics.parquet (rankcollapse.training.tuning.run_tuned_arms)."""

import logging

from rankcollapse import io
from rankcollapse.training.tuning import run_tuned_arms

io.log_to(snakemake.log[0])
w = snakemake.wildcards
chosen = run_tuned_arms(
    snakemake.params.job["arms"],
    ensemble_path=snakemake.output.ensemble,
    history_path=snakemake.output.history,
    tuning_path=snakemake.output.tuning,
    metrics_path=snakemake.output.metrics,
    eval_size=snakemake.params.eval_size,
    identity={"task": w.task, "variant": w.variant},
    device=snakemake.params.device,
    threads=snakemake.threads,
)
logging.info("selected %s", chosen)
