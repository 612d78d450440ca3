# Helpers of e2_paths.smk: its input functions, parameters and benchmark records.


def path_tables(wildcards=None):
    """E2's per-ensemble path-accuracy tables."""
    return train_files("paths", train_jobs("E2"))


BENCHMARKS[table("E2", "paths")] = lambda: [
    *train_files("train_benchmark", train_jobs("E2")),
    *train_files("paths_benchmark", train_jobs("E2")),
    results("benchmarks/collect/E2_paths.tsv"),
]
