"""DRA devices through the kubelet's own path (issue 35 item 3, the DRA half): a real Trainium node of
test_dra.py's ``trn1-dra`` group (a ``devices: dra`` group of trn1.32xlarge; a kubelet, containerd and
runc: tests/cluster/real_nodes.py) with a stand-in of each DRA driver's kubelet plugin
(tools/cluster-binaries/dra-kubelet-plugin: its main.go says what it leaves out of the drivers).

Each stand-in registers with the node's kubelet through its plugins_registry directory and publishes
its driver's ResourceSlice of the node, the slice tests/cluster/dra.py builds (one home for the
devices and their attributes). A pod in a namespace of the test claims the node through the team's
ResourceClaimTemplate as the product renders it for the group (``trainium-node-trn1-dra``: 16 Neuron
devices and 8 EFA interfaces of one device group); the real resourceclaim controller makes the
claim, the real scheduler allocates it on this node, the kubelet calls each stand-in's
NodePrepareResources, each writes a CDI spec of the claim's device nodes (character devices of
``DEVICE_MAJOR``), and containerd's CDI support and runc put them in the container. A claim for one
Neuron device more than the node has stays Pending with the scheduler's reason.

What is not the product's path here: the DeviceClasses and the template are created alone, not with
the plan's other objects (the drivers' DaemonSets, whose images do not exist here, and the admission
policies: the stand-ins write their slices with the session's admin credentials, not as the drivers'
service accounts; test_dra.py's ``DriverStandIn`` shows the policies judging those writes), and the
pod is the default scheduler's (a run's pods are Volcano's: test_dra.py).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from cluster_facts.dra import (
    EFA_DEVICE_CLASS,
    EFA_DRA_DRIVER,
    NEURON_DEVICE_CLASS,
    NEURON_DRA_DRIVER,
    POD_DEVICE_CLAIM,
    node_claim_template,
)
from cluster_facts.instance_catalog import instance_type
from tests.cluster.control_plane import ControlPlane
from tests.cluster.dra import efa_slice, neuron_slice
from tests.cluster.nodes import group_nodes
from tests.cluster.plans import plan_of
from tests.cluster.real_nodes import DEVICE_MAJOR, RealNode
from tests.cluster.standin_images import python_image
from tests.cluster.test_devices import probe_namespace
from tests.cluster.test_dra import CONFIG, DRA, TRAINING, TRN1
from tests.cluster.test_real_nodes import _rendered

NODE = "real-trn1-dra"
NAMESPACE = "dra-pods"
TOO_MANY = "too-many-neurons"
_KUBELET_OWN = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch")
_INSTANCE = instance_type(CONFIG.node_group(TRN1).instance_type)


def _plugin_configs(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each driver's --config: dra.py's slice, a device node per device (the Neuron devices'
    ``/dev/neuron<N>``, minor N; the EFA interfaces' ``/dev/infiniband/uverbs<N>`` in the slice's
    order, after them), and the variable the Neuron device plugin sets (real_nodes.trainium_devices)."""
    neuron = neuron_slice(node, instance_type=_INSTANCE.name, family="trn1")
    efa = efa_slice(node, family="trn1")
    chips = len(neuron["spec"]["devices"])
    return {
        NEURON_DRA_DRIVER: {
            "slice": neuron,
            "deviceNodes": {
                d["name"]: {"path": f"/dev/neuron{d['attributes']['deviceId']['int']}", "minor": i}
                for i, d in enumerate(neuron["spec"]["devices"])
            },
            "env": {"AWS_NEURON_VISIBLE_DEVICES": "deviceId"},
        },
        EFA_DRA_DRIVER: {
            "slice": efa,
            "deviceNodes": {
                d["name"]: {"path": f"/dev/infiniband/uverbs{i}", "minor": chips + i}
                for i, d in enumerate(efa["spec"]["devices"])
            },
        },
    }


