"""The built report as a reader meets it: report.html in headless Chromium, report.pdf as page
images, and Snakemake's own report of the same run. All read the shared CI run (`ci_run`)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from rankcollapse.plan.config import output_roots

from conftest import CI, claims_in, report_file, results_dir, run_snakemake

pytestmark = pytest.mark.workflow
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Debian's chromium under Selenium, headless, no network, a throwaway profile."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("needs Debian's chromium and chromium-driver (/usr/bin/chromium, "
                    "/usr/bin/chromedriver); .ci/run installs them with apt-get")
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in CHROMIUM_ARGS:
        options.add_argument(arg)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options,
                              service=webdriver.ChromeService(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def test_report_html_renders_in_chromium(ci_run, browser):
    browser.get(report_file(ci_run, CI, ".html").as_uri())
    images = browser.execute_script(
        "return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth]);")
    figures = sum(len(json.loads(p.read_text())["figures"])
                  for p in (results_dir(ci_run, CI) / "numbers").glob("E*.json"))
    assert len(images) == figures > 0
    broken = [alt for alt, complete, width in images if not (complete and width > 0)]
    assert not broken, f"images that did not load: {broken}"

    links = browser.execute_script(
        "return Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'));")
    assert links, "the report has no links (table of contents, ledger)"
    external = [href for href in links if not href.startswith("#")]
    assert not external, f"links out of the self-contained report: {external}"
    dangling = browser.execute_script(
        "return arguments[0]"
        ".filter(h => !document.getElementById(decodeURIComponent(h.slice(1))));", links)
    assert not dangling, f"links to anchors that do not exist: {dangling}"

    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, f"console errors: {severe}"

    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('table.ledger tr.claim'))"
        ".map(r => r.cells[1].innerText);")
    claims = claims_in(ci_run, CI)
    assert len(rows) == len(claims)
    statements = [" ".join(row.split()) for row in rows]
    for claim in claims:  # every measured claim has its row (the ledger groups them by kind)
        assert any(" ".join(claim["statement"].split()) in row for row in statements), claim["id"]


def test_report_pdf_pages_are_typeset(ci_run, tmp_path):
    if shutil.which("pdftoppm") is None:
        pytest.skip("needs pdftoppm (Debian's poppler-utils); .ci/run installs it with apt-get")
    from PIL import Image

    subprocess.run(["pdftoppm", "-png", "-r", "30", str(report_file(ci_run, CI, ".pdf")),
                    str(tmp_path / "page")], check=True, timeout=120)
    pages = sorted(tmp_path.glob("page-*.png"))
    sections = len(list((results_dir(ci_run, CI) / "numbers").glob("E*.json")))
    # Title, methods, a page or more per experiment, the ledger and provenance; not hundreds.
    assert sections + 4 <= len(pages) <= 40 * sections, len(pages)
    for page in pages:
        pixels = np.asarray(Image.open(page).convert("L"), dtype=float)
        inked = (pixels < 200).mean()
        assert pixels.std() > 2 and inked > 0.002, f"{page.name} is blank (ink {inked:.4f})"


def test_snakemake_report_builds(ci_run):
    out = ci_run / output_roots({"name": CI}).snakemake_report
    run_snakemake(ci_run, "--workflow-profile", "workflow/profiles/ci", "--report", str(out),
                  timeout=300)
    html = out.read_text(errors="replace")
    assert out.stat().st_size > 100_000
    for path in (results_dir(ci_run, CI) / "numbers").glob("E*.json"):
        section = json.loads(path.read_text())
        for figure in section["figures"]:
            assert Path(figure["png"]).name in html, figure["png"]
    assert report_file(ci_run, CI, ".pdf").name in html


def test_wall_times_find_the_rule_under_any_config_root(tmp_path):
    """The provenance table's rule is the folder under the config's benchmarks folder: results/
    benchmarks/<rule>/ (default) or results/<name>/benchmarks/<rule>/, even with a folder named
    benchmarks above the project."""
    from rankcollapse.report import wall_times

    paths = []
    for rel, seconds in [("results/benchmarks/init/san.tsv", 1.0),
                         ("results/ci/benchmarks/train/digits/post_ln/L2/part0.tsv", 2.0),
                         ("results/ci/benchmarks/train/digits/san/L2/part0.tsv", 3.0),
                         ("benchmarks/project/results/ci/benchmarks/notebooks/E1.tsv", 4.0)]:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"s\th:m:s\n{seconds}\t0:00:01\n")
        paths.append(path)
    times = wall_times(paths).set_index("stage")
    assert times.to_dict("index") == {
        "init": {"jobs": 1, "total_s": 1.0, "max_s": 1.0},
        "train": {"jobs": 2, "total_s": 5.0, "max_s": 3.0},
        "notebooks": {"jobs": 1, "total_s": 4.0, "max_s": 4.0}}
