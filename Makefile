# One-command entry points (see README). CPU installs pin torch to its CPU build.
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: install test toy lint

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints/cpu.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test,cluster,verl]" -c constraints/cpu.txt
	touch $@

lint: install
	ruff check .

test: lint
	pytest -q

toy: install
	snakemake --cores 2
