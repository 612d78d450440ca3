# Shared helpers: config validation (before any job starts), constraints, path lists.
# Logic belongs in src/rankcollapse; this file stays small.
from snakemake.utils import min_version, validate

from rankcollapse.config import check_config

min_version("9.0")


validate(config, "../schemas/config.schema.yaml")
check_config(config)


wildcard_constraints:
    # Short names only: no '/', no '..', so no wildcard value can escape results/.
    variant="[A-Za-z][A-Za-z0-9_]*",
    seed="[0-9]+",
    experiment="E[0-9]+[a-z]?",


# Each experiment: its notebook and the collected tables it reads. Adding an experiment means
# adding its notebook, the rules that produce its tables and one entry here.
EXPERIMENTS = {
    "E1": {
        "notebook": "notebooks/01_rank_collapse_init.ipynb",
        "tables": {"init": "results/tables/E1_init.parquet"},
        "settings": ["init_sweep", "fit"],
    },
}


def init_sweep_tables(wildcards=None):
    sweep = config["init_sweep"]
    return expand(
        "results/init/{variant}/seed{seed}.parquet",
        variant=sweep["variants"],
        seed=sweep["seeds"],
    )


def init_sweep_params(wildcards):
    """Everything one init job needs: the variant's switches and the shared sweep settings."""
    sweep = {k: v for k, v in config["init_sweep"].items() if k not in ("variants", "seeds")}
    return {"variant": config["variants"][wildcards.variant], **sweep}


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
    return ["report/report.pdf"] if config["report"]["pdf"] else []


def benchmark_files(wildcards=None):
    """The per-job wall-time records that the report's provenance section sums per rule."""
    init = expand(
        "results/benchmarks/init/{variant}/seed{seed}.tsv",
        variant=config["init_sweep"]["variants"],
        seed=config["init_sweep"]["seeds"],
    )
    notebooks = expand("results/benchmarks/notebooks/{experiment}.tsv", experiment=report_experiments())
    return init + ["results/benchmarks/collect/E1_init.tsv"] + notebooks
