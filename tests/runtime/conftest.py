"""Fixtures of the runtime tests: the torch virtualenv, a fresh etcd per test, the rendered Job."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import TRAINING_NAMESPACE
from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet
from cluster_plan.kubernetes_values import review_plan
from config import load_config
from tests.conftest import DEFAULT_CONFIG
from tests.runtime.etcd_cluster import EtcdCluster
from tests.runtime.harness import (
    LocalJob,
    RuntimeTools,
    find_runtime_tools,
    option_value,
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


def etcd_statefulset(plan: KubernetesLayerPlan) -> Mapping[str, Any]:
    """The default team's rendezvous etcd, as the plan renders it."""
    step = plan.step("etcd")
    assert isinstance(step, ManifestSet)
    [statefulset] = [
        m
        for m in step.manifests
        if m["kind"] == "StatefulSet" and m["metadata"]["namespace"] == TRAINING_NAMESPACE
    ]
    return statefulset


@pytest.fixture
def etcd(
    runtime_tools: RuntimeTools, plan: KubernetesLayerPlan, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EtcdCluster]:
    """A new etcd for every test: what one test's runs leave in it, another never sees."""
    cluster = EtcdCluster(
        python=runtime_tools.python,
        etcd=runtime_tools.etcd,
        statefulset=etcd_statefulset(plan),
        work_dir=tmp_path_factory.mktemp("etcd"),
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def job(
    runtime_tools: RuntimeTools, plan: KubernetesLayerPlan, etcd: EtcdCluster, tmp_path: Path
) -> LocalJob:
    """The rendered training Job: one local agent per node (--nnodes), one worker each."""
    container = training_job(plan)
    nodes = int(option_value(container.args, "--nnodes"))
    return LocalJob(tools=runtime_tools, container=container, etcd=etcd, work_dir=tmp_path, nodes=nodes)
