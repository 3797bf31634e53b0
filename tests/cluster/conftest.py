"""The real control plane, shared by every scenario of a session (tests/cluster/README.md).

Tests here are marked ``cluster`` (and so ``slow``): `make test` runs them in a pass of their own,
after the binaries are built (`make cluster-binaries`). A missing binary fails the test with the
target to run; nothing is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from config import StackConfig, load_config
from tests.cluster.binaries import find_binaries
from tests.cluster.control_plane import ControlPlane
from tests.cluster.nodes import system_nodes
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
from tests.plans import shared_review_plan

CLUSTER_DIR = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(CLUSTER_DIR):
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def default_config() -> StackConfig:
    return load_config(DEFAULT_CONFIG)


@pytest.fixture(scope="session")
def example_config() -> StackConfig:
    return load_config(EXAMPLE_CONFIG)


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, default_config: StackConfig
) -> Iterator[ControlPlane]:
    """etcd, the API server, controller manager, scheduler and kwok with the system nodes; the plan's
    steps (Volcano, the watchdog) start their processes as a test applies them."""
    plane = ControlPlane(binaries=find_binaries(), work_dir=tmp_path_factory.mktemp("control-plane"))
    plane.start()
    try:
        plane.add_nodes(system_nodes(default_config))
        plane.wait_for(
            lambda: (
                all(
                    condition["status"] == "True"
                    for node in plane.kubectl.json("get", "nodes")["items"]
                    for condition in node["status"].get("conditions", [])
                    if condition["type"] == "Ready"
                )
                and len(plane.kubectl.json("get", "nodes")["items"])
                == default_config.system_nodes.desired_size
            ),
            timeout=60,
            what="the system nodes Ready (kwok)",
        )
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def default_plan(default_config: StackConfig) -> KubernetesLayerPlan:
    return shared_review_plan(default_config)


@pytest.fixture(autouse=True)
def _process_tails(request: pytest.FixtureRequest) -> Iterator[None]:
    """A failing scenario prints the tail of every control-plane process's output."""
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed and "control_plane" in request.fixturenames:
        plane: ControlPlane = request.getfixturevalue("control_plane")
        print(f"\n=== control plane processes ===\n{plane.report()}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
