"""E1b job: per-layer residuals of one real architecture, every seed and ablation."""

import logging
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models come from configs; nothing is downloaded

import pandas as pd  # noqa: E402

from rankcollapse import io, runtime  # noqa: E402
from rankcollapse.probe import realarch

io.log_to(snakemake.log[0])
settings = snakemake.params.settings
model = snakemake.wildcards.model
keys = ("ablations", "batch", "tokens", "input_seed", "dtype")
options = {k: settings[k] for k in keys}
checkpoint = settings["checkpoints"].get(model)
text_seeds = sorted(settings["seeds"])[: settings["text_seeds"]]
per_seed = []
for seed in settings["seeds"]:
    # As if each seed were its own job: the same thread count and seeding.
    runtime.setup(snakemake.threads, seed)
    logging.info("model=%s seed=%d settings: %s", model, seed, settings)
    inputs = ["random", "text"] if seed in text_seeds else ["random"]
    tables = [realarch.run(model, seed, inputs=inputs, **options, log=logging.info)]
    if checkpoint and seed == min(settings["seeds"]):  # pretrained weights: one run, not per seed
        logging.info("pretrained weights from %s", checkpoint)
        tables.append(realarch.run(model, seed, inputs=inputs, **options,
                                   checkpoint=checkpoint, log=logging.info))
    table = pd.concat(tables, ignore_index=True)
    table.insert(1, "seed", seed)
    per_seed.append(table)
table = pd.concat(per_seed, ignore_index=True)
table["config_hash"] = io.config_hash(settings)
table["code_version"] = io.code_version()
io.write_parquet(table, snakemake.output[0])
logging.info("wrote %d rows", len(table))
