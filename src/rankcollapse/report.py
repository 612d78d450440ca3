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


def data_uri(path: str | os.PathLike) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f"data:image/png;base64,{data}"


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


def first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence (not a decimal point)."""
    for i, ch in enumerate(text):
        if ch == "." and (i + 1 == len(text) or text[i + 1] == " ") and not text[i - 1].isdigit():
            return text[: i + 1]
    return text


def abstract(sections: list[dict], claims: list[dict]) -> str:
    """The abstract, written from the measured numbers (never typed by hand)."""
    counts = Counter(c["verdict"] for c in claims)
    tally = ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts[v])
    experiments = "; ".join(f"{s['experiment']} ({s['title'].lower()})" for s in sections)
    return (
        "Deep self-attention networks without the right architectural safeguards lose the "
        "diversity of their token representations with depth. We rebuild, on one shared model "
        "and metric library, the experiments behind three accounts of this collapse and test "
        f"each paper claim as a pass/fail measurement. Experiments: {experiments}. "
        + " ".join(first_sentence(s["summary"]) for s in sections)
        + f" Of {len(claims)} claims tested, {tally}."
    )


def build(numbers: list, benchmarks: list, template: str | os.PathLike,
          style: str | os.PathLike, title: str, config: dict, html_path: str | os.PathLike,
          pdf_path: str | os.PathLike | None = None) -> str:
    """Render the report to html_path (figures embedded) and, if pdf_path, to PDF."""
    sections = load_sections(numbers)
    for section in sections:
        for fig in section["figures"]:
            fig["src"] = data_uri(fig["png"])
    claims = ledger(sections)
    times = wall_times(benchmarks)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(template).parent),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
    )
    html = env.get_template(Path(template).name).render(
        title=title,
        css=Path(style).read_text(),
        abstract=abstract(sections, claims),
        sections=sections,
        claims=claims,
        verdict_rule=VERDICT_RULE,
        verdicts=Counter(c["verdict"] for c in claims),
        provenance=provenance(),
        config_yaml=yaml.safe_dump(config, sort_keys=False, width=100, default_flow_style=None),
        times=times.to_dict(orient="records"),
        total_time=float(times.total_s.sum()) if len(times) else 0.0,
        built=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    atomic_write(html_path, lambda tmp: tmp.write_text(html))
    if pdf_path is not None:
        import weasyprint

        document = weasyprint.HTML(string=html, base_url=str(Path(html_path).parent))
        atomic_write(pdf_path, lambda tmp: document.write_pdf(tmp))
    return html
