"""The gang watchdog cordons exactly the idle nodes that stall a partly placeable gang, and lifts its cordon.

cluster_programs/gang_watchdog.py runs as a process, with the arguments of the rendered
Deployment and ``--once``, against a small Kubernetes API on loopback that serves recorded
PodGroups, pods and nodes, applies the program's merge patches (resourceVersion precondition
included) and judges every node update with the rendered ValidatingAdmissionPolicy
(tests/admission.py), as the watchdog's service account: what the policy allows is what the
program really sends.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import (
    GANG_WATCHDOG_ANNOTATION,
    INSTANCE_TYPE_LABEL,
    NEURON_TAINT_KEY,
    NODE_GROUP_LABEL,
)
from k8s_charts.checks.gang_watchdog import (
    NAME,
    GangWatchdogAdmissionChart,
    GangWatchdogChart,
    GangWatchdogValues,
)
from tests.admission import Decision, admission_request, admit
from tests.conftest import REPO_ROOT
from tests.k8s_charts.manifests import Manifest, only, pod_spec, synth
from tests.k8s_validation import assert_valid
from tests.pod_programs import program
from tests.stand_in_api import json_api

PROGRAM = REPO_ROOT / "cluster_programs" / "gang_watchdog.py"
PLATFORM = "trainium-system"
TEAMS = ("training", "research")
GROUPS = ("trn1", "trn2")
THRESHOLD_MINUTES = 15
WATCHDOG = f"system:serviceaccount:{PLATFORM}:{NAME}"
TOKEN = "watchdog-token"
NEURON_TAINT = {"key": NEURON_TAINT_KEY, "value": "present", "effect": "NoSchedule"}


def ago(minutes: float) -> str:
    """A timestamp ``minutes`` before now (the program reads its own clock a moment later)."""
    return (datetime.now(UTC) - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


VALUES = GangWatchdogValues(namespaces=TEAMS, node_groups=GROUPS, threshold_minutes=THRESHOLD_MINUTES)


@cache
def chart() -> list[Manifest]:
    manifests = synth(
        lambda app: GangWatchdogChart(
            app, "watchdog", values=VALUES, namespace=PLATFORM, vpc_cidr="10.0.0.0/16"
        )
    )
    assert_valid(manifests)
    return manifests


@cache
def policy() -> list[Manifest]:
    manifests = synth(
        lambda app: GangWatchdogAdmissionChart(app, "admission", namespace=PLATFORM, node_groups=GROUPS)
    )
    assert_valid(manifests)
    # The node policy; the chart's second one (gang-watchdog-runs) judges only Volcano objects.
    return [m for m in manifests if m["metadata"]["name"] == NAME]


def rendered_arguments() -> list[str]:
    [container] = pod_spec(only(chart(), "Deployment"))["containers"]
    return list(container["args"])


# --- Recorded objects ----------------------------------------------------------------------------------


def node(
    name: str,
    *,
    group: str = "trn1",
    instance_type: str = "trn1.32xlarge",
    age_minutes: float = 120,
    cordoned: bool = False,
    mark: str | None = None,
    ready: bool = True,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "resourceVersion": "100",
        "creationTimestamp": ago(age_minutes),
        "labels": {NODE_GROUP_LABEL: group, INSTANCE_TYPE_LABEL: instance_type},
    }
    if mark is not None:
        metadata["annotations"] = {GANG_WATCHDOG_ANNOTATION: mark}
    spec: dict[str, Any] = {"providerID": f"aws:///us-west-2d/i-{name}", "taints": [NEURON_TAINT]}
    if cordoned:
        spec["unschedulable"] = True
        # What the node lifecycle controller adds to a cordoned node.
        spec["taints"].append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": spec,
        "status": {
            "allocatable": {
                "aws.amazon.com/neuron": "16",
                "vpc.amazonaws.com/efa": "8",
                "cpu": "127900m",
                "memory": "500Gi",
                "pods": "250",
            },
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def training_pod(
    name: str,
    *,
    gang: str = "bert",
    namespace: str = "training",
    node_name: str | None = None,
    reason: str | None = "Unschedulable",
    minutes: float = 30,
    node_selector: dict[str, str] | None = None,
    phase: str | None = None,
) -> dict[str, Any]:
    """A Volcano job's pod: pending with ``reason`` for ``minutes``, or bound to ``node_name``."""
    conditions = []
    if node_name is None and reason is not None:
        conditions.append(
            {"type": "PodScheduled", "status": "False", "reason": reason, "lastTransitionTime": ago(minutes)}
        )
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"scheduling.k8s.io/group-name": gang},
            "ownerReferences": [{"kind": "Job", "name": gang, "controller": True}],
        },
        "spec": {
            **({"nodeName": node_name} if node_name else {}),
            "nodeSelector": node_selector if node_selector is not None else {NODE_GROUP_LABEL: "trn1"},
            # What EKS's ExtendedResourceToleration adds for a pod that asks for Neuron devices.
            "tolerations": [{"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "worker",
                    "resources": {
                        "limits": {"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "8"},
                        "requests": {"cpu": "112", "memory": "448Gi"},
                    },
                }
            ],
        },
        "status": {"phase": phase or ("Running" if node_name else "Pending"), "conditions": conditions},
    }


