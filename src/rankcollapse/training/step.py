"""The ensemble's training step on the device: one static-shape step, run eagerly, captured once
in a CUDA graph and replayed, or compiled with `torch.compile`, with no host synchronisation
inside an evaluation window. Engines, precision, attention: docs/training.md.
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode

from rankcollapse.core.specs import ATTENTION, ENGINES, PRECISIONS
from rankcollapse.runtime import inductor_deterministic

log = logging.getLogger(__name__)

BETAS, EPS = (0.9, 0.999), 1e-8  # torch.optim.AdamW's defaults, as train.train uses
WARMUP_STEPS = 2  # eager steps on a side stream before capture (state restored afterwards)
# torch.compile's options for the `compile` engine (tests switch the backend to aot_eager, which
# traces the same graphs without generating code).
COMPILE_OPTIONS: dict = {"dynamic": False}


def resolve_engine(engine: str, device: torch.device) -> tuple[str, str]:
    """(the engine that runs on `device`, why, if it differs from the one asked for)."""
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}: allowed values are {list(ENGINES)}")
    if engine == "auto":
        return ("graph", "") if device.type == "cuda" else ("eager", "")
    if engine == "graph" and device.type != "cuda":
        return "eager", "CUDA graphs need a GPU; this job runs on the CPU"
    return engine, ""


def effective_precision(precision: str, device: torch.device) -> str:
    """The precision a job on `device` actually computes in (what the tables record)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: allowed values are {list(PRECISIONS)}")
    if precision == "tf32" and device.type != "cuda":
        return "float32"  # TensorFloat-32 is a GPU format; the CPU computes float32
    return precision


@contextlib.contextmanager
def matmul_precision(precision: str, device: torch.device):
    """TensorFloat-32 matrix products (and cuDNN convolutions) on a GPU while inside, for
    `tf32`; the previous settings afterwards. Nothing changes for other precisions."""
    if effective_precision(precision, device) != "tf32":
        yield
        return
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def autocast(precision: str, device: torch.device):
    """bfloat16 autocast of the forward pass for `bf16` (without autocast's weight cache, which
    a captured graph must not hold), else a context that does nothing."""
    if effective_precision(precision, device) == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)
    return contextlib.nullcontext()


def attention_backends(attention: str, device: torch.device) -> list[SDPBackend]:
    """The `scaled_dot_product_attention` backends an ensemble may use under vmap."""
    if attention not in ATTENTION:
        raise ValueError(f"attention={attention!r}: allowed values are {list(ATTENTION)}")
    if attention == "fused" and device.type == "cuda" and fused_attention_batches(device):
        return [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]
    return [SDPBackend.MATH]


def fused_attention_batches(device: torch.device) -> bool:
    """Whether the fused attention kernels run under vmap on `device` with a batching rule
    (folding the member dimension into the batch) rather than a loop over members: tried once
    on small inputs, forward and backward, and compared with the math backend."""
    q = torch.randn(3, 4, 2, 17, 16, device=device, requires_grad=True)  # (K, B, H, n, d_head)
    fused = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
             SDPBackend.CUDNN_ATTENTION]

    def attend(backends):
        with sdpa_kernel(backends):
            out = torch.func.vmap(torch.nn.functional.scaled_dot_product_attention)(q, q, q)
        grad, = torch.autograd.grad(out.square().sum(), q)
        return out, grad

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*performance drop.*")
            out, grad = attend(fused)
    except Exception as err:  # noqa: BLE001 - any failure means: keep the math backend
        log.warning("fused attention does not batch over members here (%s: %s); using the "
                    "math backend", type(err).__name__, err)
        return False
    ref_out, ref_grad = attend([SDPBackend.MATH])
    return bool(torch.allclose(out, ref_out, rtol=1e-3, atol=1e-4)
                and torch.allclose(grad, ref_grad, rtol=1e-3, atol=1e-3))


