# One table per experiment of the per-layer metrics (and histories) that the training jobs
# measured (workflow/rules/train.smk), with the experiment's own members.


rule collect_train:
    input:
        train_tables,
    output:
        results("tables/{experiment}_{kind}.parquet"),
    log:
        results("logs/collect/{experiment}_{kind}.log"),
    benchmark:
        results("benchmarks/collect/{experiment}_{kind}.tsv")
    wildcard_constraints:
        experiment="E4",
        kind="metrics|history",
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        members=experiment_members,
    script:
        "../scripts/collect_members.py"


# E5's tables (E5b reads them too), in one job: per-layer metrics and histories of the final
# members, and every member of every sweep with its role (tuning).
rule collect_tuned:
    input:
        unpack(tuned_tables),
    output:
        metrics=results("tables/E5_metrics.parquet"),
        history=results("tables/E5_history.parquet"),
        tuning=results("tables/E5_tuning.parquet"),
    log:
        results("logs/collect/E5.log"),
    benchmark:
        results("benchmarks/collect/E5.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    script:
        "../scripts/collect.py"
