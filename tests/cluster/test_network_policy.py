"""The platform's NetworkPolicies enforced by a real enforcer: kube-router's network policy controller
on the real nodes (tests/cluster/real_nodes.py), judging real connections between containers.

Two real nodes: the system node of test_real_nodes.py and a Trainium node of the group ``trn1-32xl``
(its labels and the Neuron taint as the group registers it; no Neuron devices, and not the node
check's startup taint: no node check runs here). The policies are the plan's own, as rendered:

- team A is ``training``, the default plan's team: its pods are a Volcano Job's, placed by Volcano
  on the real Trainium node through the team's admission policies (the one change to the rendered
  run's Job: a busybox container that listens, in place of the training image's program); its
  "etcd" is a Job whose pods carry etcd's labels and listen on etcd's ports;
- team B is ``research``, the example plan's second team: its Namespace (without the
  ``trainium/team`` label: the default plan's admission policies name only ``training``, and
  admission is not what this module asks) and its NetworkPolicies as the example plan renders them;
  its pods are created here on the real system node with the labels its etcd and Volcano's job
  controller give them;
- pods of ``default``, a namespace no policy selects (the cluster's own components on EKS);
- TensorBoard's pod and the gang watchdog's in ``trainium-system``: the watchdog's Deployment as
  rendered; TensorBoard's pod template as rendered (its command, arguments, environment, probes,
  security context, supplemental group, mounts), running the real TensorBoard from its image's
  stand-in (tests/cluster/standin_images.py ``tensorboard_image``: TensorBoard as
  requirements-tensorboard.lock pins it, beside this machine's Python) over a run directory with a
  real event file. The changes to the rendered pod: a Pod of its own on the real system node (not
  the Deployment's, which is scaled to 0 for the module so the Service's one endpoint is this pod;
  kwok's pod of it has no address a connection reaches), no grace period, and its ``data`` claim
  bound to a hostPath PersistentVolume (a directory of the test laid out as on FSx: the team's
  directory 2750, owned by the team's uid) in place of the FSx claim, which no real node mounts.

The addresses outside the cluster are listeners of the test on the node network's bridge (the real
instance metadata address, and a public address standing for the internet); the API server is
reached by pods at an address inside the default configuration's VPC on 443, as on EKS
(``API_ENDPOINT``). Every check asserts both ways: what a policy admits connects, what it does not
is refused (kube-router rejects), each next to a connection that shows the listener is there.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from cluster_facts.kubernetes_names import (
    ETCD_CLIENT_PORT,
    ETCD_LABELS,
    ETCD_PEER_PORT,
    PLATFORM_NAMESPACE,
    TEAMS_DIR,
    TRAINING_NAMESPACE,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_JOB_NAMESPACE_LABEL,
)
from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet
from config import StackConfig, load_config
from k8s_charts.checks import gang_watchdog
from k8s_charts.runs.tensorboard import PORT as TENSORBOARD_PORT
from k8s_charts.runs.tensorboard import TENSORBOARD_LABELS, TENSORBOARD_NAME
from operator_tools.canary import _RUNS_PATH, TENSORBOARD_PROXY
from tests.cluster.control_plane import SERVICE_CIDR, ControlPlane
from tests.cluster.netns import connect_in
from tests.cluster.nodes import group_nodes, system_nodes
from tests.cluster.processes import StartupError
from tests.cluster.real_nodes import (
    API_ENDPOINT,
    METADATA_ADDRESS,
    NODE_GATEWAY,
    OUTSIDE_ADDRESS,
    RealNode,
    RealNodes,
)
from tests.cluster.standin_images import busybox_image, python_image, tensorboard_image, tensorboard_packages
from tests.cluster.test_real_nodes import (
    REAL_NODE,
    _host_path_claim,
    _image,
    _pod_on_real_node,
    _rendered,
    _rendered_in_step,
    _selector,
)
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
from tests.plans import shared_review_plan

TEAM_A, TEAM_B = TRAINING_NAMESPACE, "research"
GROUP = "trn1-32xl"
REAL_TRAINIUM = "real-trn1-32xl-0"
NEURON_TAINT = "aws.amazon.com/neuron"
PROBE_PORT = 8080
"""Where the team pods that stand for workers listen (any port: a worker admits only its own job)."""
_KUBELET_OWN = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch")
KUBERNETES_SERVICE = str(ipaddress.ip_network(SERVICE_CIDR)[1])
"""The ``kubernetes`` Service's ClusterIP (the range's first address, as on EKS)."""
_SETTLE_SECONDS = 90
"""How long a check may wait for kube-router's first sync after a pod or policy change."""
TENSORBOARD_POD = "tensorboard"
TENSORBOARD_CLAIM = "tensorboard-data"
RUN_ID = "bert-large-0a1b2c"
"""The run whose event file TensorBoard reads (``<team>/runs/<run id>/neuron_tblogs_.../``)."""
_TENSORBOARD_READY_SECONDS = 180
"""TensorBoard up within this (the rendered startup probe allows 300 s; here it answers in seconds)."""


