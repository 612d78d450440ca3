# Shared helpers: config validation (before any job starts), constraints, path lists.
# Logic belongs in src/rankcollapse; this file stays small.
from snakemake.utils import min_version, validate

from rankcollapse.plan.config import check_config, check_schema, load_schema, output_roots

min_version("9.0")

# Concise one-line messages first (key, problem, allowed values); then snakemake's validate(),
# which also fills in the schema's defaults; then the cross-reference checks.
check_schema(config, load_schema(workflow.source_path("../schemas/config.schema.yaml")))
validate(config, "../schemas/config.schema.yaml")
check_config(config)

# Where this config writes (rankcollapse.plan.config.output_roots, by the config's `name`): results/
# and report/report.{html,pdf} for `default`, results/<name>/ and report/<name>.{html,pdf} for
# any other name, so that configs never overwrite each other. Every output path below and in
# the rules is built from RESULTS (through results(), below), REPORT (the report without its
# suffix) or FIGURES (through figures()).
ROOTS = output_roots(config)
RESULTS, REPORT, FIGURES = ROOTS.results, ROOTS.report, ROOTS.figures


def results(path):
    """`path` under this config's results folder: results("init/{variant}.parquet") is
    results/init/{variant}.parquet or results/<name>/init/{variant}.parquet (wildcards kept).
    """
    return f"{RESULTS}/{path}"


def figures(experiment):
    """An experiment's figures folder: report/figures/E1 or report/<name>/figures/E1."""
    return f"{FIGURES}/{experiment}"


# The planners, imported once the config has passed. They import neither torch nor pandas (a test
# checks it): every snakemake process parses this file, each SLURM job and each resume included.
from rankcollapse.plan import particles as homogenized_plan, training as trainplan  # noqa: E402


wildcard_constraints:
    # Short names only (letters, digits, underscores), so no wildcard value can leave results.
    variant="[A-Za-z][A-Za-z0-9_]*",
    seed="[0-9]+",
    part="[0-9]+",
    experiment="E[0-9]+[a-z]?",
    study="[a-z][a-z0-9_]*",
    point="[A-Za-z0-9_.-]+",
    table="[a-z][a-z0-9_]*",
    task="[a-z][a-z0-9_]*",
    depth="[0-9]+",
    depths="[0-9]+(-[0-9]+)*",
    model="[a-z]+",
    width="[0-9]+",


# E6: collected table -> the studies it concatenates
PARTICLE_TABLES = homogenized_plan.TABLES

# Each experiment: its notebook and the collected tables it reads. Adding an experiment means
# adding its notebook, the rules that produce its tables and one entry here.
EXPERIMENTS = {
    "E1": {
        "notebook": "notebooks/01_rank_collapse_init.ipynb",
        # Optional: the trained networks of the E5 grid, next to the init curves.
        "tables": {"init": results("tables/E1_init.parquet")}
        | (
            {"trained": results("tables/E5_metrics.parquet")}
            if "E5" in config["report"]["experiments"]
            else {}
        ),
        "settings": ["init_sweep", "fit"],
    },
    # E1b: real architectures (BERT, ALBERT, XLNet) at init with their path ablations.
    "E1b": {
        "notebook": "notebooks/01b_real_architectures.ipynb",
        "tables": {"realarch": results("tables/E1b_realarch.parquet")},
        "settings": ["realarch"],
    },
    # "derivation" is not a table but a text the notebook shows; listed here so that editing
    # it reruns the notebook. E6_discrete (the unscaled model at E1's sizes) is E7's.
    "E6": {
        "notebook": "notebooks/06_homogenized.ipynb",
        "tables": {
            **{
                name: results(f"tables/E6_{name}.parquet")
                for name in PARTICLE_TABLES
                if name != "discrete"
            },
            "derivation": "notebooks/06_homogenized_derivation.md",
        },
        "settings": ["particles"],
    },
    # E4 also reads E1's table (the same variants at init on random Gaussian sequences) and,
    # with E5 in the report, E5's tuned networks at its deepest depth.
    "E4": {
        "notebook": "notebooks/04_similarity_escalation.ipynb",
        "tables": {
            "metrics": results("tables/E4_metrics.parquet"),
            "init": results("tables/E1_init.parquet"),
        }
        | (
            {"deep": results("tables/E5_metrics.parquet")}
            if "E5" in config["report"]["experiments"]
            else {}
        ),
        "settings": ["escalation", "train", "tasks"],
    },
    # E2 and E3 also read the figures of Dong et al.'s original code (a tracked reference).
    "E2": {
        "notebook": "notebooks/02_path_lengths.ipynb",
        "tables": {
            "paths": results("tables/E2_paths.parquet"),
            "reference": "workflow/references/d21_original.yaml",
        },
        "settings": ["paths", "tasks"],
    },
    "E3": {
        "notebook": "notebooks/03_circle_trajectories.ipynb",
        "tables": {
            "circle": results("tables/E3_circle.parquet"),
            "reference": "workflow/references/d21_original.yaml",
        },
        "settings": ["circle"],
    },
    "E5": {
        "notebook": "notebooks/05_depth_enabling.ipynb",
        "tables": {
            "metrics": results("tables/E5_metrics.parquet"),
            "history": results("tables/E5_history.parquet"),
            "tuning": results("tables/E5_tuning.parquet"),
        },
        "settings": ["depth_grid", "train", "tasks"],
    },
    # Rival fixes: tuned as E5 arms at its deepest digits depth, read from E5's tables (the same
    # runs as E5's post-LN, pre-LN and de-escalation there).
    "E5b": {
        "notebook": "notebooks/05b_rival_fixes.ipynb",
        "tables": {
            "metrics": results("tables/E5_metrics.parquet"),
            "tuning": results("tables/E5_tuning.parquet"),
        },
        "settings": ["rival_fixes", "depth_grid"],
    },
    # E7 reads the other experiments' tables only: E1's random-init networks, E4/E5's trained
    # networks and E6's particle model at E1's sizes, where those experiments are in the run.
    "E7": {
        "notebook": "notebooks/07_cross_checks.ipynb",
        "tables": {"init": results("tables/E1_init.parquet")}
        | {
            key: table
            for key, (exp, table) in {
                "trained_e4": ("E4", results("tables/E4_metrics.parquet")),
                "trained_e5": ("E5", results("tables/E5_metrics.parquet")),
                "particles": ("E6", results("tables/E6_discrete.parquet")),
            }.items()
            if exp in config["report"]["experiments"]
        },
        "settings": ["init_sweep", "fit"],
    },
}


