"""Concatenate per-job tables into experiment tables: all inputs into the one output, or, for a
rule with named outputs, each named input list into the output of the same name (one job
writes all the tables of an experiment)."""

import logging

from rankcollapse import io

io.log_to(snakemake.log[0])
names = list(snakemake.output.keys())
pairs = ([(snakemake.input[n], snakemake.output[n]) for n in names] if names
         else [(snakemake.input, snakemake.output[0])])
for inputs, output in pairs:
    table = io.concat_parquet(inputs)
    io.write_parquet(table, output)
    logging.info("%s: collected %d files, %d rows", output, len(inputs), len(table))
