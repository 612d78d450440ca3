# E4's tables: the per-layer metrics (and histories) that the training jobs measured
# (training.smk), with E4's own members.


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
