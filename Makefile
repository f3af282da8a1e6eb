# The README's commands. `make test` is the one way to run the tests: it builds the
# venv, installs the Debian peers it needs, then runs ruff, mypy --strict, pytest
# and the docs site's --strict build side by side.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# dpctl finds this machine's CPU through the OpenCL ICD shipped in the venv; the
# wheel's own .icd file points at a placeholder path, so name the library directly.
export OCL_ICD_FILENAMES := $(abspath $(VENV))/lib/libintelocl.so

.PHONY: setup test test-fast lint typecheck pytest demo bench peers clean proto docs fuzz

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all,test]'
	touch $(STAMP)

# Debian's Prometheus, promtool, Alertmanager and node_exporter are the real peers
# the tests and benchmarks run against.
peers:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null && \
	  command -v prometheus-alertmanager >/dev/null && \
	  command -v prometheus-node-exporter >/dev/null || { \
	  echo "installing Debian's prometheus, prometheus-alertmanager, prometheus-node-exporter"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    prometheus prometheus-alertmanager prometheus-node-exporter >/dev/null; }

# ruff, then the architecture's import contracts ([tool.importlinter] in pyproject.toml).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: setup
	$(VENV)/bin/mypy

# The tests run in PYTEST_WORKERS processes (pytest-xdist): most of the suite waits
# on real servers (Prometheus, Alertmanager, the fake API server, exporters), not on
# a CPU, so more workers than cores still shortens the run. A module's tests stay
# on one worker (loadscope), so its shared fixture is built once, and modules go
# out in collection order, the slow ones first (tests/conftest.py).
# PYTEST_WORKERS=0 runs everything in one process, one test after another. The
# slowest 20 tests are listed at the end.
PYTEST_WORKERS ?= 4
PYTEST_XDIST   := -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder
pytest: setup peers
	$(VENV)/bin/pytest $(PYTEST_XDIST) --durations=20 $(PYTEST_ARGS)

# The inner loop: pytest without the modules marked slow (pyproject's `slow` marker:
# real Prometheus, subprocess fleets, benchmarks). `make test` still runs everything.
test-fast: setup peers
	$(VENV)/bin/pytest $(PYTEST_XDIST) -m "not slow" $(PYTEST_ARGS)

# The four checks run side by side (pytest mostly waits on servers, which leaves
# CPU for ruff, mypy and mkdocs), their output as it comes: pytest's progress
# stays live, and the others print a few lines each. All four run to the end (-k),
# so one run shows every failure; make fails if any failed.
test: setup peers
	$(MAKE) --no-print-directory -k -j4 lint typecheck pytest docs

# The fuzz suite (tests/fuzz/) for longer than `make test` runs it: hypothesis's
# "long" profile (FUZZ_SCALE times the cases per target, a new random seed each run,
# failures shrunk) and atheris for FUZZ_SECONDS per byte-level parser. The number
# of cases per target is printed at the end (and written as JSON to FUZZ_COUNTS, a
# path, when given).
FUZZ_SCALE   ?= 10
FUZZ_SECONDS ?= 300
FUZZ_COUNTS  ?=
fuzz: setup
	ACCEL_FUZZ_PROFILE=long ACCEL_FUZZ_SCALE=$(FUZZ_SCALE) \
	  ACCEL_FUZZ_ATHERIS_SECONDS=$(FUZZ_SECONDS) ACCEL_FUZZ_COUNTS=$(FUZZ_COUNTS) \
	  $(VENV)/bin/pytest -p no:cacheprovider tests/fuzz $(PYTEST_ARGS)

# The documentation site (mkdocs.yml, docs/): --strict turns every warning, a dead
# link or anchor among them, into a failure. Built into site/ (ignored by git).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site

# The fleet simulator on the small scenario (rules against the baseline, a table
# and plots in demo-out/), then the exporter on this host with a simulated node, in
# the foreground until Ctrl-C. Its port (DEMO_ADDRESS, default 127.0.0.1:9835) is
# checked first, so a busy port fails at once, not after the simulation.
demo: setup
	$(PY) -m exporter.demo --check
	$(VENV)/bin/accel-autoscaler simulate scenarios/small.yaml --out demo-out
	$(PY) -m exporter.demo

bench: setup peers
	$(PY) bench/scrape.py
	$(PY) -m bench.auth

# The kubelet PodResources and libtpu runtime metrics stubs are committed; this
# regenerates them (with .pyi for mypy --strict) after a change to a proto or to
# grpcio-tools.
proto: setup
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m grpc_tools.protoc -I. \
	  --python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. \
	  exporter/kubelet/podresources.proto exporter/backends/tpu/tpu_metric_service.proto

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
