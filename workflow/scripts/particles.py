"""E6 job: one parameter point of a KGR26 particle study -> parquet."""

import logging

from rankcollapse import io, runtime
from rankcollapse.experiments.homogenized.run import run_point

io.log_to(snakemake.log[0])
point = snakemake.params.point
runtime.setup(snakemake.threads, point["seed"])
logging.info("study=%s point=%s params=%s", snakemake.wildcards.study, snakemake.wildcards.point,
             point)

table = run_point(point)
table.insert(0, "study", snakemake.wildcards.study)
table.insert(1, "point", snakemake.wildcards.point)
table["seed"] = point["seed"]
table["config_hash"] = io.config_hash(point)
table["code_version"] = io.code_version()
io.write_parquet(table, snakemake.output[0])
logging.info("wrote %d rows", len(table))
