"""The `rankcollapse` command. One sub-command today:

    rankcollapse probe PATH_OR_FAMILY [--text FILE | --random-ids] [--tokens 128] [--batch 16]
                       [--seeds 5] [--ablations transformer,san,...] [--dtype float32|float64]
                       [--device auto|cpu|cuda] [--out DIR] [--force]

The library does the work (rankcollapse.probe, docs/probe.md); this module reads the arguments
and checks them before anything heavy is imported, so that --help and bad input answer at once.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rankcollapse.core.checkpoints import (
    TOKENIZER_FILES,
    CheckpointError,
    checkpoint_config,
    has_tokenizer,
    max_positions,
    tokenizer_files,
    weight_files,
)
from rankcollapse.probe.spec import (
    PROBE_ABLATIONS,
    PROBE_FAMILIES,
    PROBE_FAMILY_POSITIONS,
    PROBE_OUTPUTS,
    ProbeError,
    probe_ablations,
    read_text,
)

DESCRIPTION = """\
Does this model collapse? Measures every layer of a Hugging Face model (a local checkpoint
folder, or a family at random initialisation) with its paths ablated, writes a figure, a table
and probe.json into --out, prints a short table, and judges the registered claims that apply to
any model (Dong et al.'s doubly exponential collapse of pure attention and skips preventing it,
Yu & Zhang's escalation of token similarity) on this model."""

EPILOG = f"""\
families (random init, nothing downloaded): {', '.join(PROBE_FAMILIES)}
ablations: san (attention only), san_mlp, san_skip, transformer (unmodified),
  transformer_deesc (de-escalated attention), san_skip_2021 (ALBERT only); model types the
  probe can ablate: {', '.join(PROBE_ABLATIONS)}; any other is probed unmodified.
examples:
  rankcollapse probe gpt2 --layers 12 --seeds 5 --out probe-gpt2
  rankcollapse probe llama --random-ids --out probe-llama
  rankcollapse probe ~/models/bert-base-cased --out probe-bert   # a downloaded checkpoint
"""


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="rankcollapse", description="Rank collapse in "
                                  "self-attention networks: tools outside the workflow.")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = commands.add_parser("probe", help="per-layer collapse metrics, figure and verdicts of "
                            "one model", description=DESCRIPTION, epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="PATH_OR_FAMILY",
                   help="a local checkpoint folder (config.json + weights, its tokenizer when "
                   f"present), or a family built at random initialisation: "
                   f"{', '.join(PROBE_FAMILIES)}")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--text", metavar="FILE", help="UTF-8 text, read with the model's "
                        "tokenizer (default: the standard library's pydoc_data text where a "
                        "tokenizer exists, random token ids otherwise)")
    source.add_argument("--random-ids", action="store_true", help="random token ids")
    p.add_argument("--tokens", type=int, default=128, help="tokens per sequence (default 128)")
    p.add_argument("--batch", type=int, default=16, help="sequences (default 16)")
    p.add_argument("--seeds", type=int, default=None, help="independent random "
                   "initialisations of a family (default 5; a checkpoint is one network)")
    p.add_argument("--ablations", default=None, metavar="A,B,...",
                   help="comma-separated (default: every ablation the model type takes)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="precision of the forward pass (metrics are float64)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--out", default="probe-out", metavar="DIR",
                   help="output folder (default probe-out)")
    p.add_argument("--force", action="store_true", help="overwrite the outputs in --out")
    p.add_argument("--layers", type=int, help="family only: number of layers")
    p.add_argument("--width", type=int, help="family only: model width (heads of 64)")
    p.add_argument("--heads", type=int, help="family only: attention heads")
    p.add_argument("--spectrum-sequences", type=int, default=2, metavar="K",
                   help="|λ₂| of bidirectional attention on the first K sequences (it needs "
                   "LAPACK eigenvalues of every head's matrix; 0: all; causal models: always "
                   "all, from the diagonal). Default 2")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return top


def _creatable(out: Path) -> None:
    """Raise ProbeError unless the folder `out` exists or can be created: tried, then undone,
    so the check leaves nothing behind (a permission test alone misses read-only file systems
    and what root may not create, such as a folder under /proc)."""
    missing = [p for p in (out, *out.absolute().parents) if not p.exists()]
    parent = out.absolute().parents[len(missing) - 1] if missing else out
    if not parent.is_dir():
        raise ProbeError(f"--out {out}: cannot be created, {parent} is a file")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ProbeError(f"--out {out}: cannot be created ({err.strerror}: "
                         f"{err.filename})") from None
    for folder in missing:  # innermost first
        folder.rmdir()


