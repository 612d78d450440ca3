"""A checkpoint folder's files, checked before any is loaded: its config.json, the weights
AutoModel.from_pretrained will read (present, readable, not cut short) and its tokenizer; and
the texts that ship with scikit-learn. Torch-free plain tables and checks: the workflow's
planning (rankcollapse.plan) checks E1b's checkpoints with them while Snakemake parses the
Snakefile, and the probe (rankcollapse.probe) before it loads a model. docs/probe.md says which
files a checkpoint must hold.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

# The config.json keys that bound a model's sequence length, in the order they are read.
POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx")
# Files whose presence in a checkpoint folder means it carries its tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json",
                   "spiece.model", "tokenizer.model")
# A tokenizer's vocabulary: one of these sets of files, complete. Without one, transformers
# builds an empty tokenizer (every word the unknown token) and says nothing.
TOKENIZER_VOCABULARIES = (("tokenizer.json",), ("vocab.txt",), ("vocab.json", "merges.txt"),
                          ("spiece.model",), ("tokenizer.model",), ("sentencepiece.bpe.model",))
# The weights AutoModel.from_pretrained reads from a folder, the first one present (a
# config.json's transformers_weights names another).
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
OTHER_WEIGHTS = {"tf_model.h5": "TensorFlow", "flax_model.msgpack": "Flax"}  # not read
# How the probe (and E1b's text input) splits a text into tokens: words and punctuation marks.
WORD_PATTERN = r"\w+|[^\w\s]"


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be read as one, said before anything is loaded: the
    message names the file and what is wrong."""


def checkpoint_config(path) -> dict:
    """The config.json of a checkpoint folder (what `save_pretrained` writes: config.json and
    the weights); CheckpointError naming the problem when the folder does not exist, is not a
    folder, or holds no readable config.json with a model_type."""
    path = Path(path).expanduser()
    if not path.exists():
        raise CheckpointError(f"{path}: no such directory")
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a directory (a checkpoint is a folder holding "
                         "config.json and the weights)")
    config = path / "config.json"
    if not config.is_file():
        raise CheckpointError(f"{path}: no config.json in this folder (a checkpoint folder holds "
                         "config.json and the weights, as save_pretrained writes them)")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{config}: not a readable JSON file ({err})") from err
    if not isinstance(data, dict) or not data.get("model_type"):
        raise CheckpointError(f"{config}: no model_type in it (not a Hugging Face config)")
    return data


def weight_files(path, config: dict) -> list[Path]:
    """The weight files AutoModel.from_pretrained will read from the checkpoint folder `path`
    (config: its config.json), each checked: present, readable, and not cut short (a
    safetensors file as long as its header says, a zip archive's directory intact). CheckpointError
    naming the file and what is wrong otherwise."""
    path = Path(path).expanduser()
    explicit = config.get("transformers_weights")
    if explicit:
        chosen = path / str(explicit)
        if not chosen.is_file():
            raise CheckpointError(f"{path}: config.json names the weights {explicit} "
                             "(transformers_weights), which is not in this folder")
    else:
        chosen = next((path / name for name in WEIGHT_FILES if (path / name).is_file()), None)
    if chosen is None:
        others = [f"{name} ({kind} weights)" for name, kind in OTHER_WEIGHTS.items()
                  if (path / name).exists()]
        raise CheckpointError(f"{path}: no weights in this folder: none of "
                         f"{', '.join(WEIGHT_FILES)}"
                         + (f"; it holds {', '.join(others)}, which the probe does not read"
                            if others else "")
                         + " (a checkpoint folder holds config.json and the weights, as "
                         "save_pretrained writes them)")
    if not chosen.name.endswith(".index.json"):
        _check_weights(chosen)
        return [chosen]
    index = _read_json(chosen, "the index of the weights' shards")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{chosen}: no weight_map in it (not an index of weight shards)")
    shards = [path / name for name in sorted(set(map(str, weight_map.values())))]
    missing = [p.name for p in shards if not p.is_file()]
    if missing:
        raise CheckpointError(f"{path}: {chosen.name} names {len(shards)} shard(s), of which "
                         f"{len(missing)} are not in this folder: {', '.join(missing[:5])}"
                         + (" ..." if len(missing) > 5 else ""))
    for shard in shards:
        _check_weights(shard)
    return [chosen, *shards]


def has_tokenizer(path) -> bool:
    """Whether a checkpoint folder carries a tokenizer (any of TOKENIZER_FILES)."""
    path = Path(path).expanduser()
    return any((path / name).exists() for name in TOKENIZER_FILES)


