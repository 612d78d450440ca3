"""The probe (rankcollapse.probe) and its command (rankcollapse.cli): every family built tiny,
saved with save_pretrained and probed by path; metrics equal rankcollapse.core.metrics; padding
respected; bad input refused before any computation with --out untouched; E1b's table unchanged
by its move onto the probe."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may touch the network
transformers = pytest.importorskip("transformers")

from rankcollapse import cli, probe  # noqa: E402
from rankcollapse.core import metrics as M  # noqa: E402
from rankcollapse.core.checkpoints import CheckpointError  # noqa: E402
from rankcollapse.probe import spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 1500
TINY = {"layers": 2, "width": 32, "heads": 2}


def tiny(family: str, seed: int = 0, **extra) -> torch.nn.Module:
    sizes = {**probe.family_sizes(family, **TINY), "vocab_size": VOCAB, **extra}
    if family == "gpt2":  # GPT-2's special ids (50256) must lie in the tiny vocabulary
        sizes.update(bos_token_id=1, eos_token_id=1)
    return probe.build(family, seed, probe.base_config(family, **sizes))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Each family, tiny, saved with save_pretrained: what a user's checkpoint folder holds."""
    root = tmp_path_factory.mktemp("checkpoints")
    out = {}
    for family in probe.FAMILIES:
        tiny(family, seed=1).save_pretrained(root / family)
        out[family] = root / family
    return out


def checksum(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def run_cli(*args: str) -> int:
    return cli.main(["probe", *map(str, args), "--quiet"])


# ---- through the command line, by path --------------------------------------------------------


@pytest.mark.parametrize("family", probe.FAMILIES)
def test_each_family_saved_and_probed_by_path(family, checkpoints, tmp_path, capsys):
    out = tmp_path / "out"
    force = []
    if family == "gpt2":  # --force replaces an earlier probe's outputs, and only those
        out.mkdir()
        (out / "probe.json").write_text("an earlier probe's\n")
        (out / "notes.txt").write_text("the user's own file\n")
        force = ["--force"]
    assert run_cli(checkpoints[family], "--tokens", 8, "--batch", 3, "--out", out, *force) == 0
    printed = capsys.readouterr().out
    assert {p.name for p in out.iterdir()} - {"notes.txt"} == set(spec.PROBE_OUTPUTS)
    if force:
        assert (out / "notes.txt").read_text() == "the user's own file\n"
    table = pd.read_parquet(out / "layers.parquet")
    assert set(table.ablation) == set(spec.PROBE_ABLATIONS[family])
    assert set(table.layer) == {0, 1, 2} and set(table.weights) == {"checkpoint"}
    assert (table.tokens == 8).all() and table.seed.nunique() == 1
    # The CSV is the same table.
    csv = pd.read_csv(out / "layers.csv")
    np.testing.assert_allclose(csv.relative_residual, table.relative_residual, rtol=1e-12)
    record = json.loads((out / "probe.json").read_text())
    assert record["model_type"] == family and record["depth"] == 2
    assert record["input_source"]["kind"] == "random"  # no tokenizer in the folder
    assert record["code_version"] and record["model_config_hash"] and record["config_hash"]
    # A checkpoint is one network: verdicts say so, and no interval over runs is claimed.
    ids = [v["id"] for v in record["verdicts"]]
    assert ids == list(probe.claims_on(checkpoint=True))
    for v in record["verdicts"]:
        assert v["on_model"].startswith(f"On this model ({checkpoints[family]}, a checkpoint: "
                                        "one network): ")
        assert v["verdict"] == "not testable" or "one network" in v["method"]
    assert "Verdicts" in printed and "transformer" in printed
    assert (out / "probe.png").stat().st_size < 200_000


def test_family_at_random_init_judged_over_seeds():
    target = probe.resolve("llama", **TINY)
    result = probe.run(target, seeds=2, tokens=10, batch=2,
                       ablations=["san", "san_skip", "transformer"])
    table, info = result.table, result.info
    assert sorted(table.seed.unique()) == [0, 1] and set(table.weights) == {"init"}
    assert info["bands"] == "seeds" and info["input_source"]["kind"] == "random"
    by_id = {v["id"]: v for v in result.verdicts}
    assert list(by_id) == list(probe.claims_on(checkpoint=False))
    # Not probed: said, not guessed.
    assert by_id["E1.mlp_does_not_prevent"]["verdict"] == "not testable"
    assert "san_mlp ablation was not probed" in by_id["E1.mlp_does_not_prevent"]["note"]
    tested = by_id["E4.escalation_post_ln_init"]
    assert tested["n"] == 2 and "range of 2 seeds" in tested["method"]
    assert tested["on_model"].startswith("On this model (llama, random init, 2 seeds): ")
    # Two random networks really differ (seeds are independent initialisations).
    last = table[(table.ablation == "transformer") & (table.layer == 2)]
    assert last.groupby("seed").relative_residual.mean().nunique() == 2
    assert "range of the 2 seeds" in probe.summary(result) or "seeds" in probe.summary(result)


def test_unknown_architecture_is_probed_unmodified(tmp_path):
    config = transformers.RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, intermediate_size=64,
                                        attn_implementation="eager")
    torch.manual_seed(0)
    transformers.RobertaModel(config).save_pretrained(tmp_path / "roberta")
    result = probe.run(probe.resolve(str(tmp_path / "roberta")), tokens=6, batch=2)
    table = result.table
    assert set(table.ablation) == {"transformer"} and set(table.layer) == {0, 1, 2}
    assert table[table.layer > 0].attn_lambda2.notna().all()


