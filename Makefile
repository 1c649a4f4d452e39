# Two commands on a new machine (each sets everything up first, idempotently; see scripts/setup.sh):
#
#   make benchmark   # SimCLR, MoCo v2+, NCL and BayesNCL side by side, offline, on the CPU
#   make test        # the linter and the test suite, but the long end-to-end scenarios
#   make test-all    # the linter and every test
#   make quick       # the README's CPU quick start: one short BayesNCL pretraining
#
# VENV=.venv by default (VENV= installs into PYTHON itself); SOLO_LEARN_SRC=DIR installs
# solo-learn from a local checkout instead of GitHub.
PYTHON ?= python3
VENV ?= .venv
PY := $(if $(VENV),$(VENV)/bin/python,$(PYTHON))
SETUP := VENV="$(VENV)" PYTHON="$(PYTHON)" bash scripts/setup.sh

.PHONY: setup setup-tests benchmark quick test test-all

setup:
	$(SETUP)

setup-tests:
	$(SETUP) --tests

benchmark: setup
	$(PY) -m solo_bayesncl.benchmark --preset cpu

quick: setup
	$(PY) main_pretrain.py data.dataset=fashion-mnist data.fraction=0.05 data.val_fraction=0.1 \
		max_epochs=2 optimizer.batch_size=128 data.num_workers=2 interpretability.enabled=True

# one pytest worker per core, at most 4 (pytest-xdist), each test file on one worker
PYTEST := $(PY) -m pytest -q -rs -n auto --maxprocesses 4 --dist loadfile

test: setup-tests
	$(PY) -m ruff check .
	$(PYTEST) -m "not long"

test-all: setup-tests
	$(PY) -m ruff check .
	$(PYTEST)