class Pod(NamedTuple):
    namespace: str
    name: str
    ip: str
    node: str


@dataclass
class Policed:
    plane: ControlPlane
    nodes: RealNodes
    pods: dict[str, Pod]


class Case(NamedTuple):
    source: str
    """A key of ``Policed.pods``."""
    host: str
    """A key of ``Policed.pods`` or an address."""
    port: int
    opens: bool


@functools.cache
def _busybox_name() -> str:
    """The name the platform's Jobs pull busybox's stand-in by (the pull-through cache's, as the
    default plan renders it: test_real_nodes.py imports it under that name too)."""
    plan = shared_review_plan(load_config(DEFAULT_CONFIG))
    return _image(_rendered_in_step(plan, "fsx-layout", "Job"))


# ----- the pods -----------------------------------------------------------------------------------


def _listening(ports: Sequence[int]) -> list[str]:
    listeners = "".join(f"nc -ll -p {port} -e true & " for port in ports)
    return ["sh", "-c", f"{listeners}exec sleep 86400"]


def _container(ports: Sequence[int]) -> dict[str, Any]:
    return {
        "name": "probe",
        "image": _busybox_name(),
        "imagePullPolicy": "IfNotPresent",
        "command": _listening(ports),
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
    }


def _bare_pod(namespace: str, name: str, labels: dict[str, str], ports: Sequence[int]) -> dict[str, Any]:
    """A pod on the real system node, restricted as the team namespaces' Pod Security requires."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "nodeName": REAL_NODE,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [_container(ports)],
        },
    }


def _probe_job(
    plan: KubernetesLayerPlan, name: str, labels: dict[str, str] | None, ports: Sequence[int]
) -> dict[str, Any]:
    """The rendered run's Volcano Job under ``name`` (its queue, priority, plugins, node selector,
    tolerations and security context), one pod on the real Trainium node that listens on ``ports``."""
    step = plan.step("run-bert-large")
    assert isinstance(step, ManifestSet)
    (job,) = [copy.deepcopy(dict(m)) for m in step.manifests if m["kind"] == "Job"]
    job["metadata"] = {
        "name": name,
        "namespace": job["metadata"]["namespace"],
        "labels": {"app.kubernetes.io/name": name},
    }
    (task,) = job["spec"]["tasks"][:1]
    template = task["template"]
    if labels is not None:
        template["metadata"]["labels"] = dict(labels)
    spec = template["spec"]
    spec.pop("volumes", None)
    spec.pop("initContainers", None)
    spec["nodeSelector"] = {**spec["nodeSelector"], "kubernetes.io/hostname": REAL_TRAINIUM}
    spec["terminationGracePeriodSeconds"] = 0
    spec["containers"] = [_container(ports)]
    job["spec"]["tasks"] = [
        {**task, "name": "worker", "replicas": 1, "minAvailable": 1, "template": template}
    ]
    job["spec"]["minAvailable"] = 1
    return job


def _team_b_objects() -> list[dict[str, Any]]:
    """research's Namespace (without the team label) and NetworkPolicies, as the example plan renders them."""
    plan = shared_review_plan(load_config(EXAMPLE_CONFIG))
    found = []
    for step in plan.manifest_sets():
        for manifest in step.manifests:
            if manifest["kind"] == "Namespace" and manifest["metadata"]["name"] == TEAM_B:
                namespace = copy.deepcopy(dict(manifest))
                namespace["metadata"]["labels"].pop("trainium/team", None)
                found.insert(0, namespace)
            elif manifest["kind"] == "NetworkPolicy" and manifest["metadata"].get("namespace") == TEAM_B:
                found.append(dict(manifest))
    assert {m["metadata"]["name"] for m in found if m["kind"] == "NetworkPolicy"} == {
        "default-deny",
        "volcano-job-pods",
        "etcd-server",
    }, found
    return found