def test_checkpoint_tokenizer_reads_the_default_text_and_a_short_file_is_padded(
        tmp_path, capsys):
    from rankcollapse.core.tasks import text_corpus

    words = collections.Counter(text_corpus().lower().split()).most_common(300)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [w for w, _ in words]
    folder = tmp_path / "bert"
    tiny("bert").save_pretrained(folder)
    transformers.BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}).save_pretrained(folder)
    tokenizer = probe.load_tokenizer(folder)
    inputs = probe.make_inputs("text", 2, 8, VOCAB, tokenizer)  # what "auto" picks here
    assert inputs.kind == "text" and inputs.source["text"] == "pydoc_data.topics"
    assert inputs.input_ids.shape == (2, 8) and bool(inputs.attention_mask.all())
    expected = tokenizer(probe.default_text()[:4000], add_special_tokens=False)["input_ids"]
    assert inputs.input_ids.flatten().tolist() == expected[:16]
    # A text shorter than the batch: the last sequence is padded, its metrics use 3 tokens.
    short = tmp_path / "short.txt"
    short.write_text("the value of the name is in the list and the", encoding="utf-8")
    assert run_cli(folder, "--text", short, "--tokens", 8, "--batch", 4, "--ablations",
                   "san,transformer", "--out", tmp_path / "b") == 0
    table = pd.read_parquet(tmp_path / "b" / "layers.parquet")
    assert sorted(table.groupby("sample").tokens.first()) == [3, 8]
    record = json.loads((tmp_path / "b" / "probe.json").read_text())
    assert record["input_source"]["padded"] == 1 and record["input_source"]["text"] == str(short)


