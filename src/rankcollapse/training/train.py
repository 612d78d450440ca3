"""Training: the single-run reference loop (checkpoint/resume, divergence detection, a history
table), the workflow's single-run job, and the one loader of checkpoints and saved models. The
ensemble engine matches it member by member; how: docs/training.md.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from rankcollapse import io, runtime
from rankcollapse.core.metrics import layer_metrics, token_similarity
from rankcollapse.core.model import TaskModel, build_task_model
from rankcollapse.core.specs import TrainConfig, stable_steps
from rankcollapse.core.tasks import TaskData, TaskSpec, make_task

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    history: pd.DataFrame  # one row per step: step, loss, lr, grad_norm, test_loss, test_accuracy
    diverged: bool
    diverged_step: int | None  # the step whose loss or gradient was not finite
    test_loss: float  # final, NaN when diverged
    test_accuracy: float


def new_model(spec: TaskSpec, variant: dict, model_options: dict, seed: int) -> TaskModel:
    """The task model whose initial weights are fixed by `seed` (training and metrics agree)."""
    torch.manual_seed(seed)
    return build_task_model(variant, asdict(spec), **model_options)


def schedule(cfg: TrainConfig):
    """Learning-rate factor of step s: linear warm-up to 1, then cosine decay to 0, 1 throughout
    ("constant"), or 1 until the cool-down of the last `cfg.cooldown` of the steps, which
    decays linearly to 0 ("wsd")."""
    decay_from = stable_steps(cfg.steps, cfg.cooldown)

    def factor(step: int) -> float:
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        if cfg.schedule == "constant":
            return 1.0
        if cfg.schedule == "wsd":
            return 1.0 if step < decay_from else (cfg.steps - step) / (cfg.steps - decay_from)
        progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def loss_and_correct(logits: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Mean cross-entropy and number of correct labels; logits (..., C), y (...)."""
    logits, y = logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
    return F.cross_entropy(logits, y), (logits.argmax(-1) == y).sum()


