"""Config values that refer to data are judged against that data when the workflow is planned
(rankcollapse.plan.data_checks, run by check_config): each input below passed every check
before and failed only inside its job, or was silently ignored."""

import copy
import json
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config, validate

from rankcollapse.plan.config import (
    ConfigError,
    check_config,
    check_schema,
    load_schema,
    with_presets_applied,
)

from conftest import copy_project, run_snakemake

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "workflow/schemas/config.schema.yaml"
SCHEMA = load_schema(SCHEMA_PATH)
DEFAULT = yaml.safe_load((ROOT / "workflow/config/default.yaml").read_text())
CI = yaml.safe_load((ROOT / "workflow/config/ci.yaml").read_text())


def merged(*overrides: dict) -> dict:
    """default.yaml with `overrides` merged over it, as `--configfile` merges them, and the
    schema's defaults filled in: what check_config sees in the workflow."""
    config = copy.deepcopy(DEFAULT)
    for override in overrides:
        update_config(config, copy.deepcopy(override))
    config = with_presets_applied(config)
    check_schema(config, SCHEMA)
    validate(config, str(SCHEMA_PATH))
    return config


# (name, change to ci.yaml, fragments the message must hold: the key first)
BAD_INPUTS = [
    # make_task raised "memorisation.test_size=200 exceeds train_size=100" inside E2's train job
    ("memorisation_test_beyond_train", {"paths": {"data": {"memorisation": {"test_size": 200}}}},
     ["paths.data.memorisation.test_size=200", "paths.data.memorisation.train_size=100",
      "allowed"]),
    # tuning.validation_data raised "task 'digits' has no validation split" inside E5's jobs
    ("digits_without_validation_split", {"tasks": {"digits": {"val_fraction": 0}}},
     ["tasks.digits.val_fraction=0", "validation split", "allowed"]),
    # the text task built empty validation and test sets (shape (0, 30000)) in E5's jobs
    ("text_length_beyond_the_corpus", {"tasks": {"text": {"length": 30000}}},
     ["tasks.text.length=30000", "validation and test", "allowed: length <= "]),
    # realarch.text_ids raised "text has 10566 tokens, 16384 needed" inside E1b's first job
    ("realarch_text_too_short", {"realarch": {"batch": 32, "tokens": 512}},
     ["realarch.batch=32", "realarch.tokens=512", "scikit-learn", "allowed"]),
    # the layer raised "width=15 is not divisible by heads=2" inside E3's circle job
    ("circle_width_not_divisible", {"circle": {"widths": [15, 32]}},
     ["circle.widths: 15", "circle.heads=2", "allowed"]),
    # torch.randint drew a batch of 5,000 with replacement from 1,294 training images
    ("batch_beyond_the_training_split", {"depth_grid": {"batch": 5000}},
     ["depth_grid.batch=5000", "1294 training examples of task 'digits'",
      "allowed: batch <= 1294"]),
    # a typo'd task: its depths were silently never trained
    ("depths_of_an_unknown_task", {"depth_grid": {"depths": {"digits": [2, 4], "txt": [2]}}},
     ["depth_grid.depths.txt", "unknown task 'txt'"]),
]


@pytest.mark.parametrize(("name", "change", "fragments"), BAD_INPUTS,
                         ids=[b[0] for b in BAD_INPUTS])
def test_bad_data_reference_is_refused_naming_its_key(name, change, fragments):
    config = merged(CI, change)
    with pytest.raises(ConfigError) as err:
        check_config(config)
    for fragment in fragments:
        assert fragment in str(err.value), f"{fragment!r} not in:\n{err.value}"


def test_memorisation_sizes_of_tasks_are_judged_where_they_are_used():
    """E2 overrides tasks.memorisation with paths.data.memorisation: a tasks block that no run
    builds as it stands is no problem; the same sizes for E4's runs are."""
    unused = {"tasks": {"memorisation": {"train_size": 64, "test_size": 128}}}
    check_config(merged(CI, unused))
    with pytest.raises(ConfigError, match=r"tasks\.memorisation\.test_size=128 exceeds "
                                          r"tasks\.memorisation\.train_size=64 \(used by "
                                          r"escalation\.task\)"):
        check_config(merged(CI, unused, {"escalation": {"task": "memorisation"},
                                         "paths": {"tasks": ["sorting", "hull"]}}))


def test_digits_without_validation_split_is_fine_without_tuning():
    check_config(merged(CI, {"tasks": {"digits": {"val_fraction": 0}},
                             "report": {"experiments": ["E1", "E4"]}}))


def _checkpoint(folder: Path, positions: int, weights: bool) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert",
                                                    "max_position_embeddings": positions}))
    if weights:  # a well-formed safetensors file: one tensor of two float32 zeros
        header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})
        (folder / "model.safetensors").write_bytes(
            len(header.encode()).to_bytes(8, "little") + header.encode() + bytes(8))
    return folder


def test_checkpoint_without_weights_is_refused(tmp_path):
    path = _checkpoint(tmp_path / "bert", 512, weights=False)
    with pytest.raises(ConfigError) as err:
        check_config(merged(CI, {"realarch": {"checkpoints": {"bert": str(path)}}}))
    assert "realarch.checkpoints.bert" in str(err.value)
    assert "no weights in this folder" in str(err.value)


def test_checkpoint_shorter_than_the_tokens_is_refused(tmp_path):
    path = _checkpoint(tmp_path / "bert", 16, weights=True)
    with pytest.raises(ConfigError, match=r"realarch\.tokens=32 exceeds the 16 positions of "
                                          r"the checkpoint realarch\.checkpoints\.bert"):
        check_config(merged(CI, {"realarch": {"checkpoints": {"bert": str(path)}}}))
    good = _checkpoint(tmp_path / "bert512", 512, weights=True)
    check_config(merged(CI, {"realarch": {"checkpoints": {"bert": str(good)}}}))


@pytest.mark.parametrize("path", sorted((ROOT / "workflow/config").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_shipped_configs_pass_the_data_checks(path):
    check_config(merged(yaml.safe_load(path.read_text())))


@pytest.mark.workflow
def test_dry_run_names_the_bad_key_before_any_job(tmp_path):
    work = copy_project(tmp_path)
    bad = work / "bad.yaml"
    bad.write_text(yaml.safe_dump({**CI, "realarch": {**CI["realarch"], "tokens": 512,
                                                       "batch": 32}}))
    proc = run_snakemake(work, "-n", "--configfile", str(bad), check=False)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "realarch.tokens=512" in proc.stdout, proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout
    assert "Select jobs to execute" not in proc.stdout


@pytest.mark.parametrize(("task", "options"), [
    ("digits", {}), ("digits", {"val_fraction": 0.0, "test_fraction": 0.3}),
    ("text", {"length": 16}), ("text", {"length": 64, "val_fraction": 0.1})])
def test_training_examples_are_counted_without_building_the_task(task, options):
    from rankcollapse.core.tasks import DIGITS_IMAGES, make_task, training_examples

    assert training_examples(task, **options) == len(make_task(task, **options).y_train)
    from sklearn.datasets import load_digits

    assert DIGITS_IMAGES == len(load_digits().target)
