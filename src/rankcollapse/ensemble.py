"""Ensembles: K networks of one architecture trained as one batched model.

Every training experiment here trains many small networks of the same shape that differ only in
seed and optimiser settings. Trained one per process, each step is a few hundred tiny kernels
and their Python overhead; stacked, the same step does K times the arithmetic for about the
same overhead. `model.py` stays the one definition of the architecture: an `Ensemble` holds
the K members' weights stacked along a leading member dimension and runs the unmodified
`TaskModel.forward` on them with `torch.func` (`functional_call` inside `vmap`).

    members = [Member(seed, TrainConfig(lr=lr, ...)) for seed, lr in ...]
    ensemble = Ensemble([new_model(spec, variant, options, m.seed) for m in members])
    results = train_ensemble(ensemble, data, members, checkpoint="ckpt.pt")

Each member is the run `train.train` would make alone: its initial weights come from its seed,
its batches from a generator seeded the same way, its optimiser is AdamW with its own learning
rate, warm-up and weight decay (linear warm-up, cosine decay), its gradient norm is clipped on
its own, and its history has the same columns. Only floating-point rounding differs (batched
matrix products and unfused attention sum in another order); tests/test_ensemble.py bounds it.
A member whose loss or gradient norm is not finite is recorded as diverged at that step and
leaves the ensemble with its last finite weights; the others go on.

Layout: all parameters of all members live in one (K, P) buffer, the gradients in another, and
each parameter the model sees is a (K, *shape) view of it. AdamW and clipping are then a handful
of operations on (K, P) tensors with per-member (K, 1) learning rates, whatever the depth.

Attention: `scaled_dot_product_attention` picks a fused CPU kernel that has no vmap batching
rule (vmap would fall back to a slow loop over members, with a warning). Inside the ensemble the
math backend is selected (`sdpa_kernel(SDPBackend.MATH)`): the same function, decomposed into
matmul and softmax, which batch. model.py is unchanged and single runs keep the fused kernel.
"""

from __future__ import annotations

import copy
import logging
import math
import random
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import io, runtime
from .metrics import layer_metrics, token_similarity
from .specs import MEMBER_FIELDS
from .tasks import TaskData, make_task
from .train import TrainConfig, TrainResult, loss_and_correct, new_model, schedule

log = logging.getLogger(__name__)

# TrainConfig fields every member of one ensemble shares (one batched step, one schedule of
# evaluations and checkpoints); the others are per member.
SHARED_FIELDS = ("steps", "batch", "clip", "checkpoint_every", "eval_every")
HISTORY_COLUMNS = ["step", "loss", "lr", "grad_norm", "test_loss", "test_accuracy"]
BETAS, EPS = (0.9, 0.999), 1e-8  # torch.optim.AdamW's defaults, as train.train uses


@dataclass(frozen=True)
class Member:
    """One member: its seed (initial weights and batch order) and its full training settings.

    The fields in SHARED_FIELDS must agree across an ensemble's members; lr, warmup and
    weight_decay may differ.
    """

    seed: int
    train: TrainConfig

    def identity(self) -> dict:
        """The columns that tell this member apart in the results tables. The peak learning
        rate is `peak_lr`, since `lr` in a history is the scheduled rate of each step."""
        return {"seed": self.seed, "peak_lr": self.train.lr, "warmup": self.train.warmup,
                "weight_decay": self.train.weight_decay}


def members_from(train_options: dict, settings: Sequence[dict]) -> list[Member]:
    """Members from shared training options and per-member settings
    [{seed, lr?, warmup?, weight_decay?}, ...] (missing keys come from `train_options`)."""
    out = []
    for item in settings:
        unknown = set(item) - {"seed", *MEMBER_FIELDS}
        if unknown:
            raise KeyError(f"unknown member setting(s) {sorted(unknown)}; allowed: "
                           f"{['seed', *MEMBER_FIELDS]}")
        overrides = {k: v for k, v in item.items() if k != "seed"}
        out.append(Member(int(item["seed"]), TrainConfig.from_dict({**train_options,
                                                                     **overrides})))
    return out


