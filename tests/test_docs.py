"""The README and docs/ name only what exists: every project path and every `rankcollapse.*`
module (or name in one) they mention, in code spans and in code blocks."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "rankcollapse"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Made by a run, never tracked: a path under these is an output the docs describe.
# report/ holds the built reports beside its tracked templates/.
GENERATED = ("results/", "report/", ".venv/", ".snakemake/")
# A run's own files and folders (a job's tables, a merged arm's folder L2-8/).
RUN_OUTPUT = re.compile(r"[\w-]+\.(parquet|pt|tsv|log)|L\d+(-\d+)*/")
# Files of a Hugging Face checkpoint folder (docs/probe.md says which the probe reads) and the
# probe's own output: not files of this project.
CHECKPOINT_FILES = {"config.json", "tokenizer.json", "vocab.json", "merges.txt", "vocab.txt",
                    "model.safetensors.index.json", "pytorch_model.bin.index.json",
                    "probe.json"}
# docs/adding-an-experiment.md walks through adding a hypothetical experiment E8.
HYPOTHETICAL = re.compile(r"\b[eE]8\b|_E8_")
SUFFIXES = r"\.(py|md|yaml|yml|smk|ipynb|toml|json|txt|cfg|tsv|parquet|sh)$"


TOP = {p.name for p in ROOT.iterdir()} | {"results", "report"}


def _code(text: str) -> list[str]:
    """The tokens of the code blocks and code spans of a Markdown text."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    rest = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    spans = re.findall(r"`([^`\n]+)`", rest)
    return [tok for chunk in [*blocks, *spans] for tok in chunk.split()]


def _named(doc: Path) -> tuple[set[str], set[str]]:
    """(paths, modules) named in one document; a placeholder (<name>, {task}, E8) is no name."""
    paths, modules = set(), set()
    for tok in _code(doc.read_text()):
        tok = tok.strip("(),;:'\"*").removeprefix("../")
        if re.fullmatch(r"rankcollapse(\.\w+)+", tok):
            modules.add(tok)
        elif (re.fullmatch(r"[\w.\-/]+", tok) and not tok.startswith(("-", "/", "./"))
              and (re.search(SUFFIXES, tok) or tok.endswith("/")
                   or tok.split("/")[0] in TOP and "/" in tok)):
            paths.add(tok)
    return paths, modules


UNTRACKED = {".venv", ".git", ".snakemake", "results", "report", "__pycache__"}
TRACKED = {p.name for p in ROOT.rglob("*") if not UNTRACKED & set(p.relative_to(ROOT).parts)}


def _exists(path: str) -> bool:
    if path.startswith("report/templates/"):
        return (ROOT / path).exists()
    if (path.startswith(GENERATED) or path in CHECKPOINT_FILES or HYPOTHETICAL.search(path)
            or RUN_OUTPUT.fullmatch(path)):
        return True
    if "/" not in path.rstrip("/"):  # a bare file name: a file of the project somewhere
        return path.rstrip("/") in TRACKED
    bases = [ROOT, PACKAGE, *[p for p in PACKAGE.iterdir() if p.is_dir()]]
    return any((base / path).exists() for base in bases)


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_a_doc_names_exists(doc):
    paths, _ = _named(doc)
    missing = sorted(p for p in paths if not _exists(p))
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_module_a_doc_names_imports(doc):
    _, modules = _named(doc)
    missing = sorted(m for m in modules if not _resolves(m))
    assert not missing, f"{doc.relative_to(ROOT)} names modules or names that do not exist: " \
        f"{missing}"


def test_the_check_catches_a_stale_name(tmp_path):
    doc = tmp_path / "stale.md"
    doc.write_text("Run `workflow/rules/e9_gone.smk`; see `rankcollapse.plan.no_such_module`"
                   " and\n```bash\nsnakemake --configfile workflow/config/ci.yaml\n```\n")
    paths, modules = _named(doc)
    assert paths == {"workflow/rules/e9_gone.smk", "workflow/config/ci.yaml"}
    assert [p for p in paths if not _exists(p)] == ["workflow/rules/e9_gone.smk"]
    assert modules == {"rankcollapse.plan.no_such_module"}
    assert not _resolves("rankcollapse.plan.no_such_module")
    assert _resolves("rankcollapse.plan.experiments.REGISTRY")
