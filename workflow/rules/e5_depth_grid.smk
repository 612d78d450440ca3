# E5 (and E5b's rival fixes, tuned as E5 arms at its deepest depth): every arm tuned on its
# own (rankcollapse.plan.tuned), then its final seeds; then E5's tables. One job per (task,
# variant, depth) tunes its optimiser settings (rankcollapse.training.tuning): successive halving
# on the tuning seeds as one ensemble, selected on the validation split by the registered rule
# (rankcollapse.training.selection), then the fresh seeds at the selected setting as a second
# ensemble, with the budget curve's cool-down branches; tuning.parquet has a row per member of
# both (role sweep / final), metrics.parquet the final members' per-layer metrics. With
# depth_grid.merge_depths_up_to, the shallow arms of one (task, variant) share one job, one
# after another ({depths}: e.g. 2-8), where starting a job would cost more than their work.


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
    # The longest jobs first, so that the short ones (here and in other stages) fill the cores
    # at the end instead of one long job running alone.
    priority: tuned_priority
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
