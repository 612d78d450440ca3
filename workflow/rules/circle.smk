# E3: one attention layer applied recurrently to points on a circle: train (the shared training
# loop, MSE) and roll out per (setup, width, seed); then one table.


rule circle:
    output:
        "results/circle/{setup}/w{width}/seed{seed}.parquet",
    log:
        "results/logs/circle/{setup}/w{width}/seed{seed}.log",
    benchmark:
        "results/benchmarks/circle/{setup}/w{width}/seed{seed}.tsv"
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        job=circle_params,
    script:
        "../scripts/circle.py"


rule collect_circle:
    input:
        circle_tables,
    output:
        "results/tables/E3_circle.parquet",
    log:
        "results/logs/collect/E3_circle.log",
    benchmark:
        "results/benchmarks/collect/E3_circle.tsv"
    conda:
        "../../envs/environment.yaml"
    threads: 1
    script:
        "../scripts/collect.py"
