# Shared helpers: the config's checks (before any job starts), output roots, wildcard
# constraints and the experiments of the registry (rankcollapse.plan.experiments). Each
# experiment's own helpers live beside its rules (e1_init_sweep.smk, ..., e6_particles.smk).
from snakemake.utils import min_version, validate

from rankcollapse.plan.config import (
    check_config,
    check_schema,
    load_schema,
    output_roots,
    with_presets_applied,
)

min_version("9.0")

# The variant presets under the config's own variants; concise one-line messages first (key,
# problem, allowed values); then snakemake's validate(), which also fills in the schema's
# defaults; then the cross-reference checks (each experiment's, named by its registry record).
config.update(with_presets_applied(config))
check_schema(config, load_schema(workflow.source_path("../schemas/config.schema.yaml")))
validate(config, "../schemas/config.schema.yaml")
check_config(config)

# Where this config writes (rankcollapse.plan.config.output_roots, by the config's `name`):
# results/ and report/report.{html,pdf} for `default`, results/<name>/ and
# report/<name>.{html,pdf} for any other name, so that configs never overwrite each other.
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
from rankcollapse.plan import experiments as registry  # noqa: E402
from rankcollapse.plan import particles as homogenized_plan  # noqa: E402
from rankcollapse.plan import training as trainplan  # noqa: E402
from rankcollapse.plan import tuned as tunedplan  # noqa: E402


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


# Each experiment of the report: its notebook, the inputs it reads (collected tables under
# RESULTS, tracked files) and the config blocks it receives, from its registry record.
EXPERIMENTS = {
    record.id: {
        "notebook": record.notebook,
        "tables": {k: results(t) for k, t in record.tables(config).items()}
        | record.files,
        "settings": list(record.settings),
    }
    for record in registry.in_report(config)
}


def outputs(experiment):
    """{name: collected table} an experiment's rules make, under RESULTS: its registry record's
    `outputs` (the one place they are named)."""
    return {k: results(v) for k, v in registry.get(experiment).outputs.items()}


def table(experiment, name):
    """One of an experiment's collected tables (`outputs`)."""
    return outputs(experiment)[name]


# {collected table: a function giving the wall-time records of the jobs that make it}: each
# experiment's rules file adds its tables; the report sums the records of the tables it reads.
BENCHMARKS = {}

# Each stage's input functions and parameters, beside no rules (snakemake --lint).


include: "common/training.smk"
include: "common/e1_init_sweep.smk"
include: "common/e1b_realarch.smk"
include: "common/e2_paths.smk"
include: "common/e3_circle.smk"
include: "common/e4_escalation.smk"
include: "common/e5_depth_grid.smk"
include: "common/e6_particles.smk"
include: "common/notebooks.smk"
include: "common/report.smk"
