"""Devices through the kubelet's own path (issue 35 item 3): a real Trainium node of ``trn1-32xl``
(a kubelet, containerd and runc: tests/cluster/real_nodes.py) with the fake device plugin
(tools/cluster-binaries/fake-device-plugin, the stand-in for the Neuron and EFA device plugins).

The node registers as the group's nodes do (its labels, the Neuron taint and the node check's
startup taint: tests/cluster/nodes.py ``group_nodes``). The plugin registers every resource the
node template advertises (``aws.amazon.com/neuron``, ``aws.amazon.com/neuroncore``,
``vpc.amazonaws.com/efa``: cluster_facts.autoscaling, from the catalog) with the kubelet over its
device plugin socket; what the kubelet reports allocatable, what it allocates to a container and
what it refuses are the kubelet's decisions, and what a container finds in /dev is containerd's and
runc's. The device nodes are character devices no driver holds (``DEVICE_MAJOR``): a container finds
them, cannot use them.

The probing pods run in a namespace of the test, tolerating the node's two taints, as uid 65532
with nothing else: what they are asked is what the kubelet gave them. The canary's own device stages
(cluster_programs/canary_worker.py, ``check_neuron`` and ``check_efa``) judge the pod that holds the
whole node, as they judge a run's.

The node check runs as its DaemonSet's pod there (the default plan's), its container as rendered
(privileged, root, its program from its ConfigMap, its service account's token bound to the pod),
on the stand-in of its image (tests/cluster/standin_images.py ``node_check_image``: the Neuron and
EFA tools print a healthy trn1.32xlarge's outputs), behind kube-router enforcing its NetworkPolicy.
One change to the DaemonSet: ``LUSTRE_HOST`` is ``FILE_SYSTEM_ADDRESS`` (a listener of the test on
the Lustre port inside the VPC's range) in place of the file system's DNS name, which no resolver
here answers.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.instance_catalog import TrainiumInstanceType, instance_type
from cluster_facts.kubernetes_names import EFA_RESOURCE, NEURON_CORE_RESOURCE, NEURON_RESOURCE
from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from cluster_facts.node_check import (
    NODE_CHECK_CONDITION,
    NODE_CHECK_NAME,
    NODE_CHECK_NAMESPACE,
    NODE_CHECK_TAINT_KEY,
)
from config import StackConfig
from k8s_charts.checks.node_check import LUSTRE_PORT
from tests.cluster.control_plane import ControlPlane
from tests.cluster.nodes import group_nodes
from tests.cluster.real_nodes import DEVICE_MAJOR, FILE_SYSTEM_ADDRESS, RealNode, trainium_devices
from tests.cluster.standin_images import node_check_image, python_image
from tests.cluster.test_real_nodes import _rendered

GROUP = "trn1-32xl"
NODE = "real-trn1-32xl-devices"
NAMESPACE = "device-check"
_KUBELET_OWN = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch")
_PROGRAMS = Path(__file__).resolve().parents[2] / "cluster_programs"

# What a container finds: its devices (path -> major, minor), its variables and its device cgroup.
_PROBE = """
import glob, json, os, stat, sys
sys.path.insert(0, "/opt/probe")
if os.environ.get("CANARY_NEURON_DEVICES"):
    import canary_worker
    canary_worker.stage("neuron_devices", canary_worker.check_neuron)
    canary_worker.stage("efa_devices", canary_worker.check_efa)
devices = {}
for path in sorted(glob.glob("/dev/neuron*") + glob.glob("/dev/infiniband/*")):
    found = os.stat(path)
    devices[path] = [stat.S_ISCHR(found.st_mode), os.major(found.st_rdev), os.minor(found.st_rdev)]
variables = {k: v for k, v in os.environ.items() if k in ("AWS_NEURON_VISIBLE_DEVICES", "NEURON_RT_VISIBLE_CORES")}
try:
    with open("/sys/fs/cgroup/devices/devices.list") as rules:
        cgroup = rules.read().split("\\n")
except OSError as error:
    cgroup = [str(error)]
