"""Path job: token accuracy of one trained san_skip checkpoint by path length -> parquet."""

import logging

from rankcollapse import io
from rankcollapse.paths import measure_job

io.log_to(snakemake.log[0])
w = snakemake.wildcards
table = measure_job(
    snakemake.input.model,
    eval_size=snakemake.params.eval_size,
    samples=snakemake.params.samples,
    repeats=snakemake.params.repeats,
    threads=snakemake.threads,
)
table.insert(0, "task", w.task)
table.insert(1, "variant", w.variant)
io.write_parquet(table, snakemake.output[0])
logging.info("wrote %d rows", len(table))
