"""The claims registry: `claims.yaml` beside this file (package data, `REGISTRY_PATH`), every claim
stated before any run measures it, loaded and checked into `ClaimSpec`s (docs/claims.md)."""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# The registry ships with the package, so an installed `rankcollapse probe` can judge its claims.
REGISTRY_PATH = Path(__file__).with_name("claims.yaml")
KINDS = ("paper", "check", "ours")
KIND_TITLES = {"paper": "the papers' claims", "check": "consistency checks",
               "ours": "beyond the papers"}
PAPERS = {
    "D21": "Dong, Cordonnier & Loukas (ICML 2021)",
    "YZ": "Yu & Zhang (arXiv 2312.06182)",
    "KGR26": "Koubbi, Geshkovski & Rigollet (arXiv 2604.01978)",
    "rivals": "Nait Saada et al. (ICML 2025); Noci et al. (NeurIPS 2022)",
    "all": "all three papers",
}
BASIS_TYPES = {
    "value": "a value printed in the paper (with the stated reading tolerance)",
    "bound": "a bound stated by the paper's theorem, tested as a bound",
    "theorem": "a limit or rate stated by the paper's theorem",
    "convention": "a stated convention for a qualitative statement",
    "identity": "an algebraic identity: holds to floating-point round-off",
}
# A diagnostic's hypothesis: what its holding says about the paper claim it diagnoses.
HYPOTHESES = {
    "setup": "the miss comes from a difference between our set-up and the paper's",
    "paper": "the paper's statement itself is contradicted (a derivation checked by a measurement)",
    "reference": "the authors' original code, run at the same settings, misses the claim too "
                 "(the miss is not our implementation's)",
}


class RegistryError(ValueError):
    """A malformed claims registry, or a run whose claims do not match it."""


@dataclass(frozen=True)
class ClaimSpec:
    """One registered claim (a row of src/rankcollapse/claims/claims.yaml)."""

    id: str  # "<experiment>.<name>"
    experiment: str
    paper: str  # a key of PAPERS: whose claim it is, or which paper it extends or checks
    kind: Literal["paper", "check", "ours"]
    statement: str  # the claim, one sentence (the paper's, for kind "paper")
    source: str  # paper and section, figure, theorem or equation
    quantity: str  # what is measured, with its unit
    low: float  # the claim holds when the quantity lies in [low, high]
    high: float
    basis_type: str  # a key of BASIS_TYPES
    basis: str  # one line: why this range
    paper_value: str | None = None  # what the paper reports, when it reports something
    headline: bool = False  # its sentence goes into the abstract
    # A diagnostic (kind "ours") names the paper claims whose miss it tests and its hypothesis
    # (a key of HYPOTHESES); post_hoc: the hypothesis was formed after seeing the measurement.
    diagnoses: tuple[str, ...] = ()
    hypothesis: str | None = None
    post_hoc: bool = False
    # A claim that applies to any model: {ablation, statistic, weights} (rankcollapse probe).
    any_model: dict | None = None

    @property
    def criterion(self) -> str:
        return criterion(self.low, self.high)

    @property
    def failing_side(self) -> float:
        """Where an undefined sample is ranked: beyond the failing end of the range."""
        return -math.inf if math.isfinite(self.low) or not math.isfinite(self.high) else math.inf


def criterion(low: float, high: float) -> str:
    if math.isinf(low) and math.isinf(high):
        return "any value"
    if math.isinf(high):
        return f"≥ {low:g}"
    if math.isinf(low):
        return f"≤ {high:g}"
    return f"in [{low:g}, {high:g}]"


_FIELDS = {"experiment", "paper", "kind", "statement", "source", "quantity", "range", "basis",
           "paper_value", "headline", "diagnoses", "hypothesis", "post_hoc", "any_model"}
_REQUIRED = _FIELDS - {"paper_value", "headline", "diagnoses", "hypothesis", "post_hoc",
                       "any_model"}
ANY_MODEL_WEIGHTS = ("init", "checkpoint")


def _bound(value, default: float) -> float:
    return default if value is None else float(value)


