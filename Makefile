# Each target creates or updates its own virtual environment; nothing is installed by hand.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
GATE := $(VENV)/bin/gate
STAMP := $(VENV)/.installed-stamp
DEMO_DIR ?= demo-out

.PHONY: setup test demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

test: setup
	$(PY) -m pytest -q

# A real gate on the bundled numpy reference trainer: host-style Adam (off) vs a resident flat buffer (on).
demo: setup
	$(GATE) check off on --gate configs/demo/gate.toml
	$(GATE) run off on --gate configs/demo/gate.toml --out $(DEMO_DIR)/findings --runs $(DEMO_DIR)/runs

bench: setup
	$(PY) benchmarks/run.py --write docs/benchmarks.md

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache

# The simulated tables of docs/statistics.md (a few minutes; fixed seed, so reproducible).
.PHONY: statistics
statistics: setup
	$(PY) benchmarks/statistics.py --write docs/statistics.md
