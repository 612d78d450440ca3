# E4/E5 training: one job per (task, variant, depth, seed). A killed job resumes from the
# checkpoint.pt beside its outputs; a diverged run still writes both outputs (flagged).


rule train:
    output:
        model="results/train/{task}/{variant}/L{depth}/seed{seed}/model.pt",
        history="results/train/{task}/{variant}/L{depth}/seed{seed}/history.parquet",
    log:
        "results/logs/train/{task}/{variant}/L{depth}/seed{seed}.log",
    benchmark:
        "results/benchmarks/train/{task}/{variant}/L{depth}/seed{seed}.tsv"
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