@torch.no_grad()
def evaluate(model: TaskModel, x: Tensor, y: Tensor, batch: int = 512,
             loss_fn=loss_and_correct) -> tuple[float, float]:
    """(mean loss, accuracy over labels) on (x, y), fused attention, in eval mode.

    loss_fn(output, y) -> (mean loss, number of correct labels); cross-entropy by default."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total_loss, correct, labels = 0.0, 0, 0
    for i in range(0, len(y), batch):
        xb, yb = x[i:i + batch].to(device), y[i:i + batch].to(device)
        logits, _ = model(xb)
        loss, right = loss_fn(logits, yb)
        total_loss += float(loss) * yb.numel()
        correct += int(right)
        labels += yb.numel()
    model.train(was_training)
    return total_loss / labels, correct / labels


def _rng_states(gen: torch.Generator) -> dict:
    # NumPy's legacy global state is what runtime.setup seeds; saved so that any use resumes.
    states = {"batches": gen.get_state(), "torch": torch.get_rng_state(),
              "numpy": np.random.get_state(), "python": random.getstate()}  # noqa: NPY002
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(gen: torch.Generator, states: dict) -> None:
    gen.set_state(states["batches"])
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])  # noqa: NPY002
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


CHECKPOINT_KEYS = {"step", "model", "optimiser"}


def load_checkpoint(path: str | Path, device, keys=CHECKPOINT_KEYS,
                    what: str = "a training checkpoint") -> dict | None:
    """The checkpoint's state, or None if there is none or it cannot be read. The one loader
    of resume checkpoints: `train` reads its own (CHECKPOINT_KEYS), `train_ensemble` an
    ensemble's (`ensemble.CHECKPOINT_KEYS`).

    A truncated or garbled file (the SHA-256 header of io.save_checked), or one that lacks any
    of `keys`, is never trained on: the job logs a warning and starts from scratch, and the
    next checkpoint replaces the file.
    """
    if not Path(path).exists():
        return None
    try:
        state = io.load_checked(path, map_location=device)
        if not isinstance(state, dict) or not set(keys) <= set(state):
            raise ValueError(f"not {what}")
        return state
    except Exception as err:  # noqa: BLE001 - any unreadable checkpoint means: start over
        log.warning("ignoring damaged checkpoint %s (%s: %s); training from scratch", path,
                    type(err).__name__, err)
        return None


def load_saved(path: str | Path) -> dict:
    """A trained model file as the workflow writes it, on the CPU: run_job's model.pt
    (weights, settings, spec, final, fingerprint) or ensemble.run_job's ensemble.pt
    ({"members": [one such dict per member], "fingerprint"}). The one reader of both."""
    return torch.load(path, map_location="cpu", weights_only=False)


def train(model: TaskModel, data: TaskData, cfg: TrainConfig, seed: int,
          checkpoint: str | Path | None = None, fingerprint: str = "",
          loss_fn=loss_and_correct) -> TrainResult:
    """Train `model` on `data`; resume from `checkpoint` when it exists and its fingerprint
    matches (a checkpoint of other settings is ignored and overwritten). `loss_fn` as in
    `evaluate` (e.g. a regression loss for the circle experiment); any model whose forward
    returns (output, _) trains here."""
    device = next(model.parameters()).device
    optimiser = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimiser, schedule(cfg))
    gen = torch.Generator().manual_seed(seed)  # batch order; kept on the CPU for every device
    x_train, y_train = data.x_train.to(device), data.y_train.to(device)
    rows: list[dict] = []
    start, diverged_step = 0, None

    state = load_checkpoint(checkpoint, device) if checkpoint is not None else None
    if state is not None:
        if state.get("fingerprint") == fingerprint:
            model.load_state_dict(state["model"])
            optimiser.load_state_dict(state["optimiser"])
            scheduler.load_state_dict(state["scheduler"])
            _set_rng_states(gen, state["rng"])
            rows, start = state["history"], state["step"]
            log.info("resumed from %s at step %d", checkpoint, start)
        else:
            log.warning("ignoring %s: it was written with other settings", checkpoint)

    model.train()
    for step in range(start, cfg.steps):
        idx = torch.randint(len(y_train), (cfg.batch,), generator=gen).to(device)
        logits, _ = model(x_train[idx])  # fused attention: nothing captured
        loss, _ = loss_fn(logits, y_train[idx])
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        row = {"step": step + 1, "loss": float(loss.detach()), "lr": scheduler.get_last_lr()[0],
               "grad_norm": float(grad_norm), "test_loss": math.nan, "test_accuracy": math.nan}
        if not (math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])):
            diverged_step = step + 1
            rows.append(row)
            log.warning("diverged at step %d (loss %s, grad norm %s)", diverged_step,
                        row["loss"], row["grad_norm"])
            break
        optimiser.step()
        scheduler.step()
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            row["test_loss"], row["test_accuracy"] = evaluate(model, data.x_test, data.y_test,
                                                              loss_fn=loss_fn)
            log.info("step %d loss %.4f test loss %.4f test accuracy %.4f", step + 1,
                     row["loss"], row["test_loss"], row["test_accuracy"])
        rows.append(row)
        every = cfg.checkpoint_every
        if checkpoint is not None and every and (step + 1) % every == 0:
            state = {"fingerprint": fingerprint, "step": step + 1, "history": rows,
                     "model": model.state_dict(), "optimiser": optimiser.state_dict(),
                     "scheduler": scheduler.state_dict(), "rng": _rng_states(gen)}
            io.save_checked(state, checkpoint)

    history = pd.DataFrame(rows, columns=["step", "loss", "lr", "grad_norm", "test_loss",
                                          "test_accuracy"])
    if diverged_step is not None:
        return TrainResult(history, True, diverged_step, math.nan, math.nan)
    last = history.iloc[-1]
    return TrainResult(history, False, None, float(last.test_loss), float(last.test_accuracy))


def run_job(task: str, task_options: dict, variant: dict, model_options: dict,
            train_options: dict, seed: int, model_path: str | Path, history_path: str | Path,
            device: str = "cpu", threads: int = 1,
            extra_columns: dict | None = None) -> TrainResult:
    """One training job of the workflow: build, train (resuming from the checkpoint beside
    model_path), write model_path (weights + everything needed to rebuild the model) and
    history_path (the history with the run's identity columns), then drop the checkpoint."""
    runtime.setup(threads, seed)
    dev = runtime.job_device(device)
    data = make_task(task, **task_options)
    cfg = TrainConfig.from_dict(train_options)
    model = new_model(data.spec, variant, model_options, seed).to(dev)
    settings = {"task": task, "task_options": task_options, "variant": variant,
                "model_options": model_options, "train": asdict(cfg), "seed": seed}
    fingerprint = io.config_hash(settings)
    checkpoint = Path(model_path).with_name("checkpoint.pt")
    log.info("training %s on %s (%d threads), fingerprint %s", settings, dev,
             torch.get_num_threads(), fingerprint)

    result = train(model, data, cfg, seed, checkpoint, fingerprint)

    history = result.history.assign(diverged=result.diverged,
                                     diverged_step=result.diverged_step or 0)
    for key, value in {**(extra_columns or {}), "seed": seed}.items():
        history[key] = value
    history["config_hash"] = fingerprint
    history["code_version"] = io.code_version()
    final = {"diverged": result.diverged, "diverged_step": result.diverged_step,
             "test_loss": result.test_loss, "test_accuracy": result.test_accuracy}
    saved = {"model": {k: v.cpu() for k, v in model.state_dict().items()},
             "settings": settings, "spec": asdict(data.spec), "final": final,
             "fingerprint": fingerprint}
    io.atomic_write(model_path, lambda tmp: torch.save(saved, tmp))
    io.write_parquet(history, history_path)
    checkpoint.unlink(missing_ok=True)
    log.info("final %s", final)
    return result


@torch.no_grad()
def layer_table(model: TaskModel, x: Tensor) -> pd.DataFrame:
    """Per-layer metrics of one captured pass on x: a row per (sample, layer), layer 0 being
    the embedded input; columns of `metrics.layer_metrics` (attention |lambda_2| per layer)."""
    model.eval()
    x = x.to(next(model.parameters()).device)
    _, trace = model(x, capture=True)
    frames = []
    for layer, hidden in enumerate(trace.hidden):
        attn = trace.attention[layer - 1] if layer > 0 else None
        mid = trace.after_attention[layer - 1] if layer > 0 else None
        values = {k: v.double().cpu().numpy() for k, v in layer_metrics(hidden, attn).items()}
        values["token_similarity_after_attention"] = (
            token_similarity(mid).double().cpu().numpy() if mid is not None
            else np.full(len(x), np.nan))
        frames.append(pd.DataFrame({"sample": range(len(x)), "layer": layer, **values}))
    return pd.concat(frames, ignore_index=True)


def measure_job(model_path: str | Path, eval_size: int, device: str = "cpu",
                threads: int = 1) -> pd.DataFrame:
    """Per-layer metrics of a trained model and of the same model at initialisation (rebuilt
    from its seed) on the first `eval_size` test examples, with final test loss/accuracy.

    Returns rows (stage in {init, trained}, sample, layer, metrics..., test_loss,
    test_accuracy, diverged, diverged_step). A diverged model has non-finite weights: its
    trained rows carry NaN metrics.
    """
    saved = load_saved(model_path)
    settings = saved["settings"]
    runtime.setup(threads, settings["seed"])
    dev = runtime.job_device(device)
    data = make_task(settings["task"], **settings["task_options"])
    x_eval = data.x_test[:eval_size]
    init = new_model(data.spec, settings["variant"], settings["model_options"], settings["seed"])
    init_loss, init_acc = evaluate(init.to(dev), data.x_test, data.y_test)
    frames = [layer_table(init, x_eval).assign(stage="init", test_loss=init_loss,
                                               test_accuracy=init_acc)]
    final = saved["final"]
    trained = new_model(data.spec, settings["variant"], settings["model_options"],
                        settings["seed"])
    trained.load_state_dict(saved["model"])
    finite = all(torch.isfinite(p).all() for p in trained.parameters())
    if final["diverged"] or not finite:
        table = frames[0].assign(stage="trained")
        metric_cols = [c for c in table.columns if c not in ("sample", "layer", "stage")]
        table[metric_cols] = math.nan
        frames.append(table)
    else:
        loss, acc = evaluate(trained.to(dev), data.x_test, data.y_test)
        frames.append(layer_table(trained, x_eval).assign(stage="trained", test_loss=loss,
                                                          test_accuracy=acc))
    table = pd.concat(frames, ignore_index=True)
    table["diverged"] = bool(final["diverged"])
    table["diverged_step"] = int(final["diverged_step"] or 0)
    table["depth"] = int(settings["model_options"]["depth"])
    table["seed"] = int(settings["seed"])
    table["chance"] = data.spec.chance
    table["config_hash"] = saved["fingerprint"]
    table["code_version"] = io.code_version()
    return table
