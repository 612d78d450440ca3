# E3: one attention layer applied recurrently to points on a circle: one job per width trains
# every setup, all seeds of a setup as one ensemble (MSE, Adam at a constant rate), and rolls
# each layer out; then one table.


rule circle:
    output:
        results("circle/w{width}.parquet"),
    log:
        results("logs/circle/w{width}.log"),
    benchmark:
        results("benchmarks/circle/w{width}.tsv")
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
        table("E3", "circle"),
    log:
        results("logs/collect/E3_circle.log"),
    benchmark:
        results("benchmarks/collect/E3_circle.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    script:
        "../scripts/collect.py"
