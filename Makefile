# deskpool: the two commands of the quick start are `make run` and `make test`.
# Both do all the set-up on a fresh Debian/Ubuntu machine with Python 3.11+.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The driver contract (hypervisor_drivers/contract, the distribution deskpool-driver-api that
# deskpool requires) and the drivers: installed editable with deskpool, in one resolution.
DRIVERS := $(wildcard hypervisor_drivers/*/pyproject.toml)

.PHONY: run test test-deploy setup services browser podman lint docs openapi clean

$(STAMP): pyproject.toml $(DRIVERS)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "deskpool needs Python 3.11 or newer"; exit 1; }
	@$(PYTHON) -m venv --help >/dev/null 2>&1 || \
	  { echo "python venv is missing: sudo apt-get install python3-venv"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,lint,dev]' $(foreach d,$(DRIVERS),-e $(dir $(d)))
	touch $@

setup: $(STAMP)

services:
	@bash scripts/ensure-services.sh

browser:
	@bash scripts/ensure-browser.sh

# The main job: `deskpool dev` migrates, then runs every component in one process with the
# simulator driver and a development identity provider, and prints where everything is.
run: setup services
	@bash scripts/dev-env.sh
	@set -a && . ./.run/dev.env && set +a && exec $(BIN)/deskpool dev

# The whole test suite, lint and type checks included, through tox.
test: setup services browser
	$(BIN)/tox run -e lint,tests

# The deployment: the Helm chart and the composition validated, then the image built with podman
# from a local Debian base and every component run from it (a few minutes; see deploy/).
test-deploy: setup services podman
	$(BIN)/tox run -e deploy

podman:
	@bash deploy/scripts/ensure-podman.sh

lint: setup
	$(BIN)/tox run -e lint

docs: setup
	$(BIN)/deskpool config doc
	$(BIN)/deskpool hooks doc

openapi: setup
	$(BIN)/deskpool openapi write

clean:
	rm -rf $(VENV) .tox .run build *.egg-info