def parse_registry(data: dict, where: str = "claims registry") -> dict[str, ClaimSpec]:
    """ClaimSpecs from the registry's parsed YAML ({"claims": {id: fields}}), checked field by
    field; every problem is reported in one line naming the claim and the field."""
    import yaml  # noqa: F401 - only to fail early if YAML support is missing

    if not isinstance(data, dict) or not isinstance(data.get("claims"), dict):
        raise RegistryError(f"{where}: expected a top-level mapping `claims: {{id: fields}}`")
    problems, specs = [], {}
    for cid, entry in data["claims"].items():
        if not isinstance(entry, dict):
            problems.append(f"{cid}: expected a mapping of fields")
            continue
        unknown = sorted(set(entry) - _FIELDS)
        missing = sorted(_REQUIRED - set(entry))
        if unknown:
            problems.append(f"{cid}: unknown field(s) {unknown}; allowed: {sorted(_FIELDS)}")
        if missing:
            problems.append(f"{cid}: missing field(s) {missing}")
        if unknown or missing:
            continue
        if not str(cid).startswith(f"{entry['experiment']}."):
            problems.append(f"{cid}: the id must start with its experiment "
                            f"({entry['experiment']}.)")
        if entry["kind"] not in KINDS:
            problems.append(f"{cid}.kind: {entry['kind']!r}; allowed: {list(KINDS)}")
        if entry["paper"] not in PAPERS:
            problems.append(f"{cid}.paper: {entry['paper']!r}; allowed: {sorted(PAPERS)}")
        basis = entry["basis"]
        if not (isinstance(basis, dict) and set(basis) == {"type", "why"}
                and basis["type"] in BASIS_TYPES and str(basis["why"]).strip()):
            problems.append(f"{cid}.basis: expected {{type: one of {sorted(BASIS_TYPES)}, "
                            "why: one line}")
            continue
        rng = entry["range"]
        if not (isinstance(rng, list) and len(rng) == 2
                and all(v is None or isinstance(v, int | float) for v in rng)):
            problems.append(f"{cid}.range: expected [low, high] (null for unbounded)")
            continue
        low, high = _bound(rng[0], -math.inf), _bound(rng[1], math.inf)
        if low > high:
            problems.append(f"{cid}.range: low {low} exceeds high {high}")
            continue
        if entry["kind"] == "check" and basis["type"] not in ("identity", "convention"):
            problems.append(f"{cid}: a check's basis is an identity or a convention, not "
                            f"{basis['type']!r}")
        if basis["type"] == "identity" and entry["kind"] != "check":
            problems.append(f"{cid}: an identity is a check (kind: check), not a finding")
        diagnoses = entry.get("diagnoses") or []
        if isinstance(diagnoses, str):
            diagnoses = [diagnoses]
        hypothesis = entry.get("hypothesis")
        if diagnoses or hypothesis is not None:
            if entry["kind"] != "ours":
                problems.append(f"{cid}: a diagnostic is kind `ours`, not {entry['kind']!r}")
            if not (isinstance(diagnoses, list) and diagnoses
                    and all(isinstance(d, str) for d in diagnoses)):
                problems.append(f"{cid}.diagnoses: expected a list of the paper claims' ids")
            if hypothesis not in HYPOTHESES:
                problems.append(f"{cid}.hypothesis: {hypothesis!r}; allowed: {list(HYPOTHESES)}")
        if not isinstance(entry.get("post_hoc", False), bool):
            problems.append(f"{cid}.post_hoc: expected true or false")
        any_model = entry.get("any_model")
        if any_model is not None and not (
                isinstance(any_model, dict) and set(any_model) == {"ablation", "statistic",
                                                                   "weights"}
                and isinstance(any_model["weights"], list) and any_model["weights"]
                and set(any_model["weights"]) <= set(ANY_MODEL_WEIGHTS)):
            problems.append(f"{cid}.any_model: expected {{ablation: a probe ablation, statistic: "
                            f"a name, weights: a list of {list(ANY_MODEL_WEIGHTS)}}}")
        specs[cid] = ClaimSpec(
            id=cid, experiment=entry["experiment"], paper=entry["paper"], kind=entry["kind"],
            statement=str(entry["statement"]).strip(), source=str(entry["source"]).strip(),
            quantity=str(entry["quantity"]).strip(), low=low, high=high,
            basis_type=basis["type"], basis=str(basis["why"]).strip(),
            paper_value=entry.get("paper_value"), headline=bool(entry.get("headline", False)),
            diagnoses=tuple(diagnoses) if isinstance(diagnoses, list) else (),
            hypothesis=hypothesis, post_hoc=bool(entry.get("post_hoc", False)),
            any_model=dict(any_model) if isinstance(any_model, dict) else None)
    for cid, spec in specs.items():
        for target in spec.diagnoses:
            if target not in specs:
                problems.append(f"{cid}.diagnoses: {target!r} is not a registered claim")
            elif specs[target].kind != "paper":
                problems.append(f"{cid}.diagnoses: {target} is kind {specs[target].kind!r}; "
                                "a diagnostic diagnoses a paper claim")
    if problems:
        raise RegistryError(f"{where}:\n  - " + "\n  - ".join(problems))
    return specs


def load_registry(path: str | os.PathLike) -> dict[str, ClaimSpec]:
    """The registry at `path` (src/rankcollapse/claims/claims.yaml), in file order."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise RegistryError(f"cannot read the claims registry {path}: {err}") from err
    return parse_registry(data, str(path))


def registry_hash(path: str | os.PathLike) -> str:
    """Content hash of the registry file, shown in the report next to the code version."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]