def _tensorboard_pod(plan: KubernetesLayerPlan, claim: str) -> dict[str, Any]:
    """TensorBoard's pod as its Deployment renders it, on the real system node, its ``data`` volume
    from ``claim`` (the module's docstring lists the changes)."""
    deployment = _rendered(plan, "Deployment", TENSORBOARD_NAME)
    template = copy.deepcopy(deployment["spec"]["template"])
    spec = template["spec"]
    spec["nodeName"] = REAL_NODE
    spec["terminationGracePeriodSeconds"] = 0
    (data,) = (v for v in spec["volumes"] if v["name"] == "data")
    data["persistentVolumeClaim"]["claimName"] = claim
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": TENSORBOARD_POD,
            "namespace": deployment["metadata"]["namespace"],
            "labels": template["metadata"]["labels"],
        },
        "spec": spec,
    }


_WRITE_EVENTS = """
import sys, time
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

writer = EventFileWriter(sys.argv[1])
for step in range(3):
    value = summary_pb2.Summary.Value(tag="loss", simple_value=2.0 / (step + 1))
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value])))
writer.close()
"""


def _file_system(root: Path, plan: KubernetesLayerPlan) -> Path:
    """``root`` laid out as the fsx-layout Job leaves FSx (``teams/<team>`` 2750, owned by the team's
    uid and gid) with one run of team A's as its pods leave it: a ``neuron_tblogs_...`` directory
    holding an event file written by TensorBoard's own writer, the team's files group-readable only.
    TensorBoard reads it through its supplemental groups (the teams' gids), as on FSx."""
    layout = _rendered_in_step(plan, "fsx-layout", "Job")["spec"]["template"]["spec"]["containers"][0]
    uids = {team: int(uid) for team, uid in (entry.split(":") for entry in layout["args"])}
    team = root / TEAMS_DIR / TEAM_A
    logs = team / "runs" / RUN_ID / "neuron_tblogs_20261129T100000_bs16"
    logs.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-c", _WRITE_EVENTS, str(logs)],
        env={"PYTHONPATH": str(tensorboard_packages()), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        timeout=60,
    )
    (root / TEAMS_DIR).chmod(0o755)
    for path in [team, *team.rglob("*")]:
        shutil.chown(path, uids[TEAM_A], uids[TEAM_A])
        path.chmod(0o2750 if path.is_dir() else 0o640)
    return root


def _running(plane: ControlPlane, namespace: str, selector: list[str]) -> list[dict[str, Any]] | None:
    pods = plane.kubectl.json("get", "pods", "-n", namespace, *selector)["items"]
    live = [p for p in pods if "deletionTimestamp" not in p["metadata"]]
    if live and all(p["status"].get("phase") == "Running" and p["status"].get("podIP") for p in live):
        return live
    return None


def _pod(found: dict[str, Any]) -> Pod:
    return Pod(
        found["metadata"]["namespace"],
        found["metadata"]["name"],
        found["status"]["podIP"],
        found["spec"]["nodeName"],
    )


def _start_nodes(plane: ControlPlane, config: StackConfig, plan: KubernetesLayerPlan) -> RealNodes:
    """The real system node (test_real_nodes.py's, or the same started here), the real Trainium
    node, and the listeners outside the cluster."""
    nodes = plane.real_nodes
    tensorboard = tensorboard_image(_image(_rendered(plan, "Deployment", TENSORBOARD_NAME)))
    if REAL_NODE not in nodes.nodes:
        template = system_nodes(config)[0]["metadata"]["labels"]
        watchdog = _rendered(plan, "Deployment", gang_watchdog.NAME)
        nodes.add_node(
            REAL_NODE,
            labels={k: v for k, v in template.items() if k not in _KUBELET_OWN},
            images=[python_image(_image(watchdog)), busybox_image(_busybox_name()), tensorboard],
        )
    else:
        nodes.import_images(nodes.nodes[REAL_NODE], [tensorboard])
    trainium = group_nodes(config, GROUP, [REAL_TRAINIUM])[0]
    nodes.add_node(
        REAL_TRAINIUM,
        labels={k: v for k, v in trainium["metadata"]["labels"].items() if k not in _KUBELET_OWN},
        taints=[t for t in trainium["spec"]["taints"] if t["key"] == NEURON_TAINT],
        images=[busybox_image(_busybox_name())],
    )
    for address in (METADATA_ADDRESS, OUTSIDE_ADDRESS):
        for port in (80, 443):
            nodes.listen(address, port)
    return nodes


