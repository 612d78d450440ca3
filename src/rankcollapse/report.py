"""Assemble the report (HTML with embedded figures, and a PDF of the same) from the notebooks'
section files results/numbers/{experiment}.json and the jobs' benchmark records."""

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

from .claims import VERDICT_RULE, VERDICTS
from .io import atomic_write, provenance


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
            "paths",
            f"{grid(c['paths'], 'tasks', 'variants', 'depths', 'seeds')} trained networks "
            f"({_list(c['paths']['tasks'])}; depths {_list(c['paths']['depths'])}; "
            f"{_size(c['paths']['seeds'])} seeds), {c['paths']['train']['steps']} steps each"),
        "E3": lambda: (
            "circle",
            f"{grid(c['circle'], 'setups', 'widths', 'seeds')} trained layers "
            f"({_size(c['circle']['setups'])} set-ups × widths {_list(c['circle']['widths'])} × "
            f"{_size(c['circle']['seeds'])} seeds), {c['circle']['steps']} steps, "
            f"{c['circle']['rollout']}-step roll-outs"),
        "E4": lambda: (
            "escalation, train",
            f"{grid(c['escalation'], 'variants', 'seeds')} trained networks of depth "
            f"{c['escalation']['depth']} on {c['escalation']['task']}; width "
            f"{c['train']['width']}, {c['train']['steps']} steps"),
        "E5": lambda: (
            "depth_grid, train",
            f"{grid(c['depth_grid'], 'tasks', 'variants', 'depths', 'seeds')} trained networks "
            f"({_size(c['depth_grid']['variants'])} variants × depths "
            f"{_list(c['depth_grid']['depths'])} × {_size(c['depth_grid']['seeds'])} seeds); "
            f"{c['train']['steps']} steps"),
        "E5b": lambda: (
            "rival_fixes, train",
            f"{grid(c['rival_fixes'], 'variants', 'depths', 'seeds')} trained networks "
            f"({_size(c['rival_fixes']['variants'])} variants × depths "
            f"{_list(c['rival_fixes']['depths'])} × {_size(c['rival_fixes']['seeds'])} seeds)"),
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


def wall_times(benchmarks: list[str | os.PathLike]) -> pd.DataFrame:
    """Jobs and summed wall time per rule from snakemake `benchmark:` files.

    The rule is the first folder under results/benchmarks/ (results/benchmarks/<rule>/...).
    """
    per_rule: dict[str, list[float]] = defaultdict(list)
    for path in benchmarks:
        parts = Path(path).parts
        rule = parts[parts.index("benchmarks") + 1] if "benchmarks" in parts else Path(path).stem
        rule = Path(rule).stem
        per_rule[rule].append(float(pd.read_csv(path, sep="\t")["s"].iloc[0]))
    rows = [{"stage": r, "jobs": len(v), "total_s": sum(v), "max_s": max(v)}
            for r, v in per_rule.items()]
    return pd.DataFrame(rows, columns=["stage", "jobs", "total_s", "max_s"])


def ledger(sections: list[dict]) -> list[dict]:
    """Every claim of every section, numbered, with its measured value formatted."""
    rows = []
    for section in sections:
        for claim in section["claims"]:
            measured = claim["measured"]
            interval = claim.get("interval")
            if measured is None:
                value = "—"
            elif interval and all(v is not None for v in interval):
                value = f"{measured:.3g} [{interval[0]:.3g}, {interval[1]:.3g}]"
            else:
                value = f"{measured:.3g}"
            rows.append({**claim, "experiment": section["experiment"], "value": value})
    return rows


ABBREVIATIONS = ("al", "e.g", "i.e", "Fig", "cf", "vs", "Eq")


def first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence: followed by a space and a capital (or the
    end), so decimal points and abbreviations such as "et al." or "e.g." do not cut it."""
    for i, ch in enumerate(text):
        if ch != "." or text[:i].rsplit(" ", 1)[-1].endswith(ABBREVIATIONS):
            continue
        rest = text[i + 1:]
        if not rest.strip() or (rest.startswith(" ") and rest.lstrip()[:1].isupper()):
            return text[: i + 1]
    return text


# Sentences longer than this are detail for the experiment's section, not for the abstract.
ABSTRACT_SENTENCE_MAX = 260


def abstract(sections: list[dict], claims: list[dict]) -> list[str]:
    """The abstract's paragraphs, written from the measured numbers (never typed by hand):
    what was done, each experiment's headline sentence, and the verdicts per paper."""
    counts = Counter(c["verdict"] for c in claims)

    def tally(counter: Counter) -> str:
        return ", ".join(f"{counter[v]} {v}" for v in VERDICTS if counter[v])

    by_paper: dict[str, Counter] = defaultdict(Counter)
    for section in sections:
        by_paper[section["paper"]].update(c["verdict"] for c in section["claims"])
    findings = [first_sentence(s["summary"]) for s in sections]
    findings = [f for f in findings if len(f) <= ABSTRACT_SENTENCE_MAX]
    return [
        "Deep self-attention networks lose the diversity of their token representations with "
        "depth. We rebuild, on one model and one metric library, the experiments behind three "
        "accounts of this collapse (Dong, Cordonnier & Loukas 2021; Yu & Zhang 2023; Koubbi, "
        "Geshkovski & Rigollet 2026), check the three papers' statistics against each other on "
        "the same runs, and test every claim as a measurement against a pass range written "
        "into the code.",
        " ".join(findings),
        f"Of {len(claims)} claims, {tally(counts)}. By source: "
        + "; ".join(f"{paper}: {tally(c)}" for paper, c in by_paper.items()) + ".",
    ]


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


def build(numbers: list, benchmarks: list, template: str | os.PathLike,
          style: str | os.PathLike, title: str, config: dict, html_path: str | os.PathLike,
          pdf_path: str | os.PathLike | None = None) -> str:
    """Render the report to html_path (PNG figures embedded) and, if pdf_path, to PDF (SVG
    figures where the notebooks wrote them). Sections follow config["report"]["experiments"]."""
    sections = load_sections(numbers)
    order = config.get("report", {}).get("experiments", [])
    sections.sort(key=lambda s: order.index(s["experiment"]) if s["experiment"] in order
                  else len(order))
    number_items(sections)
    claims = ledger(sections)
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
        verdict_rule=VERDICT_RULE,
        verdicts=Counter(c["verdict"] for c in claims),
        sizes=experiment_sizes(config, [s["experiment"] for s in sections]),
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
