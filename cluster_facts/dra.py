"""Dynamic Resource Allocation (DRA) of Trainium devices: the drivers' names, the attributes they
publish, the claims this project writes, and what each Kubernetes version (and EKS) offers.

A node group chooses its device path (``trainium.node_groups[].devices``): ``device-plugin`` (the
Neuron and EFA device plugins advertise counted extended resources) or ``dra`` (the Neuron DRA
driver and the EFA DRA driver publish each device as an entry of a ResourceSlice, with attributes;
a run's pods ask for devices through a ResourceClaimTemplate). The two must never serve one node
(EKS user guide, "Manage Neuron devices": "Do not install the Neuron DRA driver on nodes where the
Neuron device plugin is running"; "Manage EFA devices": "Do not install the EFA DRA driver on nodes
where the EFA device plugin is running ... silent oversubscription"): the stack labels every node of
a ``dra`` group ``DEVICES_LABEL: dra`` and the device plugins keep off such nodes, the DRA drivers
keep to them.

Sources (read 2026-11-28):

- Neuron DRA driver: aws-neuron/aws-neuron-sdk ``deploy/eks/dra.rst`` (commit cc188c11): the
  DeviceClass ``neuron.aws.com``, the attributes (``instanceType``, ``resourceType``
  ``neuron_device``/``neuron_node``, ``resource.aws.com/devicegroup{1,4,8,16}_id``), the claim
  configuration ``NeuronConfig`` ``logicalNeuronCore`` and ``UltraServerConfig``
  ``ultraserverMode``; "The supported subsets include set of 1, 4, 8 or 16".
- EFA DRA driver (DRANET): EKS user guide ``device-management-efa`` (awsdocs/amazon-eks-user-guide
  commit 43d79bdb): driver ``dra.net``, DeviceClass ``efa.networking.k8s.aws``, and the Neuron
  pairing: "requests: 4-neurons, 4-efas; matchAttribute resource.aws.com/devicegroup4_id".
- The device group ids both drivers publish: aws-neuron/connected-device-maps-over-efa-for-neuron
  ``lookup/lookup.go`` (commit d5710250): for Neuron device ``d`` and group size ``g``, the first 16
  hex digits of SHA-256 over the sorted, distinct EFA PCI addresses of devices ``g*(d//g)`` to
  ``g*(d//g)+g-1`` (``lookup/neuron/<family>.json``); ``devicegroup1_id`` is the device's EFA address.
  tests/cluster/dra.py computes them the same way and checks two captured slices.
- Kubernetes feature stages: ``pkg/features/kube_features.go`` of v1.34.12, v1.35.3 and v1.36.3.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cluster_facts.instance_catalog import TrainiumInstanceType

__all__ = [
    "AUTOSCALER_FROM_ZERO_ISSUE",
    "CLAIM_DEVICE_LIMIT",
    "DEVICES_LABEL",
    "DEVICE_GROUP_SIZES",
    "DEVICE_PATHS",
    "DEVICE_TAINTS",
    "DRA_DEVICES",
    "DRA_MINIMUM_KUBERNETES",
    "EFA_DEVICE_CLASS",
    "EFA_DRA_DRIVER",
    "FAULTY_DEVICE_TAINT_KEY",
    "NEURON_DEVICE_CLASS",
    "NEURON_DRA_DRIVER",
    "PLUGIN_DEVICES",
    "POD_DEVICE_CLAIM",
    "VOLCANO_DEVICE_TAINT_RULE_API",
    "DeviceTaintSupport",
    "NodeDevices",
    "device_group_attribute",
    "device_quota_resource",
    "device_taints_usable",
    "node_claim_template",
    "node_devices",
    "queue_device_resource",
    "whole_node_claim_devices",
]

DevicePath = Literal["device-plugin", "dra"]
DEVICE_PATHS: tuple[DevicePath, ...] = ("device-plugin", "dra")
DRA_DEVICES: DevicePath = "dra"
PLUGIN_DEVICES: DevicePath = "device-plugin"

DEVICES_LABEL = "trainium/devices"
"""On every node of a ``dra`` group (value ``dra``); the device plugins' affinity is ``NotIn [dra]``,
the DRA drivers' ``In [dra]``, so a node of a group created before this label (no label) keeps its
device plugins."""

DRA_MINIMUM_KUBERNETES = "1.34"
"""DRA is GA (resource.k8s.io/v1, DynamicResourceAllocation on) from 1.34; both AWS drivers require it."""

NEURON_DRA_DRIVER = "neuron.aws.com"
NEURON_DEVICE_CLASS = "neuron.aws.com"
EFA_DRA_DRIVER = "dra.net"
EFA_DEVICE_CLASS = "efa.networking.k8s.aws"

FAULTY_DEVICE_TAINT_KEY = "trainium/faulty-device"
"""The device taint the node check puts, through a DeviceTaintRule, on a Neuron device of a DRA node
that its check finds missing (k8s_charts/scripts/node_check_devices.py); the value names the reason."""

DEVICE_GROUP_SIZES = (1, 4, 8, 16)
"""The connected subsets the Neuron driver names; one attribute each."""

AUTOSCALER_FROM_ZERO_ISSUE = "kubernetes/autoscaler#7799"
"""The cluster autoscaler's AWS provider builds a node group's template without ResourceSlices
(``AwsNodeGroup.TemplateNodeInfo``: ``framework.NewNodeInfo(node, nil, ...)`` at cluster-autoscaler
1.33.0, 1.34.5 and 1.36.1), so a pod whose claim needs DRA devices fits no group that has no node:
"predicate DynamicResources didn't pass (cannot allocate all claims)" (tests/cluster/test_dra.py,
the real 1.33.0). A group with a node gets a template copied from that node, slices included
(``processors/nodeinfosprovider/mixed_nodeinfos_processor.go``). Open upstream: #7799 (templates from
the Kubernetes API), #10277 (the same gap in externalgrpc)."""