def _bare_pods(plan: KubernetesLayerPlan, tensorboard_claim: str) -> dict[str, dict[str, Any]]:
    etcd_ports = (ETCD_CLIENT_PORT, ETCD_PEER_PORT)
    job_labels = {
        VOLCANO_JOB_NAME_LABEL: "llm",
        VOLCANO_JOB_NAMESPACE_LABEL: TEAM_B,
        "volcano.sh/task-spec": "worker",
    }
    return {
        "b-etcd-0": _bare_pod(TEAM_B, "etcd-server-0", dict(ETCD_LABELS), etcd_ports),
        "b-etcd-1": _bare_pod(TEAM_B, "etcd-server-1", dict(ETCD_LABELS), etcd_ports),
        "b-worker": _bare_pod(TEAM_B, "llm-worker-0", job_labels, (PROBE_PORT,)),
        "b-plain": _bare_pod(TEAM_B, "debug-shell", {}, (PROBE_PORT,)),
        "outsider": _bare_pod("default", "outsider", {}, (PROBE_PORT,)),
        "unpoliced-etcd": _bare_pod("default", "etcd-elsewhere", dict(ETCD_LABELS), etcd_ports),
        "tensorboard": _tensorboard_pod(plan, tensorboard_claim),
    }


def _scale(plane: ControlPlane, deployment: dict[str, Any], replicas: int) -> None:
    """The rendered Deployment at ``replicas``; at 0, once its pods are gone (the Service's
    endpoints then hold the module's TensorBoard pod alone: kwok's pod answers no connection)."""
    namespace, name = deployment["metadata"]["namespace"], deployment["metadata"]["name"]
    plane.kubectl("scale", "deployment", name, "-n", namespace, f"--replicas={replicas}")
    if replicas:
        return
    selector = ",".join(f"{k}={v}" for k, v in TENSORBOARD_LABELS.items())

    def gone() -> bool:
        pods = plane.kubectl.json("get", "pods", "-n", namespace, "-l", selector)["items"]
        return not [p for p in pods if p["metadata"]["name"] != TENSORBOARD_POD]

    plane.wait_for(gone, timeout=60, what=f"the Deployment {name}'s pods gone")


def _wait_running(plane: ControlPlane, namespace: str, selector: list[str], what: str) -> Pod:
    (found,) = plane.wait_for(
        functools.partial(_running, plane, namespace, selector), timeout=180, what=f"{what} Running"
    )
    return _pod(found)


def _wait_enforced(nodes: RealNodes, pod: Pod) -> None:
    nodes.plane.wait_for(
        functools.partial(nodes.enforcing, nodes.nodes[pod.node], pod.namespace, pod.name),
        timeout=_SETTLE_SECONDS,
        what=f"kube-router's chain for {pod.namespace}/{pod.name}",
    )


@pytest.fixture(scope="module")
def policed(
    control_plane: ControlPlane, default_config: StackConfig, default_plan: KubernetesLayerPlan
) -> Iterator[Policed]:
    control_plane.apply_plan(default_plan)
    nodes = _start_nodes(control_plane, default_config, default_plan)
    control_plane.create(_team_b_objects())
    data = _file_system(nodes.nodes[REAL_NODE].directory / "tensorboard-fsx", default_plan)
    claim = _host_path_claim(control_plane, PLATFORM_NAMESPACE, TENSORBOARD_CLAIM, data)
    deployment = _rendered(default_plan, "Deployment", TENSORBOARD_NAME)
    _scale(control_plane, deployment, 0)
    bare = _bare_pods(default_plan, claim)
    control_plane.create(bare.values())
    etcd_ports = (ETCD_CLIENT_PORT, ETCD_PEER_PORT)
    jobs = {
        "a-worker": _probe_job(default_plan, "netpol-client", None, (PROBE_PORT,)),
        "a-etcd": _probe_job(default_plan, "netpol-etcd", dict(ETCD_LABELS), etcd_ports),
    }
    control_plane.create(jobs.values())
    pods: dict[str, Pod] = {}
    for key, manifest in bare.items():
        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        selector = ["--field-selector", f"metadata.name={name}"]
        pods[key] = _wait_running(control_plane, namespace, selector, f"the pod {namespace}/{name}")
    for key, job in jobs.items():
        name = job["metadata"]["name"]
        selector = ["-l", f"{VOLCANO_JOB_NAME_LABEL}={name}"]
        pods[key] = _wait_running(control_plane, TEAM_A, selector, f"the Volcano Job {name}'s pod")
        assert pods[key].node == REAL_TRAINIUM, pods[key]
    for pod in pods.values():
        if pod.namespace != "default":
            _wait_enforced(nodes, pod)
    try:
        yield Policed(control_plane, nodes, pods)
    finally:
        kubectl = functools.partial(control_plane.kubectl, check=False)
        kubectl(
            "delete", "jobs.batch.volcano.sh", *(j["metadata"]["name"] for j in jobs.values()), "-n", TEAM_A
        )
        kubectl("delete", "namespace", TEAM_B, "--wait=false")
        kubectl("delete", "pods", "-n", "default", "outsider", "etcd-elsewhere", "--wait=false")
        kubectl("delete", "pod", "-n", PLATFORM_NAMESPACE, TENSORBOARD_POD, "--wait=true", "--timeout=60s")
        kubectl("delete", "pvc", "-n", PLATFORM_NAMESPACE, claim, "--wait=false")
        kubectl("delete", "pv", f"{PLATFORM_NAMESPACE}-{claim}", "--wait=false")
        _scale(control_plane, deployment, deployment["spec"].get("replicas", 1))


