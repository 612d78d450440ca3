"""Running experiment notebooks with papermill, and what they hand to the report."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

KERNEL = "rankcollapse"


def ensure_kernel(name: str = KERNEL) -> str:
    """Register this interpreter as Jupyter kernel `name` when it is not registered yet.

    `make venv` registers it; this covers environments made another way (conda, a bare pip).
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(name)
        if Path(spec.argv[0]).exists():
            return name
    except NoSuchKernel:
        pass
    from ipykernel.kernelspec import install

    install(kernel_name=name, display_name=f"Python ({name})", prefix=sys.prefix)
    return name


def run(notebook: str | os.PathLike, executed: str | os.PathLike, parameters: dict) -> None:
    """Execute `notebook` with `parameters` into `executed` (papermill, our kernel, cwd here)."""
    import papermill

    try:
        json.dumps(parameters, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TypeError(f"notebook parameters must be plain JSON values: {err}") from err
    os.environ.setdefault("MPLBACKEND", "Agg")
    Path(executed).parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(
        str(notebook), str(executed), parameters=parameters, kernel_name=ensure_kernel(),
        cwd=os.getcwd(), progress_bar=False, log_output=True,
    )


def defaults(experiment: str, tables: dict | None, settings: dict | None,
             root: str | os.PathLike | None = None) -> tuple[dict, dict]:
    """A notebook's (tables, settings): what papermill injected (the workflow's run), else, for
    a notebook run by hand, what its registry record names under the default config's results
    (workflow/config/default.yaml of this checkout, or of `root`) and that config's blocks; so
    a parameter cell holds no copy of either that could drift from the config."""
    if tables is not None and settings is not None:
        return tables, settings
    from rankcollapse.plan.config import load_config, output_roots
    from rankcollapse.plan.experiments import get

    root = Path(root) if root is not None else Path(__file__).resolve().parents[2]
    default = root / "workflow" / "config" / "default.yaml"
    if not default.is_file():
        raise FileNotFoundError(f"{default}: run the notebook from a checkout of the project, "
                                "or pass its tables and settings as parameters")
    config = load_config(default)
    record = get(experiment)
    results = root / output_roots(config).results
    if tables is None:
        tables = ({k: str(results / v) for k, v in record.tables(config).items()}
                  | {k: str(root / v) for k, v in record.files.items()})
    if settings is None:
        settings = {block: config[block] for block in record.settings}
    return tables, settings


def section(experiment: str, description: str, figures: list[dict], tables: list[dict],
            numbers: dict, measurements: list | tuple = ()) -> dict:
    """The JSON an experiment notebook writes to results/numbers/{experiment}.json, headed by
    the experiment's registry record (its title and the papers whose claims it tests).

    description: what was done and measured (sizes, protocol, numbers) — never a conclusion:
    the report appends the sentences generated from the claims' verdicts. figures: [{"name",
    "png", "pdf", "caption"}]; tables: [{"caption", "html"}]; measurements: the
    `rankcollapse.claims.Measurement`s of the experiment's registered claims; numbers: named
    values quoted in the text.
    """
    from rankcollapse.plan.experiments import get

    record = get(experiment)
    return {
        "experiment": experiment,
        "title": record.title,
        "paper": record.paper,
        "description": description,
        "figures": figures,
        "tables": tables,
        "measurements": [m.to_dict() for m in measurements],
        "numbers": numbers,
    }
