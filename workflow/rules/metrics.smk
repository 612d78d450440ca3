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
        experiment="E4|E5|E5b",
        kind="metrics|history",
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        members=experiment_members,
    script:
        "../scripts/collect_members.py"
