"""The ensemble's device step (rankcollapse.training.step): no host synchronisation inside a
window, the
compiled and captured engines equal to the eager one, precision as a recorded choice, and the
capture-safe embedding. CUDA-graph tests need a GPU and skip without one, saying so."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pandas as pd
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rankcollapse.core.specs import PRESETS
from rankcollapse.core.tasks import TaskData, make_task
from rankcollapse.training import ensemble as E
from rankcollapse.training import step as S
from rankcollapse.training import train as T

MODEL = {"width": 16, "heads": 2, "mlp_ratio": 2, "depth": 2}
BASE = T.TrainConfig(steps=12, batch=16, lr=2e-3, warmup=4, checkpoint_every=0, eval_every=6)
CPU = torch.device("cpu")
NO_GPU = "needs a CUDA GPU (CUDA graphs exist only there); the CPU path is tested above"


def _digits(dtype=torch.float32) -> TaskData:
    data = make_task("digits")
    return TaskData(data.spec, data.x_train.to(dtype), data.y_train, data.x_test.to(dtype),
                    data.y_test)


def _train(data, cfg, dtype=torch.float32, variant="post_ln", device="cpu", members=None):
    members = members or [E.Member(0, cfg), E.Member(1, replace(cfg, lr=5e-3)),
                          E.Member(2, replace(cfg, lr=1e12, warmup=1))]  # the last diverges
    ens = E.Ensemble([T.new_model(data.spec, PRESETS[variant], MODEL, m.seed).to(dtype)
                      .to(device) for m in members])
    return E.train_ensemble(ens, data, members), ens


def test_engines_and_precisions_resolve_per_device():
    assert S.resolve_engine("auto", CPU) == ("eager", "")
    assert S.resolve_engine("auto", torch.device("cuda")) == ("graph", "")
    engine, why = S.resolve_engine("graph", CPU)
    assert engine == "eager" and "GPU" in why
    assert S.resolve_engine("compile", CPU) == ("compile", "")
    assert S.effective_precision("tf32", CPU) == "float32"  # recorded as what ran
    assert S.effective_precision("tf32", torch.device("cuda")) == "tf32"
    assert S.effective_precision("bf16", CPU) == "bf16"
    with pytest.raises(ValueError, match="allowed values"):
        S.resolve_engine("jit", CPU)
    with pytest.raises(ValueError, match="precision"):
        T.TrainConfig(precision="fp8")


def test_windows_end_at_every_evaluation_and_checkpoint():
    cfg = replace(BASE, steps=20, eval_every=6, checkpoint_every=5)
    assert E.windows(0, cfg) == [5, 6, 10, 12, 15, 18, 20]
    assert E.windows(10, cfg) == [12, 15, 18, 20]
    assert E.windows(20, cfg) == []


class _HostSyncs(TorchDispatchMode):
    """Records every operator that hands a tensor's value to the host (item, bool, tolist's
    scalar reads, comparisons returning a Python bool) or moves a tensor to another device."""

    SYNCS = {"_local_scalar_dense", "item", "is_nonzero", "equal", "allclose"}

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        kwargs = kwargs or {}
        if name in self.SYNCS:
            self.seen.append(name)
        if name in ("_to_copy", "copy_") and "device" in kwargs:
            source = args[0].device if isinstance(args[0], torch.Tensor) else None
            if source is not None and torch.device(kwargs["device"]) != source:
                self.seen.append(f"{name} to {kwargs['device']}")
        return func(*args, **kwargs)


@pytest.mark.parametrize("variant", ["post_ln", "pre_ln", "post_ln_deesc"])
def test_a_step_never_synchronises_with_the_host(variant):
    """Every operation of the step stays on the device: what a CUDA graph needs (and what keeps
    an eager GPU step from waiting on the host)."""
    data = _digits()
    members = [E.Member(0, BASE), E.Member(1, replace(BASE, lr=1e12, warmup=1))]
    ens = E.Ensemble([T.new_model(data.spec, PRESETS[variant], MODEL, m.seed) for m in members])
    step = S.DeviceStep(ens, data.x_train, data.y_train, members, BASE,
                        [T.schedule(m.train) for m in members], T.loss_and_correct, window=3)
    step.batches.copy_(torch.randint(len(data.y_train), (3, 2, BASE.batch)))
    watch = _HostSyncs()
    with watch:
        for _ in range(3):
            step._body()
    assert watch.seen == []
    assert int(step.step) == 3 and step.diverged_steps()[1] >= 1  # it ran, and froze one


def test_the_compiled_step_equals_the_eager_step(monkeypatch):
    """torch.compile's graphs (traced by dynamo, differentiated by AOTAutograd) against the
    eager step, float64. On the CPU the test traces with the aot_eager backend, which runs the
    traced graphs without generating kernels (inductor's C++ code generation takes minutes on
    2 cores); on a GPU inductor fuses them, which only reorders rounding."""
    torch._dynamo.reset()
    monkeypatch.setitem(S.COMPILE_OPTIONS, "backend", "aot_eager")
    data = _digits(torch.float64)
    eager, eager_ens = _train(data, BASE, torch.float64)
    compiled, compiled_ens = _train(data, replace(BASE, engine="compile"), torch.float64)
    assert compiled_ens.numerics["engine"] == "compile"
    assert eager_ens.numerics["engine"] == "eager"
    for a, b in zip(compiled, eager, strict=True):
        pd.testing.assert_frame_equal(a.history, b.history, check_exact=False, rtol=1e-12,
                                      atol=1e-14)
        assert (a.diverged, a.diverged_step) == (b.diverged, b.diverged_step)
    for a, b in zip(compiled_ens.finals, eager_ens.finals, strict=True):
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=1e-12, atol=1e-14)
    assert compiled[2].diverged and not compiled[0].diverged  # isolation holds compiled too


def test_bf16_is_a_recorded_choice_and_still_trains():
    data = _digits()
    cfg = replace(BASE, steps=30, eval_every=30)
    full, full_ens = _train(data, cfg)
    half, half_ens = _train(data, replace(cfg, precision="bf16"))
    assert full_ens.numerics["precision"] == "float32"
    assert half_ens.numerics["precision"] == "bf16"
    assert half[0].history.loss.iloc[-1] < half[0].history.loss.iloc[0]  # it learns
    assert not half[0].history.loss.equals(full[0].history.loss)  # in another precision
    assert half[2].diverged and not half[1].diverged
    _, tf32_ens = _train(data, replace(cfg, precision="tf32"))
    assert tf32_ens.numerics["precision"] == "float32"  # no TF32 on a CPU, and it says so


def test_history_and_metrics_tables_record_how_members_were_trained(tmp_path):
    opts = {"steps": 6, "batch": 8, "lr": 2e-3, "warmup": 2, "checkpoint_every": 0,
            "eval_every": 6, "precision": "bf16"}
    E.run_job("digits", {}, PRESETS["post_ln"], MODEL, opts, [{"seed": 0}, {"seed": 1}],
              tmp_path / "ens.pt", tmp_path / "history.parquet", threads=1)
    history = pd.read_parquet(tmp_path / "history.parquet")
    metrics = E.measure_job(tmp_path / "ens.pt", eval_size=4, threads=1)
    for table in (history, metrics):
        assert set(table.precision) == {"bf16"} and set(table.engine) == {"eager"}
        assert set(table.attention) == {"math"}


def test_one_hot_embedding_gives_the_embedding_s_values_and_gradients():
    """The capture-safe embedding (used inside CUDA graphs) is the same function: forward
    values equal, gradients equal to rounding (they sum the same terms in another order)."""
    data = make_task("sorting", train_size=64, test_size=16)
    members = [E.Member(s, BASE) for s in range(3)]
    ens = E.Ensemble([T.new_model(data.spec, PRESETS["post_ln"], MODEL, m.seed).double()
                      for m in members])
    x, y = data.x_train[:48].view(3, 16, -1), data.y_train[:48].view(3, 16, -1)
    results = []
    for mode in (None, S.OneHotEmbedding()):
        flat = ens.flat.clone().requires_grad_(True)
        with mode if mode is not None else contextlib.nullcontext():
            loss, _ = ens.losses(x, y, flat=flat)
        grad, = torch.autograd.grad(loss.sum(), flat)
        results.append((loss.detach(), grad))
    (loss_a, grad_a), (loss_b, grad_b) = results
    assert torch.equal(loss_a, loss_b)
    torch.testing.assert_close(grad_b, grad_a, rtol=1e-12, atol=1e-14)


# --- on a GPU ----------------------------------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)


@cuda
@pytest.mark.parametrize("task", ["digits", "sorting"])
def test_the_captured_step_equals_the_eager_step_on_a_gpu(task):
    data = _digits() if task == "digits" else make_task("sorting", train_size=256,
                                                        test_size=64)
    eager, eager_ens = _train(data, replace(BASE, engine="eager"), device="cuda")
    graph, graph_ens = _train(data, replace(BASE, engine="graph"), device="cuda")
    assert graph_ens.numerics["engine"] == "graph"
    exact = task == "digits"  # token tasks embed by a one-hot product inside the graph
    for a, b in zip(graph, eager, strict=True):
        assert (a.diverged, a.diverged_step) == (b.diverged, b.diverged_step)
        pd.testing.assert_frame_equal(a.history, b.history, check_exact=exact,
                                      **({} if exact else {"rtol": 1e-4, "atol": 1e-5}))


@cuda
def test_a_captured_run_resumes_bit_identically_on_a_gpu(tmp_path):
    data = _digits()
    cfg = replace(BASE, steps=20, checkpoint_every=10, eval_every=5, engine="graph")
    members = [E.Member(0, cfg), E.Member(5, replace(cfg, lr=1e12, warmup=1))]
    clean, clean_ens = _train(data, cfg, device="cuda", members=members)
    checkpoint = tmp_path / "checkpoint.pt"
    calls = {"n": 0}

    def stop_at_third(ens):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return E.evaluate_members(ens, data.x_test, data.y_test)

    ens = E.Ensemble([T.new_model(data.spec, PRESETS["post_ln"], MODEL, m.seed).cuda()
                      for m in members])
    with pytest.raises(KeyboardInterrupt):
        E.train_ensemble(ens, data, members, checkpoint, "f", evaluate=stop_at_third)
    ens = E.Ensemble([T.new_model(data.spec, PRESETS["post_ln"], MODEL, m.seed).cuda()
                      for m in members])
    again = E.train_ensemble(ens, data, members, checkpoint, "f")
    for a, b in zip(again, clean, strict=True):
        pd.testing.assert_frame_equal(a.history, b.history, check_exact=True)
    for a, b in zip(ens.finals, clean_ens.finals, strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_methods_say_how_the_networks_were_trained():
    from rankcollapse import report

    note = report.numerics_note({"train": {"precision": "bf16", "engine": "auto"}},
                                ["E1", "E5"])
    assert note["text"].startswith("Training (E5). Precision (train.precision): bfloat16")
    assert "CUDA graph on a GPU" in note["text"] and "columns precision, engine" in note["text"]
    assert report.numerics_note({"train": {}}, ["E1", "E6"]) is None  # nothing trained
