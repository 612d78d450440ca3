# E2: token accuracy of trained networks using only some paths: the original sampled-path
# protocol (every network) and our exact path sums (LN-free networks), every member of one
# training ensemble; then one table.


rule path_accuracy:
    input:
        ensemble=results("train/{task}/{variant}/L{depth}/part{part}/ensemble.pt"),
    output:
        results("paths/{task}/{variant}/L{depth}/part{part}.parquet"),
    log:
        results("logs/paths/{task}/{variant}/L{depth}/part{part}.log"),
    benchmark:
        results("benchmarks/paths/{task}/{variant}/L{depth}/part{part}.tsv")
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
        table("E2", "paths"),
    log:
        results("logs/collect/E2_paths.log"),
    benchmark:
        results("benchmarks/collect/E2_paths.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        members=trainplan.experiment_members(config, "E2"),
    script:
        "../scripts/collect_members.py"