def daemon_pod(name: str, node_name: str, *, namespace: str = "kube-system") -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{name}-{node_name}",
            "namespace": namespace,
            "ownerReferences": [{"kind": "DaemonSet", "name": name, "controller": True}],
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": name, "resources": {"requests": {"cpu": "100m", "memory": "200Mi"}}}],
        },
        "status": {"phase": "Running"},
    }


def mirror_pod(name: str, node_name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{name}-{node_name}",
            "namespace": "kube-system",
            "annotations": {"kubernetes.io/config.mirror": "abc"},
        },
        "spec": {"nodeName": node_name, "containers": [{"name": name}]},
        "status": {"phase": "Running"},
    }


def podgroup(
    name: str = "bert",
    *,
    namespace: str = "training",
    phase: str = "Inqueue",
    min_member: int = 2,
    unschedulable_minutes: float | None = 30,
) -> dict[str, Any]:
    conditions = []
    if unschedulable_minutes is not None:
        conditions.append(
            {
                "type": "Unschedulable",
                "status": "True",
                "reason": "NotEnoughResources",
                "message": f"1/{min_member} tasks in gang unschedulable: pod group is not ready",
                "lastTransitionTime": ago(unschedulable_minutes),
            }
        )
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member, "queue": "test"},
        "status": {"phase": phase, "conditions": conditions},
    }


def stalled_gang(*, minutes: float = 30, selector: dict[str, str] | None = None) -> dict[str, Any]:
    """The #3976 signature: 2 pods, one placeable ('Schedulable'), one not, for ``minutes``."""
    return {
        "podgroups": [podgroup(unschedulable_minutes=minutes)],
        "pods": [
            training_pod("bert-worker-0", reason="Schedulable", minutes=minutes, node_selector=selector),
            training_pod("bert-worker-1", reason="Unschedulable", minutes=minutes, node_selector=selector),
        ],
    }


# --- The API server stand-in ------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _selects(selector: str, labels: dict[str, str]) -> bool:
    """The one label selector form the program sends: ``key in (a,b)``."""
    key, _, values = selector.partition(" in ")
    return labels.get(key) in values.strip("()").split(",")


METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def list_answer(kind: str, items: list[dict[str, Any]], accept: str) -> tuple[int, Any]:
    """A list as the API server answers it: with ``Accept`` METADATA_LIST, each item's metadata alone
    (a PartialObjectMetadataList, apimachinery meta.k8s.io/v1)."""
    if accept == METADATA_LIST:
        partial = [
            {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": i["metadata"]}
            for i in items
        ]
        return 200, {"kind": "PartialObjectMetadataList", "metadata": {}, "items": copy.deepcopy(partial)}
    assert accept == "application/json", accept
    return 200, {"kind": kind, "metadata": {}, "items": copy.deepcopy(items)}


def pod_list_namespace(path: str, query: Mapping[str, str]) -> str | None:
    """The namespace of a list of unfinished pods (``''``: every namespace), None for any other path."""
    parts = path.strip("/").split("/")
    if parts == ["api", "v1", "pods"]:
        namespace = ""
    elif len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
        namespace = parts[3]
    else:
        return None
    assert query["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"
    return namespace


def unfinished(pods: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if p["status"].get("phase") not in ("Succeeded", "Failed")
        and namespace in ("", p["metadata"].get("namespace"))
    ]


@dataclass
class FakeApi:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    podgroups: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    """Path prefix -> how many requests to it answer 500."""
    conflicts: int = 0
    patches: list[tuple[str, Any]] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    """Every request, ``METHOD path``."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def load(
        self,
        *,
        nodes: list[dict[str, Any]] = (),
        pods: list[dict[str, Any]] = (),
        podgroups: list[dict[str, Any]] = (),
    ) -> None:  # type: ignore[assignment]
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.pods = list(pods)
        self.podgroups = list(podgroups)

    def handle(  # noqa: PLR0911 (one per route)
        self, method: str, url: str, body: Any, accept: str = "application/json"
    ) -> tuple[int, Any]:
        with self.lock:
            parsed = urllib.parse.urlsplit(url)
            query = dict(urllib.parse.parse_qsl(parsed.query))
            self.requests.append(f"{method} {parsed.path}")
            for prefix, count in self.failures.items():
                if parsed.path.startswith(prefix) and count > 0:
                    self.failures[prefix] = count - 1
                    return 500, {"kind": "Status", "code": 500, "message": "etcdserver: request timed out"}
            parts = parsed.path.strip("/").split("/")
            if method == "GET" and parsed.path == "/api/v1/nodes":
                items = [
                    n
                    for n in self.nodes.values()
                    if _selects(query["labelSelector"], n["metadata"]["labels"])
                ]
                return list_answer("NodeList", items, accept)
            namespace = pod_list_namespace(parsed.path, query) if method == "GET" else None
            if namespace is not None:
                return list_answer("PodList", unfinished(self.pods, namespace), accept)
            if (
                method == "GET"
                and parts[:3] == ["apis", "scheduling.volcano.sh", "v1beta1"]
                and parts[-1] == "podgroups"
            ):
                namespace = parts[4]
                items = [g for g in self.podgroups if g["metadata"]["namespace"] == namespace]
                return 200, {"kind": "PodGroupList", "metadata": {}, "items": copy.deepcopy(items)}
            if (
                method == "GET"
                and parts[:3] == ["apis", "batch.volcano.sh", "v1alpha1"]
                and parts[-1] == "jobs"
            ):
                # The stuck-run guard's list (tests/cluster_programs/test_stuck_runs.py judges runs).
                return 200, {"kind": "JobList", "metadata": {}, "items": []}
            if method == "PATCH" and parts[:3] == ["api", "v1", "nodes"] and parts[3] in self.nodes:
                return self._patch(parts[3], body)
            return 404, {"kind": "Status", "code": 404}

    def _patch(self, name: str, body: Any) -> tuple[int, Any]:
        self.patches.append((name, body))
        current = self.nodes[name]
        if self.conflicts:
            self.conflicts -= 1
            current["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
        updated = merge_patch(copy.deepcopy(current), body)
        updated["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
        decision = admit(
            policy(),
            admission_request(user=WATCHDOG, operation="UPDATE", resource="nodes", name=name, kind="Node"),
            obj=updated,
            old=current,
        )
        self.decisions.append(decision)
        if not decision.allowed:
            return 403, {"kind": "Status", "code": 403, "message": "; ".join(decision.messages)}
        self.nodes[name] = updated
        return 200, updated


@pytest.fixture
def api() -> Iterator[tuple[FakeApi, str]]:
    state = FakeApi()

    def answer(method: str, path: str, headers: Mapping[str, str], body: Any) -> tuple[int, Any]:
        if headers["Authorization"] != f"Bearer {TOKEN}":
            return 401, {"kind": "Status", "code": 401}
        if body is not None:
            assert headers["Content-Type"] == "application/merge-patch+json"
        return state.handle(method, path, body, headers.get("Accept", ""))

    with json_api(answer) as url:
        yield state, url


def api_environment(url: str, tmp_path: Path) -> dict[str, str]:
    """The program's environment against a stand-in API at ``url``: its token written in ``tmp_path``."""
    token = tmp_path / "token"
    token.write_text(f"{TOKEN}\n")
    return {
        "PATH": os.environ.get("PATH", ""),
        "KUBE_API_URL": url,
        "KUBE_API_TOKEN_FILE": str(token),
        "KUBE_API_CA_FILE": str(tmp_path / "no-ca.crt"),
    }


@pytest.fixture
def environment(api: tuple[FakeApi, str], tmp_path: Path) -> dict[str, str]:
    return api_environment(api[1], tmp_path)


def run_once(environment: dict[str, str]) -> tuple[int, str]:
    """The program, one pass, with the rendered Deployment's arguments."""
    done = subprocess.run(
        [sys.executable, str(PROGRAM), *rendered_arguments(), "--once"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stderr == "", done.stderr
    return done.returncode, done.stdout


def cordoned_for(state: FakeApi, name: str) -> str | None:
    """The gang a node is cordoned for by the watchdog; '' when cordoned without the mark; None when not."""
    current = state.nodes[name]
    if not current["spec"].get("unschedulable"):
        assert GANG_WATCHDOG_ANNOTATION not in (current["metadata"].get("annotations") or {})
        return None
    return (current["metadata"].get("annotations") or {}).get(GANG_WATCHDOG_ANNOTATION, "")


# --- Cordoning ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "residents",
    [
        pytest.param([], id="nothing"),
        pytest.param(
            [daemon_pod("neuron-device-plugin", "n1"), daemon_pod("aws-node", "n1")], id="daemonsets"
        ),
        pytest.param([mirror_pod("kube-proxy", "n1")], id="mirror-pod"),
    ],
)
@pytest.mark.process
def test_a_stalled_gangs_idle_node_is_cordoned_with_the_mark(
    api: tuple[FakeApi, str], environment: dict[str, str], residents: list[dict[str, Any]]
) -> None:
    state, _ = api
    gang = stalled_gang()
    state.load(nodes=[node("n1")], pods=[*gang["pods"], *residents], podgroups=gang["podgroups"])
    status, output = run_once(environment)
    assert status == 0, output
    assert cordoned_for(state, "n1") == "training/bert"
    assert [decision.allowed for decision in state.decisions] == [True]
    assert "node n1: cordoned for gang training/bert: stalled 30m, 1 idle nodes for 2 pods" in output
    # A second pass changes nothing: the gang is still waiting and the cordon stays.
    state.patches.clear()
    status, output = run_once(environment)
    assert (status, state.patches) == (0, []), output
    assert cordoned_for(state, "n1") == "training/bert"


@pytest.mark.process
def test_a_gang_stalled_for_less_than_the_threshold_is_left_alone(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    gang = stalled_gang(minutes=THRESHOLD_MINUTES - 5)
    state.load(nodes=[node("n1")], pods=gang["pods"], podgroups=gang["podgroups"])
    status, output = run_once(environment)
    assert (status, state.patches) == (0, []), output
    assert "gang training/bert: 1 of 2 pods placeable but not the gang, for 10m; waiting until 15m" in output


@pytest.mark.process
def test_the_podgroups_recent_change_counts_not_only_the_pods_age(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    """The pods have waited an hour, but the gang's state changed 5 minutes ago (a node joined)."""
    state, _ = api
    gang = stalled_gang(minutes=60)
    gang["podgroups"] = [podgroup(unschedulable_minutes=5)]
    state.load(nodes=[node("n1")], pods=gang["pods"], podgroups=gang["podgroups"])
    status, output = run_once(environment)
    assert (status, state.patches) == (0, []), output


@pytest.mark.process
def test_a_node_younger_than_the_threshold_is_left_alone(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    gang = stalled_gang()
    state.load(nodes=[node("n1", age_minutes=5)], pods=gang["pods"], podgroups=gang["podgroups"])
    status, output = run_once(environment)
    assert (status, state.patches) == (0, []), output
    assert "node n1: left alone for gang training/bert: joined 5m ago" in output


def small_pod(name: str, node_name: str) -> dict[str, Any]:
    """A pod of a ReplicaSet that takes little of the node (the node would still hold a gang pod)."""
    return {
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "ownerReferences": [{"kind": "ReplicaSet", "name": "coredns-5d7f", "controller": True}],
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
        },
        "status": {"phase": "Running"},
    }


@pytest.mark.parametrize(
    "resident",
    [
        pytest.param(training_pod("other-worker-0", gang="other", node_name="n1"), id="training-pod"),
        pytest.param(small_pod("coredns-5d7f-x2x9z", "n1"), id="small-replicaset-pod"),
    ],
)
@pytest.mark.process
def test_a_node_running_a_pod_other_than_a_daemonsets_is_never_cordoned(
    api: tuple[FakeApi, str], environment: dict[str, str], resident: dict[str, Any]
) -> None:
    state, _ = api
    gang = stalled_gang()
    state.load(
        nodes=[node("n1"), node("n2")],
        pods=[*gang["pods"], resident, daemon_pod("aws-node", "n2")],
        podgroups=[*gang["podgroups"], podgroup("other", phase="Running", unschedulable_minutes=None)],
    )
    status, output = run_once(environment)
    assert status == 0, output
    assert [name for name, _ in state.patches] == ["n2"]
    assert cordoned_for(state, "n1") is None and cordoned_for(state, "n2") == "training/bert"


@pytest.mark.process
def test_a_node_someone_cordoned_is_never_touched(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    gang = stalled_gang()
    state.load(nodes=[node("n1", cordoned=True)], pods=gang["pods"], podgroups=gang["podgroups"])
    status, output = run_once(environment)
    assert (status, state.patches) == (0, []), output
    assert cordoned_for(state, "n1") == ""
    assert "no idle node of its groups to cordon" in output


@pytest.mark.process
def test_a_node_that_is_not_ready_is_left_alone(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    gang = stalled_gang()
    state.load(nodes=[node("n1", ready=False)], pods=gang["pods"], podgroups=gang["podgroups"])
    status, output = run_once(environment)
    assert (status, state.patches) == (0, []), output


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param({NODE_GROUP_LABEL: "trn2"}, id="another-group"),
        pytest.param({INSTANCE_TYPE_LABEL: "trn1n.32xlarge"}, id="another-instance-type"),
    ],
)
@pytest.mark.process
def test_a_node_the_gang_cannot_use_is_left_alone(
    api: tuple[FakeApi, str], environment: dict[str, str], selector: dict[str, str]
) -> None:
    state, _ = api
    gang = stalled_gang(selector=selector)
    state.load(nodes=[node("n1")], pods=gang["pods"], podgroups=gang["podgroups"])
    status, output = run_once(environment)
    assert (status, state.patches) == (0, []), output


@pytest.mark.process
def test_the_instance_type_selector_of_the_nodes_own_type_cordons_it(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    gang = stalled_gang(selector={INSTANCE_TYPE_LABEL: "trn1.32xlarge"})
    state.load(nodes=[node("n1")], pods=gang["pods"], podgroups=gang["podgroups"])
    status, output = run_once(environment)
    assert status == 0, output
    assert cordoned_for(state, "n1") == "training/bert"


@pytest.mark.process
def test_a_node_of_a_group_not_watched_is_never_listed_or_touched(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    gang = stalled_gang(selector={INSTANCE_TYPE_LABEL: "m6i.2xlarge"})
    state.load(
        nodes=[node("system-1", group="system", instance_type="m6i.2xlarge")],
        pods=gang["pods"],
        podgroups=gang["podgroups"],
    )
    status, output = run_once(environment)
    assert (status, state.patches) == (0, []), output


@pytest.mark.process
def test_a_gang_with_enough_idle_nodes_is_not_a_missing_node_stall(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    gang = stalled_gang()
    state.load(nodes=[node("n1"), node("n2")], pods=gang["pods"], podgroups=gang["podgroups"])
    status, output = run_once(environment)
    assert (status, state.patches) == (0, []), output
    assert "with 2 idle nodes for 2 pods: not a missing-node stall, nothing cordoned" in output


@pytest.mark.parametrize(
    "gang",
    [
        pytest.param(
            {
                "podgroups": [podgroup(phase="Pending", unschedulable_minutes=30)],
                "pods": [training_pod("bert-worker-0"), training_pod("bert-worker-1")],
            },
            id="all-unschedulable",
        ),
        pytest.param(
            {
                "podgroups": [podgroup(phase="Running", unschedulable_minutes=None)],
                "pods": [training_pod("bert-worker-0", node_name="n9")],
            },
            id="running",
        ),
    ],
)
@pytest.mark.process
def test_a_gang_without_the_signature_cordons_nothing(
    api: tuple[FakeApi, str], environment: dict[str, str], gang: dict[str, Any]
) -> None:
    state, _ = api
    state.load(nodes=[node("n1")], pods=gang["pods"], podgroups=gang["podgroups"])
    status, output = run_once(environment)
    assert (status, state.patches, output) == (0, [], "")


# --- Lifting the cordon ---------------------------------------------------------------------------------------


@pytest.mark.process
def test_the_cordon_stays_while_the_gang_still_waits(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    """After the cordon every pod is Unschedulable and the autoscaler works: lifting it would recreate the stall."""
    state, _ = api
    state.load(
        nodes=[node("n1", cordoned=True, mark="training/bert")],
        pods=[training_pod("bert-worker-0"), training_pod("bert-worker-1")],
        podgroups=[podgroup()],
    )
    status, output = run_once(environment)
    assert (status, state.patches, output) == (0, [], "")


@pytest.mark.parametrize(
    ("podgroups", "pods"),
    [
        pytest.param(
            [podgroup(phase="Running", unschedulable_minutes=None)],
            [training_pod("bert-worker-0", node_name="n7"), training_pod("bert-worker-1", node_name="n8")],
            id="runs-elsewhere",
        ),
        pytest.param([], [], id="deleted"),
        pytest.param(
            [podgroup(phase="Completed", unschedulable_minutes=None)],
            [training_pod("bert-worker-0", node_name="n7", phase="Succeeded")],
            id="completed",
        ),
    ],
)
@pytest.mark.process
def test_the_cordon_is_lifted_once_no_waiting_gang_can_use_the_node(
    api: tuple[FakeApi, str], environment: dict[str, str], podgroups: list[Any], pods: list[Any]
) -> None:
    state, _ = api
    state.load(
        nodes=[node("n1", cordoned=True, mark="training/bert"), node("n2", cordoned=True)],
        pods=pods,
        podgroups=podgroups,
    )
    status, output = run_once(environment)
    assert status == 0, output
    assert cordoned_for(state, "n1") is None
    assert cordoned_for(state, "n2") == ""  # someone else's cordon
    assert [name for name, _ in state.patches] == ["n1"]
    assert [decision.allowed for decision in state.decisions] == [True]
    assert (
        "node n1: uncordoned: no waiting gang can use it (gang training/bert runs, ended or is gone)"
        in output
    )


@pytest.mark.process
def test_the_cordon_is_lifted_when_the_new_nodes_and_the_cordoned_ones_hold_the_gang(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    """max_size = the gang: the autoscaler could add only one node beside the cordoned one."""
    state, _ = api
    state.load(
        nodes=[node("n1", cordoned=True, mark="training/bert"), node("n2", age_minutes=2)],
        pods=[
            training_pod("bert-worker-0", reason="Schedulable"),
            training_pod("bert-worker-1"),
            daemon_pod("aws-node", "n2"),
        ],
        podgroups=[podgroup()],
    )
    status, output = run_once(environment)
    assert status == 0, output
    assert cordoned_for(state, "n1") is None and cordoned_for(state, "n2") is None
    assert "node n1: uncordoned: gang training/bert (2 pods) now has 2 idle nodes" in output


@pytest.mark.process
def test_a_mark_left_on_a_node_someone_uncordoned_is_removed(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    state.load(nodes=[node("n1", mark="training/bert")], pods=[], podgroups=[])
    status, output = run_once(environment)
    assert status == 0, output
    assert GANG_WATCHDOG_ANNOTATION not in (state.nodes["n1"]["metadata"].get("annotations") or {})


@pytest.mark.process
def test_a_cordon_kept_for_another_waiting_gang_names_that_gang(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    state.load(
        nodes=[node("n1", cordoned=True, mark="training/bert")],
        pods=[
            training_pod("llm-0", gang="llm", namespace="research"),
            training_pod("llm-1", gang="llm", namespace="research"),
        ],
        podgroups=[podgroup("llm", namespace="research")],
    )
    status, output = run_once(environment)
    assert status == 0, output
    assert cordoned_for(state, "n1") == "research/llm"


# --- Failures --------------------------------------------------------------------------------------------------


@pytest.mark.process
def test_an_api_error_is_logged_and_the_pass_fails_without_a_change(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    gang = stalled_gang()
    state.load(nodes=[node("n1")], pods=gang["pods"], podgroups=gang["podgroups"])
    state.failures["/apis/scheduling.volcano.sh/"] = 1
    status, output = run_once(environment)
    assert (status, state.patches) == (1, []), output
    assert output.startswith("error: GET /apis/scheduling.volcano.sh/v1beta1/namespaces/training/podgroups")
    assert "HTTP 500" in output and output.rstrip().endswith("retrying next pass")


@pytest.mark.process
def test_a_node_changed_in_between_is_not_patched_over(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    gang = stalled_gang()
    state.load(nodes=[node("n1")], pods=gang["pods"], podgroups=gang["podgroups"])
    state.conflicts = 1
    status, output = run_once(environment)
    assert status == 1, output
    assert cordoned_for(state, "n1") is None
    assert "node n1: NOT changed" in output and "HTTP 409" in output
    # The next pass reads the node again and cordons it.
    status, output = run_once(environment)
    assert status == 0 and cordoned_for(state, "n1") == "training/bert", output


@pytest.mark.process
def test_the_loop_retries_after_an_error_and_then_acts(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    gang = stalled_gang()
    state.load(nodes=[node("n1")], pods=gang["pods"], podgroups=gang["podgroups"])
    state.failures["/api/v1/nodes"] = 2
    arguments = [a for a in rendered_arguments() if not a.startswith("--interval-seconds")]
    process = subprocess.Popen(
        [sys.executable, str(PROGRAM), *arguments, "--interval-seconds=0.2"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and cordoned_for(state, "n1") is None:
            time.sleep(0.1)
    finally:
        process.terminate()
        output, errors = process.communicate(timeout=10)
    assert cordoned_for(state, "n1") == "training/bert", output + errors
    lines = output.splitlines()
    assert lines[0].startswith(
        "gang watchdog: namespaces training,research, node groups trn1,trn2, threshold 15m"
    )
    assert [line for line in lines if line.startswith("error:")][:2] == [lines[1], lines[2]]
    assert "HTTP 500" in lines[1]


@pytest.mark.process
def test_a_missing_token_fails_the_pass(api: tuple[FakeApi, str], environment: dict[str, str]) -> None:
    status, output = run_once({**environment, "KUBE_API_TOKEN_FILE": "/nonexistent/token"})
    assert status == 1
    assert output.startswith("error: no service-account token")


# --- The program's reading of quantities (the pods' requests against the nodes' allocatable) ----------------------


def test_quantities_are_read_as_kubernetes_writes_them() -> None:
    parse = program("gang_watchdog").parse_quantity
    assert parse("100m") == pytest.approx(0.1)
    assert parse("448Gi") == 448 * 2**30
    assert parse("16") == 16
    assert parse("1e3") == 1000
    assert parse("2k") == 2000
    with pytest.raises(ValueError, match="is not a resource quantity"):
        parse("12 apples")


@pytest.mark.process
def test_a_node_without_room_for_the_pod_is_left_alone(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    gang = stalled_gang()
    small = node("n1")
    small["status"]["allocatable"]["aws.amazon.com/neuron"] = "0"  # the device plugin has not reported yet
    state.load(nodes=[small], pods=gang["pods"], podgroups=gang["podgroups"])
    status, output = run_once(environment)
    assert (status, state.patches) == (0, []), output


@pytest.mark.process
def test_an_object_it_cannot_read_fails_the_pass_without_a_change(
    api: tuple[FakeApi, str], environment: dict[str, str]
) -> None:
    state, _ = api
    gang = stalled_gang()
    odd = node("n1")
    odd["status"]["allocatable"]["cpu"] = "many"
    state.load(nodes=[odd], pods=gang["pods"], podgroups=gang["podgroups"])
    status, output = run_once(environment)
    assert (status, state.patches) == (1, []), output
    assert output.startswith(
        "error: unreadable object in the API's answer (ValueError(\"'many' is not a resource quantity\""
    )


# --- Tenants: a gang acts only on its own team's groups ---------------------------------------------------

TEAM_OWNED = GangWatchdogValues(
    namespaces=TEAMS,
    node_groups=GROUPS,
    threshold_minutes=THRESHOLD_MINUTES,
    team_node_groups={"training": ("trn1",), "research": ("trn2",)},
)


def team_owned_arguments() -> list[str]:
    manifests = synth(
        lambda app: GangWatchdogChart(
            app, "watchdog", values=TEAM_OWNED, namespace=PLATFORM, vpc_cidr="10.0.0.0/16"
        )
    )
    [container] = pod_spec(only(manifests, "Deployment"))["containers"]
    return list(container["args"])


def research_gang_on(group: str) -> dict[str, Any]:
    """A stalled gang of team research whose pods select ``group``."""
    selector = {NODE_GROUP_LABEL: group}
    return {
        "podgroups": [podgroup(namespace="research")],
        "pods": [
            training_pod("bert-worker-0", namespace="research", reason="Schedulable", node_selector=selector),
            training_pod(
                "bert-worker-1", namespace="research", reason="Unschedulable", node_selector=selector
            ),
        ],
    }


def test_the_rendered_watchdog_names_each_teams_groups() -> None:
    assert [a for a in team_owned_arguments() if a.startswith("--team=")] == [
        "--team=training=trn1",
        "--team=research=trn2",
    ]


@pytest.mark.process
@pytest.mark.parametrize("group, cordoned", [("trn1", None), ("trn2", "research/bert")])
def test_a_team_member_cannot_make_the_watchdog_cordon_another_teams_nodes(
    api: tuple[FakeApi, str], environment: dict[str, str], group: str, cordoned: str | None
) -> None:
    """A research gang that selects training's group trn1 (which admission refuses; here as if it had
    got through) and can never fit: the watchdog leaves trn1's warm node alone. On its own group it
    acts as before."""
    state, _ = api
    gang = research_gang_on(group)
    state.load(nodes=[node("n1", group=group)], pods=gang["pods"], podgroups=gang["podgroups"])
    done = subprocess.run(
        [sys.executable, str(PROGRAM), *team_owned_arguments(), "--once"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert cordoned_for(state, "n1") == cordoned, done.stdout
    if cordoned is None:
        assert state.patches == []
        assert "gang research/bert: stalled 30m; no idle node of its groups to cordon" in done.stdout


@pytest.mark.process
def test_a_namespace_without_its_groups_named_stops_the_program(environment: dict[str, str]) -> None:
    arguments = [a for a in team_owned_arguments() if a != "--team=research=trn2"]
    done = subprocess.run(
        [sys.executable, str(PROGRAM), *arguments, "--once"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (2, "error: no --team names the node groups of research")


def test_the_values_give_every_namespace_some_of_the_groups() -> None:
    for team_node_groups in ({"training": ("trn1",)}, {"training": ("trn1",), "research": ("trn9",)}):
        with pytest.raises(ValueError, match="team_node_groups"):
            GangWatchdogValues(
                namespaces=TEAMS, node_groups=GROUPS, threshold_minutes=1, team_node_groups=team_node_groups
            )
