"""The probe's inputs: windows of a text (the checkpoint's tokenizer, or words numbered by
first appearance without one; a short last window padded on the right) or random token ids.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from rankcollapse.core.checkpoints import WORD_PATTERN, tokenizer_files
from rankcollapse.probe.spec import FIRST_ID, ProbeError


def first_id(vocab_size: int) -> int:
    """The lowest id random inputs use: FIRST_ID (clear of special tokens) in a large
    vocabulary, 1 (clear of a padding id 0) in a tiny one."""
    return FIRST_ID if vocab_size > 2 * FIRST_ID else 1


def random_ids(batch: int, tokens: int, vocab_size: int, seed: int,
               low: int = FIRST_ID) -> Tensor:
    """(batch, tokens) token ids uniform in [low, vocab_size), from their own generator."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(low, vocab_size, (batch, tokens), generator=gen)


def word_ids(text: str, vocab_size: int, low: int = FIRST_ID) -> list[int]:
    """Ids of `text` split into words and punctuation, numbered by first appearance from `low`.

    For a model without its tokenizer at random initialisation: its embedding rows are i.i.d.,
    so which id a word gets does not matter, only which tokens repeat.
    """
    words = re.findall(WORD_PATTERN, text)
    vocab: dict[str, int] = {}
    ids = [vocab.setdefault(w, low + len(vocab)) for w in words]
    if low + len(vocab) > vocab_size:
        raise ProbeError(f"the text has {len(vocab)} distinct words, more than the model's "
                         f"vocabulary ({vocab_size} ids from {low}) can number apart")
    return ids


def text_windows(ids: Sequence[int], batch: int, tokens: int,
                 pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """Up to `batch` consecutive windows of `tokens` ids; a last, shorter window (at least 2
    ids) is padded on the right. Returns input_ids and attention_mask (1 on real tokens)."""
    ids = list(ids)
    windows = [ids[i:i + tokens] for i in range(0, len(ids), tokens)][:batch]
    windows = [w for w in windows if len(w) >= 2]
    if not windows:
        raise ProbeError(f"the text gives {len(ids)} token(s); the probe needs at least 2")
    input_ids = torch.full((len(windows), tokens), pad_id, dtype=torch.long)
    mask = torch.zeros((len(windows), tokens), dtype=torch.long)
    for row, window in enumerate(windows):
        input_ids[row, :len(window)] = torch.tensor(window)
        mask[row, :len(window)] = 1
    return input_ids, mask


def tokenize(tokenizer, text: str, need: int) -> list[int]:
    """The tokenizer's ids of `text`, no special tokens added; only a prefix of a long text is
    tokenised when it gives more than `need` ids."""
    chars = max(need * 12, 4096)
    ids = tokenizer(text[:chars], add_special_tokens=False, verbose=False)["input_ids"]
    if len(ids) <= need and chars < len(text):
        ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    return ids[:need]


def load_tokenizer(path: str | Path):
    """The tokenizer saved in a checkpoint folder, or None when it holds none. Its files are
    checked first (core.checkpoints.tokenizer_files): CheckpointError naming the folder when they
    are incomplete, ProbeError when the tokenizer cannot be loaded."""
    if not tokenizer_files(path):
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ProbeError(f"{path}: its tokenizer cannot be loaded ({type(err).__name__}: "
                         f"{err}); fix its files, or use --random-ids") from err


def default_text() -> str:
    """The standard library's pydoc_data.topics (the Python reference manual's topics)."""
    from rankcollapse.core.tasks import text_corpus

    return text_corpus()


@dataclass
class Inputs:
    """What the model reads: ids (B, n), the real-token mask, and where they come from."""

    input_ids: Tensor
    attention_mask: Tensor  # (B, n), 1 on real tokens
    kind: str  # "text" or "random"
    description: str  # one line, for the terminal, the figure and probe.json
    source: dict


def make_inputs(kind: str, batch: int, tokens: int, vocab_size: int, tokenizer=None,
                text: str | None = None, text_name: str = "pydoc_data.topics",
                seed: int = 0) -> Inputs:
    """The probe's inputs: `batch` windows of `tokens` ids of `text` (the model's tokenizer, or
    words numbered by first appearance without one; a short text gives fewer, the last one
    padded), or random ids."""
    if kind == "random":
        low = first_id(vocab_size)
        ids = random_ids(batch, tokens, vocab_size, seed, low)
        return Inputs(ids, torch.ones_like(ids), "random",
                      f"{batch} × {tokens} random token ids", {
                          "kind": "random", "seed": seed, "low": low, "high": vocab_size})
    if kind != "text":
        raise ProbeError(f"input {kind!r}: allowed inputs are 'text', 'random'")
    text = default_text() if text is None else text
    if tokenizer is not None:
        ids = tokenize(tokenizer, text, batch * tokens)
        how = f"{type(tokenizer).__name__}"
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    else:
        ids = word_ids(text, vocab_size, first_id(vocab_size))[:batch * tokens]
        how = "words numbered by first appearance (no tokenizer)"
        pad = 0
    if ids and max(ids) >= vocab_size:
        raise ProbeError(f"the tokenizer gives id {max(ids)}, beyond the model's vocabulary "
                         f"of {vocab_size}")
    input_ids, mask = text_windows(ids, batch, tokens, pad)
    real = int(mask.sum())
    padded = int((mask.sum(-1) < tokens).sum())
    return Inputs(input_ids, mask, "text",
                  f"{len(input_ids)} × {tokens} tokens of {text_name} ({how})"
                  + (f"; {padded} sequence(s) padded, {real} real tokens" if padded else ""),
                  {"kind": "text", "text": text_name, "tokenizer": how,
                   "sequences": len(input_ids), "real_tokens": real, "padded": padded})
