"""Fixtures of the runtime tests: the torch virtualenv, a fresh etcd per test, the rendered Job."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from config import load_config
from stacks.kubernetes_values import review_plan
from tests.conftest import DEFAULT_CONFIG
from tests.runtime.harness import (
    EtcdServer,
    LocalJob,
    RuntimeTools,
    find_runtime_tools,
    option_value,
    rendered_container,
    training_job,
)

SKIP_VARIABLE = "SKIP_RUNTIME_TESTS"


@pytest.fixture(scope="session")
def runtime_tools() -> RuntimeTools:
    """`make test` builds .venv-torch first; anywhere else a missing one fails, unless the
    environment says explicitly that these tests may be skipped."""
    tools, missing = find_runtime_tools()
    if tools is not None:
        return tools
    problem = f"the torch virtualenv or etcd is missing ({', '.join(missing)})"
    if os.environ.get(SKIP_VARIABLE) == "1":
        pytest.skip(f"{problem} and {SKIP_VARIABLE}=1")
    pytest.fail(f"{problem}: run `make runtime-env` (`make test` does), or set {SKIP_VARIABLE}=1 to skip")


@pytest.fixture(scope="session")
def plan() -> KubernetesLayerPlan:
    return review_plan(load_config(DEFAULT_CONFIG))


@pytest.fixture
def etcd(
    runtime_tools: RuntimeTools, plan: KubernetesLayerPlan, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EtcdServer]:
    """A new etcd for every test: what one test's runs leave in it, another never sees."""
    container = rendered_container(plan, step="etcd", kind="Deployment", name="etcd-server")
    server = EtcdServer(
        binary=runtime_tools.etcd, rendered_args=container.args, work_dir=tmp_path_factory.mktemp("etcd")
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def job(runtime_tools: RuntimeTools, plan: KubernetesLayerPlan, etcd: EtcdServer, tmp_path: Path) -> LocalJob:
    """The rendered training Job: one local agent per node (--nnodes), one worker each."""
    container = training_job(plan)
    nodes = int(option_value(container.args, "--nnodes"))
    return LocalJob(tools=runtime_tools, container=container, etcd=etcd, work_dir=tmp_path, nodes=nodes)