def test_installed_entry_point_and_module(tmp_path):
    """`python -m rankcollapse.cli` in a fresh process (start-up included), and the console
    script pyproject.toml declares (run too where this environment has installed it)."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert declared == {"rankcollapse": "rankcollapse.cli:main"}
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "rankcollapse.cli", "probe", "gpt2", "--layers", "2", "--width",
         "32", "--heads", "2", "--seeds", "2", "--tokens", "6", "--batch", "2", "--ablations",
         "san", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "On this model (gpt2, random init, 2 seeds)" in proc.stdout
    assert (tmp_path / "out" / "probe.png").exists()
    script = Path(sys.executable).parent / "rankcollapse"
    if script.exists():
        help_text = subprocess.run([str(script), "probe", "--help"], capture_output=True,
                                   text=True, timeout=60)
        assert help_text.returncode == 0 and "PATH_OR_FAMILY" in help_text.stdout


@pytest.mark.slow
def test_a_non_editable_install_finds_its_registry_and_judges(tmp_path):
    """pip install (not -e) of this repository into a fresh venv, offline: the installed
    `rankcollapse probe`, run outside the repository, imports the installed package and judges
    its verdicts against the registry shipped as package data. The venv sees this environment's
    packages through a .pth file (nothing is reinstalled); the build runs on a copy of the
    sources, so no build/ or egg-info lands in the repository."""
    import importlib.util
    import site
    import sysconfig

    for needed in ("pip", "setuptools"):  # found, not imported: setuptools patches distutils
        if importlib.util.find_spec(needed) is None:
            pytest.skip(f"{needed} is not installed here")
    started = time.perf_counter()
    fresh = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True,
                   timeout=120)
    python = fresh / "bin" / "python"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME") and not k.startswith("PIP_")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_CONFIG_FILE=os.devnull,
               PIP_NO_CACHE_DIR="1", HF_HUB_OFFLINE="1")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                             text=True, check=True, env=env, timeout=60).stdout.strip()
    ours = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"],
                          sysconfig.get_paths()["platlib"]])
    Path(purelib, "rankcollapse_test_deps.pth").write_text("\n".join(ours) + "\n")
    source = tmp_path / "source"
    shutil.copytree(ROOT / "src", source / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--ignore-installed", str(source)], capture_output=True, text=True, env=env,
        cwd=tmp_path, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    elsewhere = tmp_path / "elsewhere"  # outside the repository and the sources
    elsewhere.mkdir()
    where = subprocess.run([str(python), "-c", "import rankcollapse; print(rankcollapse.__file__)"],
                           capture_output=True, text=True, env=env, cwd=elsewhere, timeout=60)
    installed = Path(where.stdout.strip()).resolve()
    assert installed.is_relative_to(fresh.resolve()), where.stdout + where.stderr
    assert (installed.parent / "claims" / "claims.yaml").is_file()
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(fresh / "bin" / "rankcollapse"), "probe", "gpt2", "--layers", "2", "--width", "64",
         "--seeds", "2", "--tokens", "16", "--batch", "4", "--out", str(out), "--quiet"],
        capture_output=True, text=True, env=env, cwd=elsewhere, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No verdicts" not in proc.stdout
    verdicts = json.loads((out / "probe.json").read_text())["verdicts"]
    assert [v["id"] for v in verdicts] == list(probe.claims_on(checkpoint=False))
    assert {v["verdict"] for v in verdicts} <= {"reproduced", "partly", "not reproduced",
                                                "not testable"}
    assert {v["verdict"] for v in verdicts} & {"reproduced", "partly", "not reproduced"}
    assert "On this model (gpt2, random init, 2 seeds)" in proc.stdout
    print(f"non-editable install and probe: {time.perf_counter() - started:.1f} s")


# ---- bad input: a clear error before any computation, --out untouched -------------------------


@pytest.fixture
def out_dir(tmp_path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (out / "probe.json").write_text("an earlier probe's\n")
    (out / "notes.txt").write_text("the user's own file\n")
    return out


def bad_inputs(checkpoints: dict, tmp: Path) -> list[tuple[str, list, list[str]]]:
    """(name, arguments, fragments of the error message)."""
    (tmp / "empty_folder").mkdir()
    opt = tmp / "opt"
    opt.mkdir()
    (opt / "config.json").write_text(json.dumps({"model_type": "opt", "vocab_size": 50}))
    (opt / "model.safetensors").write_bytes(safetensors_bytes())  # refused before it is read
    (tmp / "empty.txt").write_text("  \n")
    (tmp / "latin1.txt").write_bytes("café crème".encode("latin-1"))
    gpt2 = checkpoints["gpt2"]
    only_config = tmp / "only_config"
    only_config.mkdir()
    shutil.copy(gpt2 / "config.json", only_config)
    tensorflow = damaged(gpt2, tmp / "tensorflow", remove=["model.safetensors"],
                         write={"tf_model.h5": b"HDF"})
    weights = (gpt2 / "model.safetensors").read_bytes()
    cut_short = damaged(gpt2, tmp / "cut_short", write={"model.safetensors": weights[:-100]})
    empty_bin = damaged(gpt2, tmp / "empty_bin", remove=["model.safetensors"],
                        write={"pytorch_model.bin": b""})
    shards = {"model-00001-of-00002.safetensors": weights,
              "model.safetensors.index.json": json.dumps({"weight_map": {
                  "a": "model-00001-of-00002.safetensors",
                  "b": "model-00002-of-00002.safetensors"}}).encode()}
    missing_shard = damaged(gpt2, tmp / "missing_shard", remove=["model.safetensors"],
                            write=shards)
    no_vocabulary = damaged(gpt2, tmp / "no_vocabulary", write={"tokenizer_config.json": b"{}"})
    no_merges = damaged(gpt2, tmp / "no_merges", write={"vocab.json": b'{"a": 0}'})
    bad_json = damaged(gpt2, tmp / "bad_json", write={"tokenizer.json": b"{"})
    return [
        ("no_such_path", [tmp / "nowhere"], ["nowhere", "no such directory"]),
        ("not_a_family", ["gpt5"], ["gpt5", "not a family", "llama"]),
        ("no_config_json", [tmp / "empty_folder"], ["no config.json"]),
        ("cannot_ablate", [opt, "--ablations", "san,transformer"],
         ["['san']", "opt", "cannot ablate", "['transformer']"]),
        ("unknown_ablation", [gpt2, "--ablations", "san_skip_2021"],
         ["san_skip_2021", "gpt2", "'san', 'san_mlp'"]),
        ("empty_text", [gpt2, "--text", tmp / "empty.txt"], ["empty.txt", "empty"]),
        ("text_not_utf8", ["bert", "--text", tmp / "latin1.txt"], ["latin1.txt", "not UTF-8"]),
        ("missing_text", ["bert", "--text", tmp / "none.txt"], ["none.txt", "no such file"]),
        ("tokens_beyond_positions", ["bert", "--tokens", 600], ["--tokens 600", "512 positions"]),
        ("tokens_beyond_checkpoint", [checkpoints["llama"], "--tokens", 5000],
         ["--tokens 5000", "2048 positions"]),
        ("seeds_of_a_checkpoint", [gpt2, "--seeds", 3], ["--seeds 3", "one network"]),
        ("resizing_a_checkpoint", [gpt2, "--layers", 4], ["--layers", "checkpoint"]),
        # a family resized to nothing: torch raised a RuntimeError inside the model's build
        ("negative_width", ["gpt2", "--width", -32], ["--width -32", "must be at least 1"]),
        ("no_layers", ["llama", "--layers", 0], ["--layers 0", "must be at least 1"]),
        ("outputs_exist", [gpt2], ["already holds", "probe.json", "--force"]),
        # Every file the probe will read is checked before any is loaded.
        ("no_weights", [only_config],
         [f"{only_config}: no weights in this folder", "model.safetensors", "pytorch_model.bin"]),
        ("tensorflow_weights_only", [tensorflow],
         ["no weights", "tf_model.h5 (TensorFlow weights), which the probe does not read"]),
        ("weights_cut_short", [cut_short], [f"{cut_short / 'model.safetensors'}: cut short"]),
        ("weights_empty", [empty_bin], [f"{empty_bin / 'pytorch_model.bin'}: the file is empty"]),
        ("shard_missing", [missing_shard],
         ["model.safetensors.index.json names 2 shard(s)", "model-00002-of-00002.safetensors"]),
        ("tokenizer_without_vocabulary", [no_vocabulary],
         [f"{no_vocabulary}: its tokenizer is incomplete", "tokenizer_config.json is here but "
          "no vocabulary", "vocab.txt", "--random-ids"]),
        ("tokenizer_without_merges", [no_merges],
         ["vocab.json is here without merges.txt"]),
        ("tokenizer_json_damaged", [bad_json], [f"{bad_json / 'tokenizer.json'}",
                                                "not a readable JSON file"]),
    ]


def safetensors_bytes() -> bytes:
    """A well-formed safetensors file holding one tensor of two float32 zeros."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    return len(header).to_bytes(8, "little") + header + bytes(8)


