"""Assemble the report (HTML with embedded figures, and a PDF of the same) from the notebooks'
section files RESULTS/numbers/{experiment}.json and the jobs' benchmark records (RESULTS:
results/ for the default config, results/<name>/ for the others)."""

from __future__ import annotations

import base64
import json
import os
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import jinja2
import pandas as pd
import yaml

from rankcollapse.claims import (
    DIAGNOSIS_RULE,
    KIND_TITLES,
    KINDS,
    PAPERS,
    READINGS,
    VERDICT_RULE,
    VERDICTS,
    diagnose,
    judge_sections,
    load_registry,
    registry_hash,
)
from rankcollapse.io import atomic_write, provenance


def load_sections(paths: list[str | os.PathLike]) -> list[dict]:
    sections = []
    for path in paths:
        try:
            sections.append(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as err:
            raise RuntimeError(f"cannot read experiment numbers {path}: {err}") from err
    return sections


MIME = {".png": "image/png", ".svg": "image/svg+xml"}

# Above this size an SVG (a scatter of many thousand points) is larger and slower to typeset than
# its PNG; the PDF report then takes the PNG.
SVG_MAX_BYTES = 3_000_000


def data_uri(path: str | os.PathLike) -> str:
    path = Path(path)
    data = base64.b64encode(path.read_bytes()).decode()
    return f"data:{MIME[path.suffix]};base64,{data}"


def print_image(figure: dict) -> str:
    """The image the PDF embeds: the vector SVG when the notebook wrote one of sensible size."""
    svg = figure.get("svg")
    if svg and Path(svg).is_file() and Path(svg).stat().st_size <= SVG_MAX_BYTES:
        return svg
    return figure["png"]


def _size(value) -> int:
    return len(value) if isinstance(value, list | tuple | dict) else int(value)


def _list(values) -> str:
    return ", ".join(str(v) for v in values)


def _e5_size(c: dict) -> str:
    """E5's tuned grid: arms, sweep members and final seeds per arm."""
    from rankcollapse.plan.training import grid_depths, tuned_runs
    from rankcollapse.training.tuning import grid as sweep_grid
    from rankcollapse.training.tuning import rung_steps

    g = c["depth_grid"]
    arms = tuned_runs(c)
    settings = len(sweep_grid({k: g[k] for k in ("lr", "warmup", "weight_decay")}))
    depths = "; ".join(f"{t} depths {_list(grid_depths(g, t))}" for t in g["tasks"])
    halving = {"eta": 3, "rungs": 3, **g.get("halving", {})}
    budgets = rung_steps(g["steps"], g.get("tuning", "grid"), halving["eta"], halving["rungs"])
    survivors, swept = settings, 0
    for rung in range(len(budgets)):
        swept += survivors * _size(g["tuning_seeds"])
        survivors = 1 if rung == len(budgets) - 1 else -(-survivors // halving["eta"])
    method = ("every setting trained to the full budget (grid)" if len(budgets) == 1 else
              f"successive halving (eta {halving['eta']}, rungs of {_list(budgets)} steps)")
    rivals = c.get("rival_fixes", {}).get("variants", []) if "E5b" in c.get("report", {}).get(
        "experiments", []) else []
    return (f"{len(arms)} tuned arms ({_list(g['tasks'])} × {_size(g['variants'])} variants; "
            f"{depths}; placements {_list(g.get('placements', [])) or 'none'}"
            + (f" and E5b's rival fixes {_list(rivals)}" if rivals else "") + " at the deepest); "
            f"each a sweep of {settings} settings × {_size(g['tuning_seeds'])} tuning seed(s), "
            f"{method}, then {_size(g['seeds'])} fresh seeds, {g['steps']} steps of batch "
            f"{g['batch']}: {len(arms) * (swept + _size(g['seeds']))} trained networks")


def _e5b_size(c: dict) -> str:
    """E5b: the rival fixes, tuned as E5 arms at the deepest depth of their task."""
    from rankcollapse.plan.training import grid_depths

    r, g = c["rival_fixes"], c["depth_grid"]
    deepest = grid_depths(g, r["task"])[-1]
    return (f"{_size(r['variants'])} rival fixes ({_list(r['variants'])}) tuned as E5 arms at "
            f"{r['task']} depth {deepest}, beside E5's post_ln, pre_ln and post_ln_deesc there; "
            f"{_size(g['seeds'])} fresh seeds each")


def experiment_sizes(config: dict, experiments: list[str]) -> list[dict]:
    """One row per experiment: what it runs and how big, read from the config."""
    c = config

    def grid(block: dict, *keys: str) -> int:
        total = 1
        for key in keys:
            total *= _size(block[key])
        return total

    describe = {
        "E1": lambda: (
            "init_sweep",
            f"{_size(c['init_sweep']['variants'])} variants × {_size(c['init_sweep']['seeds'])} "
            f"seeds; depth {c['init_sweep']['depth']}, width {c['init_sweep']['width']}, "
            f"{c['init_sweep']['heads']} heads, n = {c['init_sweep']['tokens']} tokens, "
            f"{c['init_sweep']['batch']} sequences per network"),
        "E1b": lambda: (
            "realarch",
            f"{_list(c['realarch']['models'])} × {_size(c['realarch']['seeds'])} seeds; "
            f"{_size(c['realarch']['ablations'])} ablations; {c['realarch']['batch']} sequences "
            f"of {c['realarch']['tokens']} tokens"),
        "E2": lambda: (
            "paths, train",
            f"{grid(c['paths'], 'tasks', 'variants', 'depths', 'seeds')} trained networks "
            f"({_list(c['paths']['tasks'])} × {_list(c['paths']['variants'])} × depths "
            f"{_list(c['paths']['depths'])} × {_size(c['paths']['seeds'])} seeds; widths "
            + ", ".join(f"{t} {m['width']}" for t, m in c['paths'].get('models', {}).items())
            + f"), {c['paths']['train'].get('steps', c['train']['steps'])} steps each; sampled "
            f"paths summed {' and '.join(map(str, c['paths']['samples']))} at a time, "
            f"{c['paths']['repeats']} repeats, {c['paths']['eval_size']} evaluation examples"),
        "E3": lambda: (
            "circle",
            f"{grid(c['circle'], 'setups', 'widths', 'seeds')} trained layers "
            f"({_size(c['circle']['setups'])} set-ups × widths {_list(c['circle']['widths'])} × "
            f"{_size(c['circle']['seeds'])} seeds), {c['circle']['steps']} Adam steps at "
            f"{c['circle']['lr']:g} in batches of {c['circle']['batch']}, "
            f"{c['circle']['rollout']}-step roll-outs from {c['circle']['starts']} start pairs"),
        "E4": lambda: (
            "escalation, train",
            f"{grid(c['escalation'], 'variants', 'seeds')} trained networks of depth "
            f"{c['escalation']['depth']} on {c['escalation']['task']}; width "
            f"{c['train']['width']}, {c['train']['steps']} steps"),
        "E5": lambda: ("depth_grid, train", _e5_size(c)),
        "E5b": lambda: ("rival_fixes, depth_grid", _e5b_size(c)),
        "E6": lambda: ("particles", _particles_size(c["particles"])),
        "E7": lambda: ("—", "no runs of its own: reads E1's, E4/E5's and E6's tables"),
    }
    rows = []
    for experiment in experiments:
        try:
            blocks, size = describe[experiment]()
        except (KeyError, TypeError, ValueError):
            blocks, size = "—", "see the configuration in the provenance section"
        rows.append({"experiment": experiment, "blocks": blocks, "size": size})
    return rows


TRAINED = ("E2", "E4", "E5", "E5b")  # the experiments whose networks train through the ensemble


def numerics_note(config: dict, experiments: list[str]) -> dict | None:
    """The methods paragraph on how the networks were trained: precision, step engine and
    attention, as the config chose them (each training row records what actually ran)."""
    trained = [e for e in experiments if e in TRAINED]
    if not trained:
        return None
    t = config.get("train", {})
    precision = {"float32": "float32 throughout",
                 "tf32": "float32 storage with TensorFloat-32 matrix products on a GPU (float32 "
                         "on a CPU)",
                 "bf16": "bfloat16 autocast of the forward pass, float32 weights, gradients "
                         "and optimiser"}[t.get("precision", "float32")]
    engine = {"auto": "a CUDA graph on a GPU, eager steps on a CPU",
              "eager": "eager steps", "graph": "a CUDA graph on a GPU (eager on a CPU)",
              "compile": "torch.compile (captured in a CUDA graph on a GPU)"}[
        t.get("engine", "auto")]
    attention = {"math": "the decomposed softmax attention (bit-reproducible)",
                 "fused": "the fused attention kernels on a GPU (decomposed on a CPU)"}[
        t.get("attention", "math")]
    return {"experiment": "training", "text": (
        f"Training ({', '.join(trained)}). Precision (train.precision): {precision}. Each "
        f"ensemble's step ran as {engine}, with {attention}. Every results row of a trained "
        "network records the precision, engine and attention it actually ran with (columns "
        "precision, engine, attention); per-layer metrics are measured in float32 on the CPU "
        "whatever the training precision.")}


def method_notes(experiments: list[str], config: dict | None = None) -> list[dict]:
    """Definitions the claims of these experiments rest on, one paragraph each (methods text:
    what a quantity means, never a finding); numbers come from the library's constants."""
    from rankcollapse.claims import e2
    from rankcollapse.experiments.circle import COLLAPSE_FRACTION

    notes = {
        "E2": (
            "Path lengths (E2). A path of length k passes through k of the L layers, one head "
            "in each, and skips the others. The original protocol samples such paths (k random "
            "layers, one random head each), runs each active layer on the path's own input "
            "without its residual, through a LayerNorm without learned gain and bias, sums a "
            "few paths and classifies the sum with the network's read-out. Claims compare "
            "accuracies as gain shares (a − m)/(full − m): the accuracy a above the majority-"
            "class rate m of the evaluation labels (the best constant predictor) as a share of "
            "the full network's accuracy above it, from means over trained networks; a network "
            f"less than {e2.MIN_GAIN:g} above m has no gain to share (undefined)."),
        "E3": (
            "Collapse (E3). A roll-out collapses when its two tokens come within "
            f"{COLLAPSE_FRACTION:.0%} of the data's pair distance 2r of each other and stay "
            "there, or when each token stays that close to its end point for at least three "
            "times as many steps as the data's own motion takes to cover that distance (the "
            "trajectory has shrunk to a point). The share is chosen from the paper's figure: "
            "at its scale (axes ±0.56 for r = 0.3) two points that close are drawn as one, "
            "while the data's two tokens stay 2r apart at every step. A trained layer's time to "
            "collapse is the upper median over its start pairs, a roll-out without collapse "
            "counting as its length + 1."),
    }
    out = [{"experiment": e, "text": notes[e]} for e in experiments if e in notes]
    training = numerics_note(config or {}, experiments)
    return out + ([training] if training else [])


def _particles_size(p: dict) -> str:
    """E6's size line: one clause per study."""
    h, s, x, b, m = (p[k] for k in ("homogenization", "small_beta", "simplex", "large_beta",
                                   "maps"))
    return (f"homogenization over depths {_list(h['depths'])} ({h['runs']} runs each; heads "
            f"⌈L^{h['heads_exponent']:g}⌉ up to L = {max(h['heads_depths'])}); small "
            f"temperature d = {_list(s['d'])} × n = {_list(s['n'])}, {s['runs']} runs per cell; "
            f"simplex d = {_list(x['d'])}, {x['runs']} runs; large temperature d = "
            f"{_list(b['d'])}, {b['runs']} pairs; maps {_size(m['d'])} d and {_size(m['beta'])} "
            f"β × {_size(m['n'])} n, {m['runs']} runs per cell")


def _stage(path: str | os.PathLike) -> str:
    """The rule of a benchmark record: the folder after the `benchmarks` folder that sits at
    most two levels below a `results` folder (results/benchmarks/ or results/<name>/benchmarks/),
    so that a `benchmarks` folder above the project does not count; else the file's stem."""
    parts = Path(path).parts
    for i, part in enumerate(parts[:-1]):
        if part == "benchmarks" and "results" in parts[max(0, i - 2):i]:
            return Path(parts[i + 1]).stem
    return Path(path).stem


def wall_times(benchmarks: list[str | os.PathLike]) -> pd.DataFrame:
    """Jobs and summed wall time per rule from snakemake `benchmark:` files.

    The rule is the first folder under the config's benchmarks folder:
    results/benchmarks/<rule>/... for the default config, results/<name>/benchmarks/<rule>/...
    for the others (rankcollapse.plan.config.output_roots).
    """
    per_rule: dict[str, list[float]] = defaultdict(list)
    for path in benchmarks:
        per_rule[_stage(path)].append(float(pd.read_csv(path, sep="\t")["s"].iloc[0]))
    rows = [{"stage": r, "jobs": len(v), "total_s": sum(v), "max_s": max(v)}
            for r, v in per_rule.items()]
    return pd.DataFrame(rows, columns=["stage", "jobs", "total_s", "max_s"])


def ledger(registry: dict, sections: list[dict]) -> list[dict]:
    """Every claim of the run as a ledger row, in registry order, each with its kind, basis,
    interval method, n, verdict and generated sentence; a paper claim that is not reproduced or
    partly also with its diagnosis (`diagnose`: the reading of its diagnostics' verdicts), and a
    diagnostic with the claims it diagnoses and its hypothesis."""
    judged = judge_sections(registry, sections)
    diagnoses = diagnose(judged)
    rows = [row.to_dict() for row in judged]
    for i, row in enumerate(rows, start=1):
        row["number"] = i
        found = diagnoses.get(row["id"])
        row["diagnosis"] = found.to_dict() if found else None
    return rows


def diagnosis_tally(rows: list[dict]) -> str:
    """How the papers' claims that are not reproduced or partly read, e.g. "differs with our
    set-up: 3; open: 1" (generated from the diagnoses)."""
    counter = Counter(r["diagnosis"]["reading"] for r in rows if r.get("diagnosis"))
    return "; ".join(f"{v}: {counter[v]}" for v in READINGS if counter[v]) or "none"


def paper_name(key: str) -> str:
    return PAPERS.get(key, key)


def tally(rows: list[dict]) -> str:
    counter = Counter(r["verdict"] for r in rows)
    return ", ".join(f"{counter[v]} {v}" for v in VERDICTS if counter[v]) or "none"


def abstract(sections: list[dict], rows: list[dict]) -> list[str]:
    """The abstract's paragraphs: what was done (fixed text), the headline claims' verdict
    sentences (generated), and the tallies. Only `paper` claims are tallied per paper; checks and
    our own extensions are counted apart."""
    short = {r["id"]: short_sentence(r) for r in rows if r.get("headline")}
    headlines = [short[r["id"]] for r in rows if r["id"] in short]
    papers = [r for r in rows if r["kind"] == "paper"]
    by_paper: dict[str, list[dict]] = defaultdict(list)
    for r in papers:  # by the paper's name: a key ("D21") and its full name are one paper
        by_paper[paper_name(r["paper"])].append(r)
    checks = [r for r in rows if r["kind"] == "check"]
    ours = [r for r in rows if r["kind"] == "ours"]
    return [
        "Deep self-attention networks lose the diversity of their token representations with "
        "depth. We rebuild, on one model and one metric library, the experiments behind three "
        "accounts of this collapse (Dong, Cordonnier & Loukas 2021; Yu & Zhang 2023; Koubbi, "
        "Geshkovski & Rigollet 2026), compute the three papers' statistics on the same runs, and "
        "test every claim as a measurement against a range registered before the run.",
        " ".join(headlines),
        f"Of the {len(papers)} claims the papers make that we test: "
        + "; ".join(f"{p}: {tally(r)}" for p, r in by_paper.items())
        + f". Consistency checks of our code: {tally(checks)} (of {len(checks)}). Beyond the "
        f"papers (our extensions and rival methods): {tally(ours)} (of {len(ours)}).",
        *([f"Of the papers' claims that are not reproduced or only partly, read from their "
           f"registered diagnostics by the rule of the methods: {diagnosis_tally(papers)}."]
          if any(r.get("diagnosis") for r in papers) else []),
    ]


def short_sentence(row: dict) -> str:
    """The abstract's form of a verdict sentence: the verdict phrase and the quoted claim."""
    from rankcollapse.claims import PHRASES

    phrase = PHRASES[row["kind"]][row["verdict"]]
    return f"{phrase}: “{row['statement'].rstrip('.')}” ({row['experiment']})."


def number_items(sections: list[dict]) -> None:
    """Number figures and tables through the whole report (Figure 1, 2, …) and give each an id."""
    figure = table = 0
    for section in sections:
        for f in section["figures"]:
            figure += 1
            f["number"], f["id"] = figure, f"fig-{figure}"
        for t in section["tables"]:
            table += 1
            t["number"], t["id"] = table, f"tab-{table}"


def build(numbers: list, benchmarks: list, registry: str | os.PathLike,
          template: str | os.PathLike, style: str | os.PathLike, title: str, config: dict,
          html_path: str | os.PathLike, pdf_path: str | os.PathLike | None = None) -> str:
    """Render the report to html_path (PNG figures embedded) and, if pdf_path, to PDF (SVG
    figures where the notebooks wrote them). Sections follow config["report"]["experiments"];
    their measurements are judged against the claims registry at `registry`, which must hold
    exactly the claims the run's experiments measure (RegistryError otherwise)."""
    sections = load_sections(numbers)
    order = config.get("report", {}).get("experiments", [])
    sections.sort(key=lambda s: order.index(s["experiment"]) if s["experiment"] in order
                  else len(order))
    number_items(sections)
    claims = ledger(load_registry(registry), sections)
    order_of = {kind: i for i, kind in enumerate(KINDS)}
    for section in sections:  # the section's conclusions: its claims' generated sentences
        own = [c for c in claims if c["experiment"] == section["experiment"] and c["sentence"]]
        section["n_claims"] = sum(c["experiment"] == section["experiment"] for c in claims)
        section["verdict_sentences"] = [
            c["sentence"] + (f" Diagnosis: {c['diagnosis']['text']}." if c["diagnosis"] else "")
            for c in sorted(own, key=lambda c: order_of[c["kind"]])]
    times = wall_times(benchmarks)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(template).parent),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
    )
    context = dict(
        title=title,
        css=Path(style).read_text(),
        abstract=abstract(sections, claims),
        sections=sections,
        claims=claims,
        claims_by_kind={kind: [c for c in claims if c["kind"] == kind] for kind in KINDS},
        kind_titles=KIND_TITLES,
        tallies={kind: tally([c for c in claims if c["kind"] == kind]) for kind in KINDS},
        registry_hash=registry_hash(registry),
        verdict_rule=VERDICT_RULE,
        diagnosis_rule=DIAGNOSIS_RULE,
        sizes=experiment_sizes(config, [s["experiment"] for s in sections]),
        method_notes=method_notes([s["experiment"] for s in sections], config),
        provenance=provenance(),
        config_yaml=yaml.safe_dump(config, sort_keys=False, width=100, default_flow_style=None),
        times=times.to_dict(orient="records"),
        total_time=float(times.total_s.sum()) if len(times) else 0.0,
        built=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )

    def render(image) -> str:
        for section in sections:
            for fig in section["figures"]:
                fig["src"] = data_uri(image(fig))
        return env.get_template(Path(template).name).render(**context)

    html = render(lambda fig: fig["png"])
    atomic_write(html_path, lambda tmp: tmp.write_text(html))
    if pdf_path is not None:
        import weasyprint

        document = weasyprint.HTML(string=render(print_image),
                                   base_url=str(Path(html_path).parent))
        atomic_write(pdf_path, lambda tmp: document.write_pdf(tmp))
    return html
