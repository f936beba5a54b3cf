# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The CPU build of torch; a bare `torch` requirement would pull a multi-GB CUDA build.
# On a GPU machine: make TORCH_SPEC=torch test
TORCH_SPEC ?= torch==2.13.0
export WANDB_MODE ?= offline

.PHONY: install test test-slow demo bench clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e '.[test,bench]'
	touch $@

install: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest -q -m "not slow"

test-slow: $(VENV)/.installed
	$(PY) -m pytest -q -m slow

# Until sweeps land: the most complete end-to-end path, a training run with its summary.
demo: $(VENV)/.installed
	$(VENV)/bin/arch-zoo describe configs/experiments/copy.yaml
	$(VENV)/bin/arch-zoo train configs/experiments/copy.yaml --out runs/demo-copy

bench: $(VENV)/.installed
	$(PY) benchmarks/train_step.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
