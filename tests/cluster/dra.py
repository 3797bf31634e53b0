"""A stand-in for the two DRA drivers, and the kubelet's check of a pod's claims.

**What it stands in for.** The Neuron DRA driver (``k8s-neuron-dra-driver``) and the EFA DRA driver
(DRANET) run on Trainium hardware: each discovers its node's devices and publishes them as one
ResourceSlice (a pool named after the node, owned by the Node), and prepares a claim's devices for
the container. Neither can run here. ``DriverStandIn.publish`` writes, for a node, the slice each
driver would write, **as that driver**: with a token of the driver's own service account bound to
its DaemonSet's pod on that node (the pod is real: the DaemonSet controller makes it, kwok runs it),
so the API server's fences (k8s_charts/devices/dra_admission.py) judge every write as they would the
driver's. Preparing devices for a container is not stood in for: nothing runs in a pod here.

**What the slices hold**, per instance family, and from where:

- the Neuron devices ``neuron-device-<n>`` (names as a trn2.48xlarge's driver 1.x published them in
  a captured ``kubectl get resourceslice``) with ``deviceId``, ``instanceType``, ``resourceType``
  ``neuron_device``, ``neuronDriverVersion``, ``draDriverVersion``, ``topology_x``/``topology_y`` (a
  4 x 4 grid, row-major, as the same capture shows) and the four
  ``resource.aws.com/devicegroup{1,4,8,16}_id`` (aws-neuron-sdk ``deploy/eks/dra.rst``, "Neuron DRA
  Driver Attributes Reference");
- on a trn2u.48xlarge also one ``neuron_node`` device (``resourceType`` ``neuron_node``, the
  UltraServer's ``capacityBlockId``): the device an ``UltraServerConfig`` claim asks for (dra.rst,
  "Example 3"). Its name and the rest of its attributes are not documented; ``neuron-node`` is this
  file's;
- the EFA interfaces ``pci-<address>`` (as DRANET names them in a captured trn1.32xlarge slice,
  kubernetes-sigs/dranet ``examples`` README) with ``dra.net/pciAddress``, ``dra.net/pciDevice``
  ``Elastic Fabric Adapter (EFA)``, ``dra.net/rdma``, ``dra.net/numaNode``,
  ``resource.kubernetes.io/pcieRoot`` and the same four device-group ids.

The device-group ids are computed as both drivers compute them (aws-neuron/connected-device-maps-over-
efa-for-neuron ``lookup/lookup.go`` at d5710250: SHA-256 of the sorted, distinct EFA addresses of the
group's Neuron devices, 16 hex digits), from that library's maps of Neuron device to EFA address
(``lookup/neuron/trn1.json``, ``trn1n.json``, ``trn2.json``; trn2u uses trn2's). ``test_dra.py``
checks them against three ids a real driver published (the trn1 DRANET capture and the trn2 Neuron
capture above): if this reading were wrong, so would be every "connected" claim below.

**The kubelet's check** (``kubelet_refusals``): before it prepares a pod's claims the kubelet refuses
a pod that its claim does not list in ``status.reservedFor`` ("pod ... is not allowed to use
ResourceClaim", pkg/kubelet/cm/dra/manager.go at v1.34.12, lines 294-301): the failure of
volcano-sh/volcano#5119. kwok runs no kubelet, so this reads the same fields of the real claims.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cluster_facts.dra import (
    DEVICE_GROUP_SIZES,
    EFA_DRA_DRIVER,
    NEURON_DRA_DRIVER,
    device_group_attribute,
)
from k8s_charts.devices import efa_dra_driver, neuron_dra_driver
from tests.cluster.control_plane import ControlPlane, Kubectl

__all__ = [
    "DRIVER_VERSION",
    "NEURON_TO_EFA",
    "DriverStandIn",
    "UltraServerNode",
    "claims_of",
    "device_group_id",
    "efa_slice",
    "kubelet_refusals",
    "neuron_slice",
]

# Neuron device -> the PCI address of its EFA interface (connected-device-maps-over-efa-for-neuron,
# lookup/neuron/<family>.json at d5710250 for trn1 and trn2, 111002a4 for trn1n).
NEURON_TO_EFA: dict[str, tuple[str, ...]] = {
    "trn1": (
        "0000:10:1a.0", "0000:10:1a.0", "0000:a0:1a.0", "0000:a0:1a.0",
        "0000:20:19.0", "0000:20:19.0", "0000:90:19.0", "0000:90:19.0",
        "0000:20:1a.0", "0000:20:1a.0", "0000:90:1a.0", "0000:90:1a.0",
        "0000:10:19.0", "0000:10:19.0", "0000:a0:19.0", "0000:a0:19.0",
    ),
    "trn1n": (
        "0000:10:17.0", "0000:10:1a.0", "0000:a0:17.0", "0000:a0:1a.0",
        "0000:20:19.0", "0000:20:18.0", "0000:90:19.0", "0000:90:18.0",
        "0000:20:17.0", "0000:20:1a.0", "0000:90:17.0", "0000:90:1a.0",
        "0000:10:19.0", "0000:10:18.0", "0000:a0:19.0", "0000:a0:18.0",
    ),
    "trn2": (
        "0000:c9:00.0", "0000:b4:00.0", "0000:b3:00.0", "0000:ca:00.0",
        "0000:6c:00.0", "0000:57:00.0", "0000:56:00.0", "0000:6d:00.0",
        "0000:98:00.0", "0000:83:00.0", "0000:82:00.0", "0000:99:00.0",
        "0000:f5:00.0", "0000:e0:00.0", "0000:df:00.0", "0000:f6:00.0",
    ),
}  # fmt: skip
NEURON_TO_EFA["trn2u"] = NEURON_TO_EFA["trn2"]  # instance-family-mappings.json: trn2u -> trn2
NEURON_DRIVER_VERSION = "2.24.7.0"
DRIVER_VERSION = "1.2.0"


def device_group_id(family: str, device: int, size: int) -> str:
    """The ``devicegroup<size>_id`` of Neuron device ``device`` (lookup.go ``getDeviceGroupHash``)."""
    efa = NEURON_TO_EFA[family]
    first = device // size * size
    addresses = sorted(set(efa[first : first + size]))
    return hashlib.sha256(",".join(addresses).encode()).hexdigest()[:16]


def _group_attributes(family: str, device: int) -> dict[str, Any]:
    groups: dict[str, Any] = {device_group_attribute(1): {"string": NEURON_TO_EFA[family][device]}}
    for size in DEVICE_GROUP_SIZES[1:]:
        groups[device_group_attribute(size)] = {"string": device_group_id(family, device, size)}
    return groups


@dataclass(frozen=True)
class UltraServerNode:
    """A trn2u.48xlarge's place in its UltraServer (what EKS and the Neuron driver label it with)."""

    server_id: str
    node_id: int
    capacity_block: str


