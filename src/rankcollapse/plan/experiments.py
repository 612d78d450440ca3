"""The experiment registry: one record per experiment, and every list of experiments derived
from it (the workflow's targets and benchmark files, the training plan's runs, the report's size
lines and method notes, the config checks, the schema's enum: a test compares them).

A record says where an experiment's whole story lives: its config blocks, its rules file, its
notebook, the tables it reads, the library modules that compute them, its claims module (whose
`method_note`, where it has one, is the report's methods paragraph on what its claims rest on)
and the claims' block in the registry `claims/claims.yaml`. Torch-free: Snakemake imports it
while it parses the workflow. Adding an experiment: docs/adding-an-experiment.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rankcollapse.plan import checks, data_checks, describe
from rankcollapse.plan import tuned as tunedplan
from rankcollapse.plan.particles import TABLES as PARTICLE_TABLES
from rankcollapse.plan.particles import config_problems as particle_problems

Config = dict


@dataclass(frozen=True)
class Training:
    """How an experiment's networks train as ensembles (the `train` rule): its runs and the
    settings of each task's runs."""

    runs: Callable[[Config], list[tuple[str, str, int, list[int]]]]  # (task, variant, depth, seeds)
    train: Callable[[Config, str], dict] = lambda config, task: dict(config["train"])
    data: Callable[[Config, str], dict] = lambda config, task: dict(config["tasks"][task])


@dataclass(frozen=True)
class Experiment:
    id: str  # E1, E1b, ...: the key of its tables, figures, numbers and claims
    title: str  # its section's heading in the report
    paper: str  # whose claims it tests, as the section's heading says it
    blocks: tuple[str, ...]  # the config blocks that set its runs (its size line names them)
    settings: tuple[str, ...]  # the config blocks its notebook receives
    rules: str  # the rules file that makes its tables
    notebook: str
    library: tuple[str, ...]  # the modules that compute its tables
    claims: str  # its claims module (IDS, measure, method_note); claim ids start with "<id>."
    # {name: collected table under results/} its rules make: the one place its outputs are
    # named (rules, benchmark records, the report and its notebook take them from here)
    outputs: dict[str, str] = field(default_factory=dict)
    # {name: collected table under results/} its notebook reads (default: its outputs)
    tables: Callable[[Config], dict[str, str]] | None = None
    files: dict[str, str] = field(default_factory=dict)  # {name: tracked file it also reads}
    training: Training | None = None  # networks trained as ensembles (E2, E4)
    # Networks tuned per arm (rule train_tuned: E5, E5b): (task, variant, depth) of its arms.
    tuned: Callable[[Config], list[tuple[str, str, int]]] | None = None
    checks: tuple[Callable[[Config], list[str]], ...] = ()
    size: Callable[[Config], str] = lambda config: "—"

    def __post_init__(self) -> None:
        if self.tables is None:  # it reads what it makes
            object.__setattr__(self, "tables", lambda config: dict(self.outputs))

    @property
    def trains(self) -> bool:
        return self.training is not None or self.tuned is not None


def _in_report(config: Config, experiment: str) -> bool:
    return experiment in config.get("report", {}).get("experiments", [])


def _table_set(experiment: str) -> dict[str, str]:
    return dict(REGISTRY[experiment].outputs)


def _table(experiment: str, name: str) -> str:
    """Another experiment's output `name` (a table it reads that that experiment makes)."""
    return REGISTRY[experiment].outputs[name]


def _escalation_runs(config: Config) -> list:
    e = config["escalation"]
    return [(e["task"], v, e["depth"], e["seeds"]) for v in e["variants"]]


def _paths_runs(config: Config) -> list:
    p = config["paths"]
    return [(t, v, d, p["seeds"]) for t in p["tasks"] for v in p["variants"] for d in p["depths"]]


def _paths_train(config: Config, task: str) -> dict:
    """E2's model size per task and its optimiser overrides (`paths.models`, `paths.train`)."""
    p = config["paths"]
    return {**config["train"], **p.get("models", {}).get(task, {}), **p.get("train", {})}


def _paths_data(config: Config, task: str) -> dict:
    """E2's data sizes (Dong et al.'s, apart from the other experiments': `paths.data`)."""
    return {**config["tasks"][task], **config["paths"].get("data", {}).get(task, {})}


REFERENCE = "workflow/references/d21_original.yaml"  # figures of Dong et al.'s original code

