"""Ensemble training: every member equals the same run trained alone by train.train (to a
stated float tolerance), members are isolated from each other's divergence, and a checkpointed
ensemble resumes exactly (SIGKILL, damage, other settings)."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch

from rankcollapse.core.specs import PRESETS
from rankcollapse.core.tasks import TaskData, make_task
from rankcollapse.io import load_checked
from rankcollapse.training import ensemble as E
from rankcollapse.training import train as T

MODEL = {"width": 16, "heads": 2, "mlp_ratio": 2, "depth": 3}
BASE = T.TrainConfig(steps=24, batch=32, lr=2e-3, warmup=8, checkpoint_every=0, eval_every=10)
# Seeds and optimiser settings that differ per member (peak lr, warm-up, weight decay).
MEMBERS = [E.Member(0, BASE), E.Member(1, replace(BASE, lr=1e-3, warmup=3)),
           E.Member(2, replace(BASE, weight_decay=0.2)), E.Member(3, replace(BASE, lr=4e-3))]

# Tolerances of "a member equals its single run". The two differ only in rounding: batched
# matrix products and the unfused attention of the ensemble add the same terms in another
# order than the single model's kernels, a few units in the last place per operation, which
# a few dozen optimiser steps amplify modestly (measured: float64 <= 3e-16 on weights and
# 3e-13 on gradient norms; float32 <= 2e-7 on weights and 7e-5 on gradient norms of ~10).
# The bounds leave 10-100x room above what was measured and stay far below any real effect.
TOLERANCE = {torch.float64: {"rtol": 1e-9, "atol": 1e-11},
             torch.float32: {"rtol": 1e-4, "atol": 2e-5}}


def _task(name: str, dtype: torch.dtype) -> TaskData:
    # Raw digits pixels: the float32 tolerances below were set on them (centred inputs change
    # the rounding, not the equivalence, which float64 checks tightly).
    options = {"train_size": 256, "test_size": 64} if name == "sorting" else {"features": "raw"}
    data = make_task(name, **options)
    if data.spec.inputs == "features":  # ids stay integers; features take the model's dtype
        data = TaskData(data.spec, data.x_train.to(dtype), data.y_train, data.x_test.to(dtype),
                        data.y_test)
    return data


def _solo(data, variant, member, dtype):
    model = T.new_model(data.spec, PRESETS[variant], MODEL, member.seed).to(dtype)
    result = T.train(model, data, member.train, member.seed)
    return result, model.state_dict()


def _ensemble(data, variant, members, dtype, **kwargs):
    ens = E.Ensemble([T.new_model(data.spec, PRESETS[variant], MODEL, m.seed).to(dtype)
                      for m in members])
    return E.train_ensemble(ens, data, members, **kwargs), ens


def _assert_member_equals_solo(result, state, solo_result, solo_state, dtype, n_test):
    tol = TOLERANCE[dtype]
    assert list(result.history.columns) == list(solo_result.history.columns)
    assert list(result.history.step) == list(solo_result.history.step)
    assert list(result.history.lr) == list(solo_result.history.lr)  # same schedule, exactly
    pd.testing.assert_frame_equal(result.history, solo_result.history, check_exact=False,
                                  **tol)
    assert state.keys() == solo_state.keys()
    for name in state:
        torch.testing.assert_close(state[name], solo_state[name], **tol, msg=name)
    assert result.diverged == solo_result.diverged
    assert result.diverged_step == solo_result.diverged_step
    if not result.diverged:
        assert result.test_loss == pytest.approx(solo_result.test_loss, rel=tol["rtol"])
        # Accuracy counts labels: rounding may flip at most a near-tie or so.
        assert abs(result.test_accuracy - solo_result.test_accuracy) <= 1.0 / n_test + 1e-12


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize(("task", "variant"), [("digits", "pre_ln"),
                                               ("digits", "post_ln_center"),
                                               ("sorting", "san_skip")])
def test_each_member_equals_its_single_run(task, variant, dtype):
    torch.set_num_threads(1)
    data = _task(task, dtype)
    results, ens = _ensemble(data, variant, MEMBERS, dtype)
    labels = data.y_test.numel()
    for k, member in enumerate(MEMBERS):
        solo_result, solo_state = _solo(data, variant, member, dtype)
        _assert_member_equals_solo(results[k], ens.finals[k], solo_result, solo_state, dtype,
                                   labels)
    assert not any(r.diverged for r in results)


def test_a_diverging_member_leaves_the_others_untouched():
    torch.set_num_threads(1)
    dtype = torch.float32
    data = _task("digits", dtype)
    members = [MEMBERS[0], E.Member(1, replace(BASE, lr=1e12, warmup=1)), MEMBERS[2]]
    results, ens = _ensemble(data, "post_ln", members, dtype)
    assert results[1].diverged and 1 < results[1].diverged_step < BASE.steps
    assert math.isnan(results[1].test_accuracy)
    assert len(results[1].history) == results[1].diverged_step
    last = results[1].history.iloc[-1]
    assert not (math.isfinite(last.loss) and math.isfinite(last.grad_norm))
    # It stays in the ensemble, frozen by a mask (shapes never change, so a captured step
    # serves the whole run), with its last finite weights: those before the diverging step.
    assert ens.size == 3
    assert all(torch.isfinite(v).all() for v in ens.finals[1].values())
    # (Against its single run only to the diverging step's history: at lr 1e12 the weights
    # after one step are +-1e12 by the sign of each gradient entry, which rounding can flip.)
    # The same ensemble stopped just before that step holds exactly these weights.
    before = [E.Member(m.seed, replace(m.train, steps=results[1].diverged_step - 1))
              for m in members]
    _, stopped = _ensemble(data, "post_ln", before, dtype)
    assert all(torch.equal(ens.finals[1][k], stopped.finals[1][k]) for k in ens.finals[1])
    for k in (0, 2):  # the others: as if it had never been there
        solo_result, solo_state = _solo(data, "post_ln", members[k], dtype)
        _assert_member_equals_solo(results[k], ens.finals[k], solo_result, solo_state, dtype,
                                   data.y_test.numel())
    # The diverging one, too, is its single run up to where both diverge.
    solo_result, _ = _solo(data, "post_ln", members[1], dtype)
    assert solo_result.diverged_step == results[1].diverged_step
    before = slice(0, results[1].diverged_step - 1)
    pd.testing.assert_frame_equal(results[1].history.iloc[before],
                                  solo_result.history.iloc[before], **TOLERANCE[dtype])


@pytest.mark.parametrize("variant", sorted(PRESETS))
def test_every_variant_batches_without_a_per_member_fallback(variant):
    """vmap falls back to a loop over members (with a warning) for an op without a batching
    rule; forward, backward and the captured pass must all batch."""
    data = _task("digits", torch.float32)
    ens = E.Ensemble([T.new_model(data.spec, PRESETS[variant], MODEL, s) for s in range(3)])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*performance drop.*")
        warnings.filterwarnings("ignore", message=".*gradient layout contract")
        flat = ens.flat.clone().requires_grad_(True)
        loss, _ = ens.losses(data.x_train[:24].view(3, 8, *data.x_train.shape[1:]),
                             data.y_train[:24].view(3, 8), flat=flat)
        grad, = torch.autograd.grad(loss.sum(), flat)
        _, trace = ens(data.x_test[:5], shared_input=True, capture=True)
    assert grad.shape == ens.flat.shape and (grad.abs().sum(dim=1) > 0).all()
    assert trace.attention[0].shape == (3, 5, MODEL["heads"], 17, 17)


def test_members_must_share_steps_batch_and_schedule():
    with pytest.raises(ValueError, match=r"differs in \['steps'\]"):
        E.shared_config([E.Member(0, BASE), E.Member(1, replace(BASE, steps=10))])
    with pytest.raises(KeyError, match="unknown member setting"):
        E.members_from({"steps": 5}, [{"seed": 0, "momentum": 0.9}])
    members = E.members_from({"steps": 5, "lr": 1e-3}, [{"seed": 0}, {"seed": 1, "lr": 1e-2}])
    assert [m.train.lr for m in members] == [1e-3, 1e-2] and members[1].train.steps == 5


# --- checkpoints -----------------------------------------------------------------------------

class _Stop(Exception):
    pass


def _stopping_evaluator(data, at_step_calls: int):
    """An evaluator that raises on its n-th call: a job killed between two checkpoints."""
    calls = {"n": 0}

    def evaluate(ens):
        calls["n"] += 1
        if calls["n"] == at_step_calls:
            raise _Stop
        return E.evaluate_members(ens, data.x_test, data.y_test)

    return evaluate


def test_resume_with_a_diverged_member_matches_an_uninterrupted_run(tmp_path):
    """Stopped after a checkpoint written while one member had already left the ensemble, the
    resumed run ends exactly where an uninterrupted one does."""
    torch.set_num_threads(1)
    data = _task("digits", torch.float32)
    cfg = replace(BASE, steps=30, checkpoint_every=10, eval_every=5)
    members = [E.Member(0, cfg), E.Member(5, replace(cfg, lr=1e12, warmup=1)),
               E.Member(2, replace(cfg, lr=3e-3))]
    clean, clean_ens = _ensemble(data, "pre_ln", members, torch.float32)
    checkpoint = tmp_path / "checkpoint.pt"
    with pytest.raises(_Stop):  # evaluations at 5, 10, 15: stopped at 15, checkpoint at 10
        _ensemble(data, "pre_ln", members, torch.float32, checkpoint=checkpoint,
                  fingerprint="f", evaluate=_stopping_evaluator(data, 3))
    state = load_checked(checkpoint)
    assert state["step"] == 10 and state["active"] == [0, 2]
    again, again_ens = _ensemble(data, "pre_ln", members, torch.float32, checkpoint=checkpoint,
                                 fingerprint="f")
    for a, b, sa, sb in zip(again, clean, again_ens.finals, clean_ens.finals, strict=True):
        pd.testing.assert_frame_equal(a.history, b.history, check_exact=True)
        assert (a.diverged, a.diverged_step) == (b.diverged, b.diverged_step)
        assert all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("damage", ["truncated", "garbled", "not_a_checkpoint",
                                    "other_settings"])
def test_damaged_or_foreign_checkpoint_is_never_trained_on(tmp_path, caplog, damage):
    torch.set_num_threads(1)
    data = _task("digits", torch.float32)
    cfg = replace(BASE, steps=20, checkpoint_every=10)
    members = [E.Member(0, cfg), E.Member(1, replace(cfg, lr=1e-3))]
    clean, _ = _ensemble(data, "pre_ln", members, torch.float32)
    checkpoint = tmp_path / "checkpoint.pt"
    with pytest.raises(_Stop):
        _ensemble(data, "pre_ln", members, torch.float32, checkpoint=checkpoint,
                  fingerprint="f", evaluate=_stopping_evaluator(data, 2))
    raw = checkpoint.read_bytes()
    if damage == "truncated":
        checkpoint.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbled":
        middle = len(raw) // 2
        checkpoint.write_bytes(raw[:middle] + bytes(b ^ 0xFF for b in raw[middle:middle + 64])
                               + raw[middle + 64:])
    elif damage == "not_a_checkpoint":
        torch.save({"fingerprint": "f", "step": 10}, checkpoint)  # no checksum header
    with caplog.at_level("WARNING"):
        again, _ = _ensemble(data, "pre_ln", members, torch.float32, checkpoint=checkpoint,
                             fingerprint="other" if damage == "other_settings" else "f")
    expected = "other settings" if damage == "other_settings" else "damaged checkpoint"
    assert expected in caplog.text
    for a, b in zip(again, clean, strict=True):
        pd.testing.assert_frame_equal(a.history, b.history, check_exact=True)


TRAIN = {"steps": 120, "batch": 32, "lr": 2e-3, "warmup": 10, "checkpoint_every": 20,
         "eval_every": 50}
JOB_MEMBERS = [{"seed": 0}, {"seed": 1, "lr": 1e-3, "warmup": 5}, {"seed": 2}]


def _job_command(out: Path) -> list[str]:
    code = (
        "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
        "from rankcollapse.training.ensemble import run_job\n"
        f"run_job('digits', {{}}, {PRESETS['pre_ln']!r}, {MODEL!r}, {TRAIN!r}, "
        f"{JOB_MEMBERS!r}, {str(out / 'ensemble.pt')!r}, {str(out / 'history.parquet')!r},"
        " threads=1)\n"
    )
    return [sys.executable, "-c", code]


def test_sigkilled_ensemble_job_resumes_and_matches_an_uninterrupted_run(tmp_path):
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ref = subprocess.Popen(_job_command(reference), stderr=subprocess.PIPE, text=True, env=env)
    job = subprocess.Popen(_job_command(killed), stderr=subprocess.PIPE, text=True, env=env)
    checkpoint = killed / "checkpoint.pt"
    deadline = time.monotonic() + 180
    while not checkpoint.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    job.send_signal(signal.SIGKILL)
    job.communicate(timeout=120)
    assert job.returncode == -signal.SIGKILL, "the job finished before it could be killed"
    assert checkpoint.exists() and not (killed / "ensemble.pt").exists()
    step = load_checked(checkpoint)["step"]
    assert 0 < step < TRAIN["steps"]

    resumed = subprocess.run(_job_command(killed), stderr=subprocess.PIPE, text=True, env=env,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"at step {step}" in resumed.stderr and "resumed from" in resumed.stderr
    _, err = ref.communicate(timeout=300)
    assert ref.returncode == 0, err[-3000:]
    assert not checkpoint.exists(), "the checkpoint is dropped once the outputs are written"

    h_killed = pd.read_parquet(killed / "history.parquet")
    h_ref = pd.read_parquet(reference / "history.parquet")
    assert len(h_killed) == len(JOB_MEMBERS) * TRAIN["steps"]
    pd.testing.assert_frame_equal(h_killed, h_ref, check_exact=True)
    a, b = E.load_members(killed / "ensemble.pt"), E.load_members(reference / "ensemble.pt")
    for ma, mb in zip(a, b, strict=True):
        assert ma["final"] == mb["final"] and ma["final"]["test_accuracy"] > 0.3  # chance 0.1
        assert all(torch.equal(ma["model"][k], mb["model"][k]) for k in ma["model"])


# --- the workflow's jobs -------------------------------------------------------------------

def test_ensemble_job_tables_match_single_jobs(tmp_path):
    """The ensemble's history and per-layer metrics tables hold, per member, what train.run_job
    and train.measure_job write for that run alone: same columns (plus the member's identity),
    same config_hash, values to the float32 tolerance."""
    torch.set_num_threads(1)
    opts = {"steps": 30, "batch": 32, "lr": 2e-3, "warmup": 5, "checkpoint_every": 0,
            "eval_every": 10}
    members = [{"seed": 0}, {"seed": 3, "lr": 1e-3, "weight_decay": 0.1}]
    extra = {"task": "digits", "variant": "post_ln", "depth": MODEL["depth"]}
    E.run_job("digits", {}, PRESETS["post_ln"], MODEL, opts, members, tmp_path / "ens.pt",
              tmp_path / "ens.parquet", threads=1, extra_columns=extra)
    history = pd.read_parquet(tmp_path / "ens.parquet")
    metrics = E.measure_job(tmp_path / "ens.pt", eval_size=8, threads=1)
    tol = TOLERANCE[torch.float32]
    for member in members:
        out = tmp_path / f"seed{member['seed']}"
        T.run_job("digits", {}, PRESETS["post_ln"], MODEL,
                  {**opts, **{k: v for k, v in member.items() if k != "seed"}}, member["seed"],
                  out / "model.pt", out / "history.parquet", threads=1, extra_columns=extra)
        solo_h = pd.read_parquet(out / "history.parquet")
        solo_m = T.measure_job(out / "model.pt", eval_size=8, threads=1)
        mine_h = history[history.seed == member["seed"]].reset_index(drop=True)
        mine_m = metrics[metrics.seed == member["seed"]].reset_index(drop=True)
        identity = ["peak_lr", "warmup", "weight_decay"]
        assert mine_h.precision.eq("float32").all() and mine_h.engine.eq("eager").all()
        mine_h = mine_h.drop(columns=list(E.NUMERICS_COLUMNS))  # how it was trained
        mine_m = mine_m.drop(columns=list(E.NUMERICS_COLUMNS))
        assert [c for c in mine_h.columns if c not in identity] == list(solo_h.columns)
        assert [c for c in mine_m.columns if c not in identity] == list(solo_m.columns)
        assert mine_h.peak_lr.eq(member.get("lr", opts["lr"])).all()
        pd.testing.assert_frame_equal(mine_h.drop(columns=identity), solo_h, check_exact=False,
                                      **tol)
        pd.testing.assert_frame_equal(mine_m.drop(columns=identity), solo_m, check_exact=False,
                                      rtol=1e-3, atol=1e-4)


# --- budgets: cool-downs branched off one warmup-stable-decay trunk --------------------------

WSD = replace(BASE, steps=40, schedule="wsd", cooldown=0.25, warmup=4, eval_every=10,
              checkpoint_every=10)
WSD_MEMBERS = [E.Member(0, WSD), E.Member(1, replace(WSD, lr=5e-3))]


def _wsd(steps, checkpoint=None, **kwargs):
    data = _task("digits", torch.float32)
    members = [replace(m, train=replace(m.train, steps=steps)) for m in WSD_MEMBERS]
    return _ensemble(data, "post_ln", members, torch.float32, checkpoint=checkpoint,
                     fingerprint="f", **kwargs)


def test_a_budget_branched_off_the_trunk_is_the_run_of_that_many_steps():
    """A shorter budget's cool-down, branched off the stable phase, trains exactly the network a
    run of that many steps trains (same batches, same rates): bit for bit, history included;
    the trunk goes on as if no branch had been taken."""
    torch.set_num_threads(1)
    alone20, alone20_ens = _wsd(20)
    alone12, _ = _wsd(12)
    alone40, alone40_ens = _wsd(40)
    kept, ens = _wsd(40, budgets=[12, 20], keep=20)
    for a, b, sa, sb in zip(kept, alone20, ens.finals, alone20_ens.finals, strict=True):
        pd.testing.assert_frame_equal(a.history, b.history, check_exact=True)
        assert a.test_accuracy == b.test_accuracy and a.test_loss == b.test_loss
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert sorted(ens.budget_results) == [12, 20, 40]
    for budget, alone in ((12, alone12), (20, alone20), (40, alone40)):
        assert [r[:2] for r in ens.budget_results[budget]] == [
            (r.test_loss, r.test_accuracy) for r in alone], budget
    # Without `keep`, the trunk's own networks are the result.
    trunk, trunk_ens = _wsd(40, budgets=[12, 20])
    assert all(torch.equal(a[k], b[k]) for a, b in zip(trunk_ens.finals, alone40_ens.finals,
                                                          strict=True) for k in a)
    pd.testing.assert_frame_equal(trunk[0].history, alone40[0].history, check_exact=True)


def test_a_run_killed_after_a_branch_resumes_with_its_budgets(tmp_path):
    torch.set_num_threads(1)
    clean, clean_ens = _wsd(40, budgets=[12, 20], keep=20)
    checkpoint = tmp_path / "checkpoint.pt"
    data = _task("digits", torch.float32)
    # Evaluations: the 12-step branch (at step 9), step 10 (then a checkpoint), the 20-step
    # branch (at 15), step 20: stopped there, before the checkpoint at 20.
    with pytest.raises(_Stop):
        _wsd(40, checkpoint=checkpoint, budgets=[12, 20], keep=20,
             evaluate=_stopping_evaluator(data, 4))
    state = load_checked(checkpoint)
    assert state["step"] == 10 and sorted(state["branches"]) == [12]
    again, again_ens = _wsd(40, checkpoint=checkpoint, budgets=[12, 20], keep=20)
    assert again_ens.budget_results == clean_ens.budget_results
    for a, b, sa, sb in zip(again, clean, again_ens.finals, clean_ens.finals, strict=True):
        pd.testing.assert_frame_equal(a.history, b.history, check_exact=True)
        assert all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize(("change", "budgets", "message"), [
    ({"schedule": "cosine"}, [20], "only a wsd schedule"),
    ({}, [50], "a branch needs 0 < budget < steps"),
    ({"warmup": 9}, [8], "inside the warm-up"),
])
def test_budgets_that_cannot_branch_are_refused(change, budgets, message):
    with pytest.raises(ValueError, match=message):
        E.branch_points(replace(WSD, **change), budgets)


def test_the_wsd_schedule_warms_up_holds_and_cools_down_to_zero():
    factor = T.schedule(WSD)  # 40 steps, warm-up 4, the last 10 cool down
    assert [factor(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert all(factor(s) == 1.0 for s in range(4, 30))
    assert [factor(s) for s in (30, 35, 39)] == [1.0, 0.5, 0.1]
    assert E.branch_points(WSD, [12, 20, 40]) == {9: [12], 15: [20]}
    with pytest.raises(ValueError, match="runs into the cool-down"):
        replace(WSD, warmup=31)
    with pytest.raises(ValueError, match="cooldown"):
        replace(WSD, cooldown=0.0)