# ----- connections --------------------------------------------------------------------------------


def _opens(policed: Policed, source: str, host: str, port: int) -> bool:
    """Whether a TCP connection from the pod ``source`` to ``host:port`` is accepted (busybox nc:
    exit 0 once connected; refused, rejected or 3 s without an answer: 1)."""
    pod = policed.pods[source]
    address = policed.pods[host].ip if host in policed.pods else host
    result = policed.plane.kubectl(
        "exec", "-n", pod.namespace, pod.name, "--", "sh", "-c",
        f"nc -w 3 {address} {port} </dev/null >/dev/null 2>&1; echo $?",
    )  # fmt: skip
    return result.stdout.strip() == "0"


def _expect(policed: Policed, cases: Sequence[Case]) -> None:
    """Every case as expected, within ``_SETTLE_SECONDS`` (kube-router applies a change on its next
    sync); then all of them once more together, as they stay."""
    deadline = time.monotonic() + _SETTLE_SECONDS
    pending = list(cases)
    while pending and time.monotonic() < deadline:
        pending = [c for c in pending if _opens(policed, c.source, c.host, c.port) != c.opens]
        if pending:
            time.sleep(1)
    wrong = [c for c in cases if _opens(policed, c.source, c.host, c.port) != c.opens]
    assert not wrong, "\n".join(
        f"{c.source} -> {c.host}:{c.port} {'refused' if c.opens else 'connected'}, expected the opposite"
        for c in wrong
    )


def _from_node(policed: Policed, node: RealNode, pod: str, port: int) -> bool:
    try:
        connect_in(node.namespace.path, policed.pods[pod].ip, port, timeout=3).close()
    except OSError:
        return False
    return True


# ----- the tests ----------------------------------------------------------------------------------


def test_a_team_pod_cannot_open_a_connection_to_another_teams_etcd(policed: Policed) -> None:
    """Team A's job pod reaches its own etcd and team B's job pod reaches B's etcd; A's pod is refused
    at B's etcd both by A's egress (its own namespace's etcd only) and by B's etcd's ingress (its own
    namespace's job pods only), each shown alone. With the isolation removed (both namespaces'
    policies deleted) the same connection opens: the refusal is the policies', not the network's;
    put back, it is refused again."""
    isolated = [
        Case("a-worker", "a-etcd", ETCD_CLIENT_PORT, opens=True),
        Case("b-worker", "b-etcd-0", ETCD_CLIENT_PORT, opens=True),
        Case("a-worker", "b-etcd-0", ETCD_CLIENT_PORT, opens=False),
        Case("a-worker", "b-etcd-0", ETCD_PEER_PORT, opens=False),
        Case("b-worker", "a-etcd", ETCD_CLIENT_PORT, opens=False),
        # B's etcd's ingress alone: a pod whose namespace has no egress policy.
        Case("outsider", "unpoliced-etcd", ETCD_CLIENT_PORT, opens=True),
        Case("outsider", "b-etcd-0", ETCD_CLIENT_PORT, opens=False),
        # A's egress alone: an etcd-labelled pod in a namespace with no policy.
        Case("a-worker", "unpoliced-etcd", ETCD_CLIENT_PORT, opens=False),
    ]
    _expect(policed, isolated)

    plane = policed.plane
    policies = {
        TEAM_A: plane.kubectl.json("get", "networkpolicies", "-n", TEAM_A)["items"],
        TEAM_B: plane.kubectl.json("get", "networkpolicies", "-n", TEAM_B)["items"],
    }
    for namespace in policies:
        plane.kubectl("delete", "networkpolicies", "--all", "-n", namespace)
    try:
        _expect(policed, [Case("a-worker", "b-etcd-0", ETCD_CLIENT_PORT, opens=True)])
    finally:
        for items in policies.values():
            for item in items:
                kept = ("name", "namespace", "labels", "annotations", "ownerReferences")
                item["metadata"] = {k: v for k, v in item["metadata"].items() if k in kept}
            plane.kubectl(
                "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
            )
    _expect(policed, isolated)


