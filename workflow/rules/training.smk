# E2/E4 training (E5 and E5b tune theirs: e5_depth_grid.smk): one job per ensemble, all members (seeds x optimiser settings) of one
# (task, variant, depth) as one batched model, split into parts by train.ensemble_memory_mb.
# A killed job resumes from the checkpoint.pt beside its outputs; a diverged member is
# recorded (flagged, with its step) and the others go on. The same job then measures every
# member's per-layer metrics (trained and at init) on a fixed test batch in one batched pass on
# the CPU (metrics.parquet): a few small forward passes, not worth a job of their own.
# With train.gpu 1 every training job declares the GPU memory it needs (resources: gpu_mb,
# rankcollapse.plan.training's estimate) and claims that much room on a local GPU (runtime.claim_gpu),
# so several small jobs share one GPU while their sum fits: run with
# --resources gpu_mb=<MB of all your GPUs>. The SLURM profile asks for one GPU per job instead.


rule train:
    output:
        ensemble=results("train/{task}/{variant}/L{depth}/part{part}/ensemble.pt"),
        history=results("train/{task}/{variant}/L{depth}/part{part}/history.parquet"),
        metrics=results("train/{task}/{variant}/L{depth}/part{part}/metrics.parquet"),
    log:
        results("logs/train/{task}/{variant}/L{depth}/part{part}.log"),
    benchmark:
        results("benchmarks/train/{task}/{variant}/L{depth}/part{part}.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    resources:
        gpu_mb=train_gpu_mb,
    params:
        job=train_params,
        device=config["device"],
        eval_size=config["train"]["eval_size"],
    script:
        "../scripts/train.py"
