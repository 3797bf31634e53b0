"""One bad device, not one bad node: fence a DRA node's faulty Neuron devices with DeviceTaintRules.

Runs inside the node check's pod (k8s_charts/scripts/node_check.py imports it), standard library
only. On a node of a ``devices: dra`` group, where the cluster serves DeviceTaintRule
(cluster_facts/dra.py ``DEVICE_TAINTS``), a Neuron device that ``neuron-ls`` does not list is taken
out of allocation by a DeviceTaintRule instead of failing the whole node: the rule selects the
device by the Neuron DRA driver's name (``neuron.aws.com``), its pool (the node's name) and the
device's name in the driver's ResourceSlice (``neuron-device-<n>``), with the effect ``NoExecute``:
the scheduler allocates the device to no new claim, and the controller manager's device taint
eviction deletes the pods whose claims hold it (their gang restarts on healthy devices). The rule is
owned by the Node, so the garbage collector deletes it with the node (Kubernetes "Device Taints and
Tolerations"; DeviceTaintRule ``spec.deviceSelector`` ``driver``/``pool``/``device``, ``spec.taint``).

**When a node is failed instead.** A node keeps serving only if a connected half of it stays whole
(every missing device in one ``devicegroup8``: the Neuron DRA driver allocates connected sets of 1,
4, 8 or 16, and a half is the largest set a damaged node can still give a run); with devices missing
from both halves the node check fails the node as before (replaced within the group's budget).

What it cannot see: a device that ``neuron-ls`` still lists but that fails in use (hardware errors
neuron-monitor would report). Those still fail the whole node through the collective of the check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kube_api import Api, ApiError

__all__ = ["DeviceFence", "fence_devices", "fenceable", "missing_devices", "taint_rule"]


@dataclass(frozen=True, kw_only=True)
class DeviceFence:
    """Where and how the node check fences devices (the DaemonSet's environment)."""

    api_version: str
    """The API version that serves DeviceTaintRule (``resource.k8s.io/v1beta2`` at 1.36 with its gate)."""
    taint_key: str
    driver: str
    """The Neuron DRA driver's name: the driver of the slices whose devices are fenced."""
    devices_label: str
    """The label (``trainium/devices``) whose value ``dra`` marks a node of a DRA group."""

    def applies_to(self, node: Mapping[str, Any]) -> bool:
        labels = (node.get("metadata") or {}).get("labels") or {}
        return labels.get(self.devices_label) == "dra"


def missing_devices(devices: Sequence[Mapping[str, object]], expected: int) -> list[int]:
    """The device indices (0 to ``expected`` - 1) that ``neuron-ls`` did not list."""
    listed = {int(str(device.get("neuron_device"))) for device in devices}
    return [index for index in range(expected) if index not in listed]


def fenceable(missing: Sequence[int], expected: int) -> bool:
    """Whether a connected half of the node stays whole (every missing device in one half)."""
    half = expected // 2
    return bool(missing) and half > 0 and len({index // half for index in missing}) == 1


def _rule_name(node: str, device: int) -> str:
    return f"faulty-{node}-neuron-device-{device}"


def taint_rule(node: Mapping[str, Any], device: int, reason: str, fence: DeviceFence) -> dict[str, Any]:
    """The DeviceTaintRule that takes Neuron device ``device`` of ``node`` out of allocation."""
    metadata = node["metadata"]
    return {
        "apiVersion": fence.api_version,
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": _rule_name(str(metadata["name"]), device),
            # Deleted with its node: a node name (an EC2 private DNS name) can come back with a new
            # instance, whose device of the same name must not inherit the fence.
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": metadata["name"], "uid": metadata["uid"]}
            ],
        },
        "spec": {
            "deviceSelector": {
                "driver": fence.driver,
                "pool": metadata["name"],
                "device": f"neuron-device-{device}",
            },
            "taint": {"key": fence.taint_key, "value": reason, "effect": "NoExecute"},
        },
    }


def fence_devices(
    api: Api, node: Mapping[str, Any], devices: Sequence[int], reason: str, fence: DeviceFence
) -> list[str]:
    """Create the rules of ``devices`` (a rule that exists already stays); the rules' names."""
    group, version = fence.api_version.split("/")
    names = []
    for device in devices:
        rule = taint_rule(node, device, reason, fence)
        try:
            api.call("POST", f"/apis/{group}/{version}/devicetaintrules", rule)
        except ApiError as error:
            if error.status != 409:  # 409: fenced by an earlier pass
                raise
        names.append(str(rule["metadata"]["name"]))
    return names
