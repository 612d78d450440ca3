"""Ensembles: K networks of one architecture trained as one batched model (`torch.func` over the
unmodified `TaskModel`), so that many small runs cost about one run's overhead; each member ends
where `train.train` would end it alone, to rounding. Design: docs/training.md.
"""

from __future__ import annotations

import copy
import logging
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from rankcollapse import io, runtime
from rankcollapse.core.metrics import layer_metrics, token_similarity
from rankcollapse.core.specs import MEMBER_FIELDS, stable_steps
from rankcollapse.core.tasks import TaskData, make_task
from rankcollapse.training.step import (
    DeviceStep,
    autocast,
    effective_precision,
    matmul_precision,
)
from rankcollapse.training.train import (
    TrainConfig,
    TrainResult,
    load_checkpoint,
    load_saved,
    loss_and_correct,
    new_model,
    schedule,
)

__all__ = ["Ensemble", "Member", "evaluate_members", "train_ensemble"]

log = logging.getLogger(__name__)

# TrainConfig fields every member of one ensemble shares (one batched step, one schedule of
# evaluations and checkpoints); the others are per member.
SHARED_FIELDS = ("steps", "batch", "clip", "checkpoint_every", "eval_every", "precision",
                 "engine", "attention", "schedule", "cooldown")
HISTORY_COLUMNS = ["step", "loss", "lr", "grad_norm", "test_loss", "test_accuracy"]
# How a member was trained, in every results row that comes from training (provenance).
NUMERICS_COLUMNS = ("precision", "engine", "attention")
NUMERICS_BEFORE = {"precision": "float32", "engine": "eager", "attention": "math"}


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

    `flat` (K, P) holds every member's parameters (in the order of `names`); the model sees
    each parameter as a (K, *shape) view of it (`views`), so that one gradient with respect to
    `flat` is every member's gradient, and AdamW is a handful of operations on (K, P) tensors.
    Calling the ensemble runs `TaskModel.forward` on every member.
    """

    def __init__(self, models: Sequence[nn.Module]):
        models = list(models)
        if not models:
            raise ValueError("an ensemble needs at least one model")
        params, buffers = stack_module_state(models)  # (K, *shape) each, copies
        self.names = list(params)
        self.shapes = [tuple(params[n].shape[1:]) for n in self.names]
        self.sizes = [math.prod(shape) for shape in self.shapes]
        dtypes = {p.dtype for p in params.values()}
        if len(dtypes) != 1:
            raise ValueError(f"all parameters must share one dtype, got {sorted(map(str, dtypes))}")
        self.state_keys = list(models[0].state_dict())
        self.buffers = {k: v.detach() for k, v in buffers.items()}
        # Structure only: the weights come from `flat` at every call, so the template
        # lives on the meta device and costs no memory.
        self.base = copy.deepcopy(models[0]).to("meta")
        self.flat = torch.cat([params[n].detach().reshape(len(models), -1)
                               for n in self.names], 1).contiguous()
        # Attention backends under vmap: the fused CPU kernel has no batching rule
        # (docs/training.md, "Ensembles"); rankcollapse.training.step may allow the fused GPU
        # kernels.
        self.attention = [SDPBackend.MATH]
        self.finals: list[dict[str, Tensor]] = []  # every member's weights after training
        # {budget: [(loss, accuracy, diverged step or 0) per member]} (train_ensemble)
        self.budget_results: dict[int, list[tuple[float, float, int]]] = {}

    def views(self, flat: Tensor | None = None) -> dict[str, Tensor]:
        """{name: (K, *shape) view of flat (default: the ensemble's weights)}. One split, so the
        backward of all views together is a single concatenation into a (K, P) gradient."""
        flat = self.flat if flat is None else flat
        pieces = flat.split(self.sizes, dim=1)
        return {name: piece.view(len(flat), *shape)
                for name, shape, piece in zip(self.names, self.shapes, pieces, strict=True)}

    @property
    def params(self) -> dict[str, Tensor]:
        return self.views()

    @property
    def size(self) -> int:
        """K, the number of members in the ensemble."""
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
        with sdpa_kernel(self.attention):
            return vmap(self._call, in_dims=(0, 0, None if shared_input else 0, None))(
                self.params, self.buffers, x, capture)

    def losses(self, x: Tensor, y: Tensor, loss_fn=loss_and_correct,
               shared_input: bool = False, flat: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Per-member (mean loss (K,), correct labels (K,)) of loss_fn on (x, y), with the
        weights `flat` (K, P) (default: the ensemble's)."""
        def one(params, buffers, x, y):
            out, _ = functional_call(self.base, (params, buffers), (x,))
            return loss_fn(out, y)

        dim = None if shared_input else 0
        with sdpa_kernel(self.attention):
            return vmap(one, in_dims=(0, 0, dim, dim))(self.views(flat), self.buffers, x, y)

    def state_dict(self, k: int) -> dict[str, Tensor]:
        """Member k's weights as its TaskModel's state_dict (copies)."""
        out = {name: p[k].detach().clone() for name, p in self.params.items()}
        out.update({name: b[k].clone() for name, b in self.buffers.items()})
        return {key: out[key] for key in self.state_keys}


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


CHECKPOINT_KEYS = {"fingerprint", "step", "active", "diverged_at", "flat", "exp_avg",
                   "exp_avg_sq", "losses", "norms", "evaluations"}


def windows(start: int, cfg: TrainConfig, stops: Sequence[int] = ()) -> list[int]:
    """The steps after which the host looks at the run: every evaluation and checkpoint step,
    every step in `stops` (where a cool-down branch leaves the trunk), and the last; a window is
    the run of steps from one of them to the next."""
    every = [e for e in (cfg.eval_every, cfg.checkpoint_every) if e]
    ends = {s for s in range(start + 1, cfg.steps + 1) if any(s % e == 0 for e in every)}
    ends |= {s for s in stops if start < s < cfg.steps}
    return sorted(ends | {cfg.steps}) if start < cfg.steps else []


def branch_points(cfg: TrainConfig, budgets: Sequence[int]) -> dict[int, list[int]]:
    """{trunk step: the budgets whose cool-down branches off there} for a wsd run of cfg.steps:
    a run of budget b (< cfg.steps) is the trunk's first stable_steps(b) steps followed by its
    own cool-down, so it is exactly a run of b steps (the same batches, the same rates)."""
    out: dict[int, list[int]] = {}
    for b in sorted(set(int(b) for b in budgets)):
        if b == cfg.steps:
            continue
        if cfg.schedule != "wsd":
            raise ValueError(f"budgets {sorted(budgets)}: only a wsd schedule branches shorter "
                             f"runs off its trunk (schedule={cfg.schedule!r})")
        if not 0 < b < cfg.steps:
            raise ValueError(f"budget {b}: a branch needs 0 < budget < steps={cfg.steps}")
        at = stable_steps(b, cfg.cooldown)
        if at < cfg.warmup:
            raise ValueError(f"budget {b}: its cool-down starts at step {at}, inside the "
                             f"warm-up of {cfg.warmup} steps; allowed: budgets whose "
                             f"stable phase reaches past the warm-up")
        out.setdefault(at, []).append(b)
    return out


def _results(members: Sequence[Member], losses: np.ndarray, norms: np.ndarray, lr: np.ndarray,
             evaluations: np.ndarray, diverged: Sequence[int], done: int) -> list[TrainResult]:
    """One TrainResult per member from a run's logs: losses, norms, lr (done, K), evaluations
    (done, K, 2) and each member's diverging step (0: none)."""
    results = []
    for j, member in enumerate(members):
        if diverged[j]:
            log.warning("member %d (seed %d) diverged at step %d (loss %s, grad norm %s)", j,
                        member.seed, diverged[j], losses[diverged[j] - 1, j],
                        norms[diverged[j] - 1, j])
        last = diverged[j] or done  # a diverged member's history ends at its diverging step
        history = pd.DataFrame({"step": np.arange(1, last + 1), "loss": losses[:last, j],
                                "lr": lr[:last, j], "grad_norm": norms[:last, j],
                                "test_loss": evaluations[:last, j, 0],
                                "test_accuracy": evaluations[:last, j, 1]},
                               columns=HISTORY_COLUMNS)
        if diverged[j]:
            results.append(TrainResult(history, True, diverged[j], math.nan, math.nan))
        else:
            final = history.iloc[-1]
            results.append(TrainResult(history, False, None, float(final.test_loss),
                                       float(final.test_accuracy)))
    return results


def train_ensemble(ensemble: Ensemble, data: TaskData, members: Sequence[Member],
                   checkpoint: str | Path | None = None, fingerprint: str = "",
                   loss_fn=loss_and_correct, evaluate: Evaluator | None = None,
                   budgets: Sequence[int] = (), keep: int | None = None) -> list[TrainResult]:
    """Train every member of `ensemble` (built from `members`, in order) on `data`.

    The step runs on the ensemble's device without host synchronisation between evaluations
    and checkpoints (`rankcollapse.training.step`). Resumes from `checkpoint` when it exists and its
    fingerprint matches (one of other settings is ignored and overwritten). `evaluate(ensemble)`
    gives every member's (loss, accuracy) at the evaluation steps (kept for the members still
    training); by default on the test split, as train.train does.

    budgets (a wsd schedule only): shorter training budgets, each a cool-down branched off the
    trunk's stable phase (`branch_points`), trained and evaluated by `evaluate` at its end, after
    which the trunk goes on from where the branch left it; each is the same network that a run
    of that many steps would train. keep: the budget whose networks are the result (default
    the trunk's, cfg.steps): its members' histories, final evaluations and weights.

    Returns one TrainResult per member (of the kept budget); afterwards `ensemble.finals[k]`
    holds every member's final weights (a state_dict: a diverged member's are its last finite
    ones), `ensemble.budget_results` {budget: [(loss, accuracy, diverged step or 0) per
    member]} for the trunk and every branch, and `ensemble.numerics` the precision, engine and
    attention the step ran with (NUMERICS_COLUMNS, recorded in every table).
    """
    cfg = shared_config(members)
    if ensemble.size != len(members):
        raise ValueError(f"{len(members)} members for an ensemble of {ensemble.size} models")
    branches = branch_points(cfg, budgets)
    keep = cfg.steps if keep is None else int(keep)
    if keep != cfg.steps and keep not in {b for bs in branches.values() for b in bs}:
        raise ValueError(f"keep={keep}: not the trunk's {cfg.steps} steps nor one of the "
                         f"budgets {sorted(budgets)}")
    device = ensemble.device
    precision = effective_precision(cfg.precision, device)
    if evaluate is None:
        def evaluate(ens: Ensemble) -> tuple[list[float], list[float]]:
            return evaluate_members(ens, data.x_test, data.y_test, loss_fn=loss_fn)
    gens = [torch.Generator().manual_seed(m.seed) for m in members]  # kept on the CPU
    factors = [schedule(m.train) for m in members]
    ends = windows(0, cfg, list(branches))
    longest = max((b - a for a, b in zip([0, *ends], ends, strict=False)), default=1)
    longest = max([longest, *(b - at for at, bs in branches.items() for b in bs)])
    step = DeviceStep(ensemble, data.x_train, data.y_train, members, cfg, factors, loss_fn,
                      window=longest)
    k = len(members)
    evaluations = np.full((cfg.steps, k, 2), np.nan)  # (step, member, [test loss, accuracy])
    done_branches: dict[int, dict] = {}  # budget -> its evaluations (and the kept one's run)
    start = 0

    state = (load_checkpoint(checkpoint, device, CHECKPOINT_KEYS, "an ensemble checkpoint")
             if checkpoint is not None else None)
    if state is not None and state["fingerprint"] != fingerprint:
        log.warning("ignoring %s: it was written with other settings", checkpoint)
    elif state is not None:
        step.load(state)
        ensemble.buffers = state["buffers"]
        for g, s in zip(gens, state["generators"], strict=True):
            g.set_state(s)
        _set_global_rng_states(state["rng"])
        start = int(state["step"])
        evaluations[:start] = state["evaluations"]
        done_branches = state.get("branches", {})
        log.info("resumed from %s at step %d (%d of %d members active)", checkpoint, start,
                 len(state["active"]), k)

    def draw(steps: int) -> Tensor:
        """The next `steps` batches of every member, (steps, K, batch), from its generator."""
        return torch.stack([torch.randint(len(data.y_train), (steps, cfg.batch), generator=g)
                            for g in gens], 1)

    def branch(at: int, budget: int) -> dict:
        """Train the cool-down of `budget` from trunk step `at`, evaluate it, and return the
        trunk to where it was (weights, optimiser, flags, logs, batch generators)."""
        saved, saved_gens = step.snapshot(), [g.get_state() for g in gens]
        lr, old = step.set_schedule(at, members, [schedule(replace(m.train, steps=budget))
                                                  for m in members], budget)
        step.run(draw(budget - at))
        active = step.active_members()
        with autocast(precision, device):
            loss, acc = evaluate(ensemble)
        out = {"evaluations": [(loss[j], acc[j]) if j in active else (math.nan, math.nan)
                               for j in range(k)], "diverged": step.diverged_steps()}
        if budget == keep:
            losses, norms = step.host_logs(at, budget)
            out.update(losses=losses, norms=norms, lr=lr,
                       finals=[ensemble.state_dict(j) for j in range(k)])
        log.info("budget %d (a cool-down from step %d): accuracy %s", budget, at,
                 [round(acc[j], 4) for j in active])
        step.reset_schedule(at, old)
        step.restore(saved)
        for g, s in zip(gens, saved_gens, strict=True):
            g.set_state(s)
        return out

    ensemble.train()
    with matmul_precision(precision, device):
        done = start
        for end in windows(start, cfg, list(branches)):
            if done > start and not step.active_members():
                break  # every member has diverged: nothing is left to train
            step.run(draw(end - done))  # (W, K, batch): each member's draws, step after step
            for budget in branches.get(end, []):
                if budget not in done_branches:
                    done_branches[budget] = branch(end, budget)
            if (cfg.eval_every and end % cfg.eval_every == 0) or end == cfg.steps:
                active = step.active_members()
                with autocast(precision, device):
                    test_loss, test_acc = evaluate(ensemble)
                for j in active:
                    evaluations[end - 1, j] = test_loss[j], test_acc[j]
                losses, _ = step.host_logs(end - 1, end)
                log.info("step %d loss %s test accuracy %s", end,
                         [round(float(losses[0, j]), 4) for j in active],
                         [round(test_acc[j], 4) for j in active])
            done = end
            every = cfg.checkpoint_every
            if checkpoint is not None and every and end % every == 0:
                io.save_checked({"fingerprint": fingerprint, **step.state(),
                                 "buffers": ensemble.buffers, "evaluations": evaluations[:end],
                                 "branches": done_branches,
                                 "generators": [g.get_state() for g in gens],
                                 "rng": _global_rng_states()}, checkpoint)

    ensemble.numerics = {"precision": precision, "engine": step.engine_label,
                         "attention": step.attention}
    losses, norms = step.host_logs(0, done)
    diverged = step.diverged_steps()
    ensemble.budget_results = {
        b: [(*r["evaluations"][j], r["diverged"][j]) for j in range(k)]
        for b, r in sorted(done_branches.items())}
    ensemble.budget_results[cfg.steps] = [
        (*(float(v) for v in (evaluations[done - 1, j] if done else (math.nan, math.nan))),
         diverged[j]) for j in range(k)]
    kept = done_branches.get(keep) if keep != cfg.steps else None
    if kept is None or "finals" not in kept:
        # The trunk's networks (or, when every member diverged before the kept budget's branch
        # point, the trunk's last finite weights).
        ensemble.finals = [ensemble.state_dict(j) for j in range(k)]
        return _results(members, losses, norms, step.lr, evaluations, diverged, done)
    at = stable_steps(keep, cfg.cooldown)
    tail = np.full((keep - at, k, 2), np.nan)
    tail[-1] = kept["evaluations"]
    ensemble.finals = kept["finals"]
    return _results(members, np.concatenate([losses[:at], kept["losses"]]),
                    np.concatenate([norms[:at], kept["norms"]]),
                    np.concatenate([step.lr[:at], kept["lr"]]),
                    np.concatenate([evaluations[:at], tail]), kept["diverged"], keep)


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
            extra_columns: dict | None = None, gpu_mb: float | None = None
            ) -> list[TrainResult]:
    """One training job of the workflow: the members [{seed, lr?, warmup?, weight_decay?}] of
    one architecture as one ensemble, resuming from the checkpoint beside ensemble_path.

    Writes ensemble_path ({"members": [one dict per member in the format of train.run_job's
    model.pt: weights, settings, spec, final, fingerprint], "fingerprint"}) and history_path
    (every member's history with its identity columns), then drops the checkpoint.
    """
    team = members_from(train_options, members)
    runtime.setup(threads, team[0].seed)
    dev = runtime.job_device(device, gpu_mb or None)  # room for gpu_mb MB on a shared GPU
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
                  extra_columns or {}, fingerprint, ensemble_path, history_path,
                  ensemble.numerics)
    checkpoint.unlink(missing_ok=True)
    return results


