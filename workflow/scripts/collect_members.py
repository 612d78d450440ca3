"""Concatenate per-ensemble tables into one experiment table, keeping the experiment's own
members (an ensemble may also hold members that another experiment asked for)."""

import logging

from rankcollapse import io
from rankcollapse.plan import training as trainplan

io.log_to(snakemake.log[0])
table = io.concat_parquet(snakemake.input)
kept = trainplan.select_members(table, snakemake.params.members)
io.write_parquet(kept, snakemake.output[0])
logging.info("collected %d files, kept %d of %d rows", len(snakemake.input), len(kept),
             len(table))
