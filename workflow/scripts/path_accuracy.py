"""Path job: token accuracy by path length of every member of one trained san_skip ensemble
-> parquet (one block of rows per member, with its identity columns)."""

import logging

import pandas as pd

from rankcollapse import io
from rankcollapse.ensemble import Member, load_members
from rankcollapse.paths import measure_saved
from rankcollapse.train import TrainConfig

io.log_to(snakemake.log[0])
w = snakemake.wildcards
tables = []
for saved in load_members(snakemake.input.ensemble):
    table = measure_saved(
        saved,
        eval_size=snakemake.params.eval_size,
        samples=snakemake.params.samples,
        repeats=snakemake.params.repeats,
        threads=snakemake.threads,
    )
    settings = saved["settings"]
    member = Member(settings["seed"], TrainConfig(**settings["train"]))
    for key, value in member.identity().items():
        table[key] = value
    tables.append(table)
table = pd.concat(tables, ignore_index=True)
table.insert(0, "task", w.task)
table.insert(1, "variant", w.variant)
io.write_parquet(table, snakemake.output[0])
logging.info("wrote %d rows", len(table))
