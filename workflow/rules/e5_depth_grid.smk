# E5 (and E5b's rival fixes, tuned as E5 arms at its deepest depth): every arm tuned on its
# own (rankcollapse.plan.tuned), then its final seeds; then E5's three tables.


rule train_tuned:
    output:
        ensemble=results("tuned/{task}/{variant}/L{depths}/ensemble.pt"),
        history=results("tuned/{task}/{variant}/L{depths}/history.parquet"),
        tuning=results("tuned/{task}/{variant}/L{depths}/tuning.parquet"),
        metrics=results("tuned/{task}/{variant}/L{depths}/metrics.parquet"),
    log:
        results("logs/tuned/{task}/{variant}/L{depths}.log"),
    benchmark:
        results("benchmarks/tuned/{task}/{variant}/L{depths}.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    resources:
        gpu_mb=tuned_gpu_mb,
    params:
        job=tuned_params,
        device=config["device"],
        eval_size=config["train"]["eval_size"],
    script:
        "../scripts/train_tuned.py"


# E5's tables (E5b reads them too), in one job: per-layer metrics and histories of the final
# members, and every member of every sweep with its role (tuning).
rule collect_tuned:
    input:
        unpack(tuned_tables),
    output:
        **outputs("E5"),
    log:
        results("logs/collect/E5.log"),
    benchmark:
        results("benchmarks/collect/E5.tsv")
    conda:
        "../../envs/environment.yaml"
    threads: 1
    script:
        "../scripts/collect.py"