def write_members(team: Sequence[Member], results: Sequence[TrainResult], finals: Sequence[dict],
                  settings: Sequence[dict], hashes: Sequence[str], spec, extra_columns: dict,
                  fingerprint: str, ensemble_path: str | Path, history_path: str | Path,
                  numerics: dict) -> pd.DataFrame:
    """Write a trained ensemble's members: ensemble_path ({"members": [weights, settings, spec,
    final, fingerprint per member], "fingerprint"}) and history_path (every member's history
    with extra_columns, its identity columns, how it was trained (`numerics`: precision, engine,
    attention) and config_hash). Returns the history table."""
    histories, saved = [], []
    for m, result, state, settings_k, hash_k in zip(team, results, finals, settings, hashes,
                                                    strict=True):
        history = result.history.assign(diverged=result.diverged,
                                         diverged_step=result.diverged_step or 0)
        for key, value in {**extra_columns, **m.identity(), **numerics}.items():
            history[key] = value
        history["config_hash"] = hash_k
        histories.append(history)
        final = {"diverged": result.diverged, "diverged_step": result.diverged_step,
                 "test_loss": result.test_loss, "test_accuracy": result.test_accuracy,
                 **numerics}
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
    return load_saved(ensemble_path)["members"]


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
        for key in NUMERICS_COLUMNS:  # ensembles written before these were recorded
            table[key] = final.get(key, NUMERICS_BEFORE[key])
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
