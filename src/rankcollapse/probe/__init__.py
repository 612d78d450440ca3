"""The probe: does *this* model collapse? Per-layer collapse metrics of a Hugging Face model,
with its paths ablated, and the papers' claims judged on it; behind `rankcollapse probe` and
experiment E1b (rankcollapse.probe.realarch). docs/probe.md says how it measures and
which module holds what.

This face names every part of the probe. The plain tables (spec) are imported with it (a
checkpoint folder's checks are rankcollapse.core.checkpoints'); the rest is imported on first
use, so that importing the package (the command line's
checks, the workflow's planning) does not import torch, transformers or pandas.
"""

from __future__ import annotations

import importlib

from rankcollapse.probe.spec import (  # noqa: F401 - the probe's plain tables, without torch
    ABLATIONS,
    FAMILIES,
    FIRST_ID,
    METRICS,
    PROBE_ABLATIONS,
    PROBE_FAMILIES,
    PROBE_FAMILY_POSITIONS,
    PROBE_OUTPUTS,
    PROBE_UNMODIFIED,
    RESIDUALS,
    ProbeError,
    probe_ablations,
    read_text,
)

# The names of the modules that import torch, each from where it is defined (the submodule of
# this package, or rankcollapse.core.model for DTYPES). spec's max_positions reads a
# config.json's dict; the face's, models.max_positions, a configuration object too.
_LAZY = {
    "rankcollapse.core.model": ("DTYPES",),
    "rankcollapse.probe.models": ("base_config", "family_sizes", "build", "load", "model_type",
                                  "max_positions"),
    "rankcollapse.probe.ablation": ("centre", "BertSelfOutputAblated", "FeedForwardRemoved",
                                    "AlbertAttentionAblated", "AlbertLayerAttentionOnly",
                                    "XLNetAttentionAblated", "GPT2BlockAblated",
                                    "LlamaLayerAblated", "Arch", "ARCHS", "ablate",
                                    "_TOKEN_MASK"),
    "rankcollapse.probe.hooks": ("OnLayer", "capture", "hidden_states", "check_model"),
    "rankcollapse.probe.metrics": ("one_thread", "causal_lambda2", "sequence_metrics",
                                   "measure"),
    "rankcollapse.probe.inputs": ("first_id", "random_ids", "word_ids", "text_windows",
                                  "tokenize", "load_tokenizer", "default_text", "Inputs",
                                  "make_inputs"),
    "rankcollapse.probe.verdicts": ("claims_on", "RESIDUAL_FLOOR",
                                    "TDIV_FLOOR", "RESAMPLES", "measure_claims",
                                    "judge_on_model"),
    "rankcollapse.probe.flow": ("Target", "resolve", "Result", "run"),
    "rankcollapse.probe.report": ("LABELS", "PANELS", "curves", "band_text", "figure",
                                  "outputs", "write", "plt_rc", "summary"),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # once: later look-ups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
