# Each target creates or updates its own virtual environment; nothing is installed by hand.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
GATE := $(VENV)/bin/gate
CORE_STAMP := $(VENV)/.core-stamp
TEST_STAMP := $(VENV)/.test-stamp
# The torch extra is tested with a pinned CPU build (a CUDA build is several GB; GPU tests skip without one).
TORCH_PIN ?= torch==2.13.0
DEMO_DIR ?= demo-out

.PHONY: setup browser lint test regold demo bench bench-site dist clean

# The demo needs only the core; the tests also install the test, torch and ray extras.
# The distribution was once named "gatekit" (PyPI's gatekit is another project): an old editable install of this
# checkout under that name is removed first, or its entry points would register every plugin twice.
$(CORE_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	! $(PY) -m pip show gatekit 2>/dev/null | grep -qx 'Editable project location: $(CURDIR)' || \
		$(PY) -m pip uninstall --quiet --yes gatekit
	$(PY) -m pip install --quiet --disable-pip-version-check -e .
	touch $(CORE_STAMP)

$(TEST_STAMP): pyproject.toml $(CORE_STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,torch,ray]' '$(TORCH_PIN)'
	touch $(TEST_STAMP)

# The browser test drives Debian's chromium; installed here when missing (root + apt-get), never downloaded.
browser:
	sh tests/browser/ensure-chromium.sh

setup: $(TEST_STAMP)

# Two workers (-n 2): most tests wait on real processes. Each test file runs on one worker (--dist loadfile),
# so the tests of one file never overlap (e.g. two torch gates, which refuse to start beside a running trainer).
# Tests marked "alone" judge real wall times, so they run afterwards with nothing beside them.
# ruff (pyflakes and pycodestyle's errors) and mypy (every def typed) as configured in pyproject.toml.
lint: $(TEST_STAMP)
	$(PY) -m ruff check gatekit drivers tests benchmarks
	$(PY) -m mypy

test: $(TEST_STAMP) browser lint
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not alone"
	$(PY) -m pytest -q -m alone

# Rewrite the golden files (finding, report pages, CI exports) after an intended format change; review the diff.
regold: $(TEST_STAMP)
	GATEKIT_REGOLD=1 $(PY) -m pytest -q tests/test_finding_golden.py tests/test_report.py tests/test_exports.py tests/test_import_hyperfine.py

# A real gate on the bundled numpy reference trainer: host-style Adam (off) vs a resident flat buffer (on).
demo: $(CORE_STAMP)
	$(GATE) check off on --gate configs/demo/gate.toml
	$(GATE) run off on --gate configs/demo/gate.toml --out $(DEMO_DIR)/findings --runs $(DEMO_DIR)/runs
	$(GATE) report "$$(ls -t $(DEMO_DIR)/findings/*.json | head -n 1)" --html $(DEMO_DIR)/report

bench: $(TEST_STAMP)
	$(PY) benchmarks/run.py --write docs/benchmarks.md
	$(PY) benchmarks/import_scale.py --write docs/benchmarks.md

# `gate site` over 2 000 findings: cold, unchanged, after one new finding (docs/benchmarks.md, its own section).
bench-site: $(CORE_STAMP)
	$(PY) benchmarks/site_scale.py --write docs/benchmarks.md

# A wheel and an sdist in dist/ for `pip install` or `pipx install` in another project (docs/install.md "Install into
# your own project"), built in a venv of its own that holds the core, the build tool and pytest only (no torch, no
# ray: the test extras are not needed to build a pure-Python wheel); then the wheel is checked (every module, the
# script, the entry points, the extras) and installed into a throwaway venv, where `gate --help` and `gate drivers` run.
DIST_VENV ?= .venv-dist
DIST_PY := $(DIST_VENV)/bin/python
DIST_STAMP := $(DIST_VENV)/.dist-stamp
$(DIST_STAMP): pyproject.toml
	test -x $(DIST_PY) || $(PYTHON) -m venv $(DIST_VENV)
	$(DIST_PY) -m pip install --quiet --disable-pip-version-check -e . 'build>=1.0' 'setuptools>=70.1' 'pytest>=7.4'
	touch $(DIST_STAMP)

dist: $(DIST_STAMP)
	rm -rf dist build *.egg-info
	$(DIST_PY) -m build --no-isolation --outdir dist .
	rm -rf build *.egg-info
	GATEKIT_WHEEL="$$(ls dist/*.whl)" $(DIST_PY) -m pytest -q -p no:cacheprovider tests/test_wheel.py
	smoke="$$(mktemp -d)" && $(PYTHON) -m venv "$$smoke" && \
		"$$smoke/bin/pip" install --quiet --disable-pip-version-check dist/*.whl && \
		(cd "$$smoke" && bin/gate --help >/dev/null && bin/gate drivers) && rm -rf "$$smoke"

clean:
	rm -rf $(VENV) $(DIST_VENV) $(DEMO_DIR) .pytest_cache test-artifacts dist build

# The simulated tables of docs/statistics.md, the duet section's included (fixed seeds, so reproducible; the same
# figures with any number of jobs). One block: make statistics ONLY=duet-pairs.
STATISTICS_JOBS ?= 2
.PHONY: statistics
statistics: setup
	$(PY) benchmarks/statistics_tables.py --write docs/statistics.md --jobs $(STATISTICS_JOBS) $(ONLY:%=--only %)

# The command-line reference, docs/cli.md, generated from click's command tree (tests/test_docs.py fails when
# it is stale): run after changing a command, an option or its help.
.PHONY: docs
docs: $(CORE_STAMP)
	$(PY) benchmarks/cli_reference.py --write docs/cli.md