def init_sweep_tables(wildcards=None):
    """E1's per-job tables, one per variant (all seeds in one job)."""
    return expand(
        results("init/{variant}.parquet"), variant=config["init_sweep"]["variants"]
    )


def realarch_tables(wildcards=None):
    """E1b's per-job tables, one per model (all seeds in one job)."""
    return expand(
        results("realarch/{model}.parquet"), model=config["realarch"]["models"]
    )


def init_sweep_params(wildcards):
    """Everything one init job needs: the variant's switches, its seeds and the shared sweep
    settings."""
    sweep = {
        k: v for k, v in config["init_sweep"].items() if k not in ("variants", "seeds")
    }
    return {
        "variant": config["variants"][wildcards.variant],
        "seeds": config["init_sweep"]["seeds"],
        "sweep": sweep,
    }


def particle_plan():
    """{study: {point: params}} of E6 (rankcollapse.plan.particles.plan)."""
    return homogenized_plan.plan(config["particles"], config["init_sweep"])


def particle_tables(wildcards=None):
    """{table: the per-point tables collected into RESULTS/tables/E6_{table}.parquet}."""
    plan = particle_plan()
    return {
        table: [
            results(f"particles/{study}/{point}.parquet")
            for study in studies
            for point in plan[study]
        ]
        for table, studies in PARTICLE_TABLES.items()
    }


def particle_params(wildcards):
    return particle_plan()[wildcards.study][wildcards.point]


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


def train_tables(wildcards):
    """The per-ensemble tables collected into RESULTS/tables/{experiment}_{kind}.parquet."""
    return train_files(wildcards.kind, train_jobs(wildcards.experiment))


def experiment_members(wildcards):
    """The identity rows an experiment's collected table keeps."""
    return trainplan.experiment_members(config, wildcards.experiment)


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


# E5 (and E5b's rival fixes): one tuned job per (task, variant, depth), or per (task, variant)
# over its shallow depths (depth_grid.merge_depths_up_to; rankcollapse.plan.training.tuned_jobs).
TUNED = (
    {job.key: job for job in trainplan.tuned_jobs(config)}
    if {"E5", "E5b"} & set(config["report"]["experiments"])
    else {}
)
TUNED_FILES = {
    "metrics": results("tuned/{}/{}/L{}/metrics.parquet"),
    "history": results("tuned/{}/{}/L{}/history.parquet"),
    "tuning": results("tuned/{}/{}/L{}/tuning.parquet"),
    "train_benchmark": results("benchmarks/tuned/{}/{}/L{}.tsv"),
}


def tuned_files(kind):
    return [TUNED_FILES[kind].format(*key) for key in TUNED]