REGISTRY: dict[str, Experiment] = {e.id: e for e in (
    Experiment(
        "E1", "Rank collapse at initialisation", "Dong, Cordonnier & Loukas (ICML 2021)",
        blocks=("init_sweep",), settings=("init_sweep", "fit"),
        rules="workflow/rules/e1_init_sweep.smk",
        notebook="notebooks/01_rank_collapse_init.ipynb",
        library=("rankcollapse.experiments.init_sweep", "rankcollapse.experiments.init_fits"),
        claims="rankcollapse.claims.e1",
        outputs={"init": "tables/E1_init.parquet"},
        # With E5 in the report, E5's trained networks beside the init curves.
        tables=lambda c: {"init": _table("E1", "init")}
        | ({"trained": _table("E5", "metrics")} if _in_report(c, "E5") else {}),
        checks=(checks.init_sweep,), size=describe.init_sweep),
    Experiment(
        "E1b", "Real architectures at initialisation", "Dong, Cordonnier & Loukas (ICML 2021)",
        blocks=("realarch",), settings=("realarch",),
        rules="workflow/rules/e1b_realarch.smk",
        notebook="notebooks/01b_real_architectures.ipynb",
        library=("rankcollapse.probe.realarch", "rankcollapse.probe"),
        claims="rankcollapse.claims.e1b",
        outputs={"realarch": "tables/E1b_realarch.parquet"},
        checks=(checks.realarch, data_checks.realarch), size=describe.realarch),
    Experiment(
        "E2", "Which paths carry the computation", "Dong, Cordonnier & Loukas (ICML 2021)",
        blocks=("paths", "train"), settings=("paths", "tasks"),
        rules="workflow/rules/e2_paths.smk",
        notebook="notebooks/02_path_lengths.ipynb",
        library=("rankcollapse.training.ensemble", "rankcollapse.experiments.paths"),
        claims="rankcollapse.claims.e2",
        outputs={"paths": "tables/E2_paths.parquet"},
        files={"reference": REFERENCE},
        training=Training(_paths_runs, train=_paths_train, data=_paths_data),
        checks=(checks.paths, data_checks.paths), size=describe.paths),
    Experiment(
        "E3", "Circular trajectories", "Dong, Cordonnier & Loukas (ICML 2021)",
        blocks=("circle",), settings=("circle",),
        rules="workflow/rules/e3_circle.smk",
        notebook="notebooks/03_circle_trajectories.ipynb",
        library=("rankcollapse.experiments.circle",),
        claims="rankcollapse.claims.e3",
        outputs={"circle": "tables/E3_circle.parquet"},
        files={"reference": REFERENCE},
        checks=(checks.circle, data_checks.circle), size=describe.circle),
    Experiment(
        "E4", "Token similarity escalation", "Yu & Zhang (arXiv 2312.06182)",
        blocks=("escalation", "train"), settings=("escalation", "train", "tasks"),
        rules="workflow/rules/e4_escalation.smk",
        notebook="notebooks/04_similarity_escalation.ipynb",
        library=("rankcollapse.training.ensemble", "rankcollapse.experiments.trained"),
        claims="rankcollapse.claims.e4",
        # E1's init table (the same variants on random Gaussian sequences) and, with E5 in the
        # report, E5's tuned networks at its deepest depth.
        outputs={"metrics": "tables/E4_metrics.parquet"},
        tables=lambda c: {"metrics": _table("E4", "metrics"), "init": _table("E1", "init")}
        | ({"deep": _table("E5", "metrics")} if _in_report(c, "E5") else {}),
        training=Training(_escalation_runs),
        checks=(checks.escalation, data_checks.escalation), size=describe.escalation),
    Experiment(
        "E5", "Depth-enabling with every arm tuned: post-norm, pre-norm and de-escalation",
        "Yu & Zhang (arXiv 2312.06182)",
        blocks=("depth_grid", "train"), settings=("depth_grid", "train", "tasks"),
        rules="workflow/rules/e5_depth_grid.smk",
        notebook="notebooks/05_depth_enabling.ipynb",
        library=("rankcollapse.plan.tuned", "rankcollapse.training.tuning",
                 "rankcollapse.experiments.trained"),
        claims="rankcollapse.claims.e5",
        outputs={kind: f"tables/E5_{kind}.parquet" for kind in ("metrics", "history", "tuning")},
        tuned=tunedplan.grid_arms,
        # The grid's digits need a validation split whenever some reported arm is tuned.
        checks=(checks.depth_grid, lambda c: data_checks.depth_grid(c, tuned=_tunes(c))),
        size=describe.depth_grid),
    Experiment(
        # Rival fixes, tuned as E5 arms at its deepest digits depth: E5's runs and tables.
        "E5b", "Rival depth fixes side by side",
        "Yu & Zhang; Nait Saada, Naderi & Tanner (ICML 2025); Noci et al. (NeurIPS 2022); "
        "Wang et al. (2022)",
        blocks=("rival_fixes", "depth_grid"), settings=("rival_fixes", "depth_grid"),
        rules="workflow/rules/e5_depth_grid.smk",
        notebook="notebooks/05b_rival_fixes.ipynb",
        library=("rankcollapse.plan.tuned", "rankcollapse.training.tuning",
                 "rankcollapse.experiments.trained"),
        claims="rankcollapse.claims.e5b",
        tables=lambda c: {k: _table("E5", k) for k in ("metrics", "tuning")},
        tuned=tunedplan.rival_arms,
        checks=(lambda c: checks.rival_fixes(c, reported=_in_report(c, "E5b")),),
        size=describe.rival_fixes),
    Experiment(
        "E6", "Homogenized transformers: random attention on the sphere",
        "Koubbi, Geshkovski & Rigollet (arXiv 2604.01978, 2026)",
        blocks=("particles",), settings=("particles",),
        rules="workflow/rules/e6_particles.smk",
        notebook="notebooks/06_homogenized.ipynb",
        library=("rankcollapse.plan.particles", "rankcollapse.experiments.homogenized"),
        claims="rankcollapse.claims.e6",
        outputs={name: f"tables/E6_{name}.parquet" for name in PARTICLE_TABLES},
        # E6_discrete (the unscaled model at E1's sizes) is E7's.
        tables=lambda c: {k: v for k, v in _table_set("E6").items() if k != "discrete"},
        # Not a table but a text the notebook shows: editing it reruns the notebook.
        files={"derivation": "notebooks/06_homogenized_derivation.md"},
        checks=(lambda c: particle_problems(c.get("particles", {})),),
        size=lambda c: describe.particles(c["particles"])),
    Experiment(
        "E7", "Cross-checks: three collapse statistics on the same runs",
        "all three papers (cross-checks)",
        blocks=(), settings=("init_sweep", "fit"),
        rules="workflow/rules/e1_init_sweep.smk",  # no runs of its own: E1's, E4/E5's, E6's
        notebook="notebooks/07_cross_checks.ipynb",
        library=("rankcollapse.experiments.trained",),
        claims="rankcollapse.claims.e7",
        tables=lambda c: {"init": _table("E1", "init")} | {
            key: _table(experiment, name) for key, (experiment, name) in {
                "trained_e4": ("E4", "metrics"),
                "trained_e5": ("E5", "metrics"),
                "particles": ("E6", "discrete"),
            }.items() if _in_report(c, experiment)},
        size=lambda c: "no runs of its own: reads E1's, E4/E5's and E6's tables"),
)}

