# Helpers of e1b_realarch.smk: its input functions, parameters and benchmark records.


def realarch_tables(wildcards=None):
    """E1b's per-job tables, one per model (all seeds in one job)."""
    return expand(
        results("realarch/{model}.parquet"), model=config["realarch"]["models"]
    )


BENCHMARKS[table("E1b", "realarch")] = lambda: [
    *expand(
        results("benchmarks/realarch/{model}.tsv"), model=config["realarch"]["models"]
    ),
    results("benchmarks/collect/E1b_realarch.tsv"),
]
