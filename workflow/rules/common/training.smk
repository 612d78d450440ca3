# Helpers of training.smk: its input functions, parameters and benchmark records.


# Training: all members (seeds x optimiser settings) of one (task, variant, depth) train as one
# ensemble job, split into parts when they would not fit train.ensemble_memory_mb
# (rankcollapse.plan.training); the tables of an experiment keep its own members.
ENSEMBLES = {
    (job.task, job.variant, str(job.depth), str(job.part)): job
    for job in trainplan.ensembles(config)
}

TRAIN_FILES = {
    "history": results("train/{}/{}/L{}/part{}/history.parquet"),
    "metrics": results("train/{}/{}/L{}/part{}/metrics.parquet"),
    "train_benchmark": results("benchmarks/train/{}/{}/L{}/part{}.tsv"),
    "paths": results("paths/{}/{}/L{}/part{}.parquet"),
    "paths_benchmark": results("benchmarks/paths/{}/{}/L{}/part{}.tsv"),
}


def train_jobs(experiment):
    """The ensemble jobs that hold at least one of the experiment's members."""
    wanted = {
        (
            m["task"],
            m["variant"],
            m["depth"],
            m["seed"],
            m["peak_lr"],
            m["warmup"],
            m["weight_decay"],
        )
        for m in trainplan.experiment_members(config, experiment)
    }
    return [
        job
        for job in ENSEMBLES.values()
        if any(
            (*job.key, m["seed"], m["lr"], m["warmup"], m["weight_decay"]) in wanted
            for m in job.members
        )
    ]


def train_files(kind, jobs):
    return [TRAIN_FILES[kind].format(j.task, j.variant, j.depth, j.part) for j in jobs]


def train_params(wildcards):
    """One ensemble job's settings: task options, switches, model, shared training options
    and its members (seed, lr, warmup, weight_decay each)."""
    key = (wildcards.task, wildcards.variant, wildcards.depth, wildcards.part)
    if key not in ENSEMBLES:
        raise ValueError(
            f"no training ensemble {key} in this config; planned: {sorted(ENSEMBLES)}"
        )
    return trainplan.job_params(config, ENSEMBLES[key])


def train_gpu_mb(wildcards):
    """GPU memory (MB) one training job declares: its ensemble's estimate (0 without GPU)."""
    key = (wildcards.task, wildcards.variant, wildcards.depth, wildcards.part)
    return trainplan.job_memory_mb(config, ENSEMBLES[key]) if key in ENSEMBLES else 0
