"""The workflow itself: lint, dry-runs, and one tiny real run of the CI config end to end."""

import json
import re
from pathlib import Path

import pytest
from markupsafe import escape

from conftest import CI, claims_in, report_file, results_dir, run_snakemake

pytestmark = pytest.mark.workflow
ROOT = Path(__file__).resolve().parents[2]


def scheduled(dry_run_output: str) -> dict[str, int]:
    """Rule -> job count from the 'Job stats' table of a dry run."""
    stats = dry_run_output.split("Job stats:")[1].split("Reasons:")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", stats, re.M)
            if m.group(1) != "total"}


def test_lint_is_clean(project):
    proc = run_snakemake(project, "--lint", "--cores", "1", check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "Lints for" not in proc.stdout, proc.stdout[-4000:]


@pytest.mark.parametrize("config", ["default", "ci", "paper"])
def test_dry_run_plans_every_stage(project, config):
    proc = run_snakemake(project, "-n", "--cores", "2", "--configfile",
                         f"workflow/config/{config}.yaml")
    jobs = scheduled(proc.stdout)
    assert {"init_sweep", "collect_init", "notebook", "report", "all"} <= set(jobs), jobs
    assert jobs["report"] == 1


def planned_paths(dry_run_output: str) -> set[str]:
    """Every output, log and benchmark file of the jobs a dry run plans."""
    return {path for m in re.finditer(r"^\s+(?:output|log|benchmark): (.+)$", dry_run_output, re.M)
            for path in m.group(1).split(", ")}


# Each config as snakemake builds it from --configfile (smoke.yaml is merged over ci.yaml)
CONFIGS = {"default": [], "ci": ["workflow/config/ci.yaml"],
           "smoke": ["workflow/config/ci.yaml", "workflow/config/smoke.yaml"],
           "diagnostics": ["workflow/config/diagnostics.yaml"],
           "paper": ["workflow/config/paper.yaml"]}


def test_configs_write_disjoint_outputs_each_under_its_own_roots(project):
    """Running one config after another overwrites nothing: the files each config plans (its
    outputs, logs and benchmarks, from a dry run in one fresh copy) lie under its own roots
    (rankcollapse.plan.config.output_roots of its `name`: results/ and report/report.* for the
    default, results/<name>/ and report/<name>.* for the others) and no file or folder of one is
    a file or folder of another."""
    from rankcollapse.plan.config import config_name, output_roots

    planned = {}
    for config, files in CONFIGS.items():
        name = config_name([ROOT / "workflow/config/default.yaml", *(ROOT / f for f in files)])
        assert name == config, f"{files} should be named {config!r}, not {name!r}"
        args = ["--configfile", *files] if files else []
        planned[config] = planned_paths(run_snakemake(project, "-n", "--cores", "2",
                                                      *args).stdout)
        roots = output_roots({"name": name})
        own = (roots.results + "/", roots.report + ".", roots.figures + "/")
        assert planned[config], config
        elsewhere = sorted(p for p in planned[config] if not p.startswith(own))
        assert not elsewhere, f"{config} writes outside {own}: {elsewhere[:5]}"
    assert "report/report.html" in planned["default"]  # where the default always wrote
    assert {"report/ci.html", "results/ci/tables/E1_init.parquet"} <= planned["ci"]

    def with_folders(paths: set[str]) -> set[str]:  # each path and the folders above it
        return paths | {str(parent) for p in paths for parent in Path(p).parents}

    for a in CONFIGS:
        for b in CONFIGS:
            if a < b:  # no shared file, and no output folder of one holds a file of the other
                shared = (planned[a] & with_folders(planned[b])) | (
                    planned[b] & with_folders(planned[a]))
                assert not shared, f"{a} and {b} share {sorted(shared)[:5]}"


@pytest.mark.realrun
@pytest.mark.slow
def test_two_configs_run_one_after_another_both_keep_their_report_and_tables(project):
    """E1 alone at CI sizes (about a minute of CPU for both runs), as ci.yaml's `ci`, then the
    same settings named `default`: the second run leaves the first one's report and tables as
    they were, and the first config still has nothing to do."""
    (project / "e1_only.yaml").write_text("report: {experiments: [E1], pdf: true}\n")
    (project / "named_default.yaml").write_text("name: default\n")
    ci = ("--cores", "2", "--configfile", "workflow/config/ci.yaml", "e1_only.yaml")
    run_snakemake(project, *ci)
    first = [report_file(project, CI, ".html"), report_file(project, CI, ".pdf"),
             *sorted((results_dir(project, CI) / "tables").glob("*.parquet"))]
    before = {path: path.read_bytes() for path in first}
    assert len(before) > 2
    run_snakemake(project, *ci, "named_default.yaml")
    assert {path: path.read_bytes() for path in first} == before
    for path in (report_file(project, "default", ".html"), report_file(project, "default", ".pdf"),
                 results_dir(project, "default") / "tables/E1_init.parquet"):
        assert path.stat().st_size > 1000, path
    assert "Nothing to be done" in run_snakemake(project, "-n", *ci).stdout


def test_ci_run_builds_the_report_and_every_figure(ci_run):
    html = report_file(ci_run, CI, ".html").read_text()
    pdf = report_file(ci_run, CI, ".pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and len(pdf) > 20_000
    assert "Claims ledger" in html and "Provenance" in html
    assert re.search(r"speed reference</th><td>\d+ GFLOP/s", html)  # beside the wall times
    sections = sorted((results_dir(ci_run, CI) / "numbers").glob("E*.json"))
    assert sections, "no experiment wrote its numbers"
    for path in sections:
        section = json.loads(path.read_text())
        assert section.get("measurements") or section.get("claims"), f"{path.name}: no claims"
        assert section["figures"], f"{path.name} has no figures"
        for figure in section["figures"]:
            for kind in ("png", "pdf"):
                assert (ci_run / figure[kind]).stat().st_size > 1000, figure[kind]
            assert escape(figure["caption"]) in html  # every figure is in the report, captioned
    for claim in claims_in(ci_run, CI):  # every claim is in the ledger, as registered
        assert escape(claim["statement"]) in html, claim["id"]
    assert html.count("data:image/png;base64,") == sum(
        len(json.loads(p.read_text())["figures"]) for p in sections)


def test_e1_finds_pure_attention_collapsing_fast(ci_run):
    e1 = json.loads((results_dir(ci_run, CI) / "numbers/E1.json").read_text())
    measured = {m["id"]: m for m in e1["measurements"]}
    assert measured["E1.san_doubly_exponential"]["value"] > 2  # cubic-ish, far from 1
    assert measured["E1.skip_prevents"]["value"] < 1.3
    assert e1["numbers"]["identity_max_error"] < 1e-12  # r_F^2 == 1 - t_sim


def test_rerun_has_nothing_to_do_and_a_notebook_edit_reruns_only_it(ci_run):
    proc = run_snakemake(ci_run, "-n", "--workflow-profile", "workflow/profiles/ci")
    assert "Nothing to be done" in proc.stdout, proc.stdout[-3000:]
    notebook = ci_run / "notebooks/01_rank_collapse_init.ipynb"
    original = notebook.read_text()
    try:
        notebook.write_text(original.replace("# E1 — Rank collapse", "# E1 — (edited)"))
        jobs = scheduled(run_snakemake(ci_run, "-n", "--workflow-profile",
                                       "workflow/profiles/ci").stdout)
        assert set(jobs) == {"notebook", "report", "all"}, jobs
    finally:
        notebook.write_text(original)


def test_diagnostics_config_trains_long_enough_for_its_diagnostics(project):
    """workflow/config/diagnostics.yaml plans only the diagnosed experiments, at training lengths
    that make their long-training diagnostics testable (the thresholds the claims use)."""
    import yaml

    from rankcollapse.claims import e2, e3, e5

    config = yaml.safe_load((ROOT / "workflow/config/diagnostics.yaml").read_text())
    assert config["paths"]["train"]["steps"] >= e2.LONG_STEPS
    assert config["circle"]["steps"] >= e3.LONG_STEPS
    assert config["depth_grid"]["steps"] >= e5.LONG_STEPS
    proc = run_snakemake(project, "-n", "--cores", "2", "--configfile",
                         "workflow/config/diagnostics.yaml")
    jobs = scheduled(proc.stdout)
    assert {"circle", "path_accuracy", "train_tuned", "report"} <= set(jobs), jobs
    assert "particles" not in jobs and "realarch" not in jobs
    # none of E2, E3, E5 reads E1's init-sweep table, so no init sweep runs for them
    assert "init_sweep" not in jobs and "collect_init" not in jobs, jobs
    assert jobs["notebook"] == len(config["report"]["experiments"]) == 3


def test_every_table_a_record_makes_is_planned_by_its_rules(project):
    """Each record's outputs, asked for by name, are jobs of the workflow (the CI config)."""
    from rankcollapse.plan import experiments
    from rankcollapse.plan.config import output_roots

    results = output_roots({"name": CI}).results
    targets = [f"{results}/{path}" for r in experiments.REGISTRY.values()
               for path in r.outputs.values()]
    proc = run_snakemake(project, *targets, "-n", "--cores", "1", "--configfile",
                         "workflow/config/ci.yaml")
    assert proc.returncode == 0 and all(t in proc.stdout for t in targets), proc.stdout[-3000:]