def test_a_team_namespace_denies_by_default(policed: Policed) -> None:
    """In team B's namespace, a pod no policy but ``default-deny`` selects reaches nothing and is
    reached by no pod; its own node reaches it (NetworkPolicy never judges a pod's node: the kubelet's
    probes). In team A's, a job's pod is reached by no other pod of the namespace (not even another
    of its jobs'), and reaches the internet on 443 only."""
    _expect(
        policed,
        [
            Case("outsider", OUTSIDE_ADDRESS, 443, opens=True),
            Case("outsider", "unpoliced-etcd", ETCD_CLIENT_PORT, opens=True),
            Case("b-plain", OUTSIDE_ADDRESS, 443, opens=False),
            Case("b-plain", "unpoliced-etcd", ETCD_CLIENT_PORT, opens=False),
            Case("outsider", "b-plain", PROBE_PORT, opens=False),
            Case("b-worker", "b-plain", PROBE_PORT, opens=False),
            Case("a-worker", OUTSIDE_ADDRESS, 443, opens=True),
            Case("a-worker", OUTSIDE_ADDRESS, 80, opens=False),
            Case("a-etcd", "a-worker", PROBE_PORT, opens=False),
            Case("outsider", "a-worker", PROBE_PORT, opens=False),
            Case("b-worker", "a-worker", PROBE_PORT, opens=False),
            Case("a-worker", "b-worker", PROBE_PORT, opens=False),
        ],
    )
    system, trainium = policed.nodes.nodes[REAL_NODE], policed.nodes.nodes[REAL_TRAINIUM]
    assert _from_node(policed, system, "b-plain", PROBE_PORT)
    assert _from_node(policed, system, "b-worker", PROBE_PORT)
    assert _from_node(policed, trainium, "a-worker", PROBE_PORT)


def _tensorboard_status(plane: ControlPlane) -> dict[str, Any]:
    pod = plane.kubectl.json("get", "pod", "-n", PLATFORM_NAMESPACE, TENSORBOARD_POD)
    (status,) = pod["status"].get("containerStatuses") or [{}]
    return dict(status)


def _tensorboard_ready(plane: ControlPlane, restarts: int) -> dict[str, Any] | None:
    """TensorBoard's container status once it has restarted ``restarts`` times and is Ready."""
    status = _tensorboard_status(plane)
    if status.get("restartCount", 0) >= restarts and status.get("ready"):
        return status
    return None


def _wait_tensorboard_ready(plane: ControlPlane, restarts: int, what: str) -> dict[str, Any]:
    """``_tensorboard_ready``'s status, or a failure that says how TensorBoard's last start ended
    (its container's state and its log: a start that needed the network says so there)."""
    try:
        found: dict[str, Any] = plane.wait_for(
            functools.partial(_tensorboard_ready, plane, restarts),
            timeout=_TENSORBOARD_READY_SECONDS,
            what=what,
        )
    except StartupError as error:
        status = _tensorboard_status(plane)
        ended = plane.kubectl("logs", "--previous", "-n", PLATFORM_NAMESPACE, TENSORBOARD_POD, check=False)
        raise AssertionError(
            f"{what}: not within {_TENSORBOARD_READY_SECONDS} s; restarts {status.get('restartCount')},"
            f" last state {json.dumps(status.get('lastState'))}; its last start's log:\n"
            f"{(ended.stdout + ended.stderr)[-2000:]}"
        ) from error
    return found


def _run_list(plane: ControlPlane) -> list[str]:
    """TensorBoard's run list as the canary reads it: through the API server's service proxy
    (operator_tools/canary.py ``TENSORBOARD_PROXY``, ``_RUNS_PATH``)."""
    answer = plane.kubectl(
        "get",
        "--raw",
        f"/api/v1/namespaces/{PLATFORM_NAMESPACE}/services/{TENSORBOARD_PROXY}/proxy/{_RUNS_PATH}",
    )
    runs = json.loads(answer.stdout)
    assert isinstance(runs, list), answer.stdout
    return [str(run) for run in runs]


