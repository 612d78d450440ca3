"""Circle job: train one recurrent setup at one width and roll it out -> parquet."""

import logging

from rankcollapse import io
from rankcollapse.circle import run_job

io.log_to(snakemake.log[0])
table = run_job(
    **snakemake.params.job, seed=int(snakemake.wildcards.seed), threads=snakemake.threads
)
io.write_parquet(table, snakemake.output[0])
logging.info("test MSE %.3e, %d rows", table.test_mse.iloc[0], len(table))
