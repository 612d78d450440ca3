"""Training tasks: seeded, offline, with fixed train/test splits (`TaskData`, `TaskSpec`, `TASKS`),
so that every model of a grid sees the same examples. Adding a task: docs/model.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

# torch is imported inside the functions that build data: the workflow's planning code
# (config.py, trainplan.py) reads TASKS and task_spec while Snakemake parses the workflow, in
# every snakemake process (each SLURM job runs one), and importing torch costs about 1.5 s of CPU.
if TYPE_CHECKING:
    from torch import Tensor

Inputs = Literal["features", "tokens"]  # continuous vectors (Linear embedding) or integer ids
Readout = Literal["class_token", "per_token"]  # one label per sequence, or one per token


@dataclass(frozen=True)
class TaskSpec:
    """What a task model must be built for; saved with every checkpoint."""

    name: str
    inputs: Inputs
    input_dim: int  # features per token ("features") or vocabulary size ("tokens")
    tokens: int  # sequence length n of the input (without a class token)
    classes: int  # output classes per label
    readout: Readout
    causal: bool = False  # a language model: attention is causal (lower-triangular)

    @property
    def chance(self) -> float:
        """Accuracy of guessing uniformly."""
        return 1.0 / self.classes


@dataclass(frozen=True)
class TaskData:
    spec: TaskSpec
    x_train: Tensor  # (N, n, input_dim) float32 or (N, n) int64
    y_train: Tensor  # (N,) or (N, n) int64
    x_test: Tensor
    y_test: Tensor
    # A validation split for choosing optimiser settings (tuning.py); None: the task has none.
    x_val: Tensor | None = None
    y_val: Tensor | None = None


def _split(n: int, test_fraction: float, data_seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(data_seed).permutation(n)
    n_test = max(1, round(test_fraction * n))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


DIGIT_FEATURES = ("centred", "raw", "standardised")


def digits(patch: int = 2, test_fraction: float = 0.2, data_seed: int = 0,
           val_fraction: float = 0.1, features: str = "centred") -> TaskData:
    """scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes, no download).

    Each image is cut into (8/patch)^2 non-overlapping patch x patch squares, read row by row;
    each square's pixels (scaled to [0, 1]) are one token, as in a ViT. A class token is added
    by the model. Returns a fixed split drawn with `data_seed`: test, then a validation split
    of `val_fraction` of the rest (carved from the training images).

    features: "raw" pixels leave about a quarter of the 2x2 patches blank, i.e. tokens whose
    embedding is exactly zero (the patch embedding has no bias), which differ only by their
    small positional vectors: token similarity high for a reason of the data. "centred"
    (default) subtracts the per-pixel mean of the training images, so no patch is zero;
    "standardised" also divides by the per-pixel standard deviation (constant pixels left at 0).
    """
    import torch
    from sklearn.datasets import load_digits

    if 8 % patch:
        raise ValueError(f"digits.patch={patch}: must divide 8 (allowed: 1, 2, 4, 8)")
    if features not in DIGIT_FEATURES:
        raise ValueError(f"digits.features={features!r}: allowed values are "
                         f"{list(DIGIT_FEATURES)}")
    bunch = load_digits()
    images = torch.tensor(bunch.images, dtype=torch.float32) / 16.0  # (N, 8, 8)
    side = 8 // patch
    # (N, side, patch, side, patch) -> (N, side, side, patch, patch) -> (N, side^2, patch^2)
    x = images.view(-1, side, patch, side, patch).permute(0, 1, 3, 2, 4).reshape(
        -1, side * side, patch * patch)
    y = torch.tensor(bunch.target, dtype=torch.int64)
    train, test = _split(len(y), test_fraction, data_seed)
    if val_fraction > 0:
        inner_train, inner_val = _split(len(train), val_fraction, data_seed + 1)
        train, val = train[inner_train], train[inner_val]
    else:
        val = None
    if features != "raw":
        # Statistics of the training images only: val and test never inform the inputs.
        mean = x[train].mean(dim=0, keepdim=True)  # (1, tokens, pixels)
        x = x - mean
        if features == "standardised":
            sd = x[train].std(dim=0, keepdim=True)
            x = torch.where(sd > 0, x / sd.clamp_min(1e-12), torch.zeros_like(x))
    spec = TaskSpec("digits", "features", patch * patch, side * side, 10, "class_token")
    return TaskData(spec, x[train], y[train], x[test], y[test],
                    *((x[val], y[val]) if val is not None else (None, None)))


def text_corpus() -> str:
    """The Python reference manual's topic texts that ship with the standard library
    (`pydoc_data.topics`, about 465 KB of English prose and code), topics in sorted order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


