# Two commands on a fresh machine:  make run  (the demo on the bundled sample)  and  make test;
# make report  then writes the demo's report.html.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
CORES ?= 2

.PHONY: run report test test-fast venv lint format clean

venv: $(VENV)/.installed

# torch is pinned first: 2.13.0 resolves to the CPU wheel on machines that provide it locally,
# and to the CUDA build from PyPI elsewhere (what a GPU machine wants).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# greedy scheduling: Snakemake's default (an ILP solved before each batch of jobs) costs the demo's
# 373 small jobs more than it saves
run: venv
	$(BIN)/snakemake results/miracl_ndcg.tsv results/miracl_comparability.tsv --cores $(CORES) --scheduler greedy --configfile sample/miracl.yaml

# the demo's report: builds whatever it lacks (everything after `make run`: the report's views), then report.html
report: venv
	$(BIN)/snakemake --cores $(CORES) --scheduler greedy --configfile sample/miracl.yaml --report report.html --report-after-run

# every tier (tests/unit, tests/workflow, tests/benchmarks): what CI runs
# on two workers, each test file on one (its tests share their fixtures and Snakemake runs)
test: venv
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# the unit tier alone: the library without Snakemake, a few minutes
test-fast: venv
	$(BIN)/python -m pytest -q tests/unit

lint: venv
	$(BIN)/ruff check miracl_eval scripts tests benchmarks
	$(BIN)/snakefmt --check Snakefile rules
	$(BIN)/snakemake --lint --cores 1
	$(BIN)/mypy

format: venv
	$(BIN)/ruff format miracl_eval scripts tests benchmarks
	$(BIN)/ruff check --fix miracl_eval scripts tests benchmarks
	$(BIN)/snakefmt Snakefile rules

clean:
	rm -rf resources runs results logs stats .snakemake report.html