def tokenizer_files(path) -> list[Path]:
    """The tokenizer files of a checkpoint folder that carries one ([] when it carries none),
    checked before the probe reads a text with it: a complete vocabulary among
    TOKENIZER_VOCABULARIES, and every tokenizer file readable. CheckpointError naming what is
    missing otherwise."""
    path = Path(path).expanduser()
    if not has_tokenizer(path):
        return []
    names = dict.fromkeys((*TOKENIZER_FILES, "special_tokens_map.json", "merges.txt",
                           "sentencepiece.bpe.model"))
    present = [path / name for name in names if (path / name).exists()]
    if not any(all((path / name).is_file() for name in group)
               for group in TOKENIZER_VOCABULARIES):
        here = lambda group: [n for n in group if (path / n).is_file()]  # noqa: E731
        partial = [g for g in TOKENIZER_VOCABULARIES if len(g) > 1 and here(g)]
        missing = "; ".join(f"{' and '.join(here(g))} is here without "
                            f"{' and '.join(n for n in g if n not in here(g))}"
                            for g in partial) or \
            f"{' and '.join(p.name for p in present)} {'is' if len(present) == 1 else 'are'} " \
            "here but no vocabulary"
        groups = [" with ".join(g) for g in TOKENIZER_VOCABULARIES]
        raise CheckpointError(f"{path}: its tokenizer is incomplete: {missing} (a vocabulary is "
                         f"{', '.join(groups[:-1])} or {groups[-1]}); add the tokenizer's "
                         "files, or use --random-ids")
    for file in present:
        if file.suffix == ".json":
            _read_json(file, "a tokenizer file")
        else:
            _first_bytes(file, "a tokenizer file")
    return present


def _first_bytes(file: Path, what: str, count: int = 8) -> bytes:
    """The first bytes of a file; CheckpointError when it is not a readable, non-empty file."""
    if not file.is_file():
        raise CheckpointError(f"{file}: not a file ({what})")
    try:
        with file.open("rb") as handle:
            head = handle.read(count)
    except OSError as err:
        raise CheckpointError(f"{file}: cannot be read ({err.strerror or err})") from err
    if not head:
        raise CheckpointError(f"{file}: the file is empty ({what})")
    return head


def _read_json(file: Path, what: str):
    _first_bytes(file, what)
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{file}: not a readable JSON file ({what}: {err})") from err


def _check_weights(file: Path) -> None:
    """A weights file that can be read to its end: safetensors as long as its header says; a
    zip archive (torch.save's format) with its directory intact."""
    head = _first_bytes(file, "the model's weights")
    size = file.stat().st_size
    if file.suffix == ".safetensors":
        if len(head) < 8:
            raise CheckpointError(f"{file}: not a safetensors file ({size} bytes; cut short?)")
        n = int.from_bytes(head, "little")
        if n > 100_000_000:  # the format's own limit on its header
            raise CheckpointError(f"{file}: not a safetensors file (its header would be {n:,} "
                             "bytes long)")
        if n > size - 8:
            raise CheckpointError(f"{file}: not a safetensors file, or cut short: its header "
                             f"length ({n:,} bytes) exceeds the file ({size:,} bytes)")
        try:
            with file.open("rb") as handle:
                handle.seek(8)
                header = json.loads(handle.read(n))
            end = max((int(t["data_offsets"][1]) for k, t in header.items()
                       if k != "__metadata__"), default=0)
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, IndexError,
                AttributeError) as err:
            raise CheckpointError(f"{file}: not a safetensors file (its header cannot be read: "
                             f"{err})") from err
        if 8 + n + end > size:
            raise CheckpointError(f"{file}: cut short: {size:,} bytes, its header describes "
                             f"{8 + n + end:,} (copy or download it again)")
    elif head[:2] == b"PK":  # torch.save's zip archive: its directory sits at the end
        try:
            zipfile.ZipFile(file).close()
        except (OSError, zipfile.BadZipFile) as err:
            raise CheckpointError(f"{file}: a damaged or cut-short archive ({err}; copy or "
                             "download it again)") from err


def max_positions(config: dict) -> int | None:
    """The longest sequence a model with this config.json accepts (None: no absolute limit,
    e.g. XLNet's relative positions)."""
    for key in POSITION_KEYS:
        if isinstance(config.get(key), int) and config[key] > 0:
            return config[key]
    return None


def package_text() -> str:
    """English prose that ships with scikit-learn: its bundled data sets' descriptions (E1b's
    text input). Found without importing scikit-learn, so the config checks can count it."""
    import importlib.util

    root = Path(importlib.util.find_spec("sklearn").submodule_search_locations[0])
    descr = root / "datasets" / "descr"
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(descr.glob("*.rst")))
