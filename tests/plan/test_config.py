"""Bad input stops the workflow before any job runs, with a message that names the problem."""

import copy
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import update_config, validate

from rankcollapse.plan.config import (
    RESERVED_NAMES,
    ConfigError,
    check_config,
    check_schema,
    load_config,
    load_schema,
    output_roots,
)

from conftest import copy_project, run_snakemake

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = load_schema(ROOT / "workflow/schemas/config.schema.yaml")
DEFAULT = load_config(ROOT / "workflow/config/default.yaml")

# (name, config text merged over default.yaml, fragments the error message must contain)
BAD_CONFIGS = [
    ("unknown_top_key", "epochs: 3\n", ["unknown key", "epochs", "allowed keys"]),
    ("unknown_nested_key", "init_sweep: {depht: 3}\n", ["init_sweep", "depht", "depth"]),
    ("wrong_type", "init_sweep: {depth: deep}\n", ["init_sweep.depth", "not of type 'integer'"]),
    ("negative_depth", "init_sweep: {depth: -4}\n", ["init_sweep.depth", "minimum"]),
    ("undefined_variant", "init_sweep: {variants: [san, transformer_xl]}\n",
     ["transformer_xl", "is not defined", "post_ln"]),
    ("empty_variant_list", "init_sweep: {variants: []}\n", ["init_sweep.variants", "non-empty"]),
    ("tau_out_of_range", "variants: {post_ln_deesc: {skip: true, mlp: true, norm: post, "
     "deescalate: 1.5}}\n", ["deescalate", "maximum"]),
    ("bad_norm", "variants: {odd: {skip: true, mlp: true, norm: middle}}\n",
     ["variants.odd.norm", "'none'", "'pre'", "'post'"]),
    ("seed_not_integer", "init_sweep: {seeds: [0, 1.5]}\n", ["init_sweep.seeds[1]", "integer"]),
    ("bad_dtype", "init_sweep: {dtype: float16}\n", ["init_sweep.dtype", "float32", "float64"]),
    ("width_not_divisible", "init_sweep: {width: 10, heads: 3}\n", ["not divisible"]),
    ("unknown_experiment", "report: {experiments: [E99]}\n", ["report.experiments[0]", "E99"]),
    ("bad_device", "device: tpu\n", ["device", "'cuda'"]),
    ("variant_missing_switch", "variants: {half: {skip: true}}\n", ["variants.half", "mlp"]),
    # a list where a mapping belongs: a TypeError from the preset merge, before the schema
    ("variants_as_a_list", "variants: [san, post_ln]\n",
     ["variants: ['san', 'post_ln'] is not"]),
    # A config's name picks its output root: none may land in the default's folders or elsewhere
    ("name_is_a_results_folder", "name: tables\n", ["name: 'tables'", "overwrite", "another name"]),
    ("name_is_the_report", "name: report\n", ["name: 'report'", "overwrite"]),
    ("name_leaves_results", "name: ../elsewhere\n", ["name", "does not match", "^[a-z]"]),
    ("name_with_a_slash", "name: ci/x\n", ["name", "does not match"]),
    ("zero_training_steps", "train: {steps: 0}\n", ["train.steps", "minimum"]),
    ("empty_depth_grid", "depth_grid: {depths: []}\n", ["depth_grid.depths", "non-empty"]),
    ("unknown_task", "escalation: {task: imagenet}\n", ["escalation.task", "imagenet", "digits"]),
    ("undefined_rival_variant", "rival_fixes: {variants: [post_ln, rezero]}\n",
     ["rival_fixes.variants", "rezero", "is not defined"]),
    ("unknown_real_model", "realarch: {models: [bert, gpt2]}\n", ["realarch.models", "gpt2"]),
    ("negative_seed", "depth_grid: {seeds: [-1]}\n", ["depth_grid.seeds[0]", "minimum"]),
    ("bad_variant_name", "variants: {'../escape': {skip: true, mlp: true, norm: post}}\n",
     ["variants", "../escape", "does not match"]),
    ("string_for_boolean", "variants: {odd: {skip: 'yes', mlp: true, norm: post}}\n",
     ["variants.odd.skip", "not of type 'boolean'"]),
    ("learning_rate_text", "train: {lr: fast}\n",
     ["train.lr", "'fast' is not allowed", "a number > 0 or a non-empty list"]),
    ("empty_lr_sweep", "train: {lr: []}\n", ["train.lr", "[] is not allowed"]),
    ("repeated_lr_in_sweep", "train: {lr: [0.001, 0.001]}\n",
     ["train.lr", "list of distinct numbers > 0"]),
    ("fractional_warmup_in_sweep", "train: {warmup: [10, 2.5]}\n",
     ["train.warmup", "list of distinct integers >= 1"]),
    ("negative_paths_lr", "paths: {train: {lr: [0.001, -1.0]}}\n", ["paths.train.lr"]),
    ("zero_ensemble_memory", "train: {ensemble_memory_mb: 0}\n",
     ["train.ensemble_memory_mb", "minimum"]),
    ("two_settings_one_ensemble", "escalation: {task: sorting, variants: [san_skip], "
     "depth: 6}\n", ["task 'sorting', variant 'san_skip', depth 6",
                      "other model, training or data settings"]),
    ("rival_task_not_in_grid", "rival_fixes: {task: sorting}\n",
     ["rival_fixes.task", "'sorting' is not in depth_grid.tasks"]),
    ("rival_fixes_old_keys", "rival_fixes: {depths: [16], seeds: [0, 1]}\n",
     ["rival_fixes: unknown key(s) ['depths', 'seeds']"]),
    ("pre_ln_paths_variant", "paths: {variants: [pre_ln]}\n",
     ["paths.variants", "'pre_ln' is not an ensemble of paths", "san_skip_ln_bias"]),
    ("single_path_count", "paths: {samples: 20}\n", ["paths.samples", "not of type 'array'"]),
    ("too_many_circle_starts", "circle: {points: 20, starts: 12}\n",
     ["circle.starts=12", "9 pairs"]),
    ("unknown_schedule", "circle: {schedule: linear}\n", ["circle.schedule", "'constant'"]),
    ("unknown_e2_data_key", "paths: {data: {hull: {vocab: 3}}}\n",
     ["paths.data.hull", "vocab", "train_size"]),
    ("code_in_a_value", "init_sweep: {depth: \"__import__('os').system('touch pwned')\"}\n",
     ["init_sweep.depth", "not of type 'integer'"]),
    ("simplex_needs_d_at_least_n", "particles: {simplex: {n: 12}}\n",
     ["particles.simplex.n=12", "d >= n"]),
    ("unknown_precision", "train: {precision: fp8}\n", ["train.precision", "'bf16'"]),
    ("unknown_engine", "train: {engine: jit}\n", ["train.engine", "'graph'", "'compile'"]),
    ("unknown_tuning_method", "depth_grid: {tuning: bayes}\n", ["depth_grid.tuning",
                                                               "'halving'"]),
    ("halving_rung_without_steps", "depth_grid: {tuning: halving, steps: 20, "
     "halving: {eta: 3, rungs: 5}}\n", ["depth_grid.halving", "81 steps", "is 20"]),
    # E5's budgets: every depth has one, the warm-up fits each before its cool-down, and the
    # budget curve's points branch off the stable phase of a wsd run
    ("a_depth_without_a_budget", "depth_grid: {depths: {digits: [2, 16], text: [2]}}\n",
     ["depth_grid.steps gives no budget for depth(s) [16]"]),
    ("warmup_longer_than_a_depths_budget",
     "depth_grid: {steps: {2: 40, 8: 500, 32: 500}, warmup: 50}\n",
     ["depth_grid.warmup=50", "depth 2's budget of 40 steps", "at most 32 steps"]),
    ("curve_budget_inside_the_warm_up", "depth_grid: {budget_curve: {budgets: [40, 1000]}}\n",
     ["depth_grid.budget_curve.budgets: 40 steps", "less than the warm-up"]),
    ("curve_control_outside_the_curve",
     "depth_grid: {budget_curve: {variants: [post_ln], control: pre_ln}}\n",
     ["depth_grid.budget_curve.control: 'pre_ln'", "not one of the curve's variants"]),
    ("curve_without_wsd", "depth_grid: {schedule: cosine}\n",
     ["depth_grid.budget_curve", "needs depth_grid.schedule: wsd"]),
    ("steps_per_depth_not_a_number", "depth_grid: {steps: {2: many}}\n",
     ["depth_grid.steps", "is not allowed"]),
    ("unknown_selection_rule", "depth_grid: {select_by: f1}\n",
     ["depth_grid.select_by", "'loss'", "'accuracy'"]),
    ("heads_outside_the_theorem", "particles: {homogenization: {heads_exponent: 0.5}}\n",
     ["particles.homogenization.heads_exponent", "maximum"]),
    # E1b's pretrained checkpoints are checked when the workflow is planned, not in their job.
    ("missing_checkpoint", "realarch: {checkpoints: {bert: /no/such/bert-base}}\n",
     ["realarch.checkpoints.bert", "/no/such/bert-base", "no such directory"]),
    ("checkpoint_without_config_json",
     f"realarch: {{checkpoints: {{albert: '{ROOT / 'workflow' / 'schemas'}'}}}}\n",
     ["realarch.checkpoints.albert", "no config.json"]),
    ("checkpoint_of_another_model",
     f"realarch: {{checkpoints: {{xlnet: '{ROOT / 'tests' / 'data' / 'gpt2_config'}'}}}}\n",
     ["realarch.checkpoints.xlnet", "'gpt2' model", "not 'xlnet'",
      # ... and without the weights its job would load (the folder holds config.json only)
      "no weights in this folder", "model.safetensors"]),
]


