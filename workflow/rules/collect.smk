# Concatenate the per-job tables of one experiment into RESULTS/tables/.


rule collect_init:
    input:
        init_sweep_tables,
    output:
        results("tables/E1_init.parquet"),
    log:
        results("logs/collect/E1_init.log"),
    benchmark:
        results("benchmarks/collect/E1_init.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    script:
        "../scripts/collect.py"
