# E1: random-init networks, one captured forward pass per (variant, seed) records every layer.


rule init_sweep:
    output:
        "results/init/{variant}/seed{seed}.parquet",
    log:
        "results/logs/init/{variant}/seed{seed}.log",
    benchmark:
        "results/benchmarks/init/{variant}/seed{seed}.tsv"
    conda:
        "../../envs/environment.yaml"
    threads: 1
    params:
        sweep=init_sweep_params,
        device=config["device"],
    script:
        "../scripts/init_sweep.py"
