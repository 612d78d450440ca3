# E1: random-init networks, one captured forward pass per (variant, seed) records every layer;
# one job per variant runs all its seeds (a job is mostly interpreter and torch start-up).


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