print("PROBE " + json.dumps({"devices": devices, "variables": variables, "cgroup": cgroup}), flush=True)
"""


def _instance(config: StackConfig) -> TrainiumInstanceType:
    return instance_type(config.node_group(GROUP).instance_type)


def _lustre_host(daemon_set: dict[str, Any]) -> str:
    (container,) = daemon_set["spec"]["template"]["spec"]["containers"]
    (value,) = [e["value"] for e in container["env"] if e["name"] == "LUSTRE_HOST"]
    return str(value)


def start_device_node(
    control_plane: ControlPlane,
    default_config: StackConfig,
    default_plan: KubernetesLayerPlan,
) -> tuple[RealNode, Callable[[], None]]:
    """The real Trainium node with the fake device plugin and the node check's DaemonSet pod on it
    (``LUSTRE_HOST`` the test's listener); what puts the DaemonSet back."""
    daemon_set = _rendered(default_plan, "DaemonSet", NODE_CHECK_NAME)
    (container,) = daemon_set["spec"]["template"]["spec"]["containers"]
    set_env = ["set", "env", f"daemonset/{NODE_CHECK_NAME}", "-n", NODE_CHECK_NAMESPACE]
    # Before the node registers, so the check's first pod on it already has the address.
    control_plane.kubectl(*set_env, f"LUSTRE_HOST={FILE_SYSTEM_ADDRESS}")
    control_plane.real_nodes.listen(FILE_SYSTEM_ADDRESS, LUSTRE_PORT)
    (template,) = group_nodes(default_config, GROUP, [NODE])
    node = control_plane.real_nodes.add_node(
        NODE,
        labels={k: v for k, v in template["metadata"]["labels"].items() if k not in _KUBELET_OWN},
        taints=template["spec"]["taints"],
        provider_id=f"aws:///{default_config.trainium.availability_zone}/i-0de71ce5000000000",
        images=[python_image(), node_check_image(container["image"])],
        devices=trainium_devices(_instance(default_config)),
    )

    def restore() -> None:
        control_plane.kubectl(*set_env, f"LUSTRE_HOST={_lustre_host(daemon_set)}", check=False)

    return node, restore


def probe_namespace(namespace: str) -> list[dict[str, Any]]:
    """``namespace`` and its ConfigMap ``probe``: the device probe and the canary's program, which the
    probe pods run."""
    probe = {"probe.py": _PROBE, "canary_worker.py": (_PROGRAMS / "canary_worker.py").read_text()}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "probe", "namespace": namespace},
            "data": probe,
        },
    ]


@pytest.fixture(scope="module")
def device_node(
    control_plane: ControlPlane, default_config: StackConfig, default_plan: KubernetesLayerPlan
) -> Iterator[RealNode]:
    control_plane.apply_plan(default_plan)
    node, restore = start_device_node(control_plane, default_config, default_plan)
    control_plane.create(probe_namespace(NAMESPACE))
    try:
        yield node
    finally:
        control_plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        restore()