def tree_checksum(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    work = copy_project(tmp_path_factory.mktemp("bad-configs"))
    earlier = work / "results" / "init" / "san" / "seed0.parquet"  # stands for earlier results
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"computed earlier")
    return work


@pytest.mark.parametrize(("name", "text", "fragments"), BAD_CONFIGS,
                         ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_is_refused_by_the_checks_the_workflow_runs(name, text, fragments):
    """The corpus in-process: the checks workflow/rules/common.smk runs before any job
    (check_schema, snakemake's validate, check_config), on the config merged over default.yaml
    as --configfile merges it. `make test-fast` runs this; the test below runs each bad config
    through snakemake itself."""
    config = copy.deepcopy(DEFAULT)
    update_config(config, yaml.safe_load(text))
    with pytest.raises((ConfigError, WorkflowError)) as err:
        check_schema(config, SCHEMA)
        validate(config, str(ROOT / "workflow/schemas/config.schema.yaml"))
        check_config(config)
    for fragment in fragments:
        assert fragment in str(err.value), f"{fragment!r} not in:\n{err.value}"


@pytest.mark.workflow
@pytest.mark.slow  # one snakemake call per bad config (a fork of conftest.ForkServer)
@pytest.mark.parametrize(("name", "text", "fragments"), BAD_CONFIGS,
                         ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_stops_before_any_job(workdir, name, text, fragments):
    config = workdir / f"{name}.yaml"
    config.write_text(text)
    before = tree_checksum(workdir / "results")
    proc = run_snakemake(workdir, "--cores", "1", "--configfile", str(config), check=False)
    assert proc.returncode != 0, proc.stdout
    for fragment in fragments:
        assert fragment in proc.stdout, f"{fragment!r} not in:\n{proc.stdout[-3000:]}"
    assert "Select jobs to execute" not in proc.stdout  # nothing was scheduled
    assert tree_checksum(workdir / "results") == before
    assert not (workdir / "pwned").exists()  # config values are data, never evaluated


@pytest.mark.workflow
def test_missing_configfile_is_named(workdir):
    proc = run_snakemake(workdir, "-n", "--configfile", "no/such/config.yaml", check=False)
    assert proc.returncode != 0
    assert "no/such/config.yaml" in proc.stdout


@pytest.mark.workflow
def test_malformed_yaml_is_reported(workdir):
    config = workdir / "broken.yaml"
    config.write_text("init_sweep: {depth: 3\nseeds: [0,\n")
    proc = run_snakemake(workdir, "-n", "--configfile", str(config), check=False)
    assert proc.returncode != 0
    assert "broken.yaml" in proc.stdout or "yaml" in proc.stdout.lower()


def test_shipped_configs_are_valid():
    for name in ("default", "ci", "paper"):
        config = load_config(ROOT / "workflow/config/default.yaml",
                             ROOT / f"workflow/config/{name}.yaml")
        check_schema(config, SCHEMA)
        check_config(config)


# The blocks whose seeds are the units of replication of claims' intervals (E1, E1b, E2, E3, E4,
# E5 and E5b, whose rivals are E5 arms). The ledger's 95% intervals need at least 5 of them
# (fewer: "range of n runs").
SEEDED_BLOCKS = ("init_sweep", "realarch", "paths", "circle", "escalation", "depth_grid")


@pytest.mark.parametrize("name", ["default", "paper"])
def test_every_seeded_claim_rests_on_at_least_five_networks(name):
    config = load_config(ROOT / "workflow/config/default.yaml",
                         ROOT / f"workflow/config/{name}.yaml")
    few = {block: config[block]["seeds"] for block in SEEDED_BLOCKS
           if len(set(config[block]["seeds"])) < 5}
    assert not few, f"{name}.yaml: fewer than 5 seeds in {few}"


def test_every_schema_error_is_listed_at_once():
    config = {**DEFAULT, "init_sweep": {"depth": -1, "dtype": "half"}, "typo": 1}
    with pytest.raises(ConfigError) as err:
        check_schema(config, SCHEMA)
    message = str(err.value)
    assert "init_sweep.depth" in message and "init_sweep.dtype" in message and "typo" in message


def test_planning_the_workflow_imports_neither_torch_nor_pandas():
    """What Snakemake imports while it parses the workflow (common.smk: the config checks and
    the planners) stays free of torch and pandas: every snakemake process pays for it, and the
    SLURM executor starts one per job. torch alone costs about 1.5 s of CPU per process."""
    code = (
        "import sys, yaml\n"
        "from rankcollapse.plan import config, training as trainplan\n"
        "from rankcollapse.plan import particles as homogenized_plan\n"
        "from rankcollapse.plan.config import load_config\n"
        f"cfg = load_config({str(ROOT / 'workflow/config/default.yaml')!r})\n"
        "config.check_config(cfg)\n"
        "homogenized_plan.plan(cfg['particles'], cfg['init_sweep'])\n"
        "trainplan.ensembles(cfg)\n"
        "print(sorted({'torch', 'pandas'} & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_output_roots_keep_the_default_where_it_was_and_give_each_other_name_its_own():
    assert tuple(output_roots({})) == tuple(output_roots({"name": "default"})) == (
        "results", "report/report", "report/figures", "report/snakemake-report.html")
    assert output_roots({"name": "ci"}) == ("results/ci", "report/ci", "report/ci/figures",
                                            "report/ci/snakemake-report.html")
    for name in ("default", "ci", "smoke", "diagnostics", "paper", "my-run_2"):
        check_config({**DEFAULT, "name": name})


def test_reserved_names_cover_every_folder_the_rules_write_under_results():
    """A new rule folder under RESULTS must be refused as a config name too."""
    import re

    rules = [ROOT / "Snakefile", *sorted((ROOT / "workflow/rules").glob("*.smk"))]
    text = "\n".join(p.read_text() for p in rules)
    folders = set(re.findall(r'\bresults\(f?"([A-Za-z0-9_-]+)/', text))
    # the collected tables' folders: the registry's records name them (their outputs)
    from rankcollapse.plan import experiments

    folders |= {Path(p).parts[0] for r in experiments.REGISTRY.values()
                for p in r.outputs.values()}
    assert {"tables", "train", "logs", "benchmarks", "numbers", "notebooks"} <= folders
    assert folders <= RESERVED_NAMES, folders - RESERVED_NAMES
    assert not re.search(r'(?<![\w/.])f?"(results|report)/(?!templates/)', text), \
        "an output path not built by results(), figures() or from REPORT (common.smk)"


@pytest.mark.parametrize(("files", "name"), [
    ([], "default"), (["ci.yaml"], "ci"), (["ci.yaml", "smoke.yaml"], "smoke"),
    (["diagnostics.yaml"], "diagnostics"), (["paper.yaml"], "paper")])
def test_make_prints_the_report_paths_of_config(files, name):
    """The Makefile's messages (`python -m rankcollapse.plan.config FIELD FILES`)."""
    config = ROOT / "workflow/config"
    out = subprocess.run([sys.executable, "-m", "rankcollapse.plan.config", "report",
                          str(config / "default.yaml"), *(str(config / f) for f in files)],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == ("report/report" if name == "default" else f"report/{name}")


def test_output_root_of_a_missing_config_file_is_a_message_not_a_traceback(tmp_path):
    """The Makefile prints where a CONFIG writes; a path that does not exist is named."""
    out = subprocess.run([sys.executable, "-m", "rankcollapse.plan.config", "report",
                          str(tmp_path / "no_such.yaml")], capture_output=True, text=True)
    assert out.returncode == 2
    assert "no_such.yaml" in out.stderr and "Traceback" not in out.stderr


def test_variants_given_as_a_list_are_named_before_the_preset_merge():
    from rankcollapse.plan.config import with_presets_applied

    with pytest.raises(ConfigError, match=r"variants: \['san', 'post_ln'\] is not allowed; "
                                          "allowed: a mapping of names to switches"):
        with_presets_applied({"variants": ["san", "post_ln"]})
