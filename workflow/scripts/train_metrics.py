"""Metrics job: per-layer metrics of every member of one trained ensemble (and of it at init)
-> parquet."""

import logging

from rankcollapse import io
from rankcollapse.ensemble import measure_job

io.log_to(snakemake.log[0])
w = snakemake.wildcards
table = measure_job(
    snakemake.input.ensemble,
    eval_size=snakemake.params.eval_size,
    device=snakemake.params.device,
    threads=snakemake.threads,
)
table.insert(0, "task", w.task)
table.insert(1, "variant", w.variant)
io.write_parquet(table, snakemake.output[0])
logging.info("wrote %d rows", len(table))
