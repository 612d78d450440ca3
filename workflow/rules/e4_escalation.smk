# E4's table: the per-layer metrics that the training jobs measured (training.smk), with E4's
# own members.


rule collect_train:
    input:
        escalation_tables,
    output:
        table("E4", "metrics"),
    log:
        results("logs/collect/E4_metrics.log"),
    benchmark:
        results("benchmarks/collect/E4_metrics.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        members=escalation_members,
    script:
        "../scripts/collect_members.py"