def damaged(source: Path, folder: Path, remove=(), write=None) -> Path:
    """A copy of the checkpoint folder `source` with files removed or (over)written."""
    shutil.copytree(source, folder)
    for name in remove:
        (folder / name).unlink()
    for name, data in (write or {}).items():
        (folder / name).write_bytes(data)
    return folder


def test_every_bad_input_is_refused_with_its_message(checkpoints, tmp_path, out_dir, capsys):
    before = checksum(out_dir)
    for name, args, fragments in bad_inputs(checkpoints, tmp_path):
        assert run_cli(*args, "--out", out_dir) == 2, name
        message = capsys.readouterr().err
        assert message.startswith("rankcollapse probe: error: "), (name, message)
        for fragment in fragments:
            assert fragment in message, f"{name}: {fragment!r} not in {message!r}"
        assert checksum(out_dir) == before, name


def test_an_output_folder_that_cannot_be_created_is_refused_before_the_run(tmp_path, capsys):
    """It was a FileNotFoundError traceback after the whole probe had run."""
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder\n")
    assert run_cli("gpt2", "--out", blocker / "sub" / "out") == 2
    message = capsys.readouterr().err
    assert message == (f"rankcollapse probe: error: --out {blocker / 'sub' / 'out'}: cannot be "
                       f"created, {blocker} is a file\n")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_folder_no_one_may_create_is_refused_and_a_creatable_one_left_as_it_was(tmp_path,
                                                                                  capsys):
    """/proc refuses new folders even to root, which a permission test alone lets through."""
    assert run_cli("gpt2", "--out", "/proc/rankcollapse-test/out") == 2
    assert "--out /proc/rankcollapse-test/out: cannot be created (" in capsys.readouterr().err
    fresh = tmp_path / "new" / "deeper"
    cli._creatable(fresh)  # can be made: checked by making it, then undone
    assert not (tmp_path / "new").exists()