def shared_config(members: Sequence[Member]) -> TrainConfig:
    """The first member's settings, after checking that SHARED_FIELDS agree across members."""
    if not members:
        raise ValueError("an ensemble needs at least one member")
    first = members[0].train
    for m in members[1:]:
        differ = [f for f in SHARED_FIELDS if getattr(m.train, f) != getattr(first, f)]
        if differ:
            raise ValueError(f"ensemble members must share {list(SHARED_FIELDS)}; member seed "
                             f"{m.seed} differs in {differ}")
    return first


class Ensemble:
    """K models of one architecture with stacked weights, run as one batched model.

    `flat` (K, P) holds every member's parameters (in the order of `names`), `grad` (K, P) their
    gradients; `params[name]` is a (K, *shape) view of `flat` that autograd accumulates into
    the matching view of `grad`. Calling the ensemble runs `TaskModel.forward` on every member.
    """

    def __init__(self, models: Sequence[nn.Module]):
        models = list(models)
        if not models:
            raise ValueError("an ensemble needs at least one model")
        params, buffers = stack_module_state(models)  # (K, *shape) each, copies
        self.names = list(params)
        self.shapes = [tuple(params[n].shape[1:]) for n in self.names]
        dtypes = {p.dtype for p in params.values()}
        if len(dtypes) != 1:
            raise ValueError(f"all parameters must share one dtype, got {sorted(map(str, dtypes))}")
        self.state_keys = list(models[0].state_dict())
        self.buffers = {k: v.detach() for k, v in buffers.items()}
        # Structure only: the weights come from `params` at every call, so the template
        # lives on the meta device and costs no memory.
        self.base = copy.deepcopy(models[0]).to("meta")
        flat = torch.cat([params[n].detach().reshape(len(models), -1) for n in self.names], 1)
        self._bind(flat.contiguous())
        self.finals: list[dict[str, Tensor]] = []  # every member's weights after training

    def _bind(self, flat: Tensor, grad: Tensor | None = None) -> None:
        """Make `flat` the weights and `grad` (default zeros) the gradients, with fresh views."""
        self.flat = flat
        self.grad = torch.zeros_like(flat) if grad is None else grad
        self.params: dict[str, Tensor] = {}
        offset = 0
        for name, shape in zip(self.names, self.shapes, strict=True):
            size = math.prod(shape)
            view = flat[:, offset:offset + size].view(len(flat), *shape)
            view.requires_grad_(True)  # a leaf: autograd adds into its .grad in place
            view.grad = self.grad[:, offset:offset + size].view(len(flat), *shape)
            self.params[name] = view
            offset += size

    @property
    def size(self) -> int:
        """K, the number of members currently in the ensemble."""
        return len(self.flat)

    @property
    def device(self) -> torch.device:
        return self.flat.device

    @property
    def dtype(self) -> torch.dtype:
        return self.flat.dtype

    def train(self, mode: bool = True) -> Ensemble:
        self.base.train(mode)
        return self

    def _call(self, params: dict, buffers: dict, x: Tensor, capture: bool):
        out, trace = functional_call(self.base, (params, buffers), (x,), {"capture": capture})
        return (out, trace) if capture else out

    def __call__(self, x: Tensor, shared_input: bool = False, capture: bool = False):
        """Every member's forward pass. x: (K, B, ...) one batch per member, or (B, ...) the
        same batch for all when shared_input. Returns the outputs (K, B, ...), and with capture
        a Trace whose tensors carry the member dimension first."""
        with sdpa_kernel(SDPBackend.MATH):  # the fused CPU kernel has no batching rule
            return vmap(self._call, in_dims=(0, 0, None if shared_input else 0, None))(
                self.params, self.buffers, x, capture)

    def losses(self, x: Tensor, y: Tensor, loss_fn=loss_and_correct,
               shared_input: bool = False) -> tuple[Tensor, Tensor]:
        """Per-member (mean loss (K,), correct labels (K,)) of loss_fn on (x, y)."""
        def one(params, buffers, x, y):
            out, _ = functional_call(self.base, (params, buffers), (x,))
            return loss_fn(out, y)

        dim = None if shared_input else 0
        with sdpa_kernel(SDPBackend.MATH):
            return vmap(one, in_dims=(0, 0, dim, dim))(self.params, self.buffers, x, y)

    def state_dict(self, k: int) -> dict[str, Tensor]:
        """Member k's weights as its TaskModel's state_dict (copies)."""
        out = {name: p[k].detach().clone() for name, p in self.params.items()}
        out.update({name: b[k].clone() for name, b in self.buffers.items()})
        return {key: out[key] for key in self.state_keys}

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only the members at `rows`, with their weights and gradients (others left)."""
        index = torch.tensor(list(rows), dtype=torch.long, device=self.device)
        self.buffers = {k: v[index] for k, v in self.buffers.items()}
        self._bind(self.flat[index], self.grad[index])  # indexing copies


@dataclass
class AdamW:
    """AdamW state over an ensemble's (K, P) buffers: the arithmetic of torch.optim.AdamW
    (single-tensor path) with a learning rate and weight decay per member."""

    exp_avg: Tensor
    exp_avg_sq: Tensor
    steps: int = 0

    @classmethod
    def like(cls, flat: Tensor) -> AdamW:
        return cls(torch.zeros_like(flat), torch.zeros_like(flat))

    def keep(self, rows: Sequence[int]) -> None:
        index = torch.tensor(list(rows), dtype=torch.long, device=self.exp_avg.device)
        self.exp_avg, self.exp_avg_sq = self.exp_avg[index], self.exp_avg_sq[index]

    @torch.no_grad()
    def step(self, flat: Tensor, grad: Tensor, lr: Sequence[float],
             weight_decay: Sequence[float]) -> None:
        """One update of flat (K, P) from grad (K, P); lr and weight_decay one per member."""
        beta1, beta2 = BETAS
        self.steps += 1
        # Per-member scalars in Python floats first, as torch computes them, then one (K, 1)
        # column each in the weights' dtype.
        column = lambda v: torch.tensor(v, dtype=flat.dtype, device=flat.device)[:, None]  # noqa: E731
        bias1, bias2 = 1 - beta1**self.steps, 1 - beta2**self.steps
        flat.mul_(column([1 - a * w for a, w in zip(lr, weight_decay, strict=True)]))
        self.exp_avg.lerp_(grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = (self.exp_avg_sq.sqrt() / bias2**0.5).add_(EPS)
        flat.addcdiv_(self.exp_avg * column([-a / bias1 for a in lr]), denom)


@torch.no_grad()
def clip_per_member(grad: Tensor, max_norm: float) -> Tensor:
    """Scale each member's gradient (a row of grad (K, P)) to norm <= max_norm, as
    clip_grad_norm_ does for one model; returns the norms before clipping, (K,)."""
    norms = torch.linalg.vector_norm(grad, dim=1)
    grad.mul_(torch.clamp(max_norm / (norms + 1e-6), max=1.0)[:, None])
    return norms


@torch.no_grad()
def evaluate_members(ensemble: Ensemble, x: Tensor, y: Tensor, batch: int = 512,
                     loss_fn=loss_and_correct) -> tuple[list[float], list[float]]:
    """Per-member (mean loss, accuracy over labels) on the shared (x, y), in eval mode; the
    batching and accumulation of train.evaluate, so members match single runs."""
    was_training = ensemble.base.training
    ensemble.train(False)
    k = ensemble.size
    total, correct, labels = [0.0] * k, [0] * k, 0
    for i in range(0, len(y), batch):
        xb, yb = x[i:i + batch].to(ensemble.device), y[i:i + batch].to(ensemble.device)
        loss, right = ensemble.losses(xb, yb, loss_fn, shared_input=True)
        for j, (lo, r) in enumerate(zip(loss.tolist(), right.tolist(), strict=True)):
            total[j] += lo * yb.numel()
            correct[j] += int(r)
        labels += yb.numel()
    ensemble.train(was_training)
    return [t / labels for t in total], [c / labels for c in correct]


Evaluator = Callable[[Ensemble], tuple[list[float], list[float]]]


def _global_rng_states() -> dict:
    states = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),  # noqa: NPY002
              "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_global_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])  # noqa: NPY002
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


CHECKPOINT_KEYS = {"fingerprint", "step", "active", "flat", "exp_avg", "exp_avg_sq", "history"}


def load_checkpoint(path: str | Path, device) -> dict | None:
    """The ensemble checkpoint's state, or None if there is none or it cannot be read (a
    damaged file is logged and never trained on: training starts from scratch)."""
    if not Path(path).exists():
        return None
    try:
        state = io.load_checked(path, map_location=device)
        if not isinstance(state, dict) or not CHECKPOINT_KEYS <= set(state):
            raise ValueError("not an ensemble checkpoint")
        return state
    except Exception as err:  # noqa: BLE001 - any unreadable checkpoint means: start over
        log.warning("ignoring damaged checkpoint %s (%s: %s); training from scratch", path,
                    type(err).__name__, err)
        return None


def train_ensemble(ensemble: Ensemble, data: TaskData, members: Sequence[Member],
                   checkpoint: str | Path | None = None, fingerprint: str = "",
                   loss_fn=loss_and_correct,
                   evaluate: Evaluator | None = None) -> list[TrainResult]:
    """Train every member of `ensemble` (built from `members`, in order) on `data`.

    Resumes from `checkpoint` when it exists and its fingerprint matches (one of other settings
    is ignored and overwritten). `evaluate(ensemble)` gives each current member's (loss,
    accuracy) at the evaluation steps; by default on the test split, as train.train does.
    Returns one TrainResult per member; afterwards `ensemble` holds the members that did not
    diverge and `ensemble.finals[k]` every member's final weights (a state_dict).
    """
    cfg = shared_config(members)
    if ensemble.size != len(members):
        raise ValueError(f"{len(members)} members for an ensemble of {ensemble.size} models")
    if evaluate is None:
        def evaluate(ens: Ensemble) -> tuple[list[float], list[float]]:
            return evaluate_members(ens, data.x_test, data.y_test, loss_fn=loss_fn)
    device = ensemble.device
    gens = [torch.Generator().manual_seed(m.seed) for m in members]  # kept on the CPU
    factors = [schedule(m.train) for m in members]
    x_train, y_train = data.x_train.to(device), data.y_train.to(device)
    adam = AdamW.like(ensemble.flat)
    rows: list[list[dict]] = [[] for _ in members]
    diverged: list[int | None] = [None] * len(members)
    finals: dict[int, dict[str, Tensor]] = {}  # members that left, by index
    active = list(range(len(members)))  # member index of each row of the ensemble
    start = 0

    state = load_checkpoint(checkpoint, device) if checkpoint is not None else None
    if state is not None and state["fingerprint"] != fingerprint:
        log.warning("ignoring %s: it was written with other settings", checkpoint)
    elif state is not None:
        active = list(state["active"])
        ensemble.keep(range(len(active)))  # shape only; the values come next
        ensemble.buffers = state["buffers"]
        with torch.no_grad():
            ensemble.flat.copy_(state["flat"])
        adam = AdamW(state["exp_avg"], state["exp_avg_sq"], state["adam_steps"])
        for g, s in zip(gens, state["generators"], strict=True):
            g.set_state(s)
        _set_global_rng_states(state["rng"])
        rows, diverged, finals = state["history"], state["diverged"], state["finals"]
        start = state["step"]
        log.info("resumed from %s at step %d (%d of %d members active)", checkpoint, start,
                 len(active), len(members))

    ensemble.train()
    for step in range(start, cfg.steps):
        if not active:
            break
        idx = torch.stack([torch.randint(len(y_train), (cfg.batch,), generator=gens[k])
                           for k in active]).to(device)  # (K, batch)
        ensemble.grad.zero_()
        loss, _ = ensemble.losses(x_train[idx], y_train[idx], loss_fn)  # (K,)
        with warnings.catch_warnings():
            # The gradient views are strided slices of one buffer, on purpose (see the module
            # docstring); autograd notes they are not dense, then adds into them in place.
            warnings.filterwarnings("ignore", message=".*gradient layout contract")
            loss.sum().backward()  # members share no weights: each gets its own gradient
        norms = clip_per_member(ensemble.grad, cfg.clip)
        step_rows, leaving = {}, []
        for row, (k, lo, gn) in enumerate(zip(active, loss.tolist(), norms.tolist(),
                                               strict=True)):
            lr = members[k].train.lr * factors[k](step)  # what LambdaLR gives at this step
            step_rows[k] = {"step": step + 1, "loss": lo, "lr": lr, "grad_norm": gn,
                            "test_loss": math.nan, "test_accuracy": math.nan}
            if not (math.isfinite(lo) and math.isfinite(gn)):
                leaving.append(row)
                diverged[k] = step + 1
                rows[k].append(step_rows.pop(k))
                log.warning("member %d (seed %d) diverged at step %d (loss %s, grad norm %s)",
                            k, members[k].seed, step + 1, lo, gn)
        if leaving:
            # Its weights are those before this step, as when train.train stops.
            for row in leaving:
                finals[active[row]] = ensemble.state_dict(row)
            kept = [r for r in range(len(active)) if r not in leaving]
            ensemble.keep(kept)
            adam.keep(kept)
            active = [active[r] for r in kept]
            if not active:
                break
        adam.step(ensemble.flat, ensemble.grad, [step_rows[k]["lr"] for k in active],
                  [members[k].train.weight_decay for k in active])
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            test_loss, test_acc = evaluate(ensemble)
            for k, lo, acc in zip(active, test_loss, test_acc, strict=True):
                step_rows[k]["test_loss"], step_rows[k]["test_accuracy"] = lo, acc
            log.info("step %d loss %s test accuracy %s", step + 1,
                     [round(step_rows[k]["loss"], 4) for k in active],
                     [round(a, 4) for a in test_acc])
        for k in active:
            rows[k].append(step_rows[k])
        every = cfg.checkpoint_every
        if checkpoint is not None and every and (step + 1) % every == 0:
            io.save_checked({
                "fingerprint": fingerprint, "step": step + 1, "active": active,
                "flat": ensemble.flat, "buffers": ensemble.buffers, "exp_avg": adam.exp_avg,
                "exp_avg_sq": adam.exp_avg_sq, "adam_steps": adam.steps,
                "generators": [g.get_state() for g in gens], "rng": _global_rng_states(),
                "history": rows, "diverged": diverged, "finals": finals}, checkpoint)

    for row, k in enumerate(active):
        finals[k] = ensemble.state_dict(row)
    ensemble.finals = [finals[k] for k in range(len(members))]
    results = []
    for k in range(len(members)):
        history = pd.DataFrame(rows[k], columns=HISTORY_COLUMNS)
        if diverged[k] is not None:
            results.append(TrainResult(history, True, diverged[k], math.nan, math.nan))
        else:
            last = history.iloc[-1]
            results.append(TrainResult(history, False, None, float(last.test_loss),
                                       float(last.test_accuracy)))
    return results



# ---- workflow jobs ---------------------------------------------------------------------------


def member_settings(task: str, task_options: dict, variant: dict, model_options: dict,
                    member: Member) -> dict:
    """Everything that determines one member's run; its hash is the member's fingerprint and
    config_hash (the same dict, hence the same hash, as train.run_job of the run alone)."""
    return {"task": task, "task_options": task_options, "variant": variant,
            "model_options": model_options, "train": asdict(member.train), "seed": member.seed}


def run_job(task: str, task_options: dict, variant: dict, model_options: dict,
            train_options: dict, members: Sequence[dict], ensemble_path: str | Path,
            history_path: str | Path, device: str = "cpu", threads: int = 1,
            extra_columns: dict | None = None) -> list[TrainResult]:
    """One training job of the workflow: the members [{seed, lr?, warmup?, weight_decay?}] of
    one architecture as one ensemble, resuming from the checkpoint beside ensemble_path.

    Writes ensemble_path ({"members": [one dict per member in the format of train.run_job's
    model.pt: weights, settings, spec, final, fingerprint], "fingerprint"}) and history_path
    (every member's history with its identity columns), then drops the checkpoint.
    """
    team = members_from(train_options, members)
    runtime.setup(threads, team[0].seed)
    dev = runtime.job_device(device)
    data = make_task(task, **task_options)
    settings = [member_settings(task, task_options, variant, model_options, m) for m in team]
    fingerprints = [io.config_hash(s) for s in settings]
    fingerprint = io.config_hash(fingerprints)
    checkpoint = Path(ensemble_path).with_name("checkpoint.pt")
    log.info("training %d members %s of %s on %s (%d threads), fingerprint %s", len(team),
             [m.identity() for m in team], {k: v for k, v in settings[0].items() if k != "seed"},
             dev, torch.get_num_threads(), fingerprint)
    ensemble = Ensemble([new_model(data.spec, variant, model_options, m.seed).to(dev)
                         for m in team])

    results = train_ensemble(ensemble, data, team, checkpoint, fingerprint)

    write_members(team, results, ensemble.finals, settings, fingerprints, data.spec,
                  extra_columns or {}, fingerprint, ensemble_path, history_path)
    checkpoint.unlink(missing_ok=True)
    return results


def write_members(team: Sequence[Member], results: Sequence[TrainResult], finals: Sequence[dict],
                  settings: Sequence[dict], hashes: Sequence[str], spec, extra_columns: dict,
                  fingerprint: str, ensemble_path: str | Path,
                  history_path: str | Path) -> pd.DataFrame:
    """Write a trained ensemble's members: ensemble_path ({"members": [weights, settings, spec,
    final, fingerprint per member], "fingerprint"}) and history_path (every member's history
    with extra_columns, its identity columns and config_hash). Returns the history table."""
    histories, saved = [], []
    for m, result, state, settings_k, hash_k in zip(team, results, finals, settings, hashes,
                                                    strict=True):
        history = result.history.assign(diverged=result.diverged,
                                         diverged_step=result.diverged_step or 0)
        for key, value in {**extra_columns, **m.identity()}.items():
            history[key] = value
        history["config_hash"] = hash_k
        histories.append(history)
        final = {"diverged": result.diverged, "diverged_step": result.diverged_step,
                 "test_loss": result.test_loss, "test_accuracy": result.test_accuracy}
        saved.append({"model": {k: v.cpu() for k, v in state.items()}, "settings": settings_k,
                      "spec": asdict(spec), "final": final, "fingerprint": hash_k})
        log.info("member %s: %s", m.identity(), final)
    table = pd.concat(histories, ignore_index=True)
    table["code_version"] = io.code_version()
    io.atomic_write(ensemble_path, lambda tmp: torch.save({"members": saved,
                                                           "fingerprint": fingerprint}, tmp))
    io.write_parquet(table, history_path)
    return table


def load_members(ensemble_path: str | Path) -> list[dict]:
    """The members of a trained ensemble file, each a dict as train.run_job's model.pt holds
    (model, settings, spec, final, fingerprint)."""
    return torch.load(ensemble_path, map_location="cpu", weights_only=False)["members"]


@torch.no_grad()
def layer_tables(ensemble: Ensemble, x: Tensor) -> list[pd.DataFrame]:
    """train.layer_table of every member from one captured, batched pass on the shared x:
    one frame per member, a row per (sample, layer)."""
    ensemble.train(False)
    _, trace = ensemble(x.to(ensemble.device), shared_input=True, capture=True)
    per_layer = []
    for layer, hidden in enumerate(trace.hidden):  # hidden (K, B, n, d)
        attn = trace.attention[layer - 1] if layer > 0 else None  # (K, B, H, n, n)
        values = {k: v.double().cpu().numpy() for k, v in layer_metrics(hidden, attn).items()}
        # t_sim after the attention sublayer, before the MLP: where the MLP re-injects the
        # shared component (NaN at the input, layer 0).
        mid = trace.after_attention[layer - 1] if layer > 0 else None
        values["token_similarity_after_attention"] = (
            token_similarity(mid).double().cpu().numpy() if mid is not None
            else np.full(hidden.shape[:2], np.nan))
        per_layer.append(values)  # (K, B) each
    return [pd.concat([pd.DataFrame({"sample": range(len(x)), "layer": layer,
                                     **{k: v[member] for k, v in values.items()}})
                       for layer, values in enumerate(per_layer)], ignore_index=True)
            for member in range(ensemble.size)]


def measure_job(ensemble_path: str | Path, eval_size: int, device: str = "cpu",
                threads: int = 1) -> pd.DataFrame:
    """train.measure_job for every member of a trained ensemble, in two batched passes (all
    members at initialisation, rebuilt from their seeds; the trained ones).

    Returns rows (stage in {init, trained}, sample, layer, metrics..., test_loss,
    test_accuracy, diverged, diverged_step, depth, seed, peak_lr, warmup, weight_decay,
    chance, config_hash, code_version); a diverged member's trained rows carry NaN metrics.
    """
    saved = load_members(ensemble_path)
    first = saved[0]["settings"]
    runtime.setup(threads, first["seed"])
    dev = runtime.job_device(device)
    data = make_task(first["task"], **first["task_options"])
    x_eval = data.x_test[:eval_size]

    def models(states: list[dict | None]) -> list[nn.Module]:
        out = []
        for s, state in zip(saved, states, strict=True):
            st = s["settings"]
            model = new_model(data.spec, st["variant"], st["model_options"], st["seed"])
            if state is not None:
                model.load_state_dict(state)
            out.append(model.to(dev))
        return out

    init = Ensemble(models([None] * len(saved)))
    init_loss, init_acc = evaluate_members(init, data.x_test, data.y_test)
    init_tables = [t.assign(stage="init", test_loss=lo, test_accuracy=acc) for t, lo, acc in
                   zip(layer_tables(init, x_eval), init_loss, init_acc, strict=True)]
    finite = [not s["final"]["diverged"] and all(torch.isfinite(v).all()
                                                 for v in s["model"].values()) for s in saved]
    trained_tables: list[pd.DataFrame | None] = [None] * len(saved)
    kept = [k for k, ok in enumerate(finite) if ok]
    if kept:
        # Only finite members: LAPACK's eigenvalues of |lambda_2| refuse non-finite input.
        ens = Ensemble([m for k, m in enumerate(models([s["model"] for s in saved]))
                        if k in kept])
        losses, accs = evaluate_members(ens, data.x_test, data.y_test)
        for k, table, lo, acc in zip(kept, layer_tables(ens, x_eval), losses, accs,
                                     strict=True):
            trained_tables[k] = table.assign(stage="trained", test_loss=lo, test_accuracy=acc)
    frames = []
    for k, s in enumerate(saved):
        trained = trained_tables[k]
        if trained is None:
            trained = init_tables[k].assign(stage="trained")
            metric_cols = [c for c in trained.columns if c not in ("sample", "layer", "stage")]
            trained[metric_cols] = math.nan
        table = pd.concat([init_tables[k], trained], ignore_index=True)
        st, final = s["settings"], s["final"]
        member = Member(int(st["seed"]), TrainConfig(**st["train"]))
        table["diverged"] = bool(final["diverged"])
        table["diverged_step"] = int(final["diverged_step"] or 0)
        table["depth"] = int(st["model_options"]["depth"])
        for key, value in member.identity().items():
            table[key] = value
        table["chance"] = data.spec.chance
        table["config_hash"] = s["fingerprint"]
        frames.append(table)
    out = pd.concat(frames, ignore_index=True)
    out["code_version"] = io.code_version()
    return out


def write_metrics(ensemble_path: str | Path, metrics_path: str | Path, eval_size: int,
                  identity: dict, threads: int = 1) -> pd.DataFrame:
    """measure_job on the CPU for a freshly trained ensemble, the given identity columns (task,
    variant) first, written to metrics_path. The training jobs call it once their ensemble is
    written, so measuring costs no job (and no interpreter start) of its own."""
    table = measure_job(ensemble_path, eval_size=eval_size, device="cpu", threads=threads)
    for position, (key, value) in enumerate(identity.items()):
        table.insert(position, key, value)
    io.write_parquet(table, metrics_path)
    return table