class OneHotEmbedding(TorchFunctionMode):
    """Inside, `F.embedding(ids, W)` is computed as onehot(ids) @ W: the same values, and a
    backward that is a matrix product. The embedding's own backward sorts its indices with a
    host synchronisation above 3,072 of them, which a CUDA graph cannot capture (PyTorch issue
    #82886); the product can be captured. Its gradient sums the same terms in another order."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.embedding:
            names = ("input", "weight", "padding_idx", "max_norm", "norm_type",
                     "scale_grad_by_freq", "sparse")
            given = {**dict(zip(names, args, strict=False)), **kwargs}
            if (given.get("padding_idx") is not None or given.get("max_norm") is not None
                    or given.get("scale_grad_by_freq") or given.get("sparse")):
                return func(*args, **kwargs)  # options the product does not implement
            ids, weight = given["input"], given["weight"]
            classes = torch.arange(weight.shape[0], device=ids.device)
            onehot = (ids[..., None] == classes).to(weight.dtype)  # (..., V)
            return onehot @ weight  # (..., d)
        return func(*args, **kwargs)


def lr_tables(members: Sequence, factors: Sequence[Callable[[int], float]], steps: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lr, decay, step size, sqrt of the second bias correction) for every step and member:
    lr (steps, K) is what LambdaLR gives; decay = 1 - lr * weight_decay and step size =
    -lr / (1 - beta1^t) are AdamW's per-member factors at its t-th step, computed in Python
    floats as torch.optim.AdamW does; the last is (steps,)."""
    beta1, beta2 = BETAS
    lr = np.array([[m.train.lr * f(s) for m, f in zip(members, factors, strict=True)]
                   for s in range(steps)], dtype=np.float64).reshape(steps, len(members))
    wd = [m.train.weight_decay for m in members]
    decay = np.array([[1 - a * w for a, w in zip(row, wd, strict=True)] for row in lr.tolist()],
                     dtype=np.float64).reshape(steps, len(members))
    size = np.array([[-a / (1 - beta1 ** (s + 1)) for a in row]
                     for s, row in enumerate(lr.tolist())], dtype=np.float64).reshape(
        steps, len(members))
    bias2 = np.array([(1 - beta2 ** (s + 1)) ** 0.5 for s in range(steps)], dtype=np.float64)
    return lr, decay, size, bias2


