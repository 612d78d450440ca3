# Per-layer metrics of trained networks (and of the same networks at init) on a fixed test
# batch, plus final test loss/accuracy; then one table per experiment. Measuring is a few small
# forward passes, so it runs on the CPU and leaves the GPUs to the training jobs.


rule train_metrics:
    input:
        model="results/train/{task}/{variant}/L{depth}/seed{seed}/model.pt",
    output:
        "results/metrics/{task}/{variant}/L{depth}/seed{seed}.parquet",
    log:
        "results/logs/metrics/{task}/{variant}/L{depth}/seed{seed}.log",
    benchmark:
        "results/benchmarks/metrics/{task}/{variant}/L{depth}/seed{seed}.tsv"
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
    script:
        "../scripts/collect.py"