def _slice(node: Mapping[str, Any], driver: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    name = node["metadata"]["name"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "generateName": f"{name}-{driver}-",
            # As the kubelet plugin library writes it: the Node owns its slices (the garbage
            # collector removes them with it).
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
            ],
        },
        "spec": {
            "driver": driver,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def neuron_slice(
    node: Mapping[str, Any], *, instance_type: str, family: str, ultraserver: UltraServerNode | None = None
) -> dict[str, Any]:
    """The Neuron DRA driver's slice of ``node`` (module docstring)."""
    devices = [
        {
            "name": f"neuron-device-{index}",
            "attributes": {
                "deviceId": {"int": index},
                "instanceType": {"string": instance_type},
                "resourceType": {"string": "neuron_device"},
                "neuronDriverVersion": {"string": NEURON_DRIVER_VERSION},
                "draDriverVersion": {"version": DRIVER_VERSION},
                "topology_x": {"int": index // 4},
                "topology_y": {"int": index % 4},
                **_group_attributes(family, index),
            },
        }
        for index in range(len(NEURON_TO_EFA[family]))
    ]
    if ultraserver is not None:
        devices.append(
            {
                "name": "neuron-node",
                "attributes": {
                    "instanceType": {"string": instance_type},
                    "resourceType": {"string": "neuron_node"},
                    "capacityBlockId": {"string": ultraserver.capacity_block},
                    "draDriverVersion": {"version": DRIVER_VERSION},
                },
            }
        )
    return _slice(node, NEURON_DRA_DRIVER, devices)


def efa_slice(node: Mapping[str, Any], *, family: str) -> dict[str, Any]:
    """The EFA DRA driver's slice of ``node``: one device per distinct EFA address of the family's map."""
    efa = NEURON_TO_EFA[family]
    devices = []
    for address in sorted(set(efa)):
        device = efa.index(address)
        bus = address.split(":")[1]
        devices.append(
            {
                "name": "pci-" + address.replace(":", "-").replace(".", "-"),
                "attributes": {
                    f"{EFA_DRA_DRIVER}/pciAddress": {"string": address},
                    f"{EFA_DRA_DRIVER}/pciDevice": {"string": "Elastic Fabric Adapter (EFA)"},
                    f"{EFA_DRA_DRIVER}/pciVendor": {"string": "Amazon.com, Inc."},
                    f"{EFA_DRA_DRIVER}/rdma": {"bool": True},
                    f"{EFA_DRA_DRIVER}/numaNode": {"int": 0 if int(bus, 16) < 0x80 else 1},
                    "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{bus}"},
                    **{
                        key: value
                        for key, value in _group_attributes(family, device).items()
                        if key != device_group_attribute(1)
                    },
                    device_group_attribute(1): {"string": address},
                },
            }
        )
    return _slice(node, EFA_DRA_DRIVER, devices)


@dataclass
class DriverStandIn:
    """Publishes a node's slices as the two drivers would (module docstring)."""

    plane: ControlPlane

    def driver_pod(self, daemon_set: str, node: str) -> dict[str, Any]:
        """The DaemonSet's pod on ``node`` once it runs (the real DaemonSet controller makes it)."""
        namespace = neuron_dra_driver.NAMESPACE

        def running() -> dict[str, Any] | None:
            pods = self.plane.kubectl.json(
                "get", "pods", "-n", namespace, f"--field-selector=spec.nodeName={node}"
            )["items"]
            live = [
                p
                for p in pods
                if p["metadata"].get("ownerReferences", [{}])[0].get("name") == daemon_set
                and p["status"].get("phase") == "Running"
                and "deletionTimestamp" not in p["metadata"]
            ]
            return live[0] if live else None

        found: dict[str, Any] = self.plane.wait_for(running, timeout=60, what=f"{daemon_set}'s pod on {node}")
        return found

    def as_driver(self, daemon_set: str, node: str) -> Kubectl:
        """kubectl with the driver's service-account token bound to its pod on ``node``."""
        pod = self.driver_pod(daemon_set, node)
        token = self.plane.kubectl(
            "create", "token", pod["spec"]["serviceAccountName"], "-n", pod["metadata"]["namespace"],
            "--bound-object-kind=Pod", f"--bound-object-name={pod['metadata']['name']}",
            f"--bound-object-uid={pod['metadata']['uid']}", "--duration=1h",
        ).stdout.strip()  # fmt: skip
        return self.plane.with_token(f"{daemon_set}-{node}", token)

    def publish(
        self, node_name: str, *, instance_type: str, family: str, ultraserver: UltraServerNode | None = None
    ) -> None:
        """Both drivers' slices of ``node_name``, each written as its driver."""
        node = self.plane.kubectl.json("get", "node", node_name)
        neuron = neuron_slice(node, instance_type=instance_type, family=family, ultraserver=ultraserver)
        self.as_driver(neuron_dra_driver.NAME, node_name)("create", "-f", "-", input=json.dumps(neuron))
        efa = efa_slice(node, family=family)
        self.as_driver(efa_dra_driver.NAME, node_name)("create", "-f", "-", input=json.dumps(efa))


def claims_of(plane: ControlPlane, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ResourceClaims the pod's status names (the resourceclaim controller's, from its templates)."""
    names = [
        s["resourceClaimName"]
        for s in pod.get("status", {}).get("resourceClaimStatuses", [])
        if "resourceClaimName" in s
    ]
    namespace = pod["metadata"]["namespace"]
    return [plane.kubectl.json("get", "resourceclaim", name, "-n", namespace) for name in names]


def kubelet_refusals(plane: ControlPlane, pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the kubelet would refuse of each bound pod's claims before it runs the pod (module docstring)."""
    refused = []
    for pod in pods:
        claims = claims_of(plane, pod)
        wanted = len(pod["spec"].get("resourceClaims", []))
        if len(claims) != wanted:
            refused.append(f"{pod['metadata']['name']}: {len(claims)} of its {wanted} claims exist")
        for claim in claims:
            reserved = [r.get("uid") for r in claim.get("status", {}).get("reservedFor", [])]
            if pod["metadata"]["uid"] not in reserved:
                refused.append(
                    f"pod {pod['metadata']['name']} ({pod['metadata']['uid']}) is not allowed to use "
                    f"ResourceClaim {claim['metadata']['name']} ({claim['metadata']['uid']})"
                )
            if "allocation" not in claim.get("status", {}):
                refused.append(f"{claim['metadata']['name']}: not allocated")
    return refused
