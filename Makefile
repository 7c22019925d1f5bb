# Two commands on a fresh machine:  make run  (the demo on the bundled sample)  and  make test;
# make report  then writes the demo's report.html; make docs builds the documentation site (site/) from docs/.
# Python: the newest python3.13 or python3.12 on the PATH that runs (a python3 of 3.12 or later otherwise);
# PYTHON=/path/to/python3.12 chooses another.
PYTHON ?= $(shell for p in python3.13 python3.12 python3; do $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
CORES ?= 2
# torch first: PyPI's build is for CUDA 13 (NVIDIA drivers of the 580 series or newer); for an older driver
# name PyTorch's build for its CUDA version, e.g.
#   make TORCH="torch==2.14.1 --index-url https://download.pytorch.org/whl/cu126" run
TORCH ?= torch==2.14.1

.PHONY: run report test test-fast docs venv lint format clean

venv: $(VENV)/.installed

# a new pyproject.toml or Python makes the environment anew (--clear: nothing of another Python is kept)
$(VENV)/.installed: pyproject.toml
	@[ -n "$(PYTHON)" ] || { echo "make: no Python 3.12 or 3.13 found on the PATH: install one (Ubuntu 24.04: apt install python3.12-venv; Debian 13: apt install python3.13-venv; elsewhere python.org or pyenv), or name it with make PYTHON=/path/to/python3.12 (pyenv: select an installed one, pyenv shell 3.12.x)" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 12))' || { echo "make: $(PYTHON) is Python $$($(PYTHON) -c 'import platform; print(platform.python_version())'); miracl-eval needs 3.12 or later (pyserini 2.4 does): install python3.12 or python3.13, or name one with make PYTHON=..." >&2; exit 1; }
	$(PYTHON) -m venv --clear $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[test,docs]'
	touch $@

# greedy scheduling: Snakemake's default (an ILP solved before each batch of jobs) costs the demo's
# 559 small jobs (a dry run once preprocessing is done counts them) more than it saves
run: venv
	$(BIN)/snakemake results/miracl_ndcg.tsv results/miracl_comparability.tsv --cores $(CORES) --scheduler greedy --configfile sample/miracl.yaml

# the demo's report: builds whatever it lacks (everything after `make run`: the report's views), then report.html
report: venv
	$(BIN)/snakemake --cores $(CORES) --scheduler greedy --configfile sample/miracl.yaml --report report.html --report-after-run

# every tier (tests/unit, tests/workflow, tests/benchmarks): what CI runs
# on two workers, each test file on one (its tests share their fixtures and Snakemake runs)
test: venv
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# the unit tier alone: the library without Snakemake, on two workers (under 3 minutes)
test-fast: venv
	$(BIN)/python -m pytest -q -n 2 --dist loadfile tests/unit

# the documentation site (docs/, mkdocs.yml) into site/: --strict fails on a broken link, a missing page or a
# missing included file; the reference pages are generated from the code at every build (docs/hooks.py)
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --quiet

lint: venv
	$(BIN)/ruff check miracl_eval scripts tests benchmarks docs/hooks.py
	$(BIN)/snakefmt --check Snakefile rules
	$(BIN)/snakemake --lint --cores 1
	$(BIN)/mypy

format: venv
	$(BIN)/ruff format miracl_eval scripts tests benchmarks docs/hooks.py
	$(BIN)/ruff check --fix miracl_eval scripts tests benchmarks docs/hooks.py
	$(BIN)/snakefmt Snakefile rules

clean:
	rm -rf resources runs results logs stats .snakemake report.html site
