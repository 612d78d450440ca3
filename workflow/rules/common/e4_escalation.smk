# Helpers of e4_escalation.smk: its input functions, parameters and benchmark records.


BENCHMARKS[results("tables/E4_metrics.parquet")] = lambda: [
    *train_files("train_benchmark", train_jobs("E4")),
    results("benchmarks/collect/E4_metrics.tsv"),
]
