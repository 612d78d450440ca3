"""Notebooks are generated from their percent-format sources with jupytext and kept in sync."""

from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "notebooks" / "src").glob("[0-9]*.py"))


def cells(nb) -> list[tuple[str, str, list[str]]]:
    """What a reader and papermill see: each cell's type, source and tags."""
    return [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", []))) for c in nb.cells]


def test_every_source_has_a_notebook_and_every_notebook_a_source():
    notebooks = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert SOURCES and {p.stem for p in SOURCES} == notebooks


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_notebook_is_in_sync_with_its_source(source):
    """Fails when a source was edited without `jupytext --sync notebooks/src/*.py` (or the
    notebook was edited in Jupyter without syncing back)."""
    from_source = jupytext.read(source)
    notebook = nbformat.read(ROOT / "notebooks" / f"{source.stem}.ipynb", as_version=4)
    assert cells(notebook) == cells(from_source), (
        f"{source.name} and its notebook differ: run `jupytext --sync {source.relative_to(ROOT)}`")
    # papermill needs the kernel (with its language) and exactly one tagged parameters cell
    assert notebook.metadata["kernelspec"]["name"] == "rankcollapse"
    assert notebook.metadata["kernelspec"]["language"] == "python"
    assert [c.metadata.get("tags") for c in notebook.cells].count(["parameters"]) == 1


def test_a_stale_notebook_is_detected(tmp_path):
    """The sync check itself can fail: an edited source no longer matches its notebook."""
    source = SOURCES[0]
    edited = jupytext.reads(source.read_text().replace("# %% [markdown]", "# %% [markdown]\n# x",
                                                       1), fmt="py:percent")
    notebook = nbformat.read(ROOT / "notebooks" / f"{source.stem}.ipynb", as_version=4)
    assert cells(notebook) != cells(edited)


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_a_parameter_cell_holds_no_copy_of_the_config_or_the_tables(source):
    """What papermill injects is the run's; a notebook run by hand reads its record's tables and
    the default config (notebooks.defaults), so no default of its own can drift from them."""
    notebook = jupytext.read(source)
    cell = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    assert "tables = None" in cell.source and "settings = None" in cell.source
    assert "{" not in cell.source  # no literal table map or config block


def test_defaults_are_the_injected_values_or_the_registry_and_the_default_config():
    import yaml

    from rankcollapse.notebooks import defaults
    from rankcollapse.plan.config import load_config

    assert defaults("E5", {"a": "x"}, {"b": 1}) == ({"a": "x"}, {"b": 1})
    tables, settings = defaults("E5", None, None)
    assert tables == {k: str(ROOT / "results" / "tables" / f"E5_{k}.parquet")
                      for k in ("metrics", "history", "tuning")}
    config = load_config(ROOT / "workflow/config/default.yaml")
    assert settings == {k: config[k] for k in ("depth_grid", "train", "tasks")}
    assert settings["depth_grid"]["depths"] == yaml.safe_load(
        (ROOT / "workflow/config/default.yaml").read_text())["depth_grid"]["depths"]
    tables, _ = defaults("E6", None, {})
    assert tables["derivation"] == str(ROOT / "notebooks/06_homogenized_derivation.md")
    assert "discrete" not in tables  # E7's table, not E6's notebook's
    with pytest.raises(FileNotFoundError, match="run the notebook from a checkout"):
        defaults("E5", None, None, root=ROOT / "tests")
