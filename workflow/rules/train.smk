# E2/E4/E5/E5b training: one job per ensemble, all members (seeds x optimiser settings) of one
# (task, variant, depth) as one batched model, split into parts by train.ensemble_memory_mb.
# A killed job resumes from the checkpoint.pt beside its outputs; a diverged member is
# recorded (flagged, with its step) and the others go on.


rule train:
    output:
        ensemble="results/train/{task}/{variant}/L{depth}/part{part}/ensemble.pt",
        history="results/train/{task}/{variant}/L{depth}/part{part}/history.parquet",
    log:
        "results/logs/train/{task}/{variant}/L{depth}/part{part}.log",
    benchmark:
        "results/benchmarks/train/{task}/{variant}/L{depth}/part{part}.tsv"
    conda:
        "../../envs/environment.yaml"
    threads: 1
    resources:
        gpu=config["train"]["gpu"],
    params:
        job=train_params,
        device=config["device"],
    script:
        "../scripts/train.py"
