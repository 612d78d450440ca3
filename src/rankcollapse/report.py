"""Assemble the report (HTML with embedded figures, and a PDF of the same) from the notebooks'
section files RESULTS/numbers/{experiment}.json and the jobs' benchmark records (RESULTS:
results/ for the default config, results/<name>/ for the others)."""

from __future__ import annotations

import base64
import json
import os
from collections import Counter, defaultdict
from datetime import UTC, datetime
from importlib import import_module
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
from rankcollapse.plan.experiments import get as experiment_record


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


def experiment_sizes(config: dict, experiments: list[str]) -> list[dict]:
    """One row per experiment: what it runs and how big, read from the config (each
    experiment's `size` in the registry)."""
    rows = []
    for experiment in experiments:
        record = experiment_record(experiment)
        try:
            blocks, size = ", ".join(record.blocks) or "—", record.size(config)
        except (KeyError, TypeError, ValueError):
            blocks, size = "—", "see the configuration in the provenance section"
        rows.append({"experiment": experiment, "blocks": blocks, "size": size})
    return rows


def numerics_note(config: dict, experiments: list[str]) -> dict | None:
    """The methods paragraph on how the networks were trained: precision, step engine and
    attention, as the config chose them (each training row records what actually ran)."""
    trained = [e for e in experiments if experiment_record(e).trains]
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
    what a quantity means, never a finding): each experiment's claims module's `method_note`."""
    out = []
    for e in experiments:
        note = getattr(import_module(experiment_record(e).claims), "method_note", None)
        if note is not None:
            out.append({"experiment": e, "text": note(config or {})})
    training = numerics_note(config or {}, experiments)
    return out + ([training] if training else [])


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
    notes = headline_notes(sections, rows)
    short = {r["id"]: " ".join(filter(None, (short_sentence(r), notes.get(r["id"]))))
             for r in rows if r.get("headline")}
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


def headline_notes(sections: list[dict], rows: list[dict]) -> dict[str, str]:
    """{headline claim id: what decided it}, from its experiment's claims module's
    `headline_note(row, rows, section)` where it has one (E5: the deciding depth's budget and
    whether the control converged there), generated from verdicts and the section's numbers."""
    by_experiment = {s["experiment"]: s for s in sections}
    out = {}
    for row in rows:
        if not row.get("headline"):
            continue
        note = getattr(import_module(experiment_record(row["experiment"]).claims),
                       "headline_note", None)
        if note is not None:
            out[row["id"]] = note(row, rows, by_experiment.get(row["experiment"]))
    return out


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
