# Per-layer metrics of trained networks (and of the same networks at init) on a fixed test
# batch, plus final test loss/accuracy, every member of an ensemble in one batched pass; then
# one table per experiment with its own members. Measuring is a few small forward passes, so
# it runs on the CPU and leaves the GPUs to the training jobs.


rule train_metrics:
    input:
        ensemble="results/train/{task}/{variant}/L{depth}/part{part}/ensemble.pt",
    output:
        "results/metrics/{task}/{variant}/L{depth}/part{part}.parquet",
    log:
        "results/logs/metrics/{task}/{variant}/L{depth}/part{part}.log",
    benchmark:
        "results/benchmarks/metrics/{task}/{variant}/L{depth}/part{part}.tsv"
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        eval_size=config["train"]["eval_size"],
        device="cpu",
    script:
        "../scripts/train_metrics.py"


rule collect_train:
    input:
        train_tables,
    output:
        "results/tables/{experiment}_{kind}.parquet",
    log:
        "results/logs/collect/{experiment}_{kind}.log",
    benchmark:
        "results/benchmarks/collect/{experiment}_{kind}.tsv"
    wildcard_constraints:
        experiment="E4|E5b",
        kind="metrics|history",
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        members=experiment_members,
    script:
        "../scripts/collect_members.py"


rule tuned_metrics:
    input:
        ensemble="results/tuned/{task}/{variant}/L{depth}/ensemble.pt",
    output:
        "results/tuned_metrics/{task}/{variant}/L{depth}.parquet",
    log:
        "results/logs/tuned_metrics/{task}/{variant}/L{depth}.log",
    benchmark:
        "results/benchmarks/tuned_metrics/{task}/{variant}/L{depth}.tsv"
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        eval_size=config["train"]["eval_size"],
        device="cpu",
    script:
        "../scripts/train_metrics.py"


# E5's tables: per-layer metrics and histories of the final members, and every member of
# every sweep with its role (tuning).
rule collect_tuned:
    input:
        tuned_tables,
    output:
        "results/tables/E5_{kind}.parquet",
    log:
        "results/logs/collect/E5_{kind}.log",
    benchmark:
        "results/benchmarks/collect/E5_{kind}.tsv"
    wildcard_constraints:
        kind="metrics|history|tuning",
    conda:
        "../../envs/environment.yaml"
    threads: 1
    script:
        "../scripts/collect.py"
