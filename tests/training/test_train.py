"""Training machinery (tasks, task models, train loop, resume, divergence) and its workflow."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from rankcollapse.core.model import TaskModel
from rankcollapse.core.specs import PRESETS
from rankcollapse.core.tasks import TASKS, make_task
from rankcollapse.experiments.trained import escalation_fits, line_fit
from rankcollapse.io import load_checked
from rankcollapse.plan import experiments as registry
from rankcollapse.plan import training as trainplan
from rankcollapse.plan import tuned as tunedplan
from rankcollapse.plan.config import ConfigError, check_config, load_config, output_roots
from rankcollapse.training.train import measure_job, new_model, run_job

from conftest import CI, run_snakemake

VARIANTS = ["post_ln", "pre_ln", "post_ln_deesc", "san_skip"]
MODEL = {"width": 16, "heads": 2, "mlp_ratio": 2, "depth": 3}
TRAIN = {"steps": 120, "batch": 32, "lr": 2e-3, "warmup": 10, "checkpoint_every": 20,
         "eval_every": 50}


# --- tasks -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(TASKS))
def test_tasks_are_deterministic_with_fixed_disjoint_splits(name):
    a, b = make_task(name), make_task(name)
    for field in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    import inspect

    if "data_seed" in inspect.signature(TASKS[name]).parameters:  # text: fixed blocks, no seed
        other = make_task(name, data_seed=1)
        assert not torch.equal(a.y_test, other.y_test), "data_seed must change the split"
    # No test example also sits in the training set (digits: distinct images; sorting: rows
    # may repeat by chance, so compare the split sizes instead).
    assert len(a.y_train) > len(a.y_test) > 0
    if name == "digits":
        train_rows = {tuple(r) for r in a.x_train.flatten(1).tolist()}
        overlap = sum(tuple(r) in train_rows for r in a.x_test.flatten(1).tolist())
        assert overlap <= 2  # the 1797 digits contain a couple of exact duplicates at most


def test_digits_patches_rebuild_the_images():
    from sklearn.datasets import load_digits

    data = make_task("digits", patch=2, features="raw")
    assert data.spec.tokens == 16 and data.spec.input_dim == 4 and data.spec.classes == 10
    images = torch.tensor(load_digits().images, dtype=torch.float32) / 16
    # Token 5 is patch row 1, column 1: pixels [2:4, 2:4].
    first = data.x_train[0].view(4, 4, 2, 2)
    match = (images[:, 2:4, 2:4].flatten(1) == first[1, 1].flatten()).all(dim=1)
    assert match.any()


def test_sorting_labels_are_the_sorted_inputs():
    data = make_task("sorting", vocab=7, length=5, train_size=50, test_size=10)
    assert torch.equal(data.y_train, data.x_train.sort(dim=-1).values)
    assert data.x_train.max() < 7 and data.spec.chance == pytest.approx(1 / 7)


def test_unknown_task_fails_with_the_allowed_names():
    with pytest.raises(KeyError, match="allowed"):
        make_task("cifar")


# --- task models ----------------------------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", sorted(TASKS))
def test_task_model_shapes_and_capture(name, variant):
    data = make_task(name, **({"train_size": 64, "test_size": 8} if name == "sorting" else {}))
    model = new_model(data.spec, PRESETS[variant], MODEL, seed=0)
    assert isinstance(model, TaskModel)
    x = data.x_test[:5]
    logits, trace = model(x, capture=True)
    tokens = data.spec.tokens + (data.spec.readout == "class_token")
    classes = data.spec.classes
    per_token = data.spec.readout == "per_token"
    expected = (5, data.spec.tokens, classes) if per_token else (5, classes)
    assert logits.shape == expected
    assert len(trace.hidden) == MODEL["depth"] + 1 and len(trace.attention) == MODEL["depth"]
    assert trace.hidden[-1].shape == (5, tokens, MODEL["width"])
    assert trace.attention[0].shape == (5, MODEL["heads"], tokens, tokens)
    fused, _ = model(x)  # the training path: fused attention, nothing captured
    torch.testing.assert_close(fused, logits, rtol=1e-4, atol=1e-5)


def test_same_seed_same_initial_model():
    data = make_task("digits")
    a = new_model(data.spec, PRESETS["post_ln"], MODEL, seed=3).state_dict()
    b = new_model(data.spec, PRESETS["post_ln"], MODEL, seed=3).state_dict()
    c = new_model(data.spec, PRESETS["post_ln"], MODEL, seed=4).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


# --- resume after SIGKILL -------------------------------------------------------------------

def _job_command(out: Path) -> list[str]:
    code = (
        "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
        "from rankcollapse.training.train import run_job\n"
        f"run_job('digits', {{}}, {PRESETS['pre_ln']!r}, {MODEL!r}, {TRAIN!r}, 0,"
        f" {str(out / 'model.pt')!r}, {str(out / 'history.parquet')!r}, threads=1)\n"
    )
    return [sys.executable, "-c", code]


def _wait(proc: subprocess.Popen, timeout: float = 120) -> str:
    _, err = proc.communicate(timeout=timeout)
    return err


@pytest.mark.slow  # trains three short jobs in subprocesses
def test_resume_after_sigkill_matches_an_uninterrupted_run(tmp_path):
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ref = subprocess.Popen(_job_command(reference), stderr=subprocess.PIPE, text=True, env=env)
    job = subprocess.Popen(_job_command(killed), stderr=subprocess.PIPE, text=True, env=env)
    checkpoint = killed / "checkpoint.pt"
    deadline = time.monotonic() + 120
    while not checkpoint.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    job.send_signal(signal.SIGKILL)
    _wait(job)
    assert job.returncode == -signal.SIGKILL, "the job finished before it could be killed"
    assert checkpoint.exists() and not (killed / "model.pt").exists()
    step = load_checked(checkpoint)["step"]
    assert 0 < step < TRAIN["steps"]

    resumed = subprocess.run(_job_command(killed), stderr=subprocess.PIPE, text=True, env=env,
                             timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"at step {step}" in resumed.stderr and "resumed from" in resumed.stderr
    assert _wait(ref) is not None and ref.returncode == 0
    assert not checkpoint.exists(), "the checkpoint is dropped once the outputs are written"

    h_killed = pd.read_parquet(killed / "history.parquet")
    h_ref = pd.read_parquet(reference / "history.parquet")
    assert list(h_killed.step) == list(range(1, TRAIN["steps"] + 1))
    pd.testing.assert_frame_equal(h_killed, h_ref, check_exact=True)
    a = torch.load(killed / "model.pt", weights_only=False)
    b = torch.load(reference / "model.pt", weights_only=False)
    assert a["final"] == b["final"] and a["final"]["test_accuracy"] > 0.3  # chance is 0.1
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


# --- divergence -----------------------------------------------------------------------------

def test_divergence_is_recorded_and_outputs_are_written(tmp_path):
    threads = torch.get_num_threads()
    try:
        result = run_job("digits", {}, PRESETS["post_ln"], MODEL,
                         {**TRAIN, "steps": 60, "lr": 1e12, "warmup": 1}, 0,
                         tmp_path / "model.pt", tmp_path / "history.parquet", threads=1)
        table = measure_job(tmp_path / "model.pt", eval_size=4, threads=1)
    finally:
        torch.set_num_threads(threads)
    assert result.diverged and 1 < result.diverged_step <= 60
    assert math.isnan(result.test_accuracy)
    history = pd.read_parquet(tmp_path / "history.parquet")
    assert history.diverged.all() and (history.diverged_step == result.diverged_step).all()
    assert history.step.max() == result.diverged_step
    assert not np.isfinite(history.loss.iloc[-1]) or not np.isfinite(history.grad_norm.iloc[-1])
    trained = table[table.stage == "trained"]
    assert trained.diverged.all() and trained.token_similarity.isna().all()
    assert table[table.stage == "init"].token_similarity.notna().all()


# --- analysis -------------------------------------------------------------------------------

def test_escalation_fits_tell_the_two_readings_apart():
    layers = np.arange(12)
    geometric = pd.DataFrame({"seed": 0, "layer": layers,
                              "token_similarity": 1 - 0.5 * 0.8**layers})
    linear = pd.DataFrame({"seed": 0, "layer": layers, "token_similarity": 0.05 + 0.07 * layers})
    g, lin = escalation_fits(geometric), escalation_fits(linear)
    assert g["rho"] == pytest.approx(0.8) and g["log_r2"] == pytest.approx(1.0)
    assert g["lin_r2"] < 0.95
    assert lin["lin_slope"] == pytest.approx(0.07) and lin["lin_r2"] == pytest.approx(1.0)
    assert lin["log_r2"] < 0.99
    assert math.isnan(line_fit(np.ones(5), np.arange(5))[0])


# --- config and workflow --------------------------------------------------------------------

def _config(**blocks):
    base = {"variants": {"post_ln": PRESETS["post_ln"]}, "init_sweep": {"variants": ["post_ln"]}}
    return {**base, **blocks}


@pytest.mark.parametrize(("blocks", "message"), [
    ({"depth_grid": {"variants": ["post_lnn"]}}, "depth_grid.variants: variant 'post_lnn'"),
    ({"escalation": {"variants": ["x"], "task": "digits"}}, "escalation.variants: variant 'x'"),
    ({"depth_grid": {"tasks": ["cifar"]}}, "depth_grid.tasks: unknown task 'cifar'; allowed"),
    ({"escalation": {"task": "imagenet"}}, "escalation.task: unknown task 'imagenet'"),
    ({"train": {"width": 30, "heads": 4}}, "train.width=30 is not divisible"),
    ({"depth_grid": {"seeds": [0, 1], "tuning_seeds": [1]}}, "the final seeds must be fresh"),
    ({"depth_grid": {"tasks": ["digits"], "depths": {"text": [2]}}},
     "depth_grid.depths: no depths for task 'digits'"),
    ({"depth_grid": {"placements": ["post_ln_x"]}}, "depth_grid.placements: variant 'post_ln_x'"),
])
def test_config_cross_references_name_the_key(blocks, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        check_config(_config(**blocks))
    check_config(_config())  # the base is valid


@pytest.mark.workflow
def test_dry_run_includes_the_training_jobs(project):
    results = output_roots({"name": CI}).results  # ci.yaml's outputs
    targets = [f"{results}/numbers/E4.json", f"{results}/numbers/E5.json"]
    proc = run_snakemake(project, *targets, "-n", "--cores", "1", "--quiet", "rules",
                         "--configfile", "workflow/config/ci.yaml", timeout=300)
    counts = dict(line.split() for line in proc.stdout.splitlines()
                  if len(line.split()) == 2 and line.split()[1].isdigit())
    config = load_config(project / "workflow/config/default.yaml",
                         project / "workflow/config/ci.yaml")
    keys = set(trainplan.experiment_groups(config, "E4"))
    ensembles = [j for j in trainplan.ensembles(config) if j.key in keys]
    assert len(ensembles) == len(keys)  # the CI grid fits one ensemble per architecture
    # each training job measures its own members' metrics: no job of its own for that
    assert int(counts["train"]) == len(ensembles), proc.stdout[-3000:]
    assert not {"train_metrics", "tuned_metrics"} & counts.keys()
    assert int(counts["collect_train"]) == 1  # E4_metrics
    # E5: one tuned job per (task, variant) over the shallow depths, one per deeper arm
    runs = registry.tuned_runs(config)
    tuned = tunedplan.tuned_jobs(config, runs)
    assert int(counts["train_tuned"]) == len(tuned) < len(runs)
    assert {j.task for j in tuned} == {"digits", "text"}
    assert int(counts["collect_tuned"]) == 1  # E5_metrics, E5_history, E5_tuning in one job


def _held(runtime):
    return list(runtime._HELD_GPU_LOCKS)


def _release(runtime, since: int, count: int | None = None) -> None:
    """Close the lock files claimed after position `since` (the last `count` of them)."""
    extra = runtime._HELD_GPU_LOCKS[since:]
    for handle in extra[-count:] if count else extra:
        handle.close()
        runtime._HELD_GPU_LOCKS.remove(handle)


def test_the_sharing_rule_in_slots():
    from rankcollapse import runtime

    assert runtime.slots_needed(2048, 8192) == (2, 8)
    assert runtime.slots_needed(1, 8192) == (1, 8)  # at least one slot
    assert runtime.slots_needed(1500, 8192) == (2, 8)  # rounded up
    assert runtime.slots_needed(None, 8192) == (8, 8)  # no estimate: the whole GPU
    assert runtime.slots_needed(99999, 8192) == (8, 8)  # larger than the GPU: alone on it


def test_small_jobs_share_a_gpu_while_their_sum_fits(tmp_path):
    from rankcollapse import runtime

    start = len(_held(runtime))
    try:
        one = [4 * runtime.SLOT_MB]  # a GPU of 4 slots
        assert runtime.claim_gpu(2 * runtime.SLOT_MB, tmp_path, capacities=one) == 0
        assert runtime.claim_gpu(2 * runtime.SLOT_MB, tmp_path, capacities=one) == 0  # shared
        with pytest.raises(TimeoutError, match="room"):  # full: the next one waits
            runtime.claim_gpu(runtime.SLOT_MB, tmp_path, poll_s=0.01, timeout_s=0.05,
                              capacities=one)
        _release(runtime, start, count=2)  # the second job ends: its two slots are free
        assert runtime.claim_gpu(runtime.SLOT_MB, tmp_path, capacities=one) == 0
        with pytest.raises(TimeoutError):  # 3 slots held, 1 free: a 2-slot job does not fit
            runtime.claim_gpu(2 * runtime.SLOT_MB, tmp_path, poll_s=0.01, timeout_s=0.05,
                              capacities=one)
        assert len(runtime._HELD_GPU_LOCKS) - start == 3  # a failed try keeps nothing
    finally:
        _release(runtime, start)


def test_a_job_without_an_estimate_takes_a_gpu_of_its_own(tmp_path):
    from rankcollapse import runtime

    start = len(_held(runtime))
    two = [2 * runtime.SLOT_MB, 2 * runtime.SLOT_MB]
    try:
        assert runtime.claim_gpu(None, tmp_path, capacities=two) == 0
        assert runtime.claim_gpu(None, tmp_path, capacities=two) == 1  # GPU 0 is taken
        with pytest.raises(TimeoutError, match="busy|room"):
            runtime.claim_gpu(runtime.SLOT_MB, tmp_path, poll_s=0.01, timeout_s=0.05,
                              capacities=two)
        _release(runtime, start, count=2)  # the job on GPU 1 ends
        assert runtime.claim_gpu(runtime.SLOT_MB, tmp_path, capacities=two) == 1
    finally:
        _release(runtime, start)


# --- damaged checkpoints --------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["truncated", "garbled", "not_a_checkpoint"])
def test_damaged_checkpoint_is_never_trained_on(tmp_path, caplog, damage):
    """A damaged checkpoint is detected, logged, and training starts over from scratch, ending
    exactly where a run that never had a checkpoint ends."""
    from rankcollapse.core.tasks import make_task
    from rankcollapse.training.train import TrainConfig, new_model, train

    data = make_task("digits")
    cfg = TrainConfig.from_dict({**TRAIN, "steps": 20, "checkpoint_every": 10})
    torch.set_num_threads(1)
    clean = train(new_model(data.spec, PRESETS["pre_ln"], MODEL, 0), data, cfg, 0)

    checkpoint = tmp_path / "checkpoint.pt"
    train(new_model(data.spec, PRESETS["pre_ln"], MODEL, 0), data, cfg, 0, checkpoint, "f")
    if damage == "not_a_checkpoint":
        torch.save({"fingerprint": "f", "step": 10}, checkpoint)  # plain torch file, no header
    raw = checkpoint.read_bytes()
    if damage == "truncated":
        checkpoint.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbled":
        middle = len(raw) // 2
        checkpoint.write_bytes(raw[:middle] + bytes(b ^ 0xFF for b in raw[middle:middle + 64])
                               + raw[middle + 64:])
    with caplog.at_level("WARNING"):
        again = train(new_model(data.spec, PRESETS["pre_ln"], MODEL, 0), data, cfg, 0,
                      checkpoint, "f")
    assert "damaged checkpoint" in caplog.text
    pd.testing.assert_frame_equal(again.history, clean.history, check_exact=True)


def test_constant_schedule_keeps_the_rate_after_warm_up():
    from rankcollapse.training.train import TrainConfig, schedule

    cosine = schedule(TrainConfig(steps=100, warmup=10))
    constant = schedule(TrainConfig(steps=100, warmup=10, schedule="constant"))
    assert [constant(s) for s in (0, 4, 9)] == [cosine(s) for s in (0, 4, 9)]  # same warm-up
    assert all(constant(s) == 1.0 for s in range(10, 120))
    assert cosine(99) < 0.01
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="linear")


# --- the digits features and the text task -------------------------------------------------

def test_digits_centred_patches_have_no_blank_token_and_raw_ones_do():
    from rankcollapse.experiments.trained import blank_patch_share

    assert blank_patch_share({"features": "raw"}) > 0.2
    assert blank_patch_share({}) == 0.0  # centred by default
    assert blank_patch_share({"features": "standardised"}) == 0.0


def test_digits_validation_split_is_carved_from_training_and_disjoint():
    data = make_task("digits", val_fraction=0.1, features="raw")
    assert len(data.x_val) == round(0.1 * (len(data.x_train) + len(data.x_val)))
    assert len(data.x_train) + len(data.x_val) + len(data.x_test) == 1797
    none = make_task("digits", val_fraction=0.0)
    assert none.x_val is None


def test_text_blocks_are_contiguous_and_next_character_labels():
    from rankcollapse.core.tasks import task_spec, text_corpus

    data = make_task("text", length=8, eval_windows=4)
    assert data.spec.causal and data.spec == task_spec("text", length=8, eval_windows=4)
    assert torch.equal(data.x_train[:, 1:], data.y_train[:, :-1])  # y is x shifted by one
    assert torch.equal(data.x_train[1:, 0], data.y_train[:-1, -1])  # windows are contiguous
    assert len(data.x_val) == len(data.x_test) == 4
    n = len(text_corpus())
    assert len(data.x_train) == (n - 2 * round(0.05 * n) - 1) // 8


def test_setup_makes_torch_deterministic_without_importing_inductor():
    """runtime.setup turns on deterministic algorithms (warn-only) in a fresh process without
    loading torch._inductor (seconds per job); the compile engine's hook then gives Inductor
    the same setting."""
    code = (
        "import sys, torch\n"
        "from rankcollapse import runtime\n"
        "runtime.setup(1, 0)\n"
        "assert torch.are_deterministic_algorithms_enabled()\n"
        "assert torch.is_deterministic_algorithms_warn_only_enabled()\n"
        "assert 'torch._inductor' not in sys.modules, 'setup imported Inductor'\n"
        "runtime.inductor_deterministic()\n"
        "import torch._inductor.config as c\n"
        "assert c.deterministic is True\n"
        "runtime.set_deterministic(False)\n"
        "assert not torch.are_deterministic_algorithms_enabled() and c.deterministic is False\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_speed_reference_measures_one_thread_and_restores_the_thread_count():
    """The report's speed reference times float32 products on one thread: a rate that grows with
    the work (n = 256 and 1024 give the same order of GFLOP/s, not a constant), and the caller's
    thread count is back afterwards."""
    from rankcollapse import io, runtime

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        rate = runtime.speed_reference()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert 0.1 < rate < 10_000  # GFLOP/s of one CPU thread, whatever the machine
    small = runtime.matmul_rate(torch.device("cpu"), n=256, repeats=3) / 1e9
    assert 0.05 < small / rate < 20  # a rate, not a time: it does not scale with n^3
    assert io.provenance(packages=())["speed_reference_gflops"] > 0
