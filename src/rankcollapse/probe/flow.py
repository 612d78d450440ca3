"""The whole probe: `resolve` a target (a family or a checkpoint folder, checked without
loading anything), then `run` it: inputs, every seed and ablation measured, provenance, and the
verdicts. What `rankcollapse probe` calls between checking its arguments and writing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from rankcollapse.core.checkpoints import checkpoint_config, has_tokenizer, weight_files
from rankcollapse.core.model import DTYPES
from rankcollapse.probe.ablation import ARCHS
from rankcollapse.probe.hooks import check_model
from rankcollapse.probe.inputs import load_tokenizer, make_inputs
from rankcollapse.probe.metrics import measure
from rankcollapse.probe.models import base_config, build, family_sizes, load, max_positions
from rankcollapse.probe.spec import FAMILIES, ProbeError, probe_ablations
from rankcollapse.probe.verdicts import judge_on_model


@dataclass
class Target:
    """What is probed: a random-init family or a checkpoint folder, checked before loading."""

    name: str  # the family, or the folder as given
    family: str | None  # None for a checkpoint
    path: Path | None  # None for a family
    kind: str  # Hugging Face model type
    config: dict  # config.json's content (checkpoint) or the family's sizes
    tokenizer: bool  # a tokenizer is available


def resolve(target: str, layers: int | None = None, width: int | None = None,
            heads: int | None = None) -> Target:
    """A family name (unless a checkpoint folder of that name, with its config.json, is here)
    or a checkpoint folder, checked without loading anything: its config.json and the weights
    the loader will read (the tokenizer is checked by `run`, where a text is read with it).
    ProbeError names what is wrong."""
    path = Path(target).expanduser()
    if target in FAMILIES and not (path / "config.json").is_file():
        return Target(target, target, None, target, family_sizes(target, layers, width, heads),
                      False)
    if not path.exists() and "/" not in target and not target.startswith("."):
        raise ProbeError(f"{target}: no such directory, and not a family "
                         f"({', '.join(FAMILIES)})")
    config = checkpoint_config(path)
    weight_files(path, config)
    if layers is not None or width is not None or heads is not None:
        raise ProbeError("--layers, --width and --heads resize a random-init family; "
                         f"{target} is a checkpoint")
    return Target(str(target), None, path, str(config["model_type"]), config,
                  has_tokenizer(path))


@dataclass
class Result:
    table: pd.DataFrame  # one row per (seed, ablation, sample, layer)
    info: dict  # provenance and settings, written to probe.json
    verdicts: list[dict]  # the judged claims (Judged.to_dict() + "on_model")


def _progress(total: int, enabled: bool):
    """A progress bar on stderr: tqdm where installed, a minimal one otherwise; silent when
    stderr is not a terminal."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        return tqdm(total=total, file=sys.stderr, unit="pass", leave=False, disable=None)
    if not sys.stderr.isatty():
        return None

    class Bar:
        n = 0

        def update(self, k: int = 1) -> None:
            self.n += k
            done = int(30 * self.n / total)
            sys.stderr.write(f"\r[{'#' * done}{'.' * (30 - done)}] {self.n}/{total}")
            sys.stderr.flush()

        def set_description(self, text: str) -> None:
            pass

        def close(self) -> None:
            sys.stderr.write("\r" + " " * 50 + "\r")

    return Bar()


