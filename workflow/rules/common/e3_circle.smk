# Helpers of e3_circle.smk: its input functions, parameters and benchmark records.


def circle_tables(wildcards=None):
    """E3's per-job roll-out tables, one per width, every setup and seed in each."""
    return expand(results("circle/w{width}.parquet"), width=config["circle"]["widths"])


def circle_params(wildcards):
    c = config["circle"]
    train = ("steps", "batch", "lr", "warmup", "schedule", "weight_decay", "clip")
    return {
        "setups": c["setups"],
        "width": int(wildcards.width),
        "heads": c["heads"],
        "mlp_ratio": c["mlp_ratio"],
        "task_options": {k: c[k] for k in ("points", "radius")},
        "train_options": {k: c[k] for k in train}
        | {"checkpoint_every": 0, "eval_every": c["steps"]},
        "rollout_steps": c["rollout"],
        "starts": c["starts"],
        "seeds": c["seeds"],
    }


BENCHMARKS[table("E3", "circle")] = lambda: [
    *expand(
        results("benchmarks/circle/w{width}.tsv"), width=config["circle"]["widths"]
    ),
    results("benchmarks/collect/E3_circle.tsv"),
]
