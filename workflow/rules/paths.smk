# E2: token accuracy of trained networks using only some paths: the original sampled-path
# protocol (every network) and our exact path sums (LN-free networks), every member of one
# training ensemble; then one table.


rule path_accuracy:
    input:
        ensemble=RESULTS + "/train/{task}/{variant}/L{depth}/part{part}/ensemble.pt",
    output:
        RESULTS + "/paths/{task}/{variant}/L{depth}/part{part}.parquet",
    log:
        RESULTS + "/logs/paths/{task}/{variant}/L{depth}/part{part}.log",
    benchmark:
        RESULTS + "/benchmarks/paths/{task}/{variant}/L{depth}/part{part}.tsv"
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
        RESULTS + "/tables/E2_paths.parquet",
    log:
        RESULTS + "/logs/collect/E2_paths.log",
    benchmark:
        RESULTS + "/benchmarks/collect/E2_paths.tsv"
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        members=trainplan.experiment_members(config, "E2"),
    script:
        "../scripts/collect_members.py"