def device_group_attribute(devices: int) -> str:
    """The attribute whose equal value marks ``devices`` connected Neuron devices (and their EFA)."""
    if devices not in DEVICE_GROUP_SIZES:
        allowed = ", ".join(map(str, DEVICE_GROUP_SIZES))
        raise ValueError(
            f"the Neuron DRA driver allocates connected sets of {allowed} devices, not {devices}"
        )
    return f"resource.aws.com/devicegroup{devices}_id"


def device_quota_resource(device_class: str) -> str:
    """The ResourceQuota key that counts the devices a namespace's claims request from ``device_class``
    (Kubernetes 1.34+, "Resource quota: DRA": ``<class>.deviceclass.resource.k8s.io/devices``)."""
    return f"{device_class}.deviceclass.resource.k8s.io/devices"


def queue_device_resource(device_class: str) -> str:
    """The Volcano queue resource that counts devices of ``device_class`` (v1.15.1
    pkg/scheduler/plugins/capacity/capacity.go ``DeviceClassCountPrefix``)."""
    return f"deviceclass/{device_class}"


POD_DEVICE_CLAIM = "devices"
"""The name of a training pod's claim (``spec.resourceClaims[].name``) and of its container's
(``resources.claims[].name``) on a ``dra`` group: the stack's runs and TorchX jobs alike."""


def node_claim_template(node_group: str) -> str:
    """The ResourceClaimTemplate, in each team namespace that may use ``node_group``, that asks for one
    whole node of it (the TorchX component names it; k8s_charts/device_claims.py renders it)."""
    return f"trainium-node-{node_group}"


