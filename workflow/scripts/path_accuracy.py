"""Path job: token accuracy by path length of every member of one trained ensemble (Dong et
al.'s post-LN network or our LN-free one) -> parquet (a block of rows per member, with its
identity columns)."""

import logging

import pandas as pd

from rankcollapse import io
from rankcollapse.core.tasks import make_task
from rankcollapse.experiments.paths import measure_saved
from rankcollapse.training.ensemble import Member, load_members
from rankcollapse.training.train import TrainConfig

io.log_to(snakemake.log[0])
w = snakemake.wildcards
members = load_members(snakemake.input.ensemble)
first = members[0]["settings"]  # every member of an ensemble trains on the same data
data = make_task(first["task"], **first["task_options"])
tables = []
for saved in members:
    table = measure_saved(
        saved,
        eval_size=snakemake.params.eval_size,
        samples=snakemake.params.samples,
        repeats=snakemake.params.repeats,
        threads=snakemake.threads,
        data=data,
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
