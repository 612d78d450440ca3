# E1: random-init networks, one captured forward pass per (variant, seed) records every layer;
# one job per variant runs all its seeds (a job is mostly interpreter and torch start-up).
# Its table is E1's, E4's and E7's (their registry records' tables).


rule init_sweep:
    output:
        results("init/{variant}.parquet"),
    log:
        results("logs/init/{variant}.log"),
    benchmark:
        results("benchmarks/init/{variant}.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        job=init_sweep_params,
        device=config["device"],
    script:
        "../scripts/init_sweep.py"


rule collect_init:
    input:
        init_sweep_tables,
    output:
        table("E1", "init"),
    log:
        results("logs/collect/E1_init.log"),
    benchmark:
        results("benchmarks/collect/E1_init.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    script:
        "../scripts/collect.py"