def text_vocabulary() -> list[str]:
    """The characters of the corpus, sorted: a character-level vocabulary."""
    return sorted(set(text_corpus()))


def text_blocks(size: int, val_fraction: float = 0.05,
                test_fraction: float = 0.05) -> tuple[int, int, int]:
    """Characters of the train, validation and test blocks of a corpus of `size` characters
    (`text`'s split; torch-free, so the config checks size the blocks before any job)."""
    n_val, n_test = round(val_fraction * size), round(test_fraction * size)
    return size - n_val - n_test, n_val, n_test


def text_windows(block: int, length: int) -> int:
    """Non-overlapping windows of `length` + 1 characters (inputs and their next characters)
    in a block of `block` characters: the sequences `text` cuts from it."""
    return max(0, (block - 1) // length)


def text(length: int = 32, eval_windows: int = 256, val_fraction: float = 0.05,
         test_fraction: float = 0.05) -> TaskData:
    """Causal character-level language modelling of `text_corpus()`.

    The corpus is cut into three contiguous blocks, train / validation / test (90 / 5 / 5 by
    default, in that order); each block into non-overlapping windows of `length` + 1
    characters: the input is the first `length`, the label of position i the character after
    it. Validation and test keep the first `eval_windows` windows of their blocks. Metric: bits
    per character = test cross-entropy / ln 2. The split is fixed (no seed).
    """
    import torch

    corpus = text_corpus()
    vocab = {c: i for i, c in enumerate(sorted(set(corpus)))}
    ids = torch.tensor([vocab[c] for c in corpus], dtype=torch.int64)
    n_train, n_val, _ = text_blocks(len(ids), val_fraction, test_fraction)
    blocks = ids[:n_train], ids[n_train:n_train + n_val], ids[n_train + n_val:]

    def windows(block: Tensor, limit: int | None = None) -> tuple[Tensor, Tensor]:
        count = text_windows(len(block), length)
        if limit is not None:
            count = min(count, limit)
        w = block[:count * length + 1]
        x = w[:-1].view(count, length)
        y = w[1:].view(count, length)  # w is contiguous: y[i, j] = w[i * length + j + 1]
        return x, y

    (x_tr, y_tr), (x_va, y_va), (x_te, y_te) = (windows(blocks[0]),
                                                windows(blocks[1], eval_windows),
                                                windows(blocks[2], eval_windows))
    spec = TaskSpec("text", "tokens", len(vocab), length, len(vocab), "per_token", causal=True)
    return TaskData(spec, x_tr, y_tr, x_te, y_te, x_va, y_va)


def sorting(vocab: int = 10, length: int = 8, train_size: int = 8000, test_size: int = 1000,
            data_seed: int = 0) -> TaskData:
    """Sort a sequence of `length` integers in [0, vocab): the label of token i is the i-th
    smallest input. One label per token; chance accuracy 1/vocab (Dong et al.'s setting:
    vocab 10, length 8). Train and test sequences are drawn once from `data_seed`.
    """
    import torch

    gen = torch.Generator().manual_seed(data_seed)
    x = torch.randint(0, vocab, (train_size + test_size, length), generator=gen)
    y = x.sort(dim=-1).values
    spec = TaskSpec("sorting", "tokens", vocab, length, vocab, "per_token")
    return TaskData(spec, x[:train_size], y[:train_size], x[train_size:], y[train_size:])


def memorisation(vocab: int = 16, length: int = 8, train_size: int = 512, test_size: int = 256,
                 data_seed: int = 0) -> TaskData:
    """Memorise a random binary label for every token of `train_size` random sequences.

    Tokens are drawn uniformly from [0, vocab); each position of each sequence gets its own random
    label in {0, 1}, so a label can only be told from the whole sequence (Dong et al.'s
    memorisation task, chance 0.5). The task is to fit the training set: the "test" set is its
    first `test_size` sequences (a fixed subset of what is memorised), not new data.
    """
    import torch

    if test_size > train_size:
        raise ValueError(f"memorisation.test_size={test_size} exceeds train_size={train_size}: "
                         "the test sequences are a subset of the memorised ones")
    gen = torch.Generator().manual_seed(data_seed)
    x = torch.randint(0, vocab, (train_size, length), generator=gen)
    y = torch.randint(0, 2, (train_size, length), generator=gen)
    spec = TaskSpec("memorisation", "tokens", vocab, length, 2, "per_token")
    return TaskData(spec, x, y, x[:test_size], y[:test_size])


def hull(points: int = 10, train_size: int = 4000, test_size: int = 500,
         data_seed: int = 0) -> TaskData:
    """Convex hull of `points` uniform points in the unit square: the label of each point is 1
    when it is a vertex of the set's convex hull, else 0 (Dong et al.'s convex-hull task,
    10 points; about half the points are vertices). Inputs are the 2-D coordinates.
    """
    import torch
    from scipy.spatial import ConvexHull

    if points < 3:
        raise ValueError(f"hull.points={points}: a 2-D hull needs at least 3 points")
    rng = np.random.default_rng(data_seed)
    x = rng.random((train_size + test_size, points, 2))
    y = np.zeros((train_size + test_size, points), dtype=np.int64)
    for i, cloud in enumerate(x):
        y[i, ConvexHull(cloud).vertices] = 1
    x, y = torch.tensor(x, dtype=torch.float32), torch.from_numpy(y)
    spec = TaskSpec("hull", "features", 2, points, 2, "per_token")
    return TaskData(spec, x[:train_size], y[:train_size], x[train_size:], y[train_size:])


TASKS: dict[str, Callable[..., TaskData]] = {
    "digits": digits, "sorting": sorting, "memorisation": memorisation, "hull": hull,
    "text": text,
}


def task_spec(name: str, **options) -> TaskSpec:
    """The TaskSpec of task `name` with `options`, without building its data: the sizes that
    plan a model (memory per ensemble member) before any job runs."""
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}; allowed: {sorted(TASKS)}")
    import inspect

    defaults = {k: p.default for k, p in inspect.signature(TASKS[name]).parameters.items()}
    o = {**defaults, **options}
    if name == "digits":
        side = 8 // o["patch"]
        return TaskSpec("digits", "features", o["patch"] ** 2, side * side, 10, "class_token")
    if name == "sorting":
        return TaskSpec("sorting", "tokens", o["vocab"], o["length"], o["vocab"], "per_token")
    if name == "memorisation":
        return TaskSpec("memorisation", "tokens", o["vocab"], o["length"], 2, "per_token")
    if name == "text":
        vocab = len(text_vocabulary())
        return TaskSpec("text", "tokens", vocab, o["length"], vocab, "per_token", causal=True)
    return TaskSpec("hull", "features", 2, o["points"], 2, "per_token")


DIGITS_IMAGES = 1797  # scikit-learn's bundled 8x8 digits (a test checks the count)


def training_examples(name: str, **options) -> int:
    """How many training examples (sequences) `make_task(name, **options)` holds, computed
    without building the data (torch-free: the config checks bound a batch by it)."""
    import inspect

    o = {k: p.default for k, p in inspect.signature(TASKS[name]).parameters.items()} | options
    if name == "digits":
        train = DIGITS_IMAGES - max(1, round(o["test_fraction"] * DIGITS_IMAGES))
        return train - max(1, round(o["val_fraction"] * train)) if o["val_fraction"] > 0 \
            else train
    if name == "text":
        chars = text_blocks(len(text_corpus()), o["val_fraction"], o["test_fraction"])[0]
        return text_windows(chars, o["length"])
    return int(o["train_size"])


def make_task(name: str, **options) -> TaskData:
    """The task `name` built with `options` (the config's `tasks.<name>` block)."""
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}; allowed: {sorted(TASKS)}")
    return TASKS[name](**options)
