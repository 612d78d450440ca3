# Two commands do all the set-up on a fresh machine:
#   make reproduce   create .venv if missing, install pinned deps, run the workflow, build the report
#   make test        the same set-up, then the whole test suite (what CI runs)
#   make test-fast   lint, then the tests that do not run the workflow for real (under 2 minutes)
# Re-running either is fast: the venv is rebuilt only when envs/ or pyproject.toml change.

PYTHON ?= python3
VENV ?= .venv
CORES ?= 2
CONFIG ?=
SNAKEMAKE_ARGS ?=
PYTEST_ARGS ?=
# What test-fast leaves out: tests that use a real workflow run (marked `realrun` by
# tests/conftest.py from the fixtures they use), the SLURM cluster and the other slow ones.
FAST_MARKERS := not realrun and not slurm and not slow

PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONFIG_ARG := $(if $(CONFIG),--configfile $(CONFIG),)
# Where CONFIG writes (its `name`: rankcollapse.plan.config.output_roots): report/report for the
# default config, report/<name> for the others; read only by the recipes that print it.
ROOT_OF = $(shell PYTHONPATH=src $(PY) -m rankcollapse.plan.config $(1) workflow/config/default.yaml $(CONFIG))
RUFF := $(PY) -m ruff check src tests workflow/scripts benchmarks
SNAKEFMT := $(VENV)/bin/snakefmt --check Snakefile workflow/rules

.PHONY: venv reproduce snakemake-report test test-fast bench bench-gpu lint dryrun notebooks clean-results help

help:
	@echo "make reproduce   set up .venv, run the workflow (CORES=$(CORES)), build report/report.{html,pdf}"
	@echo "                 (CONFIG with name: <name>: results/<name>/ and report/<name>.{html,pdf})"
	@echo "make snakemake-report  Snakemake's own report of the last run: report/snakemake-report.html"
	@echo "make test        set up .venv, run the whole test suite (what CI runs)"
	@echo "make test-fast   lint, unit and property tests, dry-runs: no real workflow run (under 2 min)"
	@echo "make bench       the performance suite (benchmarks/README.md)"
	@echo "make bench-gpu   the GPU check: B1, B7, B9 and the CI workflow on a GPU (QUICK=1: CPU mode)"
	@echo "make lint        ruff, snakefmt --check, snakemake --lint"
	@echo "make notebooks   regenerate notebooks/*.ipynb from notebooks/src/*.py (jupytext --sync)"
	@echo "Variables: CORES=N  CONFIG=workflow/config/paper.yaml  SNAKEMAKE_ARGS='...'  PYTEST_ARGS='...'"

venv: $(STAMP)

$(STAMP): envs/requirements.txt envs/constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r envs/requirements.txt -c envs/constraints.txt
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name rankcollapse --display-name "Python (rankcollapse)" >/dev/null
	touch $(STAMP)

reproduce: $(STAMP)
	$(VENV)/bin/snakemake --cores $(CORES) $(CONFIG_ARG) $(SNAKEMAKE_ARGS)
	@echo "Report: $(call ROOT_OF,report).html and $(call ROOT_OF,report).pdf (results in $(call ROOT_OF,results)/)"

# Snakemake's own report (figures by experiment, run times, rule graph, provenance) of the last
# `make reproduce` with the same CONFIG: it reads the run's metadata and reruns nothing.
snakemake-report: $(STAMP)
	$(VENV)/bin/snakemake --cores $(CORES) $(CONFIG_ARG) $(SNAKEMAKE_ARGS) --report $(call ROOT_OF,snakemake_report)
	@echo "Report: $(call ROOT_OF,snakemake_report)"

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

# The developer's fast path: ruff and snakefmt, then every test that neither runs the workflow for
# real nor is marked slow: unit and property tests, dry-runs, and snakemake --lint (run by
# tests/workflow/test_workflow.py::test_lint_is_clean, so not twice).
test-fast: $(STAMP)
	$(RUFF)
	$(SNAKEFMT)
	$(PY) -m pytest -m "$(FAST_MARKERS)" $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/run.py

# The GPU check (benchmarks/gpu_check.py): on a GPU machine it runs with the Python that has the
# machine's own CUDA build of torch (no venv is built: BENCH_PYTHON defaults to .venv's python
# when there is one, else python3); QUICK=1 is its CPU mode, which the test suite runs.
QUICK ?=
BENCH_PYTHON ?= $(if $(wildcard $(PY)),$(PY),$(PYTHON))
bench-gpu:
	QUICK=$(QUICK) $(BENCH_PYTHON) benchmarks/gpu_check.py

lint: $(STAMP)
	$(RUFF)
	$(SNAKEFMT)
	$(VENV)/bin/snakemake --lint --cores 1

# The percent-format sources notebooks/src/*.py are what is reviewed; the .ipynb files that
# papermill runs are generated from them (paired in notebooks/jupytext.toml).
notebooks: $(STAMP)
	$(VENV)/bin/jupytext --sync notebooks/src/[0-9]*.py

dryrun: $(STAMP)
	$(VENV)/bin/snakemake -n --cores $(CORES) $(CONFIG_ARG)

clean-results:
	rm -rf results report/*.html report/*.pdf report/figures report/*/figures report/*/snakemake-report.html
