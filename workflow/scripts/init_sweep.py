"""E1 job: per-layer metrics of one variant's random-init networks, every seed -> parquet."""

import logging

import pandas as pd

from rankcollapse import io, runtime
from rankcollapse.experiments.init_sweep import init_sweep

io.log_to(snakemake.log[0])
job, variant = snakemake.params.job, snakemake.wildcards.variant
sweep = job["sweep"]
logging.info("variant=%s seeds=%s settings: %s", variant, job["seeds"], sweep)
tables = []
for seed in job["seeds"]:
    # As if each seed were its own job: the same thread count and seeding per network.
    runtime.setup(snakemake.threads, seed)
    device = runtime.select_device(snakemake.params.device)
    table = init_sweep(variant=job["variant"], seed=seed, device=device, **sweep)
    table.insert(0, "variant", variant)
    table.insert(1, "seed", seed)
    tables.append(table)
table = pd.concat(tables, ignore_index=True)
table["config_hash"] = io.config_hash({"variant": job["variant"], **sweep})  # as before
table["code_version"] = io.code_version()
io.write_parquet(table, snakemake.output[0])
logging.info("wrote %d rows (%d seeds) on %s", len(table), len(job["seeds"]), device)
