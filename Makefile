# Each target creates or updates its own virtual environment; nothing is installed by hand.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
GATE := $(VENV)/bin/gate
STAMP := $(VENV)/.installed-stamp
DEMO_DIR ?= demo-out

.PHONY: setup browser test demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

# The browser test drives Debian's chromium; installed here when missing (root + apt-get), never downloaded.
browser:
	sh tests/browser/ensure-chromium.sh

test: setup browser
	$(PY) -m pytest -q

# A real gate on the bundled numpy reference trainer: host-style Adam (off) vs a resident flat buffer (on).
demo: setup
	$(GATE) check off on --gate configs/demo/gate.toml
	$(GATE) run off on --gate configs/demo/gate.toml --out $(DEMO_DIR)/findings --runs $(DEMO_DIR)/runs
	$(GATE) report "$$(ls -t $(DEMO_DIR)/findings/*.json | head -n 1)" --html $(DEMO_DIR)/report

bench: setup
	$(PY) benchmarks/run.py --write docs/benchmarks.md

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache test-artifacts
