"""E1 job: per-layer metrics of one random-init network (variant x seed) -> parquet."""

import logging

from rankcollapse import io, runtime
from rankcollapse.sweep import init_sweep

io.log_to(snakemake.log[0])
sweep = snakemake.params.sweep
seed = int(snakemake.wildcards.seed)
runtime.setup(snakemake.threads, seed)
device = runtime.select_device(snakemake.params.device)
logging.info("variant=%s seed=%d device=%s", snakemake.wildcards.variant, seed, device)
logging.info("settings: %s", sweep)

table = init_sweep(seed=seed, device=device, **sweep)
table.insert(0, "variant", snakemake.wildcards.variant)
table.insert(1, "seed", seed)
table["config_hash"] = io.config_hash(sweep)
table["code_version"] = io.code_version()
io.write_parquet(table, snakemake.output[0])
logging.info("wrote %d rows", len(table))
