"""The probe's plain tables, without torch: families, ablations, output names, its metrics, and
its own error; the command line (rankcollapse.cli) checks its arguments with these (and a
checkpoint folder's files with rankcollapse.core.checkpoints) before importing torch.
"""

from __future__ import annotations

from pathlib import Path

from rankcollapse.core.checkpoints import CheckpointError

# Random-init families the probe builds from explicit configurations (nothing is downloaded).
PROBE_FAMILIES = ("bert", "albert", "xlnet", "gpt2", "llama")
FAMILIES = PROBE_FAMILIES
# san: attention only (no attention skip, its norm kept; no feed-forward block); san_mlp: the
# feed-forward block kept; san_skip: the attention skip kept; transformer: the model as it is;
# transformer_deesc: the model with Yu & Zhang's de-escalation of every attention output.
_PATHS = ("san", "san_mlp", "san_skip", "transformer", "transformer_deesc")
# Hugging Face model types the probe can ablate, each with the ablations it runs on them. Any
# other model type that returns hidden states and attentions is probed unmodified only.
PROBE_ABLATIONS = {
    "bert": _PATHS,
    "albert": (*_PATHS, "san_skip_2021"),  # + ALBERT as Dong et al.'s 2021 code ablated it
    "xlnet": _PATHS,
    "gpt2": _PATHS,
    "llama": _PATHS,  # the Llama-style decoders: RMSNorm, pre-norm, rotary positions
    "mistral": _PATHS,
    "qwen2": _PATHS,
}
PROBE_UNMODIFIED = ("transformer",)
ABLATIONS = {  # name: (attention skip kept, feed-forward block kept, de-escalation)
    "san": (False, False, False),
    "san_mlp": (False, True, False),
    "san_skip": (True, False, False),
    "transformer": (True, True, False),
    "transformer_deesc": (True, True, True),
    "san_skip_2021": (True, False, False),  # ALBERT only; see rankcollapse.probe.ablation.ablate
}
# The longest sequence each family's base configuration accepts (rankcollapse.probe.base_config;
# a test keeps the two in step); None: relative positions only (XLNet).
PROBE_FAMILY_POSITIONS = {"bert": 512, "albert": 512, "xlnet": None, "gpt2": 1024, "llama": 2048}
# Config keys that bound the sequence length a model accepts (the first one present counts).
# The files a probe writes into its --out folder (none is overwritten without --force).
PROBE_OUTPUTS = ("probe.png", "probe.pdf", "layers.parquet", "layers.csv", "probe.json")
FIRST_ID = 1000  # input ids start here: clear of padding (zero embedding row) and special tokens
RESIDUALS = ("relative_residual_comp", "relative_residual")
METRICS = (*RESIDUALS, "token_similarity", "mean_cosine", "effective_rank", "attn_lambda2")


def probe_ablations(model_type: str) -> tuple[str, ...]:
    """The ablations the probe can run on a model of this Hugging Face model type."""
    return PROBE_ABLATIONS.get(model_type, PROBE_UNMODIFIED)


class ProbeError(CheckpointError):
    """Input the probe cannot measure, said before any computation: the message names it (a
    checkpoint folder's own problems are CheckpointError, which this extends)."""


def read_text(path) -> str:
    """A UTF-8 text file's content; ProbeError naming the file when it is missing, empty or
    not UTF-8."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ProbeError(f"--text {path}: no such file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ProbeError(f"--text {path}: not UTF-8 text (byte {err.start} is "
                         f"{data[err.start:err.start + 1]!r})") from err
    if not text.strip():
        raise ProbeError(f"--text {path}: the file is empty")
    return text