def tuned_tables(wildcards=None):
    """{kind: the per-job tables collected into RESULTS/tables/E5_{kind}.parquet}."""
    return {kind: tuned_files(kind) for kind in ("metrics", "history", "tuning")}


def tuned_job(wildcards):
    key = (wildcards.task, wildcards.variant, wildcards.depths)
    if key not in TUNED:
        raise ValueError(
            f"no tuned E5 job {key} in this config; planned: {sorted(TUNED)}"
        )
    return TUNED[key]


def tuned_params(wildcards):
    return trainplan.tuned_job_params(config, tuned_job(wildcards))


def tuned_gpu_mb(wildcards):
    """GPU memory (MB) one tuned job declares (0 without GPU)."""
    key = (wildcards.task, wildcards.variant, wildcards.depths)
    return trainplan.tuned_job_gpu_mb(config, TUNED[key]) if key in TUNED else 0


def path_tables(wildcards=None):
    """E2's per-ensemble path-accuracy tables."""
    return train_files("paths", train_jobs("E2"))


def circle_tables(wildcards=None):
    """E3's per-job roll-out tables, one per width, every setup and seed in each."""
    return expand(results("circle/w{width}.parquet"), width=config["circle"]["widths"])


def circle_params(wildcards):
    c = config["circle"]
    train = ("steps", "batch", "lr", "warmup", "schedule", "weight_decay", "clip")
    return {
        "setups": c["setups"],
        "width": int(wildcards.width),
        "heads": c["heads"],
        "mlp_ratio": c["mlp_ratio"],
        "task_options": {k: c[k] for k in ("points", "radius")},
        "train_options": {k: c[k] for k in train}
        | {"checkpoint_every": 0, "eval_every": c["steps"]},
        "rollout_steps": c["rollout"],
        "starts": c["starts"],
        "seeds": c["seeds"],
    }


def notebook_inputs(wildcards):
    spec = EXPERIMENTS[wildcards.experiment]
    return {"notebook": spec["notebook"], **spec["tables"]}


def notebook_params(wildcards):
    """Papermill parameters: JSON-serialisable values only."""
    spec = EXPERIMENTS[wildcards.experiment]
    return {
        "experiment": wildcards.experiment,
        "tables": spec["tables"],
        "settings": {key: config[key] for key in spec["settings"]},
    }


def report_experiments():
    return config["report"]["experiments"]


def report_pdf():
    return [f"{REPORT}.pdf"] if config["report"]["pdf"] else []


def init_sweep_needed():
    """Whether an experiment of the report reads E1's init-sweep table (E1, E4, E7 do): a
    report without them (e.g. diagnostics.yaml's E2, E3, E5) runs no init sweep."""
    return any(
        EXPERIMENTS[name]["tables"].get("init") == results("tables/E1_init.parquet")
        for name in report_experiments()
    )


def benchmark_files(wildcards=None):
    """The per-job wall-time records that the report's provenance section sums per rule."""
    init = expand(
        results("benchmarks/init/{variant}.tsv"),
        variant=config["init_sweep"]["variants"] if init_sweep_needed() else [],
    )
    notebooks = expand(
        results("benchmarks/notebooks/{experiment}.tsv"),
        experiment=report_experiments(),
    )
    particles = []
    if "E6" in report_experiments():
        particles = [
            results(f"benchmarks/particles/{study}/{point}.tsv")
            for study, points in particle_plan().items()
            for point in points
        ]
        particles.append(results("benchmarks/collect/E6.tsv"))
    training = set()
    if "E4" in report_experiments():
        training |= set(train_files("train_benchmark", train_jobs("E4")))
        training.add(results("benchmarks/collect/E4_metrics.tsv"))
    if {"E5", "E5b"} & set(report_experiments()):
        training |= set(tuned_files("train_benchmark"))
        training.add(results("benchmarks/collect/E5.tsv"))
    if "E2" in report_experiments():
        jobs = train_jobs("E2")
        for kind in ("train_benchmark", "paths_benchmark"):
            training |= set(train_files(kind, jobs))
        training.add(results("benchmarks/collect/E2_paths.tsv"))
    if "E3" in report_experiments():
        training |= {
            t.replace(results("circle/"), results("benchmarks/circle/")).replace(
                ".parquet", ".tsv"
            )
            for t in circle_tables()
        }
        training.add(results("benchmarks/collect/E3_circle.tsv"))
    collect = [results("benchmarks/collect/E1_init.tsv")] if init_sweep_needed() else []
    if "E1b" in report_experiments():
        collect += expand(
            results("benchmarks/realarch/{model}.tsv"),
            model=config["realarch"]["models"],
        )
        collect.append(results("benchmarks/collect/E1b_realarch.tsv"))
    return init + collect + particles + sorted(training) + notebooks