def test_tensorboard_starts_with_all_egress_denied_and_becomes_ready(policed: Policed) -> None:
    """The real TensorBoard, from its rendered command in its image's stand-in, starts with its
    namespace's egress denied and becomes Ready by its own probes: it needs nothing from the network.
    The policies selecting its pod deny all egress (the namespace's ``default-deny``; its own
    admits ingress only), and kube-router enforces them before the start that counts: the container
    is killed once its pod's chain is in place (a first start may run before kube-router has the
    pod's address, as on any new pod) and the kubelet's restart must come up Ready again. A
    TensorBoard that installs or fetches anything at start (an earlier audit found one running
    ``pip install``) crash-loops here and this fails. The pod is the Deployment's template as
    rendered but for what the module's docstring lists, and why: a Pod of its own on the real node
    (the Deployment at 0, so the Service's one endpoint is it) and a hostPath claim for FSx's."""
    plane, pod = policed.plane, policed.pods["tensorboard"]
    first = _wait_tensorboard_ready(plane, 0, "TensorBoard Ready")
    policies = plane.kubectl.json("get", "networkpolicies", "-n", PLATFORM_NAMESPACE)["items"]
    selecting = [
        p for p in policies
        if all(TENSORBOARD_LABELS.get(k) == v for k, v in p["spec"]["podSelector"].get("matchLabels", {}).items())
        and not p["spec"]["podSelector"].get("matchExpressions")
    ]  # fmt: skip
    egress = [p for p in selecting if "Egress" in p["spec"].get("policyTypes", [])]
    assert egress, [p["metadata"]["name"] for p in selecting]
    assert all(not p["spec"].get("egress") for p in egress), egress
    _expect(
        policed,
        [
            Case("outsider", OUTSIDE_ADDRESS, 443, opens=True),
            Case("tensorboard", OUTSIDE_ADDRESS, 443, opens=False),
        ],
    )
    container = first["containerID"].split("://", 1)[1]
    node = policed.nodes.nodes[pod.node]
    node.ctr(policed.nodes.binaries, "tasks", "kill", "--signal", "SIGKILL", container)
    again = _wait_tensorboard_ready(
        plane, first.get("restartCount", 0) + 1, "TensorBoard restarted with its egress denied, Ready again"
    )
    assert again["containerID"] != first["containerID"], again
    log = plane.kubectl("logs", "-n", PLATFORM_NAMESPACE, TENSORBOARD_POD).stdout
    assert f"TensorBoard {_tensorboard_version()} at http://" in log, log
    assert (
        plane.kubectl.json("get", "pod", "-n", PLATFORM_NAMESPACE, TENSORBOARD_POD)["status"]["podIP"]
        == pod.ip
    )
    _expect(policed, [Case("tensorboard", OUTSIDE_ADDRESS, 443, opens=False)])


def _tensorboard_version() -> str:
    (found,) = tensorboard_packages().glob("tensorboard-*.dist-info")
    return found.name.removeprefix("tensorboard-").removesuffix(".dist-info")


def test_tensorboards_run_list_through_the_api_servers_service_proxy_names_the_run(policed: Policed) -> None:
    """What the canary reads (``services/tensorboard:6006/proxy/data/runs``) names the run whose
    event file is in the team's directory: the API server reaches the pod through the Service and
    TensorBoard's policy, and TensorBoard read the team's 2750 directory through its supplemental
    group, from the read-only claim at its rendered logdir."""
    plane = policed.plane
    _wait_tensorboard_ready(plane, 0, "TensorBoard Ready")
    endpoints = plane.kubectl.json(
        "get",
        "endpointslices",
        "-n",
        PLATFORM_NAMESPACE,
        "-l",
        f"kubernetes.io/service-name={TENSORBOARD_NAME}",
    )["items"]
    addresses = {a for e in endpoints for point in e.get("endpoints") or [] for a in point["addresses"]}
    assert addresses == {policed.pods["tensorboard"].ip}, addresses
    found: list[str] = []

    def listed() -> bool:
        found[:] = _run_list(plane)
        return any(RUN_ID in run for run in found)

    plane.wait_for(listed, timeout=90, what=f"TensorBoard's run list naming {RUN_ID}")
    (run,) = found
    assert run.startswith(f"{TEAM_A}/runs/{RUN_ID}/neuron_tblogs_"), found


