# Helpers of e1_init_sweep.smk: its input functions, parameters and benchmark records.


def init_sweep_tables(wildcards=None):
    """E1's per-job tables, one per variant (all seeds in one job)."""
    return expand(
        results("init/{variant}.parquet"), variant=config["init_sweep"]["variants"]
    )


def init_sweep_params(wildcards):
    """Everything one init job needs: the variant's switches, its seeds and the shared sweep
    settings."""
    sweep = {
        k: v for k, v in config["init_sweep"].items() if k not in ("variants", "seeds")
    }
    return {
        "variant": config["variants"][wildcards.variant],
        "seeds": config["init_sweep"]["seeds"],
        "sweep": sweep,
    }


BENCHMARKS[table("E1", "init")] = lambda: [
    *expand(
        results("benchmarks/init/{variant}.tsv"),
        variant=config["init_sweep"]["variants"],
    ),
    results("benchmarks/collect/E1_init.tsv"),
]
