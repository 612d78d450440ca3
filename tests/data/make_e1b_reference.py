"""Writes tests/data/e1b_reference.parquet: E1b's table (realarch.run, as the workflow's job
calls it) for tiny BERT/ALBERT/XLNet models, 2 seeds, every ablation, random ids and the packaged
text. It was generated ONCE by the code before E1b moved onto rankcollapse.probe (commit
b6a4f95, src/ of that commit on PYTHONPATH); tests/probe/test_probe.py checks that today's code
gives the identical table. Run: PYTHONPATH=<old src> python tests/data/make_e1b_reference.py OUT
"""

import sys

import pandas as pd

# Tiny sizes (milliseconds per forward pass); vocabulary large enough for the packaged text.
from rankcollapse import runtime
from rankcollapse.probe import realarch

TINY = {
    "bert": {"vocab_size": 3000, "hidden_size": 32, "num_hidden_layers": 3,
             "num_attention_heads": 2, "intermediate_size": 64},
    "albert": {"vocab_size": 3000, "embedding_size": 16, "hidden_size": 32,
               "num_hidden_layers": 3, "num_attention_heads": 2, "intermediate_size": 64},
    "xlnet": {"vocab_size": 3000, "d_model": 32, "n_layer": 3, "n_head": 2, "d_head": 16,
              "d_inner": 64},
}
SETTINGS = {"seeds": [0, 1], "ablations": list(realarch.ABLATIONS), "text_seeds": 1,
            "batch": 3, "tokens": 12, "input_seed": 0, "dtype": "float32"}


def table(model: str) -> pd.DataFrame:
    """What workflow/scripts/realarch.py builds for one model (without provenance columns)."""
    full_size = realarch.build
    realarch.build = lambda m, seed=0, checkpoint=None, config_overrides=None: full_size(
        m, seed, checkpoint, TINY[m])
    try:
        options = {k: SETTINGS[k] for k in ("ablations", "batch", "tokens", "input_seed",
                                            "dtype")}
        text_seeds = sorted(SETTINGS["seeds"])[: SETTINGS["text_seeds"]]
        per_seed = []
        for seed in SETTINGS["seeds"]:
            runtime.setup(1, seed)
            inputs = ["random", "text"] if seed in text_seeds else ["random"]
            t = realarch.run(model, seed, inputs=inputs, **options)
            t.insert(1, "seed", seed)
            per_seed.append(t)
        return pd.concat(per_seed, ignore_index=True)
    finally:
        realarch.build = full_size


if __name__ == "__main__":
    out = pd.concat([table(m) for m in realarch.MODELS], ignore_index=True)
    out.to_parquet(sys.argv[1], index=False)
    print(f"wrote {len(out)} rows to {sys.argv[1]}")