@pytest.fixture(scope="module")
def dra_node(control_plane: ControlPlane) -> Iterator[RealNode]:
    plan = plan_of(DRA)
    template = _rendered(plan, "ResourceClaimTemplate", node_claim_template(TRN1))
    assert template["metadata"]["namespace"] == TRAINING, template["metadata"]
    ours = copy.deepcopy(template)
    ours["metadata"] = {"name": template["metadata"]["name"], "namespace": NAMESPACE}
    too_many = copy.deepcopy(ours)
    too_many["metadata"]["name"] = TOO_MANY
    (neurons,) = [r for r in too_many["spec"]["spec"]["devices"]["requests"] if r["name"] == "neurons"]
    neurons["exactly"]["count"] = _INSTANCE.chips + 1
    control_plane.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    _rendered(plan, "DeviceClass", NEURON_DEVICE_CLASS),
                    _rendered(plan, "DeviceClass", EFA_DEVICE_CLASS),
                ],
            }
        ),
    )
    control_plane.create([*probe_namespace(NAMESPACE), ours, too_many])
    (node_template,) = group_nodes(CONFIG, TRN1, [NODE])
    nodes = control_plane.real_nodes
    node = nodes.add_node(
        NODE,
        labels={k: v for k, v in node_template["metadata"]["labels"].items() if k not in _KUBELET_OWN},
        taints=node_template["spec"]["taints"],
        provider_id=f"aws:///{CONFIG.trainium.availability_zone}/i-0d7a0000000000001",
        images=[python_image()],
    )
    registered = control_plane.kubectl.json("get", "node", NODE)
    configs = _plugin_configs(registered)
    nodes.start_dra_plugin(node, NEURON_DRA_DRIVER, "neuron", configs[NEURON_DRA_DRIVER])
    nodes.start_dra_plugin(node, EFA_DRA_DRIVER, "efa", configs[EFA_DRA_DRIVER])
    try:
        yield node
    finally:
        control_plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def _pod(name: str, template: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod claiming through ``template``, placed by the scheduler (no node selector: only this
    node's devices can satisfy the claim), tolerating every taint (the node's are the group's)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "resourceClaims": [{"name": POD_DEVICE_CLAIM, "resourceClaimTemplateName": template}],
            "volumes": [{"name": "probe", "configMap": {"name": "probe"}}],
            "containers": [
                {
                    "name": "run",
                    "image": python_image().name,
                    "imagePullPolicy": "Never",
                    # The probe, then the container stays: its claim is prepared (and exists: the
                    # resourceclaim controller deletes a pod's claim once the pod has ended) until
                    # the test deletes the pod.
                    "command": [
                        "python3",
                        "-c",
                        "import runpy, time; runpy.run_path('/opt/probe/probe.py'); time.sleep(600)",
                    ],
                    "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "32Mi"},
                        "limits": {"memory": "128Mi"},
                        "claims": [{"name": POD_DEVICE_CLAIM}],
                    },
                    "volumeMounts": [{"name": "probe", "mountPath": "/opt/probe", "readOnly": True}],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "readOnlyRootFilesystem": True,
                    },
                }
            ],
        },
    }


def _host_nodes(node: RealNode) -> dict[str, tuple[int, int]]:
    found = {}
    for path in node.device_nodes.rglob("*"):
        if path.is_char_device():
            device = path.stat().st_rdev
            found["/" + str(path.relative_to(node.device_nodes))] = (os.major(device), os.minor(device))
    return found


def test_the_stand_ins_publish_the_nodes_slices_and_register_with_the_kubelet(
    control_plane: ControlPlane, dra_node: RealNode
) -> None:
    """Each driver's slice of the node, as the kubelet plugin library publishes it (pool = node,
    owned by the Node), with dra.py's devices; the kubelet found both registration sockets."""
    slices = control_plane.kubectl.json("get", "resourceslices", f"--field-selector=spec.nodeName={NODE}")
    by_driver = {s["spec"]["driver"]: s for s in slices["items"]}
    assert set(by_driver) == {NEURON_DRA_DRIVER, EFA_DRA_DRIVER}, by_driver
    node = control_plane.kubectl.json("get", "node", NODE)
    configs = _plugin_configs(node)
    for driver, found in by_driver.items():
        assert found["spec"]["pool"]["name"] == NODE
        assert [o["uid"] for o in found["metadata"]["ownerReferences"]] == [node["metadata"]["uid"]]
        assert found["spec"]["devices"] == configs[driver]["slice"]["spec"]["devices"], driver
    # The kubelet's DRA plugin manager connected to each (pkg/kubelet/cm/dra/plugin, v=2).
    lines = (control_plane.processes.log_dir / f"kubelet-{NODE}.log").read_text().splitlines()
    for driver in (NEURON_DRA_DRIVER, EFA_DRA_DRIVER):
        connected = [
            line
            for line in lines
            if '"Connection changed"' in line
            and f'driverName="{driver}"' in line
            and "connected=true" in line
        ]
        assert connected, f"the kubelet never connected to the {driver} plugin"


