"""The real control plane, shared by every scenario of a session (tests/cluster/README.md).

Tests here are marked ``cluster`` (and so ``slow``): `make test` runs them in a pass of their own,
after the binaries are built (`make cluster-binaries`). A missing binary fails the test with the
target to run; nothing is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling

from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from config import StackConfig, load_config
from tests.cluster.binaries import find_binaries
from tests.cluster.control_plane import ControlPlane
from tests.cluster.nodes import system_nodes
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
from tests.plans import shared_review_plan

CLUSTER_DIR = Path(__file__).parent


# The tier runs as three sessions at once (`make test`: `pytest -n 3 --dist loadfile`), each with a
# control plane of its own: the scenarios mostly wait on the times they measure (three planes keep
# about one core busy), so three planes on two cores take under half the wall time of one. Here a
# work unit of `loadfile` is one of these lists, not a file (pytest_xdist_make_scheduler below): its
# modules run on one worker, in this order. Modules on the same plan go together, so a worker
# switches plans (a Helm upgrade of Volcano, 20 to 40 s) rarely; test_deploy comes first on its
# worker, on a fresh control plane (its first apply must create every step). The lists take about
# the same wall time (measured in docs/performance.md); a list per worker, so `-n` is their number.
# Without -n, the same order on one control plane.
WORKERS: dict[str, tuple[str, ...]] = {
    "default-plan": (
        "test_deploy.py",
        "test_gang_run.py",
        "test_canary.py",
        "test_node_check.py",
        "test_security.py",
        "test_watchdog.py",
        "test_torchx.py",
        "test_redeploy.py",
        "test_deployment_check.py",
        "test_platform_pods.py",
    ),
    "autoscaler-and-teams": (
        "test_scale_from_zero.py",
        "test_failing_group.py",
        "test_teams.py",
        "test_tenant_admission.py",
        "test_tenants_apart.py",
        "test_torchx_teams.py",
        "test_put_file.py",
        "test_torchx_native.py",
    ),
    "recovery-and-queues": (
        "test_recovery.py",
        "test_queues.py",
    ),
    "dra": ("test_dra.py", "test_dra_device_taints.py"),
    # Real pods (tests/cluster/real_nodes.py): a kubelet, containerd and runc beside kwok's nodes.
    # `make test` runs this list in a pass of its own, after the others (REAL_NODES_TESTS): its
    # module cordons kwok's system nodes, applies the default plan on a control plane no other plan
    # has changed (the static FSx PersistentVolumes' specs differ between plans and are immutable),
    # and its containers' start-up is CPU the other lists do not wait on.
    # test_file_server.py mounts a root-squashing NFS server through FUSE relays (nfs_server.py).
    # test_network_policy.py adds a real Trainium node and asks kube-router, the real nodes'
    # NetworkPolicy enforcer, what the platform's policies admit.
    # test_devices.py adds a real Trainium node with the fake device plugin (issue 35 item 3).
    # test_run_pods.py starts CoreDNS, moves the team's etcd onto the real system node and runs the
    # rendered run's pod script through a retry on the real Trainium node; then rolls the team's etcd
    # from the template of the probes before their fix to the current one.
    # test_canary_pods.py runs `make canary`'s entry point against test_devices.py's node, with the
    # team's etcd test_run_pods.py moved onto the real system node (alone, it does both itself).
    # test_dra_pods.py adds a real Trainium node of a `devices: dra` group with the DRA kubelet
    # plugin stand-ins (issue 35 item 3, the DRA half): its pod gets the node's devices through its
    # ResourceClaim, the kubelet's NodePrepareResources and containerd's CDI.
    "real-nodes": (
        "test_real_nodes.py",
        "test_network_policy.py",
        "test_file_server.py",
        "test_devices.py",
        "test_run_pods.py",
        "test_canary_pods.py",
        "test_dra_pods.py",
    ),
}
_ORDER = {
    module: (group, index) for group, modules in WORKERS.items() for index, module in enumerate(modules)
}


class _WorkerLists(LoadFileScheduling):
    """`--dist loadfile`, with a WORKERS list for a unit. (pytest-xdist's own `loadgroup` marks do
    nothing under pytest 9, which keeps a test's id where xdist 3.8 no longer writes its group.)"""

    def _split_scope(self, nodeid: str) -> str:
        module = Path(nodeid.split("::", 1)[0]).name
        return _ORDER[module][0] if module in _ORDER else super()._split_scope(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> _WorkerLists | None:
    return _WorkerLists(config, log) if config.getvalue("dist") == "loadfile" else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    place: dict[int, tuple[str, int]] = {}
    for item in items:
        path = Path(str(item.fspath))
        if not path.is_relative_to(CLUSTER_DIR):
            continue
        if path.name not in _ORDER:
            raise pytest.UsageError(f"tests/cluster/conftest.py: add {path.name} to one list of WORKERS")
        place[id(item)] = _ORDER[path.name]
        item.add_marker(pytest.mark.cluster)
        item.add_marker(pytest.mark.slow)
    # sorted is stable: each module's tests keep their order; the modules take the order above.
    slots = iter(sorted((item for item in items if id(item) in place), key=lambda item: place[id(item)]))
    items[:] = [next(slots) if id(item) in place else item for item in items]


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
