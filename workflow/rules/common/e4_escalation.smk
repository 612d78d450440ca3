# Helpers of e4_escalation.smk: its input functions, parameters and benchmark records.


def escalation_tables(wildcards=None):
    """The per-ensemble metrics tables that hold E4's members."""
    return train_files("metrics", train_jobs("E4"))


def escalation_members(wildcards=None):
    """The identity rows E4's table keeps (an ensemble may hold other experiments' members)."""
    return trainplan.experiment_members(config, "E4")


BENCHMARKS[table("E4", "metrics")] = lambda: [
    *train_files("train_benchmark", train_jobs("E4")),
    results("benchmarks/collect/E4_metrics.tsv"),
]
