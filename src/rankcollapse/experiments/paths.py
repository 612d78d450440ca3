"""E2: path-length decomposition of trained attention networks (Dong, Cordonnier & Loukas 2021,
§4): the original sampled-path protocol (`sampled_path_accuracy`) and our exact path sums
(`path_sums`). How each works and its caveat: docs/experiments.md.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from rankcollapse.core.model import SelfAttention, TaskModel


def check_decomposable(model: TaskModel) -> None:
    """Raise ValueError unless every block is attention + residual only (the DP's premise)."""
    cfg = model.stack.cfg
    problems = [name for name, bad in [
        ("norm must be 'none'", cfg.norm != "none"), ("mlp must be off", cfg.mlp),
        ("skip must be on", not cfg.skip), ("deescalate must be 0", cfg.deescalate != 0),
        ("center_attention must be off", cfg.center_attention),
        ("bias must be off", cfg.bias)] if bad]
    if problems:
        raise ValueError("path decomposition needs an LN-free, MLP-free, bias-free san_skip "
                         "network: "
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


ALL_HEADS = -1  # a path entry that keeps every head of its layer (the layer as trained)
BATCH_FLOATS = 2**25  # path states the sampled protocol runs at once (128 MB in float32)


def path_network(model: TaskModel) -> str:
    """Which kind of network the sampled-path protocol runs on: "post_ln" (attention + skip +
    post-LN, no MLP: Dong et al.'s network) or "ln_free" (attention + skip, no LayerNorm, no MLP).
    Raises ValueError for any other architecture."""
    cfg = model.stack.cfg
    problems = [name for name, bad in [
        ("skip must be on", not cfg.skip), ("mlp must be off", cfg.mlp),
        ("norm must be 'none' or 'post'", cfg.norm not in ("none", "post")),
        ("deescalate must be 0", cfg.deescalate != 0),
        ("center_attention must be off", cfg.center_attention)] if bad]
    if problems:
        raise ValueError("paths need attention + skip (norm none or post), no MLP: "
                         + "; ".join(problems))
    return "post_ln" if cfg.norm == "post" else "ln_free"


def sample_path(depth: int, heads: int, length: int, rng: np.random.Generator) -> list:
    """One random path of `length` through `depth` layers (the original code's create_path):
    `length` distinct layers drawn uniformly are active, each with one head drawn uniformly;
    the others are None (the identity). Returns a list of `depth` entries."""
    if not 0 <= length <= depth:
        raise ValueError(f"path length {length} outside 0..{depth}")
    head_of = rng.integers(heads, size=depth)
    path: list = [None] * depth
    for layer in rng.choice(depth, size=length, replace=False):
        path[int(layer)] = int(head_of[layer])
    return path


def head_branch(attn: SelfAttention, h: Tensor, head: int) -> Tensor:
    """The attention branch of one layer restricted to one head (or ALL_HEADS), with its biases:
    A_h (h W_v,h + b_v,h) W_o,h + b_o, attention recomputed from h. h: (B, n, d) -> (B, n, d).
    The output bias b_o is added whole, as the original code adds it on a path."""
    B, n, d = h.shape
    kept = attn.heads if head == ALL_HEADS else 1
    dh = d // attn.heads
    w_qkv, b_qkv, w_out = attn.qkv.weight, attn.qkv.bias, attn.proj.weight
    if head != ALL_HEADS:  # only this head's rows of q, k, v and columns of the output map
        rows = torch.cat([torch.arange(head * dh, (head + 1) * dh) + part * d
                          for part in range(3)])
        w_qkv = w_qkv[rows]
        b_qkv = None if b_qkv is None else b_qkv[rows]
        w_out = w_out[:, head * dh:(head + 1) * dh]
    q, k, v = F.linear(h, w_qkv, b_qkv).split(kept * dh, dim=-1)
    q, k, v = (t.view(B, n, kept, dh).transpose(1, 2) for t in (q, k, v))
    # q, k, v: (B, heads kept, n, d_head)
    A = torch.softmax(attn.scale * q @ k.transpose(-2, -1), dim=-1)  # (B, heads kept, n, n)
    y = (A @ v).transpose(1, 2).reshape(B, n, -1) @ w_out.T  # (B, n, d)
    return y if attn.proj.bias is None else y + attn.proj.bias


@torch.no_grad()
def path_forward(model: TaskModel, h0: Tensor, path: list, residual: bool = False) -> Tensor:
    """The stack run along one path from its input h0 (B, n, d): a layer whose entry is None is
    the identity; an entry h runs that head only, ALL_HEADS every head. residual=False is the
    original protocol's path layer: the branch alone, through a LayerNorm without learned gain
    or bias in a post-LN network (times the branch factor c in an LN-free one). residual=True
    keeps the block's own wiring (residual and trained LayerNorm): with every layer active and
    every head kept it is the network's forward pass. Returns (B, n, d)."""
    kind = path_network(model)
    c = model.stack.cfg.branch_factor
    h = h0
    for block, head in zip(model.stack.blocks, path, strict=True):
        if head is None:
            continue
        branch = c * head_branch(block.attn, h, head)
        if residual:
            h = block.attn_out(block.skip * h + branch)
        elif kind == "post_ln":
            h = F.layer_norm(branch, branch.shape[-1:], eps=block.attn_out.eps)
        else:
            h = branch
    return h


@torch.no_grad()
def paths_forward(model: TaskModel, h0: Tensor, paths: list[list]) -> Tensor:
    """`path_forward` (without residuals) of many paths at once: (P, B, n, d) for P paths.
    At each layer the paths that pass through it are run together, one call per head."""
    kind = path_network(model)
    c = model.stack.cfg.branch_factor
    h = h0.expand(len(paths), *h0.shape).clone()  # (P, B, n, d)
    P, B, n, d = h.shape
    for layer, block in enumerate(model.stack.blocks):
        heads = torch.tensor([-2 if p[layer] is None else p[layer] for p in paths])
        for head in heads.unique().tolist():
            if head == -2:  # the identity: these paths skip the layer
                continue
            rows = (heads == head).nonzero().flatten()
            branch = c * head_branch(block.attn, h[rows].reshape(-1, n, d), head)
            if kind == "post_ln":
                branch = F.layer_norm(branch, branch.shape[-1:], eps=block.attn_out.eps)
            h[rows] = branch.view(len(rows), B, n, d)
    return h


@torch.no_grad()
def sampled_path_accuracy(model: TaskModel, x: Tensor, y: Tensor, samples=(5, 20),
                          repeats: int = 5, seed: int = 0) -> pd.DataFrame:
    """The original code's sampled-path protocol: for each number of paths s in `samples`, each
    length k = 0..L and each repeat, sum s random paths of length k (`sample_path`, run
    without residuals as `path_forward` does) and classify. Columns protocol ("sampled"),
    samples, k, accuracy (mean over repeats), std (over repeats)."""
    path_network(model)
    model.eval()
    depth, heads = model.stack.cfg.depth, model.stack.cfg.heads
    rng = np.random.default_rng(seed)
    h0 = embed(model, x)
    rows = []
    for count in ([samples] if isinstance(samples, int) else list(samples)):
        # Repeats per batched call: about BATCH_FLOATS floats of path states at a time.
        together = max(1, BATCH_FLOATS // (count * h0.numel()))
        for k in range(depth + 1):
            drawn = [sample_path(depth, heads, k, rng) for _ in range(repeats * count)]
            accs = []
            for first in range(0, repeats, together):
                chunk = drawn[first * count:(first + together) * count]
                out = paths_forward(model, h0, chunk).view(-1, count, *h0.shape)
                accs += [_accuracy(readout(model, total), y) for total in out.sum(1)]
            rows.append({"protocol": "sampled", "samples": int(count), "k": k,
                         "accuracy": float(np.mean(accs)), "std": float(np.std(accs))})
    return pd.DataFrame(rows)


def path_counts(depth: int, heads: int) -> list[int]:
    """Number of paths of each length k = 0..L: C(L, k) H^k (they sum to (H + 1)^L)."""
    return [math.comb(depth, k) * heads**k for k in range(depth + 1)]


# The reference lines of Dong et al.'s path-length figure (the original code's plotting
# constants): task -> (entire model's token accuracy, baseline predictor's), the baseline being
# a random predictor for sorting and memorisation and the majority class for the convex hull.
PAPER_REFERENCE = {"sorting": (0.98, 0.10), "hull": (0.90, 0.54), "memorisation": (0.85, 0.50)}


def measure_job(model_path, eval_size: int, samples, repeats: int,
                threads: int = 1) -> pd.DataFrame:
    """Path accuracies of one trained checkpoint (a model.pt of train.run_job) on its first
    `eval_size` test examples, with the run's identity and final accuracy (`measure_saved`)."""
    from rankcollapse.training.train import load_saved

    saved = load_saved(model_path)
    return measure_saved(saved, eval_size, samples, repeats, threads)


def measure_saved(saved: dict, eval_size: int, samples, repeats: int,
                  threads: int = 1, data=None) -> pd.DataFrame:
    """Path accuracies of one trained network already loaded (a dict with its weights,
    settings and final result: train.run_job's model.pt, or one member of
    ensemble.load_members) on its first `eval_size` test examples: the full network ("full"),
    the sampled-path protocol for each count in `samples`, and for an LN-free, bias-free
    network the exact sums ("exact_up_to", "exact_exactly"). Columns protocol, samples (0 but
    for "sampled"), k, accuracy, std, paths (how many paths of that length exist), network
    ("post_ln" or "ln_free"), bias, the run's identity and its baselines. `data`: the task's
    TaskData when the caller has built it already (the members of one ensemble share it)."""
    from rankcollapse import io, runtime
    from rankcollapse.core.tasks import make_task
    from rankcollapse.training.train import new_model

    settings = saved["settings"]
    runtime.setup(threads, settings["seed"])
    if data is None:
        data = make_task(settings["task"], **settings["task_options"])
    model = new_model(data.spec, settings["variant"], settings["model_options"],
                      settings["seed"])
    model.load_state_dict(saved["model"])
    model.eval()
    kind, cfg = path_network(model), model.stack.cfg
    x, y = data.x_test[:eval_size], data.y_test[:eval_size]
    depth = int(settings["model_options"]["depth"])
    if saved["final"]["diverged"]:
        table = pd.DataFrame({"protocol": ["full"], "k": [depth], "accuracy": [math.nan],
                              "std": [math.nan]})
    else:
        full = pd.DataFrame({"protocol": ["full"], "k": [depth],
                             "accuracy": [_accuracy(model(x)[0], y)], "std": [0.0]})
        exact = ([exact_accuracies(model, x, y).query("protocol != 'full'")]
                 if kind == "ln_free" and not cfg.bias else [])
        table = pd.concat([full, *exact, sampled_path_accuracy(model, x, y, samples, repeats,
                                                               seed=settings["seed"])],
                          ignore_index=True)
    table["samples"] = table.get("samples", pd.Series(0, index=table.index)).fillna(0)
    table["samples"] = table["samples"].astype(int)
    counts = path_counts(depth, cfg.heads)
    table["paths"] = [counts[k] if p != "exact_up_to" else sum(counts[:k + 1])
                      for p, k in zip(table.protocol, table.k, strict=True)]
    table["network"] = kind
    table["bias"] = bool(cfg.bias)
    table["depth"] = depth
    table["seed"] = int(settings["seed"])
    table["width"] = int(settings["model_options"]["width"])
    table["heads"] = cfg.heads
    table["chance"] = data.spec.chance
    table["majority"] = float(max((y == c).double().mean() for c in range(data.spec.classes)))
    table["test_accuracy"] = saved["final"]["test_accuracy"]
    table["diverged"] = bool(saved["final"]["diverged"])
    table["config_hash"] = saved["fingerprint"]
    table["code_version"] = io.code_version()
    return table