class DeviceStep:
    """Everything one training step needs on the device, and the step itself.

    State (all on the ensemble's device, fixed addresses): `flat` (K, P) the weights (the
    ensemble's), `exp_avg`, `exp_avg_sq` (K, P) AdamW's moments, `active` (K,) bool, `diverged`
    (K,) the step at which each member diverged (0: it has not), `step` the number of steps
    taken (0-dim), `loss_log` and `norm_log` (steps, K) every step's loss and gradient norm,
    and the window's batch indices `batches` (window, K, batch) read at position `position`.
    """

    def __init__(self, ensemble, x_train: Tensor, y_train: Tensor, members: Sequence, cfg,
                 factors: Sequence[Callable[[int], float]], loss_fn, window: int):
        self.ensemble = ensemble
        dev, dtype = ensemble.device, ensemble.dtype
        self.device = dev
        self.k, self.steps, self.batch = ensemble.size, cfg.steps, cfg.batch
        self.clip = cfg.clip
        self.loss_fn = loss_fn
        self.precision = effective_precision(cfg.precision, dev)
        self.engine, self.engine_note = resolve_engine(cfg.engine, dev)
        self.x_train, self.y_train = x_train.to(dev), y_train.to(dev)
        lr, decay, size, bias2 = lr_tables(members, factors, cfg.steps)
        self.lr = lr  # host copy: the history's lr column
        self.decay = torch.tensor(decay, dtype=dtype, device=dev)  # (steps, K)
        self.size = torch.tensor(size, dtype=dtype, device=dev)  # (steps, K)
        self.bias2 = torch.tensor(bias2, dtype=dtype, device=dev)[:, None]  # (steps, 1)
        self.flat = ensemble.flat.requires_grad_(True)
        self.exp_avg = torch.zeros_like(self.flat, requires_grad=False)
        self.exp_avg_sq = torch.zeros_like(self.flat, requires_grad=False)
        self.active = torch.ones(self.k, dtype=torch.bool, device=dev)
        self.diverged = torch.zeros(self.k, dtype=torch.long, device=dev)
        self.step = torch.zeros((), dtype=torch.long, device=dev)
        self.loss_log = torch.full((cfg.steps, self.k), math.nan, dtype=dtype, device=dev)
        self.norm_log = torch.full((cfg.steps, self.k), math.nan, dtype=dtype, device=dev)
        self.batches = torch.zeros(max(1, window), self.k, cfg.batch, dtype=torch.long,
                                   device=dev)
        self.position = torch.zeros((), dtype=torch.long, device=dev)
        ensemble.attention = attention_backends(cfg.attention, dev)
        self.attention = "fused" if ensemble.attention != [SDPBackend.MATH] else "math"
        self._forward = ensemble.losses
        self.graph = None  # the captured step, when there is one
        self.one_hot = False  # token embeddings as one-hot products (while capturing)
        self._prepared = False

    # --- the step ----------------------------------------------------------------------------

    def _embedding_mode(self):
        return OneHotEmbedding() if self.one_hot else contextlib.nullcontext()

    def _body(self) -> None:
        """One training step of every member, entirely on the device."""
        k, b = self.k, self.batch
        index = self.batches.index_select(0, self.position.view(1))[0]  # (K, batch)
        flat_index = index.reshape(-1)
        xb = self.x_train.index_select(0, flat_index).view(k, b, *self.x_train.shape[1:])
        yb = self.y_train.index_select(0, flat_index).view(k, b, *self.y_train.shape[1:])
        with autocast(self.precision, self.device), self._embedding_mode():
            loss, _ = self._forward(xb, yb, self.loss_fn, flat=self.flat)  # (K,)
        grad, = torch.autograd.grad(loss.sum(), self.flat)  # (K, P): members share nothing
        with torch.no_grad():
            loss = loss.detach().to(self.flat.dtype)
            norms = clip_per_member(grad, self.clip)
            bad = ~(torch.isfinite(loss) & torch.isfinite(norms))
            taken = self.step + 1
            self.diverged.copy_(torch.where(bad & self.active, taken, self.diverged))
            self.active.logical_and_(~bad)
            # A frozen member: no gradient, decay 1 and step size 0, so its weights stay
            # exactly what they were and its moments stay finite.
            grad.masked_fill_(~self.active[:, None], 0.0)
            at = self.step.view(1)
            decay = torch.where(self.active, self.decay.index_select(0, at)[0], 1.0)[:, None]
            size = torch.where(self.active, self.size.index_select(0, at)[0], 0.0)[:, None]
            beta1, beta2 = BETAS
            self.flat.mul_(decay)
            self.exp_avg.lerp_(grad, 1 - beta1)
            self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (self.exp_avg_sq.sqrt() / self.bias2.index_select(0, at)).add_(EPS)
            self.flat.addcdiv_(self.exp_avg * size, denom)
            self.loss_log.index_copy_(0, at, loss[None])
            self.norm_log.index_copy_(0, at, norms[None])
            self.step.add_(1)
            self.position.add_(1)

    # --- engines -----------------------------------------------------------------------------

    def prepare(self) -> None:
        """Compile and/or capture, once, from the current state (after any resume)."""
        if self._prepared:
            return
        self._prepared = True
        if self.engine == "compile":
            inductor_deterministic()
            self._forward = torch.compile(self.ensemble.losses, **COMPILE_OPTIONS)
        if self.device.type == "cuda" and self.engine in ("graph", "compile"):
            self.one_hot = True
            self._capture()
        log.info("training step: engine %s%s, precision %s, attention %s", self.engine_label,
                 f" ({self.engine_note})" if self.engine_note else "", self.precision,
                 self.attention)

    def _mutable(self) -> list[Tensor]:
        return [self.flat, self.exp_avg, self.exp_avg_sq, self.active, self.diverged, self.step,
                self.position, self.loss_log, self.norm_log]

    def _capture(self) -> None:
        """Warm up on a side stream (kernels chosen, memory pools filled, compilation done),
        restore the state the warm-up changed, and capture one step in a CUDA graph. If capture
        fails, the job goes on eagerly and says why."""
        saved = self.snapshot()

        def restore() -> None:
            self.restore(saved)

        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(WARMUP_STEPS):
                    self._body()
            torch.cuda.current_stream(self.device).wait_stream(side)
            restore()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._body()
            self.graph = graph
        except Exception as err:  # noqa: BLE001 - capture is an optimisation: fall back
            torch.cuda.synchronize(self.device)
            self.graph, self.one_hot = None, False
            self.engine_note = f"capture failed: {type(err).__name__}: {err}"
            log.warning("CUDA graph capture failed (%s: %s); stepping without a graph",
                        type(err).__name__, err)
        restore()

    def snapshot(self) -> list[Tensor]:
        """A copy, on the device, of everything a step changes (weights, moments, flags, step
        counters, logs): a cool-down branch starts from it and `restore` returns to it."""
        return [t.detach().clone() for t in self._mutable()]

    def restore(self, saved: list[Tensor]) -> None:
        """Put a `snapshot` back into the same tensors (their addresses stay)."""
        with torch.no_grad():
            for t, s in zip(self._mutable(), saved, strict=True):
                t.copy_(s)

    def set_schedule(self, start: int, members: Sequence, factors: Sequence[Callable],
                     stop: int) -> tuple[np.ndarray, list[Tensor]]:
        """Steps start..stop-1 follow the schedules `factors` (one per member, of a run of
        `stop` steps) instead of the trunk's: the tables are overwritten in place. Returns
        (the new rows' learning rates (stop - start, K), the old rows, for `reset_schedule`)."""
        lr, decay, size, _ = lr_tables(members, factors, stop)
        old = [self.decay[start:stop].clone(), self.size[start:stop].clone()]
        with torch.no_grad():
            self.decay[start:stop].copy_(torch.tensor(decay[start:], dtype=self.decay.dtype))
            self.size[start:stop].copy_(torch.tensor(size[start:], dtype=self.size.dtype))
        return lr[start:], old

    def reset_schedule(self, start: int, old: list[Tensor]) -> None:
        """Undo `set_schedule` (old: the rows it returned)."""
        with torch.no_grad():
            self.decay[start:start + len(old[0])].copy_(old[0])
            self.size[start:start + len(old[1])].copy_(old[1])

    def run(self, batches: Tensor) -> None:
        """Take len(batches) steps; batches (W, K, batch) the window's indices (CPU)."""
        self.prepare()
        with torch.no_grad():
            self.batches[:len(batches)].copy_(batches)
            self.position.zero_()
        with matmul_precision(self.precision, self.device):
            for _ in range(len(batches)):
                if self.graph is not None:
                    self.graph.replay()
                else:
                    self._body()

    # --- state to and from the host ----------------------------------------------------------

    @property
    def engine_label(self) -> str:
        """The engine that ran, as the tables record it: eager, graph, compile (on a CPU) or
        compile+graph (on a GPU)."""
        if self.engine == "compile":
            return "compile+graph" if self.graph is not None else "compile"
        return "graph" if self.graph is not None else "eager"

    def host_logs(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(losses, gradient norms) of steps start+1..stop, (stop - start, K), on the host."""
        return (self.loss_log[start:stop].double().cpu().numpy(),
                self.norm_log[start:stop].double().cpu().numpy())

    def active_members(self) -> list[int]:
        return torch.nonzero(self.active).flatten().tolist()

    def diverged_steps(self) -> list[int]:
        return self.diverged.tolist()

    def state(self) -> dict:
        """What a checkpoint keeps of the device state (copies on the host)."""
        return {"flat": self.flat.detach().cpu(), "exp_avg": self.exp_avg.cpu(),
                "exp_avg_sq": self.exp_avg_sq.cpu(), "active": self.active_members(),
                "diverged_at": self.diverged_steps(), "step": int(self.step),
                "losses": self.loss_log[:int(self.step)].cpu(),
                "norms": self.norm_log[:int(self.step)].cpu()}

    def load(self, state: dict) -> None:
        """Restore a checkpoint's state into the same tensors (their addresses stay)."""
        step = int(state["step"])
        with torch.no_grad():
            self.flat.copy_(state["flat"])
            self.exp_avg.copy_(state["exp_avg"])
            self.exp_avg_sq.copy_(state["exp_avg_sq"])
            self.active.zero_()
            self.active[list(state["active"])] = True
            self.diverged.copy_(torch.tensor(state["diverged_at"], dtype=torch.long))
            self.step.fill_(step)
            self.loss_log[:step].copy_(state["losses"])
            self.norm_log[:step].copy_(state["norms"])


@torch.no_grad()
def clip_per_member(grad: Tensor, max_norm: float) -> Tensor:
    """Scale each member's gradient (a row of grad (K, P)) to norm <= max_norm, as
    clip_grad_norm_ does for one model; returns the norms before clipping, (K,)."""
    norms = torch.linalg.vector_norm(grad, dim=1)
    grad.mul_(torch.clamp(max_norm / (norms + 1e-6), max=1.0)[:, None])
    return norms
