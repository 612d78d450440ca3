"""Concatenate per-job tables into one experiment table."""

import logging

from rankcollapse import io

io.log_to(snakemake.log[0])
table = io.concat_parquet(snakemake.input)
io.write_parquet(table, snakemake.output[0])
logging.info("collected %d files, %d rows", len(snakemake.input), len(table))
