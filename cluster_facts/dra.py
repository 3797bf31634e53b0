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
- A pod's node in two claims where one cannot hold it (trn2u): aws-neuron-sdk
  ``deploy/eks/ultraserver-operator.rst`` (commit 3afa0fdf: a Neuron claim and an EFA claim
  "alongside" it, in one pod) and the Kubernetes API reference, ``DeviceConstraint.requests`` ("the
  one or more requests in this claim": no constraint spans two claims).
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
    "POD_EFA_CLAIM",
    "ULTRASERVER_MODE",
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
that its check finds missing (cluster_programs/node_check_devices.py); the value names the reason."""

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
(``resources.claims[].name``) on a ``dra`` group: the stack's runs and TorchX jobs alike. It holds
the node's Neuron devices (and, on an UltraServer, its ``neuron_node`` device)."""

POD_EFA_CLAIM = "efa"
"""The pod's second claim, where its node's devices are more than one claim may hold (a trn2u's 33):
the node's EFA interfaces (``NodeDevices.claims``)."""

CLAIM_DEVICE_LIMIT = 32
"""The most devices one ResourceClaim may be allocated (k8s.io/api resource/v1 types.go
``AllocationResultsMaxSize`` = 32 at v0.36.3); the allocator refuses a claim asking more: "claim ...:
number of requested devices 33 exceeds the claim limit of 32" (dynamic-resource-allocation
structured/internal/stable/allocator_stable.go, as Volcano 1.15.1 printed it in the tier)."""

ULTRASERVER_MODE = 1
"""The ``UltraServerConfig`` ``ultraserverMode`` a trn2u pod's claim gives the Neuron driver: how many
nodes of its UltraServer the job spans over NeuronLink (1, 2 or 4; dra.rst "Example 3", which "is
passed by the Neuron DRA driver to the Neuron runtime and collectives inside the container"). 1: the
stack places no gang on one UltraServer's nodes (that takes pod affinity on the UltraServer labels or
the Neuron UltraServer Operator, beta and Trn3-only: deploy/eks/ultraserver-operator.rst), so a pod's
node is all it may assume; its peers are reached over EFA, as on trn2.48xlarge."""


def node_claim_template(node_group: str, claim: str = POD_DEVICE_CLAIM) -> str:
    """The ResourceClaimTemplate, in each team namespace that may use ``node_group``, of the pod's
    ``claim`` on one whole node of it (the TorchX component names it from the team's settings;
    k8s_charts/devices/device_claims.py renders it): ``trainium-node-<group>``, ``trainium-node-<group>-efa``."""
    base = f"trainium-node-{node_group}"
    return base if claim == POD_DEVICE_CLAIM else f"{base}-{claim}"


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

    def _requests(self) -> dict[str, dict[str, Any]]:
        """By request name: ``neurons`` (the devices of the instance type), ``efa`` (its EFA
        interfaces) and on an UltraServer ``ultraserver`` (its ``neuron_node`` device)."""
        neuron_device = (
            f"device.attributes['{NEURON_DRA_DRIVER}'].instanceType == '{self.instance_type}' && "
            f"device.attributes['{NEURON_DRA_DRIVER}'].resourceType == 'neuron_device'"
        )
        requests = {
            "neurons": _exactly(NEURON_DEVICE_CLASS, self.neuron_devices, neuron_device),
            "efa": _exactly(EFA_DEVICE_CLASS, self.efa_interfaces),
        }
        if self.ultraserver_mode is not None:
            node = f"device.attributes['{NEURON_DRA_DRIVER}'].resourceType == 'neuron_node'"
            requests["ultraserver"] = _exactly(NEURON_DEVICE_CLASS, 1, node)
        return requests

    def _config(self) -> list[dict[str, Any]]:
        """The Neuron driver's configuration: the LNC of ``neurons``, the mode of ``ultraserver``."""
        config: list[dict[str, Any]] = []
        if self.logical_core_size is not None:
            config.append(_opaque(["neurons"], "NeuronConfig", logicalNeuronCore=self.logical_core_size))
        if self.ultraserver_mode is not None:
            config.append(
                _opaque(["ultraserver"], "UltraServerConfig", ultraserverMode=self.ultraserver_mode)
            )
        return config

    def _spec(self, names: list[str], connected: list[str]) -> dict[str, Any]:
        requests = self._requests()
        devices: dict[str, Any] = {"requests": [{"name": name, **requests[name]} for name in names]}
        if connected:
            attribute = device_group_attribute(self.neuron_devices)
            devices["constraints"] = [{"requests": connected, "matchAttribute": attribute}]
        config = [c for c in self._config() if set(c["requests"]) <= set(names)]
        if config:
            devices["config"] = config
        return {"devices": devices}

    def one_claim_spec(self) -> dict[str, Any]:
        """The whole node in one ResourceClaimSpec (resource.k8s.io/v1): the Neuron devices and the EFA
        interfaces in the same device group (``matchAttribute``; the ``neuron_node`` device has no
        device group), the driver's configuration."""
        names = ["neurons", "efa", *(["ultraserver"] if self.ultraserver_mode is not None else [])]
        return self._spec(names, ["neurons", "efa"])

    def claims(self) -> dict[str, dict[str, Any]]:
        """The pod's claims, by name (``POD_DEVICE_CLAIM`` first): the whole node in one claim where
        its devices fit one (``CLAIM_DEVICE_LIMIT``), else two: the Neuron devices with their
        configuration (and the ``neuron_node``), and the EFA interfaces.

        Split, the EFA interfaces lose the ``matchAttribute`` beside the Neuron devices: a constraint
        names "requests in this claim" only (k8s.io/api resource/v1 ``DeviceConstraint.Requests``),
        and none is needed: both claims are the pod's, so both are allocated on the pod's node, and
        each takes every device of its kind there, all of one ``devicegroup16_id``. Neuron's own
        UltraServer pattern is the same: a Neuron claim and a second claim of every EFA interface
        of the node (deploy/eks/ultraserver-operator.rst, "attach the EFA claim alongside")."""
        if sum(self.counts.values()) <= CLAIM_DEVICE_LIMIT:
            return {POD_DEVICE_CLAIM: self.one_claim_spec()}
        neuron = ["neurons", *(["ultraserver"] if self.ultraserver_mode is not None else [])]
        return {POD_DEVICE_CLAIM: self._spec(neuron, ["neurons"]), POD_EFA_CLAIM: self._spec(["efa"], [])}

    @property
    def counts(self) -> dict[str, int]:
        """Devices by DeviceClass that one pod's claims take (what quotas and queues count)."""
        neurons = self.neuron_devices + (1 if self.ultraserver_mode is not None else 0)
        return {NEURON_DEVICE_CLASS: neurons, EFA_DEVICE_CLASS: self.efa_interfaces}

    def claim_devices(self) -> dict[str, int]:
        """Devices each of the pod's claims asks for, by claim name."""
        return {
            name: sum(int(r["exactly"]["count"]) for r in spec["devices"]["requests"])
            for name, spec in self.claims().items()
        }


def whole_node_claim_devices(instance: TrainiumInstanceType) -> int:
    """The devices a pod takes of a whole node of ``instance``: its Neuron devices and EFA interfaces,
    and on an UltraServer its ``neuron_node`` device (dra.rst, "Example 3")."""
    return instance.chips + instance.efa_interfaces + (1 if instance.ultraserver is not None else 0)


def _exactly(device_class: str, count: int, selector: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": device_class,
        "allocationMode": "ExactCount",
        "count": count,
    }
    if selector is not None:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"exactly": exactly}


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
    refuses ``logicalNeuronCore`` there). On an UltraServer type its ``neuron_node`` device too, with
    ``ultraserver_mode`` (default ``ULTRASERVER_MODE``)."""
    lnc = instance.default_logical_core_size if logical_core_size is None else logical_core_size
    mode = None if instance.ultraserver is None else (ultraserver_mode or ULTRASERVER_MODE)
    return NodeDevices(
        instance_type=instance.name,
        neuron_devices=instance.chips,
        efa_interfaces=instance.efa_interfaces,
        logical_core_size=lnc if len(instance.logical_core_sizes) > 1 else None,
        ultraserver_mode=mode,
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
