"""Path-length decomposition of trained attention networks (Dong, Cordonnier & Loukas 2021, §4).

With skip connections and nothing else (no LayerNorm, no MLP: the `san_skip` variant), one block
maps x -> x + c * sum_h A_h x V_h O_h, with A_h the head's attention matrix (n, n), V_h (d, d_h)
and O_h (d_h, d) its value and output maps and c the branch factor. Once the attention matrices
of a forward pass are fixed, the stack is linear in its input and its output is a sum over paths:
each path passes through a subset of the layers (the identity elsewhere), and its length is the
size of that subset. Two ways to measure what paths of each length carry:

- `path_sums` (ours, exact): the contribution P_k of all paths of length k, k = 0..L, by a
  dynamic programme over layers, P_k^(l) = P_k^(l-1) + c sum_h A_h^l P_{k-1}^(l-1) V_h O_h:
  O(L^2) maps instead of the 2^L subsets (times H^k head choices) of `enumerate_paths`.
  sum_k P_k equals the network's output (to round-off).
- `sampled_path_accuracy` (the original code's protocol): pick one head per layer, turn L - k
  random layers into the identity, run the k active layers without their residual (attention
  recomputed on the path's own input), sum a few sampled paths and classify; mean and std over
  repeats.

Accuracy of a set of paths = the task read-out (final LayerNorm + linear head) applied to the
sum of their outputs.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from .model import SelfAttention, TaskModel


def check_decomposable(model: TaskModel) -> None:
    """Raise ValueError unless every block is attention + residual only (the DP's premise)."""
    cfg = model.stack.cfg
    problems = [name for name, bad in [
        ("norm must be 'none'", cfg.norm != "none"), ("mlp must be off", cfg.mlp),
        ("skip must be on", not cfg.skip), ("deescalate must be 0", cfg.deescalate != 0),
        ("center_attention must be off", cfg.center_attention)] if bad]
    if problems:
        raise ValueError("path decomposition needs an LN-free, MLP-free san_skip network: "
                         + "; ".join(problems))


def attention_map(attn: SelfAttention, A: Tensor, h: Tensor) -> Tensor:
    """sum_h A_h h V_h O_h: the layer's attention branch with its attention matrices fixed.

    A: (B, H, n, n); h: (..., B, n, d) with any leading dims (path lengths) -> (..., B, n, d).
    Computed like the layer itself (values, per-head mixing, output projection), so one map
    costs about what the layer costs.
    """
    *lead, B, n, d = h.shape
    heads = attn.heads
    v = h @ attn.qkv.weight[2 * d:].T  # (..., B, n, d)
    v = v.reshape(*lead, B, n, heads, d // heads).transpose(-3, -2)  # (..., B, H, n, d_head)
    y = (A @ v).transpose(-3, -2).reshape(*lead, B, n, d)  # heads concatenated
    return y @ attn.proj.weight.T


@torch.no_grad()
def capture(model: TaskModel, x: Tensor) -> list[Tensor]:
    """The stack's input and the attention matrices of the full forward pass on x:
    [h0 (B, n, d), A_1, ..., A_L (B, H, n, n)]."""
    check_decomposable(model)
    _, trace = model(x, capture=True)
    return [trace.hidden[0], *trace.attention]


@torch.no_grad()
def decompose(model: TaskModel, captured: list[Tensor]) -> Tensor:
    """The dynamic programme of `path_sums` on captured [h0, A_1, ..., A_L]: (L + 1, B, n, d)."""
    h0, attention = captured[0], captured[1:]
    c = model.stack.cfg.branch_factor
    P = h0.new_zeros((len(attention) + 1, *h0.shape))
    P[0] = h0
    for layer, (block, A) in enumerate(zip(model.stack.blocks, attention, strict=True), 1):
        # Lengths 0..layer-1 each gain one step through this layer, as one batched map.
        P[1:layer + 1] = P[1:layer + 1] + c * attention_map(block.attn, A, P[:layer])
    return P


@torch.no_grad()
def enumerate_captured(model: TaskModel, captured: list[Tensor]) -> Tensor:
    """`enumerate_paths` on captured [h0, A_1, ..., A_L]: (L + 1, B, n, d)."""
    h0, attention = captured[0], captured[1:]
    c = model.stack.cfg.branch_factor
    blocks = list(model.stack.blocks)
    out = h0.new_zeros((len(attention) + 1, *h0.shape))
    for active in itertools.product((False, True), repeat=len(attention)):
        h = h0
        for block, A, on in zip(blocks, attention, active, strict=True):
            if on:
                h = c * attention_map(block.attn, A, h)
        out[sum(active)] += h
    return out


@torch.no_grad()
def embed(model: TaskModel, x: Tensor) -> Tensor:
    """The stack's input for task inputs x: embedding (+ class token) + positions, (B, n, d)."""
    h = model.embed(x)
    if model.cls is not None:
        h = torch.cat([model.cls.expand(h.shape[0], -1, -1), h], dim=1)
    return h + model.pos


@torch.no_grad()
def readout(model: TaskModel, h: Tensor) -> Tensor:
    """Logits of stack outputs h (..., B, n, d), as TaskModel.forward reads them out."""
    if model.readout == "class_token":
        h = h[..., 0, :]
    return model.head(model.norm(h))


@torch.no_grad()
def path_sums(model: TaskModel, x: Tensor) -> Tensor:
    """Exact contribution of all paths of each length: (L + 1, B, n, d); entry k sums the
    C(L, k) H^k paths of length k, with the attention matrices of the full forward pass on x.
    Summed over k it is the stack's output."""
    return decompose(model, capture(model, x))


@torch.no_grad()
def enumerate_paths(model: TaskModel, x: Tensor) -> Tensor:
    """Reference for `path_sums`: every one of the 2^L layer subsets run explicitly (heads summed
    within a layer, which is the sum over the head choices of that subset), grouped by length.
    Cost: 2^L subsets, L 2^(L-1) maps in all. Returns (L + 1, B, n, d)."""
    return enumerate_captured(model, capture(model, x))


def _accuracy(logits: Tensor, y: Tensor) -> float:
    return float((logits.argmax(-1) == y).double().mean())


@torch.no_grad()
def exact_accuracies(model: TaskModel, x: Tensor, y: Tensor) -> pd.DataFrame:
    """Token accuracy using all paths of length <= k ("up_to") and of exactly k ("exactly"),
    k = 0..L, plus the full network ("full", the ordinary forward pass): columns protocol,
    k, accuracy, std (0 here: exact)."""
    model.eval()
    P = path_sums(model, x)
    cumulative = P.cumsum(0)
    rows = []
    for k in range(len(P)):
        rows.append({"protocol": "exact_up_to", "k": k,
                     "accuracy": _accuracy(readout(model, cumulative[k]), y)})
        rows.append({"protocol": "exact_exactly", "k": k,
                     "accuracy": _accuracy(readout(model, P[k]), y)})
    full, _ = model(x)
    rows.append({"protocol": "full", "k": len(P) - 1, "accuracy": _accuracy(full, y)})
    return pd.DataFrame(rows).assign(std=0.0)


def _one_head_layer(attn: SelfAttention, h: Tensor, head: int) -> Tensor:
    """One attention layer restricted to one head, without residual: A_h h V_h O_h (B, n, d).
    The attention is recomputed from h, as the original code runs the layer on the path."""
    B, n, d = h.shape
    dh = d // attn.heads
    sl = slice(head * dh, (head + 1) * dh)
    w_q, w_k, w_v = attn.qkv.weight.split(d)  # each (d, d)
    q, k, v = h @ w_q[sl].T, h @ w_k[sl].T, h @ w_v[sl].T  # (B, n, dh)
    A = torch.softmax(attn.scale * q @ k.transpose(-2, -1), dim=-1)  # (B, n, n)
    return (A @ v) @ attn.proj.weight[:, sl].T


@torch.no_grad()
def sampled_path_accuracy(model: TaskModel, x: Tensor, y: Tensor, samples: int = 4,
                          repeats: int = 5, seed: int = 0) -> pd.DataFrame:
    """The original code's sampled-path protocol: for each length k = 0..L and each repeat, sum
    `samples` random paths (k random active layers, one random head each, no residual) and
    classify. Columns protocol ("sampled"), k, accuracy (mean over repeats), std (over repeats).
    """
    check_decomposable(model)
    model.eval()
    c = model.stack.cfg.branch_factor
    blocks = list(model.stack.blocks)
    depth, heads = len(blocks), model.stack.cfg.heads
    rng = np.random.default_rng(seed)
    h0 = embed(model, x)
    rows = []
    for k in range(depth + 1):
        accs = []
        for _ in range(repeats):
            total = torch.zeros_like(h0)
            for _ in range(samples):
                active = set(rng.choice(depth, size=k, replace=False).tolist())
                h = h0
                for layer, block in enumerate(blocks):
                    if layer in active:
                        h = c * _one_head_layer(block.attn, h, int(rng.integers(heads)))
                total = total + h
            accs.append(_accuracy(readout(model, total), y))
        rows.append({"protocol": "sampled", "k": k, "accuracy": float(np.mean(accs)),
                     "std": float(np.std(accs))})
    return pd.DataFrame(rows)


def path_counts(depth: int, heads: int) -> list[int]:
    """Number of paths of each length k = 0..L: C(L, k) H^k (they sum to (H + 1)^L)."""
    return [math.comb(depth, k) * heads**k for k in range(depth + 1)]


def measure_job(model_path, eval_size: int, samples: int, repeats: int,
                threads: int = 1) -> pd.DataFrame:
    """Path accuracies of one trained checkpoint (a model.pt of train.run_job) on its first
    `eval_size` test examples: both protocols, with the run's identity and final accuracy."""
    saved = torch.load(model_path, map_location="cpu", weights_only=False)
    return measure_saved(saved, eval_size, samples, repeats, threads)


def measure_saved(saved: dict, eval_size: int, samples: int, repeats: int,
                  threads: int = 1) -> pd.DataFrame:
    """measure_job of one trained network already loaded: a dict with its weights, settings
    and final result (train.run_job's model.pt, or one member of ensemble.load_members)."""
    from . import io, runtime
    from .tasks import make_task
    from .train import new_model

    settings = saved["settings"]
    runtime.setup(threads, settings["seed"])
    data = make_task(settings["task"], **settings["task_options"])
    model = new_model(data.spec, settings["variant"], settings["model_options"],
                      settings["seed"])
    model.load_state_dict(saved["model"])
    x, y = data.x_test[:eval_size], data.y_test[:eval_size]
    if saved["final"]["diverged"]:
        table = pd.DataFrame({"protocol": ["full"], "k": [0], "accuracy": [math.nan],
                              "std": [math.nan]})
    else:
        table = pd.concat([exact_accuracies(model, x, y),
                           sampled_path_accuracy(model, x, y, samples, repeats,
                                                 seed=settings["seed"])], ignore_index=True)
    depth = int(settings["model_options"]["depth"])
    counts = path_counts(depth, model.stack.cfg.heads)
    table["paths"] = [counts[k] if p != "exact_up_to" else sum(counts[:k + 1])
                      for p, k in zip(table.protocol, table.k, strict=True)]
    table["depth"] = depth
    table["seed"] = int(settings["seed"])
    table["width"] = int(settings["model_options"]["width"])
    table["heads"] = model.stack.cfg.heads
    table["chance"] = data.spec.chance
    table["majority"] = float(max((data.y_test[:eval_size] == c).double().mean()
                                  for c in range(data.spec.classes)))
    table["test_accuracy"] = saved["final"]["test_accuracy"]
    table["diverged"] = bool(saved["final"]["diverged"])
    table["config_hash"] = saved["fingerprint"]
    table["code_version"] = io.code_version()
    return table
