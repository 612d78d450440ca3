# E2: token accuracy of trained san_skip networks using only paths of length <= k (exact DP and
# the original sampled-path protocol), per checkpoint of the train rule; then one table.


rule path_accuracy:
    input:
        model="results/train/{task}/{variant}/L{depth}/seed{seed}/model.pt",
    output:
        "results/paths/{task}/{variant}/L{depth}/seed{seed}.parquet",
    log:
        "results/logs/paths/{task}/{variant}/L{depth}/seed{seed}.log",
    benchmark:
        "results/benchmarks/paths/{task}/{variant}/L{depth}/seed{seed}.tsv"
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        eval_size=config["paths"]["eval_size"],
        samples=config["paths"]["samples"],
        repeats=config["paths"]["repeats"],
    script:
        "../scripts/path_accuracy.py"


rule collect_paths:
    input:
        path_tables,
    output:
        "results/tables/E2_paths.parquet",
    log:
        "results/logs/collect/E2_paths.log",
    benchmark:
        "results/benchmarks/collect/E2_paths.tsv"
    conda:
        "../../envs/environment.yaml"
    threads: 1
    script:
        "../scripts/collect.py"