def test_tensorboard_is_reached_only_through_the_api_servers_proxy_and_reaches_nothing(
    policed: Policed,
) -> None:
    """TensorBoard's policy admits TCP 6006 from the VPC only: the API server's service proxy (it
    dials from ``API_ENDPOINT``, inside the VPC, as EKS's interfaces do) gets TensorBoard's answer;
    the same port from the node network's gateway (outside the VPC) and from a pod is refused. Its
    namespace denies all egress: here nothing reaches out (the internet, the metadata service,
    DNS's port)."""
    pod = policed.pods["tensorboard"]
    _wait_tensorboard_ready(policed.plane, 0, "TensorBoard Ready")
    assert isinstance(_run_list(policed.plane), list)
    with pytest.raises(OSError):
        connect_in(
            policed.nodes.network.path, pod.ip, TENSORBOARD_PORT, timeout=3, source=NODE_GATEWAY
        ).close()
    connect_in(policed.nodes.network.path, pod.ip, TENSORBOARD_PORT, timeout=3, source=API_ENDPOINT).close()
    _expect(
        policed,
        [
            Case("outsider", OUTSIDE_ADDRESS, 443, opens=True),
            Case("outsider", METADATA_ADDRESS, 80, opens=True),
            Case("tensorboard", OUTSIDE_ADDRESS, 443, opens=False),
            Case("tensorboard", METADATA_ADDRESS, 80, opens=False),
            Case("tensorboard", "unpoliced-etcd", ETCD_CLIENT_PORT, opens=False),
            Case("outsider", "tensorboard", TENSORBOARD_PORT, opens=False),
            Case("a-worker", "tensorboard", TENSORBOARD_PORT, opens=False),
        ],
    )


@pytest.fixture(scope="module")
def watchdog(
    policed: Policed, default_config: StackConfig, default_plan: KubernetesLayerPlan
) -> Iterator[str]:
    """The gang watchdog's pod on the real system node (kwok's system nodes cordoned meanwhile)."""
    plane = policed.plane
    kwok_system = [n["metadata"]["name"] for n in system_nodes(default_config)]
    for name in kwok_system:
        plane.kubectl("cordon", name)
    plane.processes.stop("gang-watchdog")
    try:
        deployment = _rendered(default_plan, "Deployment", gang_watchdog.NAME)
        found = _pod_on_real_node(plane, deployment["metadata"]["namespace"], _selector(deployment))
        policed.pods["watchdog"] = _pod(found)
        _wait_enforced(policed.nodes, policed.pods["watchdog"])
        yield "watchdog"
    finally:
        for name in kwok_system:
            plane.kubectl("uncordon", name, check=False)
        plane.start_watchdog()


def test_the_platforms_egress_reaches_what_it_needs_and_never_the_metadata_service(
    policed: Policed, watchdog: str
) -> None:
    """The watchdog reaches the API server through the ``kubernetes`` Service (its policy's rule for
    the API server's endpoints in the VPC on 443: kube-router judges the address kube-proxy
    translated to) and nothing else; etcd members reach each other on both ports and nothing
    outside; a team's job pod reaches the internet on 443 but not the instance metadata service on
    80 or 443, which a pod of an unpoliced namespace does reach here (the listener is there)."""
    _expect(
        policed,
        [
            Case(watchdog, KUBERNETES_SERVICE, 443, opens=True),
            Case("outsider", METADATA_ADDRESS, 80, opens=True),
            Case("outsider", METADATA_ADDRESS, 443, opens=True),
            Case("outsider", OUTSIDE_ADDRESS, 443, opens=True),
            Case(watchdog, METADATA_ADDRESS, 80, opens=False),
            Case(watchdog, OUTSIDE_ADDRESS, 443, opens=False),
            Case(watchdog, "unpoliced-etcd", ETCD_CLIENT_PORT, opens=False),
            Case("b-etcd-0", "b-etcd-1", ETCD_PEER_PORT, opens=True),
            Case("b-etcd-1", "b-etcd-0", ETCD_CLIENT_PORT, opens=True),
            Case("b-etcd-0", OUTSIDE_ADDRESS, 443, opens=False),
            Case("b-etcd-0", METADATA_ADDRESS, 80, opens=False),
            Case("b-etcd-0", "b-worker", PROBE_PORT, opens=False),
            Case("a-worker", OUTSIDE_ADDRESS, 443, opens=True),
            Case("a-worker", METADATA_ADDRESS, 80, opens=False),
            Case("a-worker", METADATA_ADDRESS, 443, opens=False),
            Case("b-worker", METADATA_ADDRESS, 443, opens=False),
        ],
    )