IDS = tuple(REGISTRY)


def get(experiment: str) -> Experiment:
    if experiment not in REGISTRY:
        raise ValueError(f"experiment {experiment!r}: allowed values are {list(IDS)}")
    return REGISTRY[experiment]


def in_report(config: Config) -> list[Experiment]:
    """The report's experiments, in the config's order."""
    return [get(e) for e in config["report"]["experiments"]]


def _tunes(config: Config) -> bool:
    """Whether some experiment of the report tunes arms (they select on validation data)."""
    return any(REGISTRY[e].tuned is not None
               for e in config.get("report", {}).get("experiments", []) if e in REGISTRY)


def tuned_runs(config: Config) -> list[tuple[str, str, int]]:
    """(task, variant, depth) of every tuned arm the report's experiments train, in their
    order (an arm two experiments share is trained once)."""
    runs = [arm for e in in_report(config) if e.tuned is not None for arm in e.tuned(config)]
    return list(dict.fromkeys(runs))


def ensemble_trained() -> tuple[str, ...]:
    """The experiments whose networks train as ensembles (the `train` rule)."""
    return tuple(e.id for e in REGISTRY.values() if e.training is not None)


def needed_tables(config: Config) -> set[str]:
    """Every collected table (path under results/) that the report's experiments read."""
    return {t for e in in_report(config) for t in e.tables(config).values()}


def problems(config: Config) -> list[str]:
    """Every experiment's config checks, its cross-checks and its data checks (each block is
    checked, in the report or not: a block left to the schema's defaults passes), each problem
    said once (a task two experiments use is one problem)."""
    return list(dict.fromkeys(p for e in REGISTRY.values() for check in e.checks
                              for p in check(config)))