def checked(args: argparse.Namespace) -> dict:
    """Everything about the arguments that can be checked without torch: the target (a
    checkpoint folder's config.json, weights and, where a text is read with it, tokenizer), the
    ablations, the sequence length, the text, the output folder. Returns what the probe needs;
    ProbeError with a message naming the problem otherwise."""
    target = args.target
    path = Path(target).expanduser()
    family = None
    # A family's name is the family, unless a checkpoint folder of that name is here (say
    # ./gpt2 for a folder; a folder without config.json, an earlier --out say, does not count).
    if target in PROBE_FAMILIES and not (path / "config.json").is_file():
        family = target
        kind, config, tokenizer = target, None, False
        limit = PROBE_FAMILY_POSITIONS[target]
    else:
        if not path.exists() and "/" not in target and not target.startswith("."):
            raise ProbeError(f"{target}: no such directory, and not a family "
                             f"({', '.join(PROBE_FAMILIES)})")
        config = checkpoint_config(path)
        weight_files(path, config)  # every file the probe will read, before it loads any
        tokenizer = has_tokenizer(path)
        if tokenizer and not args.random_ids:
            tokenizer_files(path)
        kind = str(config["model_type"])
        limit = max_positions(config)
        if args.layers is not None or args.width is not None or args.heads is not None:
            raise ProbeError("--layers, --width and --heads resize a random-init family; "
                             f"{target} is a checkpoint")
        if args.seeds not in (None, 1):
            raise ProbeError(f"--seeds {args.seeds}: {target} is a checkpoint, one network; "
                             "seeds are random initialisations of a family")
    allowed = probe_ablations(kind)
    if args.ablations is None:
        ablations = list(allowed)
    else:
        ablations = [a.strip() for a in args.ablations.split(",") if a.strip()]
        bad = [a for a in ablations if a not in allowed]
        if not ablations or bad:
            known = "" if kind in PROBE_ABLATIONS else " (the probe cannot ablate this " \
                "architecture; it probes it unmodified)"
            raise ProbeError(f"--ablations: {bad or 'none given'} cannot run on a {kind} "
                             f"model{known}; the probe runs {list(allowed)} on it")
    for name, value, low in (("--tokens", args.tokens, 2), ("--batch", args.batch, 1),
                             ("--seeds", args.seeds, 1), ("--spectrum-sequences",
                                                          args.spectrum_sequences, 0),
                             ("--layers", args.layers, 1), ("--width", args.width, 1),
                             ("--heads", args.heads, 1)):
        if value is not None and value < low:
            raise ProbeError(f"{name} {value}: must be at least {low}")
    if limit is not None and args.tokens > limit:
        raise ProbeError(f"--tokens {args.tokens} is longer than the model's {limit} "
                         "positions")
    text = read_text(args.text) if args.text else None
    if text is not None and family is None and not tokenizer:
        raise ProbeError(f"{target} holds no tokenizer ({', '.join(TOKENIZER_FILES)}): its "
                         "ids cannot be read from a text; add its tokenizer or use --random-ids")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ProbeError(f"--out {out}: exists and is not a folder")
    _creatable(out)
    existing = [name for name in PROBE_OUTPUTS if (out / name).exists()]
    if existing and not args.force:
        raise ProbeError(f"--out {out} already holds {existing}; nothing was overwritten "
                         "(use --force, or another --out)")
    return {"ablations": ablations, "text": text, "kind": kind}


def device(wanted: str) -> str:
    import torch

    if wanted == "cuda" and not torch.cuda.is_available():
        raise ProbeError("--device cuda: no GPU is visible to torch (CUDA not available); "
                         "use --device cpu or auto")
    if wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return wanted


def probe(args: argparse.Namespace) -> int:
    settings = checked(args)
    where = device(args.device)
    from rankcollapse import probe as library  # torch, transformers, pandas: after the checks

    target = library.resolve(args.target, args.layers, args.width, args.heads)
    result = library.run(
        target, input_kind="random" if args.random_ids else "auto", text=settings["text"],
        text_name=args.text, tokens=args.tokens, batch=args.batch, seeds=args.seeds,
        ablations=settings["ablations"], dtype=args.dtype, device=where,
        spectrum_sequences=args.spectrum_sequences or None, progress=not args.quiet)
    written = library.write(result, args.out, force=args.force)
    print(library.summary(result))
    print(f"\nwrote {', '.join(str(p) for p in written)} ({result.info['wall_s']:.1f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "probe":
            return probe(args)
    except CheckpointError as err:  # the probe's own (ProbeError) and a checkpoint folder's
        print(f"rankcollapse {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
