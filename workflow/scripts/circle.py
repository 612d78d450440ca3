"""Circle job: train every recurrent setup at one width for every seed, roll each out -> parquet."""

import logging

from rankcollapse import io
from rankcollapse.experiments.circle import run_job

io.log_to(snakemake.log[0])
table = run_job(**snakemake.params.job, threads=snakemake.threads)
io.write_parquet(table, snakemake.output[0])
logging.info(
    "training MSE per seed %s, %d rows",
    table.groupby("seed").train_mse.first().round(8).to_dict(),
    len(table),
)
