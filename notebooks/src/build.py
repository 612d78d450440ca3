"""Build notebooks/*.ipynb from the percent-format sources in notebooks/src/*.py.

Cells start with `# %%` (code) or `# %% [markdown]`; a `# %% tags=["parameters"]` line marks
papermill's parameters cell. Run: python notebooks/src/build.py  (the .ipynb files are tracked;
edit the .py source and rebuild, or edit the notebook in Jupyter and keep the source in sync).
"""

import re
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
KERNELSPEC = {"name": "rankcollapse", "display_name": "Python (rankcollapse)", "language": "python"}


def cells_of(source: str):
    for chunk in re.split(r"^# %%", source, flags=re.M)[1:]:
        header, _, body = chunk.partition("\n")
        body = body.strip("\n")
        tags = re.findall(r'"([^"]+)"', header) if "tags=" in header else []
        if "[markdown]" in header:
            text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                             for line in body.splitlines())
            yield nbformat.v4.new_markdown_cell(text)
        else:
            cell = nbformat.v4.new_code_cell(body)
            if tags:
                cell.metadata["tags"] = tags
            yield cell


def build(src: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = list(cells_of(src.read_text()))
    for i, cell in enumerate(nb.cells):  # stable ids keep diffs small
        cell.id = f"{src.stem[:20]}-{i:02d}"
    out = HERE.parent / f"{src.stem}.ipynb"
    nbformat.write(nb, out)
    return out


if __name__ == "__main__":
    sources = [Path(p) for p in sys.argv[1:]] or sorted(HERE.glob("[0-9]*.py"))
    for src in sources:
        print(build(src))
