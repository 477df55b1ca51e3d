# Each target creates or updates its own virtual environment; nothing is installed by hand.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
GATE := $(VENV)/bin/gate
STAMP := $(VENV)/.installed-stamp
# The torch extra is tested with a pinned CPU build (a CUDA build is several GB; GPU tests skip without one).
TORCH_PIN ?= torch==2.13.0
DEMO_DIR ?= demo-out

.PHONY: setup test demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,torch]' '$(TORCH_PIN)'
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