@dataclass(frozen=True, kw_only=True)
class NodeDevices:
    """What one training pod takes of its node through DRA: every Neuron device as one connected set,
    the EFA interfaces beside them, the Logical NeuronCore size, and on an UltraServer its mode."""

    instance_type: str
    neuron_devices: int
    efa_interfaces: int
    logical_core_size: int | None = None
    ultraserver_mode: int | None = None
    """How many nodes of the UltraServer the job spans (1, 2 or 4); None off an UltraServer."""

    def claim_spec(self) -> dict[str, Any]:
        """The ResourceClaimSpec (resource.k8s.io/v1): ``neurons`` (the devices of the instance type,
        connected), ``efa`` (its EFA interfaces, in the same device group), and the driver's
        configuration of the Neuron devices."""
        connected = device_group_attribute(self.neuron_devices)
        requests: list[dict[str, Any]] = [
            {
                "name": "neurons",
                "exactly": {
                    "deviceClassName": NEURON_DEVICE_CLASS,
                    "allocationMode": "ExactCount",
                    "count": self.neuron_devices,
                    "selectors": [
                        {
                            "cel": {
                                "expression": f"device.attributes['{NEURON_DRA_DRIVER}'].instanceType == "
                                f"'{self.instance_type}' && device.attributes['{NEURON_DRA_DRIVER}']"
                                ".resourceType == 'neuron_device'"
                            }
                        }
                    ],
                },
            },
            {
                "name": "efa",
                "exactly": {
                    "deviceClassName": EFA_DEVICE_CLASS,
                    "allocationMode": "ExactCount",
                    "count": self.efa_interfaces,
                },
            },
        ]
        config: list[dict[str, Any]] = []
        if self.logical_core_size is not None:
            config.append(_opaque(["neurons"], "NeuronConfig", logicalNeuronCore=self.logical_core_size))
        if self.ultraserver_mode is not None:
            requests.append(
                {
                    "name": "ultraserver",
                    "exactly": {
                        "deviceClassName": NEURON_DEVICE_CLASS,
                        "allocationMode": "ExactCount",
                        "count": 1,
                        "selectors": [
                            {
                                "cel": {
                                    "expression": f"device.attributes['{NEURON_DRA_DRIVER}'].resourceType"
                                    " == 'neuron_node'"
                                }
                            }
                        ],
                    },
                }
            )
            config.append(
                _opaque(["ultraserver"], "UltraServerConfig", ultraserverMode=self.ultraserver_mode)
            )
        devices: dict[str, Any] = {
            "requests": requests,
            "constraints": [{"requests": ["neurons", "efa"], "matchAttribute": connected}],
        }
        if config:
            devices["config"] = config
        return {"devices": devices}

    @property
    def counts(self) -> dict[str, int]:
        """Devices by DeviceClass that one claim takes (what quotas and queues count)."""
        neurons = self.neuron_devices + (1 if self.ultraserver_mode is not None else 0)
        return {NEURON_DEVICE_CLASS: neurons, EFA_DEVICE_CLASS: self.efa_interfaces}


CLAIM_DEVICE_LIMIT = 32
"""The most devices one ResourceClaim may be allocated (k8s.io/api resource/v1 types.go
``AllocationResultsMaxSize`` = 32 at v0.36.3); the allocator refuses a claim asking more: "claim ...:
number of requested devices 33 exceeds the claim limit of 32" (dynamic-resource-allocation
structured/internal/stable/allocator_stable.go, as Volcano 1.15.1 printed it in the tier)."""


def whole_node_claim_devices(instance: TrainiumInstanceType) -> int:
    """The devices this project's one claim per node asks for on ``instance``: its Neuron devices and
    EFA interfaces, and on an UltraServer its ``neuron_node`` device (dra.rst, "Example 3")."""
    return instance.chips + instance.efa_interfaces + (1 if instance.ultraserver is not None else 0)


def _opaque(requests: list[str], kind: str, **parameters: int) -> dict[str, Any]:
    return {
        "requests": requests,
        "opaque": {
            "driver": NEURON_DRA_DRIVER,
            "parameters": {"apiVersion": f"{NEURON_DRA_DRIVER}/v1", "kind": kind, **parameters},
        },
    }


def node_devices(
    instance: TrainiumInstanceType,
    *,
    logical_core_size: int | None = None,
    ultraserver_mode: int | None = None,
) -> NodeDevices:
    """One whole node of ``instance``, as a training pod takes it. The Logical NeuronCore size the claim
    asks the driver for: ``logical_core_size`` (a run's), else the catalog's default for the type; none
    on a type that takes one size only (Trainium1: its NeuronCore-v2 are not grouped, and the driver
    refuses ``logicalNeuronCore`` there)."""
    lnc = instance.default_logical_core_size if logical_core_size is None else logical_core_size
    return NodeDevices(
        instance_type=instance.name,
        neuron_devices=instance.chips,
        efa_interfaces=instance.efa_interfaces,
        logical_core_size=lnc if len(instance.logical_core_sizes) > 1 else None,
        ultraserver_mode=ultraserver_mode,
    )


