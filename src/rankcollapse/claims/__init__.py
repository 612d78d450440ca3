"""The claims ledger: claims registered before they are measured, measurements, and verdicts.

The registry (`registry`, claims.yaml), measurements (`measurement`), verdicts (`verdicts`), a
run's claims against the registry (`ledger`) and the diagnoses of missed paper claims
(`diagnoses`) are modules of this package, re-exported here; each experiment measures its claims
in `rankcollapse.claims.<experiment>` (e1, ...). How the ledger works: docs/claims.md.
"""

from rankcollapse.claims.diagnoses import DIAGNOSED, DIAGNOSIS_RULE, READINGS, Diagnosis, diagnose
from rankcollapse.claims.ledger import judge_sections
from rankcollapse.claims.measurement import (
    IntervalKind,
    Measurement,
    at_scale,
    exact,
    not_testable,
    over_runs,
    sample_interval,
)
from rankcollapse.claims.registry import (
    BASIS_TYPES,
    HYPOTHESES,
    KIND_TITLES,
    KINDS,
    PAPERS,
    REGISTRY_PATH,
    ClaimSpec,
    RegistryError,
    criterion,
    load_registry,
    parse_registry,
    registry_hash,
)
from rankcollapse.claims.verdicts import (
    PHRASES,
    VERDICT_RULE,
    VERDICTS,
    Judged,
    interval_of,
    judge,
    sentence,
    verdict,
)
from rankcollapse.stats import LEVEL, MIN_RUNS_FOR_BOOTSTRAP

__all__ = [
    "BASIS_TYPES", "DIAGNOSED", "DIAGNOSIS_RULE", "HYPOTHESES", "KINDS", "KIND_TITLES", "LEVEL",
    "MIN_RUNS_FOR_BOOTSTRAP", "PAPERS", "PHRASES", "READINGS", "REGISTRY_PATH", "VERDICTS",
    "VERDICT_RULE", "ClaimSpec", "Diagnosis", "IntervalKind", "Judged", "Measurement",
    "RegistryError", "at_scale", "criterion", "diagnose", "exact", "interval_of", "judge",
    "judge_sections", "load_registry", "not_testable", "over_runs", "parse_registry",
    "registry_hash", "sample_interval", "sentence", "verdict",
]
