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
	$(PY) -m pip install --quiet -e '.[test,bench,ray]'
	touch $@

install: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest -q -m "not slow"

test-slow: $(VENV)/.installed
	$(PY) -m pytest -q -m slow

# The quickstart sweep (3 position schemes x 2 seeds on a char-LM), then its report.
# Rerunning resumes: finished runs are kept.
demo: $(VENV)/.installed
	$(VENV)/bin/arch-zoo sweep sweeps/quickstart.yaml --workers 2 --out runs/sweeps
	$(VENV)/bin/arch-zoo report runs/sweeps/quickstart --out reports/quickstart

bench: $(VENV)/.installed
	$(PY) benchmarks/train_step.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
