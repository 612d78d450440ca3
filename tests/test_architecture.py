"""The package's shape: the parse-time layer (plan/) imports neither torch nor pandas, no module
imports itself back through others, and the experiment registry agrees with everything that
names experiments (schema, claims registry, notebooks, rules, Snakefile, claims modules)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rankcollapse.claims import REGISTRY_PATH, load_registry
from rankcollapse.plan import experiments

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src/rankcollapse"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def test_the_parse_time_layer_imports_neither_torch_nor_pandas():
    """Every module of rankcollapse.plan imports with torch and pandas made unimportable: Snakemake
    imports this layer while it parses the workflow, in every process (each SLURM job too)."""
    plan = sorted(m for m in MODULES if m.startswith("rankcollapse.plan"))
    assert "rankcollapse.plan.experiments" in plan and "rankcollapse.plan.config" in plan
    code = ("import sys\n"
            "for blocked in ('torch', 'pandas'):\n"
            "    sys.modules[blocked] = None  # `import torch` now raises ImportError\n"
            f"for name in {plan!r}:\n"
            "    __import__(name)\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def _imported(name: str, path: Path, anywhere: bool) -> set[str]:
    """The rankcollapse modules `name` imports: at module level, or (anywhere) inside functions
    too; `from a import b` counts a.b when that is a module, else a."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree) if anywhere else tree.body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                      for a in node.names}
    return {m for m in found if m.startswith("rankcollapse")}


def module_imports(name: str, path: Path) -> set[str]:
    """The rankcollapse modules that `name` imports when it is imported (top-level statements,
    not imports inside functions)."""
    return {m for m in _imported(name, path, anywhere=False) if m in MODULES and m != name}


def test_no_module_imports_itself_back():
    """The module-level import graph of the package has no cycle (a package's face counts as a
    module: a submodule that imports its own face, which imports it, is a circle too)."""
    graph = {name: module_imports(name, path) for name, path in MODULES.items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                pytest.fail("import circle: " + " -> ".join(trail[trail.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


# The package's layers, bottom up: a package may import its own layer's flat plumbing and
# anything below it, never above (core/ at the bottom with the plumbing that imports nothing of
# ours but itself; plan/, torch-free, on core alone; the report and the command line on top).
LAYERS = {
    "core": 0, "io": 0, "runtime": 0, "stats": 0, "plotting": 0, "references": 0,
    "__version__": 0, "__init__": 0,
    "plan": 1, "training": 2, "experiments": 3, "claims": 4, "probe": 5,
    "report": 6, "cli": 6, "notebooks": 6,
}


def unit(module: str) -> str:
    """The layer unit of a module: its subpackage (core, plan, ...) or, for the flat plumbing
    and the package's own face, the module's name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def every_import(name: str, path: Path) -> set[str]:
    """The rankcollapse modules `name` imports anywhere in its file: at module level and inside
    functions (a function-local import is an edge of the graph too, only a later one)."""
    return _imported(name, path, anywhere=True)


def upward_edges(modules: dict[str, Path]) -> list[str]:
    """Every import, module-level or function-local, from a layer to a higher one."""
    bad = []
    for name, path in modules.items():
        here = unit(name)
        for target in every_import(name, path):
            there = unit(target)
            if there != here and LAYERS[there] > LAYERS[here]:
                bad.append(f"{name} ({here}, layer {LAYERS[here]}) imports {target} ({there}, "
                           f"layer {LAYERS[there]})")
    return sorted(bad)


def test_every_unit_of_the_package_has_a_layer():
    assert {unit(m) for m in MODULES} <= set(LAYERS), sorted({unit(m) for m in MODULES}
                                                             - set(LAYERS))


def test_package_edges_go_down_only_function_local_imports_included():
    assert upward_edges(MODULES) == []


def test_an_upward_edge_is_caught(tmp_path):
    """A planted function-local import of the probe from plan/ (the edge the checkpoint tables
    used to make) fails the check, naming it."""
    planted = tmp_path / "checks.py"
    planted.write_text("def f():\n    from rankcollapse.probe.spec import ProbeError\n")
    bad = upward_edges({"rankcollapse.plan.checks": planted})
    assert bad == ["rankcollapse.plan.checks (plan, layer 1) imports rankcollapse.probe.spec "
                   "(probe, layer 5)"]


def test_the_schema_allows_exactly_the_registered_experiments():
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    enum = schema["properties"]["report"]["properties"]["experiments"]["items"]["enum"]
    assert enum == list(experiments.IDS)


@pytest.mark.parametrize("record", experiments.REGISTRY.values(), ids=list(experiments.IDS))
def test_every_record_names_files_and_modules_that_exist(record):
    assert (ROOT / record.notebook).is_file()
    assert (ROOT / record.notebook.replace("notebooks/", "notebooks/src/").replace(
        ".ipynb", ".py")).is_file()
    assert (ROOT / record.rules).is_file()
    snakefile = (ROOT / "Snakefile").read_text()
    assert f'include: "{record.rules}"' in snakefile
    for path in record.files.values():
        assert (ROOT / path).is_file(), path
    for block in (*record.blocks, *record.settings):
        assert block in yaml.safe_load((ROOT / "workflow/config/default.yaml").read_text()) or \
            block in yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())[
                "properties"], block
    for module in (*record.library, record.claims):
        assert module in MODULES, module
    claims = importlib.import_module(record.claims)
    registered = {cid for cid, s in load_registry(REGISTRY_PATH).items()
                  if s.experiment == record.id}
    assert set(claims.IDS) == registered


def test_every_table_read_is_a_table_some_record_makes_and_its_rules_name_it():
    """The records name every collected table once (`outputs`); a table a record reads is one
    some record makes; each record's rules file takes its outputs from the record (the helpers
    `outputs`/`table` of common.smk), and its stage's helpers register their benchmark records
    under the same names, so no table path is written in a rules file."""
    config = {"report": {"experiments": list(experiments.IDS)}}
    made = {path for r in experiments.REGISTRY.values() for path in r.outputs.values()}
    assert len(made) == sum(len(r.outputs) for r in experiments.REGISTRY.values())  # once each
    rules_dir = ROOT / "workflow/rules"
    for record in experiments.REGISTRY.values():
        assert set(record.tables(config).values()) <= made, record.id
        if not record.outputs:
            continue
        text = (ROOT / record.rules).read_text()
        helpers = (rules_dir / "common" / Path(record.rules).name).read_text()
        for name in record.outputs:
            assert f'outputs("{record.id}")' in text or f'table("{record.id}", "{name}")' \
                in text, f"{record.id}.{name}: not an output of {record.rules}"
            assert f'outputs("{record.id}")' in helpers or f'table("{record.id}", "{name}")' \
                in helpers, f"{record.id}.{name}: no benchmark records"
    for path in [*rules_dir.glob("*.smk"), *rules_dir.glob("common/*.smk")]:
        assert "tables/" not in path.read_text(), f"{path.name} writes a table path itself"


def test_no_experiment_is_named_in_the_planning_layer_but_by_the_registry():
    """plan/ speaks of config blocks; which experiment a block serves is the registry's
    (plan/experiments.py) to say: no experiment id anywhere else in plan/, docstrings included."""
    import re

    ids = re.compile(r"\bE[1-9]b?\b")
    named = [f"{p.name}:{i}: {line.strip()}" for p in sorted((PACKAGE / "plan").glob("*.py"))
             if p.name != "experiments.py"
             for i, line in enumerate(p.read_text().splitlines(), start=1) if ids.search(line)]
    assert named == []