def test_a_family_name_is_the_family_unless_a_checkpoint_of_that_name_is_here(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpt2").mkdir()  # an earlier --out, say: no config.json
    args = cli.parser().parse_args(["probe", "gpt2", "--out", "o"])
    assert cli.checked(args)["kind"] == "gpt2" and probe.resolve("gpt2").family == "gpt2"
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "gpt2" / "model.safetensors").write_bytes(safetensors_bytes())
    assert cli.checked(args)["kind"] == "llama" and probe.resolve("gpt2").family is None


def test_text_for_a_checkpoint_without_tokenizer(checkpoints, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("some text\n")
    assert run_cli(checkpoints["gpt2"], "--text", text, "--out", tmp_path / "o") == 2
    assert "holds no tokenizer" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_the_library_checks_every_file_before_it_loads_a_model(checkpoints, tmp_path,
                                                              monkeypatch):
    """resolve, load and run (not only the command line) refuse a folder without its weights,
    and run refuses an incomplete tokenizer before a model is loaded; random ids read none."""
    gpt2 = checkpoints["gpt2"]
    no_weights = damaged(gpt2, tmp_path / "no_weights", remove=["model.safetensors"])
    for call in (lambda: probe.resolve(str(no_weights)), lambda: probe.load(no_weights)):
        with pytest.raises(CheckpointError, match="no weights in this folder"):
            call()
    target = probe.resolve(str(damaged(gpt2, tmp_path / "tok", write={
        "tokenizer_config.json": b"{}"})))
    assert target.tokenizer

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the tokenizer was checked")

    with monkeypatch.context() as patch:
        patch.setattr("rankcollapse.probe.flow.load", no_model)  # where run looks it up
        with pytest.raises(CheckpointError, match="tokenizer is incomplete"):
            probe.run(target, tokens=4, batch=1)
    result = probe.run(target, input_kind="random", tokens=4, batch=1,
                       ablations=["transformer"])
    assert result.info["input_source"]["kind"] == "random"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_cuda_without_a_gpu(checkpoints, out_dir, capsys):
    before = checksum(out_dir)
    assert run_cli(checkpoints["bert"], "--device", "cuda", "--force", "--out", out_dir) == 2
    assert "--device cuda: no GPU is visible" in capsys.readouterr().err
    assert checksum(out_dir) == before


def test_model_without_attention_is_refused(tmp_path, out_dir, capsys):
    """A state-space model returns hidden states but no attention matrices."""
    config = transformers.MambaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                      state_size=4)
    torch.manual_seed(0)
    transformers.MambaModel(config).save_pretrained(tmp_path / "mamba")
    before = checksum(out_dir)
    assert run_cli(tmp_path / "mamba", "--tokens", 4, "--batch", 1, "--force", "--out",
                   out_dir) == 2
    message = capsys.readouterr().err
    assert "mamba model returns no attention matrices" in message
    assert checksum(out_dir) == before


