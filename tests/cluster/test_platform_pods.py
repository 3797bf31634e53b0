"""The platform's pods where the real control plane decides: a team's etcd members and their
disruption budget, and the platform namespaces' defaults for a container that declares nothing.

- The StatefulSet controller makes the team's three etcd members (through the team namespace's
  admission policy, which leaves the platform's pods to it) and the scheduler spreads them over the
  system nodes: never all three on one.
- A drain takes one member at a time: with every system node cordoned, as ``kubectl drain`` leaves
  them, the eviction API grants one eviction and refuses the next ("would violate the pod's
  disruption budget") while the first's replacement cannot run; a member that is not ready may be
  evicted even then (``unhealthyPodEvictionPolicy: AlwaysAllow``), so a broken one never holds a
  drain; after the nodes are uncordoned, the members are back and the budget allows one again.
- A container without requests or limits in volcano-system or trainium-system is stored with the
  ``platform-defaults`` LimitRange's (the API server's LimitRanger).

What the members do when one is lost (their data, the runs' rendezvous) needs etcd and torchrun
running: tests/runtime/test_etcd_members.py. Who may reach them: tests/cluster/test_network_policy.py
(kube-router on the real nodes) and tests/k8s_charts/network/test_netpol.py (the VPC CNI's reading).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from cluster_facts.kubernetes_names import (
    ETCD_LABELS,
    ETCD_REPLICAS,
    ETCD_SERVICE_NAME,
    NODE_GROUP_LABEL,
    PLATFORM_NAMESPACE,
    TRAINING_NAMESPACE,
    system_node_group,
)
from config import StackConfig
from k8s_charts.plan import VOLCANO_NAMESPACE
from k8s_charts.shared.resources import CONTAINER_DEFAULTS
from tests.cluster.control_plane import ControlPlane
from tests.cluster.nodes import group_nodes
from tests.cluster.plans import deployed_plan

SELECTOR = ",".join(f"{key}={value}" for key, value in ETCD_LABELS.items())
GROUP = "trn1-32xl"


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, default_config: StackConfig) -> Iterator[ControlPlane]:
    control_plane.apply_plan(deployed_plan(default_config))
    # A Trainium node beside the system nodes: tainted, it is no place for a member.
    names = control_plane.add_nodes(group_nodes(default_config, GROUP, [f"{GROUP}-etcd-0"]))
    yield control_plane
    control_plane.remove_nodes(names)


def members(cluster: ControlPlane) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = cluster.kubectl.json(
        "get", "pods", "-n", TRAINING_NAMESPACE, "-l", SELECTOR
    )["items"]
    return [pod for pod in pods if "deletionTimestamp" not in pod["metadata"]]


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def all_ready(cluster: ControlPlane) -> list[dict[str, Any]] | None:
    found = members(cluster)
    return found if len(found) == ETCD_REPLICAS and all(ready(pod) for pod in found) else None


def budget_allows(cluster: ControlPlane, disruptions: int) -> bool:
    status = cluster.kubectl.json("get", "pdb", ETCD_SERVICE_NAME, "-n", TRAINING_NAMESPACE).get("status", {})
    return bool(status.get("disruptionsAllowed") == disruptions)


def evict(cluster: ControlPlane, pod: str) -> Any:
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": TRAINING_NAMESPACE},
    }
    return cluster.kubectl(
        "create", "--raw", f"/api/v1/namespaces/{TRAINING_NAMESPACE}/pods/{pod}/eviction", "-f", "-",
        input=json.dumps(eviction), check=False,
    )  # fmt: skip


def system_node_names(cluster: ControlPlane, config: StackConfig) -> list[str]:
    nodes = cluster.kubectl.json("get", "nodes", "-l", f"{NODE_GROUP_LABEL}={system_node_group(config.name)}")
    return [node["metadata"]["name"] for node in nodes["items"]]


def test_the_members_run_spread_over_the_system_nodes(
    cluster: ControlPlane, default_config: StackConfig
) -> None:
    pods = cluster.wait_for(lambda: all_ready(cluster), timeout=60, what="three ready etcd members")
    system = system_node_names(cluster, default_config)
    assert len(system) == default_config.system_nodes.desired_size == 2
    placed = Counter(pod["spec"]["nodeName"] for pod in pods)
    assert set(placed) <= set(system), placed
    # Two nodes for three members: two and one (maxSkew 1), never three on one.
    assert sorted(placed.values()) == [1, 2], placed
    owners = {ref["kind"] for pod in pods for ref in pod["metadata"]["ownerReferences"]}
    assert owners == {"StatefulSet"}


def test_a_drain_evicts_one_member_at_a_time_and_never_waits_on_a_broken_one(
    cluster: ControlPlane, default_config: StackConfig
) -> None:
    cluster.wait_for(lambda: all_ready(cluster), timeout=60, what="three ready etcd members")
    cluster.wait_for(lambda: budget_allows(cluster, 1), timeout=60, what="the budget allowing one eviction")
    system = system_node_names(cluster, default_config)
    for node in system:
        cluster.kubectl("cordon", node)
    try:
        first, second, third = (f"{ETCD_SERVICE_NAME}-{index}" for index in range(3))
        granted = evict(cluster, first)
        assert granted.returncode == 0, granted.stderr
        # Its replacement has no node to run on: two healthy members, no disruption left.
        cluster.wait_for(lambda: budget_allows(cluster, 0), timeout=60, what="the budget at zero")
        refused = evict(cluster, second)
        assert refused.returncode != 0
        assert "would violate the pod's disruption budget" in refused.stderr, refused.stderr

        # A member that is not ready: evicted even though the budget is short (AlwaysAllow).
        cluster.kubectl(
            "patch", "pod", second, "-n", TRAINING_NAMESPACE, "--subresource=status", "--type=strategic",
            "-p", json.dumps({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        )  # fmt: skip
        cluster.wait_for(
            lambda: (
                cluster.kubectl.json("get", "pdb", ETCD_SERVICE_NAME, "-n", TRAINING_NAMESPACE)["status"].get(
                    "currentHealthy"
                )
                == 1
            ),
            timeout=60,
            what="one healthy member",
        )
        broken = evict(cluster, second)
        assert broken.returncode == 0, broken.stderr
        last = evict(cluster, third)
        assert last.returncode != 0 and "disruption budget" in last.stderr, last.stderr
    finally:
        for node in system:
            cluster.kubectl("uncordon", node)
    cluster.wait_for(lambda: all_ready(cluster), timeout=120, what="the members back on the system nodes")
    cluster.wait_for(lambda: budget_allows(cluster, 1), timeout=60, what="the budget allowing one again")


@pytest.mark.parametrize("namespace", [VOLCANO_NAMESPACE, PLATFORM_NAMESPACE])
def test_a_platform_container_without_resources_gets_the_platform_defaults(
    cluster: ControlPlane, namespace: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "no-resources", "namespace": namespace},
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "c",
                    "image": "example.invalid/x:1",
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }
    stored = cluster.kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod), check=False
    )
    assert stored.returncode == 0, stored.stderr
    [container] = json.loads(stored.stdout)["spec"]["containers"]
    assert container["resources"] == {
        "requests": CONTAINER_DEFAULTS["defaultRequest"],
        "limits": CONTAINER_DEFAULTS["default"],
    }
