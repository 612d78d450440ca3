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


def section(experiment: str, title: str, paper: str, description: str, figures: list[dict],
            tables: list[dict], numbers: dict, measurements: list | tuple = ()) -> dict:
    """The JSON an experiment notebook writes to results/numbers/{experiment}.json.

    description: what was done and measured (sizes, protocol, numbers) — never a conclusion:
    the report appends the sentences generated from the claims' verdicts. figures: [{"name",
    "png", "pdf", "caption"}]; tables: [{"caption", "html"}]; measurements: the
    `rankcollapse.claims.Measurement`s of the experiment's registered claims; numbers: named
    values quoted in the text.
    """
    return {
        "experiment": experiment,
        "title": title,
        "paper": paper,
        "description": description,
        "figures": figures,
        "tables": tables,
        "measurements": [m.to_dict() for m in measurements],
        "numbers": numbers,
    }