def _container(name: str, requests: dict[str, int], env: dict[str, str] | None = None) -> dict[str, Any]:
    amounts = {resource: str(amount) for resource, amount in requests.items()}
    return {
        "name": name,
        "image": python_image().name,
        "imagePullPolicy": "Never",
        "command": ["python3", "/opt/probe/probe.py"],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "resources": {
            "requests": {"cpu": "10m", "memory": "32Mi", **amounts},
            "limits": {"memory": "128Mi", **amounts},
        },
        "volumeMounts": [{"name": "probe", "mountPath": "/opt/probe", "readOnly": True}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
    }


def _pod(name: str, containers: list[dict[str, Any]], *, bound: bool = False) -> dict[str, Any]:
    """A pod for the device node: placed by the scheduler, or with ``bound`` given to the kubelet
    directly (``nodeName``), so the kubelet's own admission decides."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"kubernetes.io/hostname": NODE},
        "tolerations": [
            {"key": NEURON_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
            {"key": NODE_CHECK_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
        ],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [{"name": "probe", "configMap": {"name": "probe"}}],
        "containers": containers,
    }
    if bound:
        spec["nodeName"] = NODE
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def _ended(control_plane: ControlPlane, name: str, timeout: float = 120) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        pod: dict[str, Any] = control_plane.kubectl.json("get", "pod", "-n", NAMESPACE, name)
        return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None

    found: dict[str, Any] = control_plane.wait_for(ended, timeout=timeout, what=f"the pod {name} ended")
    return found


def _probe(control_plane: ControlPlane, pod: dict[str, Any], container: str) -> tuple[dict[str, Any], str]:
    name = pod["metadata"]["name"]
    log = control_plane.kubectl("logs", "-n", NAMESPACE, name, "-c", container, check=False).stdout
    assert pod["status"]["phase"] == "Succeeded", f"{name}: {json.dumps(pod['status'])}\n{log}"
    (line,) = [line for line in log.splitlines() if line.startswith("PROBE ")]
    found: dict[str, Any] = json.loads(line.removeprefix("PROBE "))
    return found, log


def _host_nodes(node: RealNode) -> dict[str, tuple[int, int]]:
    """The plugin's device nodes on the node (container path -> major, minor)."""
    found = {}
    for path in node.device_nodes.rglob("*"):
        if path.is_char_device():
            device = path.stat().st_rdev
            found["/" + str(path.relative_to(node.device_nodes))] = (os.major(device), os.minor(device))
    return found


def _ids(value: str) -> list[int]:
    return sorted(int(i) for i in value.split(","))


def test_the_kubelet_reports_the_plugins_devices_allocatable(
    control_plane: ControlPlane, device_node: RealNode, default_config: StackConfig
) -> None:
    """Registered over the kubelet's socket, each resource is in the Node's capacity and allocatable
    as the kubelet writes them, with the node template's counts; the node's device nodes are
    character devices of ``DEVICE_MAJOR``."""
    instance = _instance(default_config)
    status = control_plane.kubectl.json("get", "node", NODE)["status"]
    expected = {
        NEURON_RESOURCE: str(instance.chips),
        NEURON_CORE_RESOURCE: str(instance.neuron_cores),
        EFA_RESOURCE: str(instance.efa_interfaces),
    }
    for field in ("capacity", "allocatable"):
        assert {k: status[field].get(k) for k in expected} == expected, status[field]
    nodes = _host_nodes(device_node)
    assert sorted(nodes) == sorted(
        [f"/dev/neuron{i}" for i in range(instance.chips)]
        + [f"/dev/infiniband/uverbs{i}" for i in range(instance.efa_interfaces)]
    ), nodes
    assert {major for major, _ in nodes.values()} == {DEVICE_MAJOR}
    # The kubelet listens for plugins in the node's own directory (its mount namespace), not in the
    # machine's /var/lib/kubelet/device-plugins, which every other real node's kubelet also uses.
    assert stat.S_ISSOCK((device_node.device_plugins / "kubelet.sock").stat().st_mode)


def test_a_pod_gets_its_devices_and_variables_through_allocate(
    control_plane: ControlPlane, device_node: RealNode, default_config: StackConfig
) -> None:
    """A run's container asks for every chip and every EFA interface (torchx_trn's requests): the
    canary's device stages pass in it (the catalog's counts in /dev), AWS_NEURON_VISIBLE_DEVICES
    names every chip, each device node is the node's (same major and minor) and runc allows exactly
    those in the container's device cgroup. Then a container asking for one chip finds that one and
    no other, and one asking for two NeuronCores finds the device nodes that hold them and
    NEURON_RT_VISIBLE_CORES naming them."""
    instance = _instance(default_config)
    host = _host_nodes(device_node)
    whole = _container(
        "run",
        {NEURON_RESOURCE: instance.chips, EFA_RESOURCE: instance.efa_interfaces},
        {
            "CANARY_NEURON_DEVICES": str(instance.chips),
            "CANARY_EFA_DEVICES": str(instance.efa_interfaces),
            # The run's own setting (the training image's launcher sets it): the stage checks it too.
            "FI_PROVIDER": "efa",
        },
    )
    control_plane.create([_pod("whole-node", [whole])])
    found, log = _probe(control_plane, _ended(control_plane, "whole-node"), "run")
    stages = {
        json.loads(line.removeprefix("CANARY "))["stage"]: line
        for line in log.splitlines()
        if line.startswith("CANARY ")
    }
    assert set(stages) == {"neuron_devices", "efa_devices"}, log
    assert all('"ok": true' in line for line in stages.values()), log
    assert _ids(found["variables"]["AWS_NEURON_VISIBLE_DEVICES"]) == list(range(instance.chips)), found
    assert {path: tuple(v[1:]) for path, v in found["devices"].items()} == host, found
    assert all(v[0] for v in found["devices"].values()), found
    for major, minor in host.values():
        assert f"c {major}:{minor} rw" in found["cgroup"], found["cgroup"]

    cores_per_chip = instance.neuron_cores // instance.chips
    parts = _pod(
        "parts",
        [_container("chip", {NEURON_RESOURCE: 1}), _container("cores", {NEURON_CORE_RESOURCE: 2})],
    )
    control_plane.create([parts])
    ended = _ended(control_plane, "parts")
    chip, _ = _probe(control_plane, ended, "chip")
    (index,) = _ids(chip["variables"]["AWS_NEURON_VISIBLE_DEVICES"])
    assert list(chip["devices"]) == [f"/dev/neuron{index}"], chip
    assert "NEURON_RT_VISIBLE_CORES" not in chip["variables"], chip
    cores, _ = _probe(control_plane, ended, "cores")
    held = _ids(cores["variables"]["NEURON_RT_VISIBLE_CORES"])
    assert len(held) == 2, cores
    assert sorted(cores["devices"]) == sorted({f"/dev/neuron{core // cores_per_chip}" for core in held}), (
        cores
    )
    assert not [path for path in cores["devices"] if "infiniband" in path], cores
    assert f"c {DEVICE_MAJOR}:{host[f'/dev/neuron{index}'][1]} rw" in chip["cgroup"], chip["cgroup"]
    others = [minor for path, (_, minor) in host.items() if path != f"/dev/neuron{index}"]
    assert not [m for m in others if f"c {DEVICE_MAJOR}:{m} rw" in chip["cgroup"]], chip["cgroup"]


def test_more_devices_than_the_node_has_are_refused(
    control_plane: ControlPlane, device_node: RealNode, default_config: StackConfig
) -> None:
    """One chip more than the node has: the scheduler leaves the pod Pending (the kubelet's
    allocatable is all it knows), and given to the kubelet directly the pod fails its admission
    there, its container never started."""
    too_many = {NEURON_RESOURCE: _instance(default_config).chips + 1}
    control_plane.create(
        [
            _pod("too-many", [_container("run", too_many)]),
            _pod("too-many-bound", [_container("run", too_many)], bound=True),
        ]
    )

    def refused() -> dict[str, Any] | None:
        pod: dict[str, Any] = control_plane.kubectl.json("get", "pod", "-n", NAMESPACE, "too-many-bound")
        return pod if pod["status"].get("phase") == "Failed" else None

    bound = control_plane.wait_for(refused, timeout=60, what="the kubelet refusing too-many-bound")
    said = f"{bound['status'].get('reason')}: {bound['status'].get('message')}"
    assert NEURON_RESOURCE in said, bound["status"]
    statuses = bound["status"].get("containerStatuses", [])
    assert not [s for s in statuses if {"running", "terminated"} & set(s.get("state", {}))], bound["status"]

    def unschedulable() -> str | None:
        pod = control_plane.kubectl.json("get", "pod", "-n", NAMESPACE, "too-many")
        for condition in pod["status"].get("conditions", []):
            if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return str(condition.get("message", ""))
        return None

    message = control_plane.wait_for(unschedulable, timeout=60, what="too-many Unschedulable")
    assert f"Insufficient {NEURON_RESOURCE}" in message, message
    pod = control_plane.kubectl.json("get", "pod", "-n", NAMESPACE, "too-many")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName"), pod["status"]
    print(f"kubelet: {said}\nscheduler: {message}")


def test_the_node_check_runs_as_its_pod_and_lifts_the_startup_taint(
    control_plane: ControlPlane, device_node: RealNode, default_plan: KubernetesLayerPlan
) -> None:
    """The node check's DaemonSet pod on the node, as runc runs it (privileged, uid 0), checks the
    node and, through the API server's ``node-check`` policy with the token the kubelet got for the
    pod, sets its condition and lifts the node's startup taint; training pods may land there now."""
    rendered = _rendered(default_plan, "DaemonSet", NODE_CHECK_NAME)
    selector = ",".join(f"{k}={v}" for k, v in rendered["spec"]["selector"]["matchLabels"].items())

    def passed() -> dict[str, Any] | None:
        node = control_plane.kubectl.json("get", "node", NODE)
        taints = [t["key"] for t in node["spec"].get("taints", [])]
        conditions = {c["type"]: c for c in node["status"].get("conditions", [])}
        checked = conditions.get(NODE_CHECK_CONDITION, {}).get("status") == "True"
        return node if checked and NODE_CHECK_TAINT_KEY not in taints else None

    node = control_plane.wait_for(passed, timeout=240, what=f"the node check's pass on {NODE}")
    assert NEURON_RESOURCE in [t["key"] for t in node["spec"]["taints"]], node["spec"]
    (pod,) = [
        p
        for p in control_plane.kubectl.json("get", "pods", "-n", NODE_CHECK_NAMESPACE, "-l", selector)[
            "items"
        ]
        if p["spec"].get("nodeName") == NODE
    ]
    log = control_plane.kubectl("logs", "-n", NODE_CHECK_NAMESPACE, pod["metadata"]["name"]).stdout
    assert f"TRAINIUM_NODE_CHECK node={NODE} state=passed" in log, log
    (container,) = pod["spec"]["containers"]
    assert (
        container["securityContext"]
        == rendered["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    )
    seen = control_plane.kubectl(
        "exec", "-n", NODE_CHECK_NAMESPACE, pod["metadata"]["name"], "--",
        "sh", "-c", "id -u; grep -E '^CapEff:' /proc/1/status",
    ).stdout.split()  # fmt: skip
    assert seen[0] == "0" and seen[2] != "0000000000000000", seen
