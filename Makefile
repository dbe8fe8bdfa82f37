# deskpool: the two commands of the quick start are `make run` and `make test`.
# Both do all the set-up on a fresh Debian/Ubuntu machine with Python 3.11+.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The driver contract (hypervisor_drivers/contract, the distribution deskpool-driver-api that
# deskpool requires) and the drivers: installed editable with deskpool, in one resolution.
DRIVERS := $(wildcard hypervisor_drivers/*/pyproject.toml)

.PHONY: run test test-fast test-deploy setup services libvirt browser x11 promtool rsyslog podman lint docs openapi clean console console-test

# The console (web/): its dependencies from package-lock.json, then a build when a source,
# the lock file or the OpenAPI document (its generated types) changed.
WEB_NODE := cd web && bash ../scripts/node.sh
WEB_STAMP := web/node_modules/.installed
WEB_SOURCES := $(shell find web/src web/public -type f 2>/dev/null) web/index.html \
  web/package.json web/vite.config.ts web/tsconfig.json api/openapi/openapi.yaml

# The libvirt driver's binding (libvirt-python) builds against libvirt-dev: libvirt first.
$(STAMP): pyproject.toml $(DRIVERS) | libvirt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "deskpool needs Python 3.11 or newer"; exit 1; }
	@$(PYTHON) -m venv --help >/dev/null 2>&1 || \
	  { echo "python venv is missing: sudo apt-get install python3-venv"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	@# The build requirements once, in .venv, instead of once per editable distribution in an
	@# isolated environment of its own (five of them: about 5 s of a fresh clone's set-up).
	$(BIN)/pip install -q --upgrade pip 'setuptools>=77' wheel
	$(BIN)/pip install -q --no-build-isolation -e '.[test,lint,dev]' \
	  $(foreach d,$(DRIVERS),-e $(dir $(d)))
	touch $@

setup: $(STAMP)

$(WEB_STAMP): web/package-lock.json | $(STAMP)
	$(WEB_NODE) npm ci --no-audit --no-fund --loglevel=error
	touch $@

web/dist/index.html: $(WEB_STAMP) $(WEB_SOURCES)
	$(WEB_NODE) npm run --silent build

# Build the console into web/dist (served by the web component).
console: web/dist/index.html

# The console's checks: generated API types up to date with the OpenAPI document, and Vitest.
console-test: $(WEB_STAMP)
	$(WEB_NODE) npm run --silent gen:check || \
	  { echo "web/src/api/schema.d.ts is stale: run 'cd web && npm run gen' and commit it"; exit 1; }
	$(WEB_NODE) npx vitest run

services:
	@bash scripts/ensure-services.sh

# QEMU and libvirt's daemons (and libvirt-dev for the binding), for the libvirt driver's tests
# against real VMs and `make run`.
libvirt:
	@bash scripts/ensure-libvirt.sh

browser:
	@bash scripts/ensure-browser.sh

# Xvfb, x11vnc, xterm and tesseract: the real X and VNC servers of the VNC bridge tests, and
# the reading of remote screens' text in the browser tests.
x11:
	@bash scripts/ensure-x11.sh

# rsyslogd, the real syslog server of the syslog export's tests (they start their own, on a
# free port with a file of their own; nothing runs as a service).
rsyslog:
	@bash scripts/ensure-rsyslog.sh

# promtool (Debian's prometheus package): the shipped alerting rules' checks and unit tests.
promtool:
	@bash scripts/ensure-promtool.sh

# The main job: `deskpool dev` migrates, then runs every component in one process with the
# simulator driver and a development identity provider, and prints where everything is.
# `make run HYPERVISOR=libvirt`: the demo pool's desktops are real tiny VMs on the local libvirt.
HYPERVISOR ?= simulator
run: setup services libvirt console
	@bash scripts/dev-env.sh
	@# The caller's environment wins over .run/dev.env (dev-env.sh said which, once).
	@bash -c '. scripts/dev-env-load.sh .run/dev.env 2>/dev/null && exec $(BIN)/deskpool dev --hypervisor $(HYPERVISOR)'

# What ruff checks and formats.
LINTED := platform plugins hypervisor_drivers tests bench
# pytest from .venv (tests/README.md). Bytecode is written (__pycache__, ignored by git): pytest
# caches its assertion rewriting there (without it, every run rewrote hundreds of modules, the
# platform's and its test plugins', for tens of seconds of CPU).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest
# The tests after the unit tests run in parallel (pytest-xdist, tests/README.md): WORKERS
# processes, more than this machine's two cores since most tests wait (for processes, browsers,
# VMs). By groups (a module whose tests share processes or a libvirt lab runs on one worker),
# the longest first. Tracebacks in Python's own format: pytest's, made in a worker for a
# failure, once stopped the run with an INTERNALERROR (AST constructor recursion depth mismatch).
WORKERS ?= 3
PARALLEL := -n $(WORKERS) --dist loadgroup --tb=native

# The whole test suite, lint and type checks included, from .venv: the unit tests first (a
# broken one is reported in seconds), lint and types, then integration and end-to-end in
# parallel. Beside the unit tests, ruff and mypy, the console is built and tested (Node.js, on
# the other core). After the parallel run, the API contract (schemathesis over the OpenAPI
# document) runs in a pytest of its own: collecting it builds every operation's coverage cases
# (about 11 s of CPU), and every xdist worker collects every test, so each worker would build
# them. It ran beside the parallel run until a machine half as fast (2026-11-29) overloaded:
# two fresh clones in a row each failed one to three tests on timeouts (a browser's click, a
# Redis read, a statement), different ones each time, each passing alone.
CONTRACT := tests/integration/api/test_contract.py
CHECKS := $(PYTEST) tests/unit && $(BIN)/ruff check $(LINTED) && \
  $(BIN)/ruff format --check $(LINTED) && $(BIN)/mypy

test: setup services libvirt browser x11 promtool rsyslog
	@bash scripts/beside.sh '$(MAKE) --no-print-directory console console-test' bash -c '$(CHECKS)'
	$(PYTEST) $(PARALLEL) tests --ignore=tests/deploy --ignore=tests/unit --ignore=$(CONTRACT)
	$(PYTEST) -q --tb=native $(CONTRACT)

# Every test but the slow ones (the end-to-end tests, the API contract, the VNC bridge, the
# libvirt driver), the unit tests first, the rest in parallel: a few minutes.
test-fast: setup services rsyslog
	$(PYTEST) tests/unit
	$(PYTEST) $(PARALLEL) -m "not slow" tests --ignore=tests/deploy --ignore=tests/unit

# The deployment: the Helm chart and the composition validated, then the image built with podman
# from a local Debian base and every component run from it (a few minutes; see deploy/).
test-deploy: setup services podman
	$(BIN)/tox run -e deploy

podman:
	@bash deploy/scripts/ensure-podman.sh

lint: setup
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

docs: setup
	$(BIN)/deskpool config doc
	$(BIN)/deskpool hooks doc

# The OpenAPI document from the code, and the console's API types from the document.
openapi: setup $(WEB_STAMP)
	$(BIN)/deskpool openapi write
	$(WEB_NODE) npm run --silent gen

clean:
	rm -rf $(VENV) .tox .run build *.egg-info web/node_modules web/dist