@dataclass(frozen=True, kw_only=True)
class DeviceTaintSupport:
    """What a Kubernetes minor version offers to take one device out of allocation, and where."""

    slice_taints: str
    """``DRADeviceTaints``: taints a driver writes into its ResourceSlice, honoured by the scheduler."""
    taint_rules: str
    """``DRADeviceTaintRules`` (1.35+; part of ``DRADeviceTaints`` in 1.34): the DeviceTaintRule API,
    which a component other than the driver (the node check) can write."""
    rule_api: str | None
    """The API version that serves DeviceTaintRule at that minor."""
    on_eks: bool
    """Whether an EKS cluster of that version has DeviceTaintRule: EKS serves GA APIs and the beta
    APIs it already served, and leaves feature gates at their defaults."""


DEVICE_TAINTS: Mapping[str, DeviceTaintSupport] = {
    "1.33": DeviceTaintSupport(
        slice_taints="alpha, off", taint_rules="alpha, off", rule_api="resource.k8s.io/v1alpha3", on_eks=False
    ),
    "1.34": DeviceTaintSupport(
        slice_taints="alpha, off", taint_rules="alpha, off", rule_api="resource.k8s.io/v1alpha3", on_eks=False
    ),
    "1.35": DeviceTaintSupport(
        slice_taints="alpha, off", taint_rules="alpha, off", rule_api="resource.k8s.io/v1alpha3", on_eks=False
    ),
    # v1.36.3: DRADeviceTaints beta, on; DRADeviceTaintRules beta, off ("Depends on an off-by-default
    # beta API": resource.k8s.io/v1beta2 DeviceTaintRule).
    "1.36": DeviceTaintSupport(
        slice_taints="beta, on", taint_rules="beta, off", rule_api="resource.k8s.io/v1beta2", on_eks=False
    ),
    # Stable in 1.37 (KEP-5055, kubernetes/enhancements#5055; kubernetes.io "Device Taints and
    # Tolerations": "FEATURE STATE: Kubernetes v1.37 [stable] (enabled by default)"); no 1.37 source
    # was read here, so the API version of the rule is the KEP's GA plan, not a reading.
    "1.37": DeviceTaintSupport(
        slice_taints="GA, on", taint_rules="GA, on", rule_api="resource.k8s.io/v1", on_eks=True
    ),
}
"""By Kubernetes minor version: what the API server serves."""

VOLCANO_DEVICE_TAINT_RULE_API = "resource.k8s.io/v1alpha3"
"""The only version at which Volcano 1.15.1's scheduler reads DeviceTaintRules, and only with its
``DRADeviceTaints`` gate on (pkg/scheduler/cache/cache.go lines 836-845 at v1.15.1:
``informerFactory.Resource().V1alpha3().DeviceTaintRules()``, from Kubernetes 1.35's libraries). With
the gate off it honours no device taint at all, neither a rule's nor a slice's (predicates.go
``EnableDRADeviceTaints``); with it on where v1alpha3 is not served, its informer never lists and
its cache never syncs. EKS serves no alpha API, so on EKS Volcano cannot honour a fence: a run it
placed on a fenced device would be evicted by the controller manager (NoExecute) and placed there
again until its retries ran out. No Volcano issue for this was found (searched 2026-11-28)."""


def device_taints_usable(kubernetes_version: str) -> bool:
    """Whether a fenced device stays out of Volcano's allocations on an EKS cluster of that version:
    EKS serves DeviceTaintRule, and at the version Volcano reads. The node check fences devices only
    where this holds (docs/health.md, "One bad device on a DRA node"); elsewhere a faulty device
    fails its node."""
    support = DEVICE_TAINTS.get(kubernetes_version)
    return support is not None and support.on_eks and support.rule_api == VOLCANO_DEVICE_TAINT_RULE_API