def run(target: Target, *, input_kind: str = "auto", text: str | None = None,
        text_name: str | None = None, tokens: int = 128, batch: int = 16,
        seeds: int | None = None, ablations: Sequence[str] | None = None,
        dtype: str = "float32", device: str = "cpu", spectrum_sequences: int | None = 2,
        progress: bool = False, log: Callable[[str], None] = lambda msg: None) -> Result:
    """Probe `target` (resolve()): every ablation, seed and layer, and the verdicts.

    input_kind "auto": the text (`text`, else pydoc_data.topics) where a tokenizer exists or a
    text is given, random ids otherwise. seeds: independent random initialisations of a family
    (default 5); a checkpoint is one network. Raises ProbeError before measuring anything when
    the model, the inputs or the ablations do not fit.
    """
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # its loading bars; ours says the work
    started = time.perf_counter()
    allowed = probe_ablations(target.kind)
    ablations = list(ablations or allowed)
    bad = [a for a in ablations if a not in allowed]
    if bad:
        raise ProbeError(f"ablation(s) {bad} cannot run on a {target.kind} model; the probe "
                         f"runs {list(allowed)} on it")
    if target.path is not None and seeds not in (None, 1):
        raise ProbeError(f"--seeds {seeds}: a checkpoint is one network; seeds are random "
                         "initialisations of a family")
    seeds = 1 if target.path is not None else (5 if seeds is None else seeds)
    if seeds < 1 or tokens < 2 or batch < 1:
        raise ProbeError("--seeds and --batch must be at least 1, --tokens at least 2")
    if target.path is not None:
        config = None
        # The checkpoint's tokenizer, checked and loaded before the model, where a text will be
        # read with it (random ids need none).
        tokenizer = (load_tokenizer(target.path)
                     if target.tokenizer and input_kind != "random" else None)
        vocab_size = int(target.config.get("vocab_size") or 0)
        limit = max_positions(target.config)
    else:
        config = base_config(target.family, **target.config)
        tokenizer = None
        vocab_size = config.vocab_size
        limit = max_positions(config)
    if limit is not None and tokens > limit:
        raise ProbeError(f"--tokens {tokens} is longer than the model's {limit} positions")
    if input_kind == "auto":
        input_kind = "text" if (tokenizer is not None or text is not None) else "random"
    if input_kind == "text" and text is not None and tokenizer is None \
            and target.path is not None:
        raise ProbeError(f"{target.name} holds no tokenizer: its ids cannot be read from a "
                         "text; add the tokenizer's files or use --random-ids")
    if not vocab_size:
        raise ProbeError(f"{target.name}: config.json gives no vocab_size")
    inputs = make_inputs(input_kind, batch, tokens, vocab_size, tokenizer, text,
                         text_name or "pydoc_data.topics")

    torch_device = torch.device(device)
    frames = []
    bar = _progress(seeds * len(ablations), progress)
    depth = None
    try:
        for seed in range(seeds):
            net = load(target.path) if target.path is not None else build(target.family, seed,
                                                                          config)
            net = net.to(device=torch_device, dtype=DTYPES[dtype])
            if depth is None:  # the model's own checks, once, before the measurements
                depth = check_model(net, target.kind, vocab_size)
                details = _model_details(net)
            if bar is not None:
                bar.set_description(f"seed {seed}")

            def step(ablation: str, seed: int = seed) -> None:
                if bar is not None:
                    bar.update(1)
                log(f"seed {seed} {ablation} done")

            table = measure(net, target.kind, inputs.input_ids, inputs.attention_mask,
                            ablations, full=True, spectrum_sequences=spectrum_sequences,
                            step=step)
            table.insert(0, "seed", seed)
            frames.append(table)
            del net
    finally:
        if bar is not None:
            bar.close()
    table = pd.concat(frames, ignore_index=True)
    weights = "checkpoint" if target.path is not None else "init"
    table.insert(0, "input", inputs.kind)
    table.insert(0, "weights", weights)
    table.insert(0, "model", target.name)

    from rankcollapse import io

    settings = {"target": target.name, "model_type": target.kind, "weights": weights,
                "sizes": target.config if target.path is None else None,
                "input": inputs.source, "tokens": tokens, "batch": batch, "seeds": seeds,
                "ablations": ablations, "dtype": dtype, "device": device,
                "spectrum_sequences": spectrum_sequences}
    model_config = (target.config if target.path is not None else config.to_dict())
    info = {
        "model": target.name, "model_type": target.kind, "weights": weights,
        "path": str(target.path.resolve()) if target.path is not None else None,
        "depth": depth, **details,
        "model_config_hash": io.config_hash(model_config),
        "config_hash": io.config_hash({"settings": settings, "model": model_config}),
        "input": inputs.description, "input_source": inputs.source,
        "settings": settings, "bands": "seeds" if seeds > 1 else "sequences",
        "spectrum": ("every sequence (causal attention is triangular: its diagonal)"
                     if target.kind in ARCHS
                     and ARCHS[target.kind].causal else
                     f"the first {spectrum_sequences} sequence(s)"
                     if spectrum_sequences is not None else "every sequence"),
        "code_version": io.code_version(),
        "versions": _versions(), "device": str(torch_device), "dtype": dtype,
        "wall_s": None,
    }
    table["config_hash"] = info["config_hash"]
    table["code_version"] = info["code_version"]
    verdicts = judge_on_model(table, info)
    info["wall_s"] = round(time.perf_counter() - started, 2)
    return Result(table, info, verdicts)


def _model_details(net: nn.Module) -> dict:
    config = net.config.to_dict()
    width = next((config[k] for k in ("hidden_size", "n_embd", "d_model") if k in config), None)
    heads = next((config[k] for k in ("num_attention_heads", "n_head") if k in config), None)
    return {"width": width, "heads": heads,
            "parameters": int(sum(p.numel() for p in net.parameters())),
            "model_class": type(net).__name__}


def _versions() -> dict:
    from importlib import metadata

    out = {}
    for name in ("torch", "transformers", "numpy", "pandas"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out