def test_a_pod_gets_the_whole_node_through_its_claim(control_plane: ControlPlane, dra_node: RealNode) -> None:
    """The product's template of the group: the scheduler allocates the node's 16 Neuron devices and
    8 EFA interfaces to the claim, the kubelet has each stand-in prepare them (a CDI spec per driver,
    named by the claim's UID), and the container finds every device node (the node's major and
    minor), AWS_NEURON_VISIBLE_DEVICES naming every chip, its device cgroup allowing exactly them;
    the canary's device stages pass in it. Deleted, the pod's claim is unprepared: its specs go."""
    env = {
        "CANARY_NEURON_DEVICES": str(_INSTANCE.chips),
        "CANARY_EFA_DEVICES": str(_INSTANCE.efa_interfaces),
        "FI_PROVIDER": "efa",
    }
    control_plane.create([_pod("whole-node", node_claim_template(TRN1), env)])

    def probed() -> tuple[dict[str, Any], str] | None:
        pod: dict[str, Any] = control_plane.kubectl.json("get", "pod", "-n", NAMESPACE, "whole-node")
        phase = pod["status"].get("phase")
        if phase == "Pending":
            return None
        log = control_plane.kubectl("logs", "-n", NAMESPACE, "whole-node", check=False).stdout
        # Ended (its canary stages failed, say): judged below at once, not waited on.
        return (pod, log) if "PROBE " in log or phase != "Running" else None

    pod, log = control_plane.wait_for(probed, timeout=180, what="the pod whole-node probed its devices")
    assert pod["spec"]["nodeName"] == NODE
    assert pod["status"]["phase"] == "Running", f"{json.dumps(pod['status'])}\n{log}"
    (line,) = [line for line in log.splitlines() if line.startswith("PROBE ")]
    found = json.loads(line.removeprefix("PROBE "))
    stages = [
        json.loads(line.removeprefix("CANARY ")) for line in log.splitlines() if line.startswith("CANARY ")
    ]
    assert {s["stage"]: s["ok"] for s in stages} == {"neuron_devices": True, "efa_devices": True}, log
    host = _host_nodes(dra_node)
    assert len(host) == _INSTANCE.chips + _INSTANCE.efa_interfaces, host
    assert {path: tuple(v[1:]) for path, v in found["devices"].items()} == host, found
    assert all(v[0] for v in found["devices"].values()), found
    visible = sorted(int(i) for i in found["variables"]["AWS_NEURON_VISIBLE_DEVICES"].split(","))
    assert visible == list(range(_INSTANCE.chips)), found
    for major, minor in host.values():
        assert major == DEVICE_MAJOR
        assert f"c {major}:{minor} rw" in found["cgroup"], found["cgroup"]

    (status,) = pod["status"]["resourceClaimStatuses"]
    claim = control_plane.kubectl.json("get", "resourceclaim", "-n", NAMESPACE, status["resourceClaimName"])
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {r["pool"] for r in results} == {NODE}
    assert sorted(r["driver"] for r in results) == sorted(
        [NEURON_DRA_DRIVER] * _INSTANCE.chips + [EFA_DRA_DRIVER] * _INSTANCE.efa_interfaces
    )
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
    uid = claim["metadata"]["uid"]
    specs = {p.name: json.loads(p.read_text()) for p in dra_node.cdi_specs.iterdir()}
    assert sorted(specs) == [f"{EFA_DRA_DRIVER}-{uid}.json", f"{NEURON_DRA_DRIVER}-{uid}.json"], sorted(specs)
    neuron_spec = specs[f"{NEURON_DRA_DRIVER}-{uid}.json"]
    assert len(neuron_spec["devices"]) == _INSTANCE.chips + 1, neuron_spec  # a device each, and the variable
    control_plane.kubectl("delete", "pod", "-n", NAMESPACE, "whole-node", "--wait=true", "--timeout=60s")

    def unprepared() -> bool:
        return not [p for p in dra_node.cdi_specs.iterdir() if uid in p.name]

    control_plane.wait_for(unprepared, timeout=60, what=f"the CDI specs of claim {uid} removed")
    for short in ("neuron", "efa"):
        text = (control_plane.processes.log_dir / f"dra-plugin-{short}-{NODE}.log").read_text()
        assert f'"prepared" claim="{NAMESPACE}/{claim["metadata"]["name"]}" uid="{uid}"' in text, text
        assert f'"unprepared" claim="{NAMESPACE}/{claim["metadata"]["name"]}:{uid}" error=null' in text, text
    print(f"CDI specs while the claim was prepared: {sorted(specs)}")


def test_a_claim_for_more_devices_than_the_node_has_stays_pending(
    control_plane: ControlPlane, dra_node: RealNode
) -> None:
    """One Neuron device more than the node has: the scheduler cannot allocate the claim on any node,
    the pod stays Pending, unbound, with the scheduler's reason, and no stand-in is asked."""
    control_plane.create([_pod("too-many", TOO_MANY)])

    def unschedulable() -> str | None:
        pod = control_plane.kubectl.json("get", "pod", "-n", NAMESPACE, "too-many")
        for condition in pod["status"].get("conditions", []):
            if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return str(condition.get("message", ""))
        return None

    message = control_plane.wait_for(unschedulable, timeout=90, what="too-many Unschedulable")
    assert "cannot allocate all claims" in message, message
    pod = control_plane.kubectl.json("get", "pod", "-n", NAMESPACE, "too-many")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName"), pod["status"]
    print(f"scheduler: {message}")