def test_help_and_errors_come_before_torch_is_imported():
    code = ("import sys; from rankcollapse import cli; rc = cli.main(['probe', '/no/such']); "
            "heavy = [m for m in ('torch', 'pandas', 'transformers') if m in sys.modules]; "
            "print(rc, heavy)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=60)
    assert proc.stdout.strip() == "2 []", proc.stdout + proc.stderr


def test_the_plain_tables_and_checks_work_where_torch_cannot_be_imported(tmp_path):
    """rankcollapse.probe.spec, the package's face, the command line's checks and the workflow's
    planning import and check a checkpoint folder with torch, transformers and pandas
    unimportable; the probe's other parts are imported only when used."""
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 50,
                                                    "max_position_embeddings": 512}))
    (folder / "model.safetensors").write_bytes(safetensors_bytes())
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\n")
    code = textwrap.dedent(f"""
        import sys
        for name in ("torch", "transformers", "pandas"):
            sys.modules[name] = None  # importing it raises ImportError
        from rankcollapse.probe import spec
        from rankcollapse.core import checkpoints
        from rankcollapse import cli, probe
        from rankcollapse.plan import checks
        folder = {str(folder)!r}
        assert [p.name for p in checkpoints.weight_files(
            folder, checkpoints.checkpoint_config(folder))] == ["model.safetensors"]
        assert [p.name for p in checkpoints.tokenizer_files(folder)] == ["vocab.txt"]
        args = cli.parser().parse_args(["probe", folder, "--out", {str(tmp_path / "o")!r}])
        assert cli.checked(args)["kind"] == "bert"
        assert checks.realarch({{"realarch": {{"checkpoints": {{"bert": folder}}}}}}) == []
        assert probe.ProbeError is spec.ProbeError and probe.FIRST_ID == 1000
        try:
            probe.measure
        except ImportError:
            print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_the_face_names_every_part_of_the_package():
    """Every public name a module of rankcollapse.probe defines is reachable from the package
    (what cli, realarch, the benchmarks and these tests use), and is the same object."""
    import ast
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(probe.__path__):
        if info.name == "realarch":  # E1b's module on the probe, not a part of the probe
            continue
        module = importlib.import_module(f"rankcollapse.probe.{info.name}")
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
        names += [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                  if isinstance(t, ast.Name)]
        for name in (n for n in names if not n.startswith("_")):
            assert name in dir(probe), f"{info.name}.{name}"
            assert getattr(probe, name) is getattr(module, name), f"{info.name}.{name}"
    assert probe.max_positions is importlib.import_module("rankcollapse.probe.models") \
        .max_positions
    from rankcollapse.core.model import DTYPES
    from rankcollapse.experiments import init_sweep
    from rankcollapse.probe import realarch

    assert probe.DTYPES is DTYPES and realarch.DTYPES is DTYPES and init_sweep.DTYPES is DTYPES


# ---- the library: metrics, masks, wrappers ----------------------------------------------------


@pytest.mark.parametrize("family", probe.FAMILIES)
def test_metrics_equal_the_library_on_the_models_own_states(family):
    """The unmodified model's table equals rankcollapse.core.metrics on the hidden states and
    attentions the model itself returns (output_hidden_states / output_attentions)."""
    net = tiny(family)
    ids = probe.random_ids(3, 7, VOCAB, seed=0, low=1)
    with probe.one_thread():  # both forward passes alike (the thread count can change GEMMs)
        table = probe.measure(net, family, ids, spectrum_sequences=None)
        with torch.no_grad():
            out = net(input_ids=ids, output_hidden_states=True, output_attentions=True,
                      **({"use_cache": False} if probe.ARCHS[family].causal else {}))
    causal = probe.ARCHS[family].causal
    # Decoders return their last hidden state after the final norm: compare the others.
    layers = range(len(out.hidden_states) - (1 if causal else 0))
    for layer in layers:
        A = out.attentions[layer - 1].double() if layer else None
        expected = M.layer_metrics(out.hidden_states[layer].double(), A)
        got = table[table.layer == layer].sort_values("sample")
        for metric in probe.METRICS:
            np.testing.assert_allclose(got[metric].to_numpy(), expected[metric].numpy(),
                                       rtol=1e-9, atol=1e-12, err_msg=f"{metric}, {layer}")


def test_causal_lambda2_is_the_library_spectrum_of_a_triangular_matrix():
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(4, 3, 9, 9, generator=gen, dtype=torch.float64)
    A = torch.softmax(scores.masked_fill(torch.ones(9, 9).triu(1).bool(), -torch.inf), -1)
    torch.testing.assert_close(probe.causal_lambda2(A), M.attention_spectrum(A), rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("family", probe.FAMILIES)
def test_a_padded_batch_gives_the_unpadded_numbers(family):
    net = tiny(family)
    ids = probe.random_ids(3, 9, VOCAB, seed=1, low=1)
    mask = torch.ones_like(ids)
    lengths = [9, 5, 2]
    for row, n in enumerate(lengths):
        mask[row, n:] = 0
        ids[row, n:] = 0  # whatever a pad id is, it must not matter
    ablations = spec.PROBE_ABLATIONS[family]
    padded = probe.measure(net, family, ids, mask, ablations, spectrum_sequences=None)
    for row, n in enumerate(lengths):
        alone = probe.measure(net, family, ids[row:row + 1, :n], None, ablations,
                              spectrum_sequences=None)
        got = padded[padded["sample"] == row].drop(columns="sample").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, alone.drop(columns="sample"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "mistral", "qwen2"])
def test_decoder_wrapper_with_every_path_kept_is_the_layer(kind):
    if kind in probe.FAMILIES:
        net = tiny(kind)
    else:
        config_class = {"mistral": transformers.MistralConfig, "qwen2": transformers.Qwen2Config}
        config = config_class[kind](vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                    num_hidden_layers=2, num_attention_heads=2,
                                    num_key_value_heads=2, attn_implementation="eager")
        torch.manual_seed(0)
        net = transformers.AutoModel.from_config(config).eval()
    ids = probe.random_ids(2, 6, VOCAB, seed=0, low=1)
    reference = probe.hidden_states(net, kind, ids)
    wrapped = probe.ablate(net, kind, "transformer")
    layers = wrapped.h if kind == "gpt2" else wrapped.layers
    wrapper = probe.GPT2BlockAblated if kind == "gpt2" else probe.LlamaLayerAblated
    for i, layer in enumerate(layers):
        layers[i] = wrapper(layer, skip=True, ffn=True)
    for ours, theirs in zip(probe.hidden_states(wrapped, kind, ids), reference, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    assert len(probe.measure(net, kind, ids, ablations=["san"])) == 2 * 3  # ablatable


@pytest.mark.parametrize("family", ["bert", "albert", "xlnet"])
def test_encoder_wrappers_with_the_skip_kept_are_the_modules(family):
    net = tiny(family)
    ids = probe.random_ids(2, 6, VOCAB, seed=0, low=1)
    reference = probe.hidden_states(net, family, ids)
    ablated = probe.ablate(net, family, "transformer")
    for layer in probe.ARCHS[family].layers(ablated):
        if family == "bert":
            layer.attention.output = probe.BertSelfOutputAblated(layer.attention.output, True)
        elif family == "albert":
            layer.attention = probe.AlbertAttentionAblated(layer.attention, True)
        else:
            layer.rel_attn = probe.XLNetAttentionAblated(layer.rel_attn, True)
    for ours, theirs in zip(probe.hidden_states(ablated, family, ids), reference, strict=True):
        torch.testing.assert_close(ours, theirs)


def test_centre_subtracts_the_mean_of_real_tokens_and_the_prefix_mean_when_causal():
    y = torch.randn(2, 5, 3, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]).bool()
    token = probe._TOKEN_MASK.set(mask)
    try:
        centred = probe.centre(y, causal=False)
        prefix = probe.centre(y, causal=True)
    finally:
        probe._TOKEN_MASK.reset(token)
    torch.testing.assert_close(centred[1, :3].mean(0), torch.zeros(3, dtype=torch.float64))
    torch.testing.assert_close(centred[0].mean(0), torch.zeros(3, dtype=torch.float64))
    torch.testing.assert_close(prefix[1, 2], y[1, 2] - y[1, :3].mean(0))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_de_escalated_decoders_stay_causal(family):
    net = probe.ablate(tiny(family), family, "transformer_deesc")
    ids = probe.random_ids(1, 6, VOCAB, seed=0, low=1)
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 7) % VOCAB
    a, b = probe.hidden_states(net, family, ids), probe.hidden_states(net, family, changed)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x[:, :-1], y[:, :-1])
        assert not torch.equal(x[:, -1], y[:, -1]) or x is a[0]


def test_family_positions_match_the_base_configs():
    for family in probe.FAMILIES:
        assert probe.max_positions(probe.base_config(family)) == \
            spec.PROBE_FAMILY_POSITIONS[family], family


# ---- E1b on the probe: the same numbers as before the move ------------------------------------


def test_e1b_table_is_identical_to_the_code_before_the_probe():
    """tests/data/e1b_reference.parquet was written by the pre-probe code (commit b6a4f95) with
    tests/data/make_e1b_reference.py on a 2-core AMD EPYC; today's realarch (on the probe) must
    give it: the same rows and identities, every number to float32's rounding. Not bit for bit:
    another CPU's BLAS kernels round float32 sums differently (an Intel Xeon gave residuals 8e-8
    away, 2026-12-06), and these residuals are ratios of at most about 1."""
    sys.path.insert(0, str(ROOT / "tests" / "data"))
    try:
        import make_e1b_reference as reference
    finally:
        sys.path.pop(0)
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        new = pd.concat([reference.table(m) for m in ("bert", "albert", "xlnet")],
                        ignore_index=True)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    old = pd.read_parquet(ROOT / "tests" / "data" / "e1b_reference.parquet")
    floats = [c for c in old.columns if old[c].dtype.kind == "f"]
    pd.testing.assert_frame_equal(new.drop(columns=floats), old.drop(columns=floats),
                                  check_exact=True)
    pd.testing.assert_frame_equal(new[floats], old[floats], check_exact=False, rtol=0, atol=1e-6)
