"""Who may write what of DRA, enforced by the API server (ValidatingAdmissionPolicies).

RBAC cannot name a node, a driver or a DeviceClass inside an object; these policies can:

- ``dra-driver-own-node`` (one policy per driver): the Neuron DRA driver's and the EFA DRA
  driver's service accounts may create, change and delete only ResourceSlices of their own driver
  for the node their token is bound to (the user extra ``authentication.kubernetes.io/node-name``,
  as for the Neuron device plugin: k8s_charts/devices/device_plugin_admission.py). The Neuron driver may
  change only its own Node, and there only labels and annotations (and its status); the EFA driver
  may change a claim's status only where the claim holds a ``dra.net`` device of its own node, and
  there only the ``dra.net`` entries of ``status.devices``: never an allocation or a reservation.
  A request with a token not bound to a pod is refused.
- ``dra-objects-service-accounts``: no other service account may create, change or delete a
  ResourceSlice, a DeviceClass or a DeviceTaintRule. RBAC already gives these to almost nobody, but
  Volcano's scheduler's ClusterRole (chart v1.15.1 templates/scheduler.yaml) holds ``create`` on
  resourceslices and deviceclasses: its token could publish a device that does not exist, or a class
  that selects another team's devices. Exempt: the two drivers (judged above), the node check for
  DeviceTaintRules (judged by its own policy, below), and the controller manager's
  garbage collector and device-taint eviction controller (it deletes the slices of a deleted node;
  the latter writes a rule's status). People (the kubectl handler, admins) are not service
  accounts and are not judged here.
- ``node-check-own-devices``: the node check's service account may only create a DeviceTaintRule
  that fences one Neuron device (``neuron-device-<n>`` of the Neuron DRA driver) of the node its
  token is bound to, with the faulty-device taint and ``NoExecute``, owned by that node (so the
  garbage collector deletes it with the node); never change or delete one.
- ``team-device-claims``: in a team namespace, a ResourceClaim or ResourceClaimTemplate may ask only
  for the DeviceClasses of the team's ``devices: dra`` node groups (none, for a team without one),
  and never for admin access (which would see devices in use by others; Kubernetes also refuses it
  outside namespaces labelled ``resource.kubernetes.io/admin-access``).

docs/security.md, "DRA devices", lists each with the test that shows it refusing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import cdk8s
from constructs import Construct

from cluster_facts.dra import EFA_DRA_DRIVER, FAULTY_DEVICE_TAINT_KEY, NEURON_DRA_DRIVER
from cluster_facts.kubernetes_names import TEAM_NAMESPACE_LABEL
from cluster_facts.node_check import NODE_CHECK_NAME, NODE_CHECK_NAMESPACE
from k8s_charts.devices import efa_dra_driver, neuron_dra_driver
from k8s_charts.devices.device_plugin_admission import NODE_NAME_EXTRA
from k8s_charts.shared.admission_policy import (
    admission_policy,
    cel_list,
    cel_string,
    refuse,
    same_except,
    service_account_username,
)

__all__ = [
    "DRIVER_POLICIES",
    "NODE_CHECK_DEVICES_POLICY",
    "OBJECTS_POLICY",
    "TEAM_CLAIMS_POLICY",
    "DraAdmissionChart",
    "TeamClaimsAdmissionChart",
]

DRIVER_POLICIES = {NEURON_DRA_DRIVER: "neuron-dra-driver-own-node", EFA_DRA_DRIVER: "efa-dra-driver-own-node"}
OBJECTS_POLICY = "dra-objects-service-accounts"
NODE_CHECK_DEVICES_POLICY = "node-check-own-devices"
TEAM_CLAIMS_POLICY = "team-device-claims"
_LABELS = {"app.kubernetes.io/part-of": "trainium-dra"}
_DRA = "resource.k8s.io"
_SERVER_METADATA = ("managedFields", "resourceVersion", "generation")
# The controller manager's controllers that write DRA objects on their own (each runs with its own
# service account: --use-service-account-credentials).
_CONTROLLERS = (
    service_account_username("kube-system", "generic-garbage-collector"),
    service_account_username("kube-system", "device-taint-eviction-controller"),
)


def _rules(group_resources: Mapping[str, Sequence[str]], operations: Sequence[str]) -> list[dict[str, Any]]:
    return [
        {
            "apiGroups": [group],
            "apiVersions": ["*"],
            "operations": list(operations),
            "resources": list(resources),
            "scope": "*",
        }
        for group, resources in group_resources.items()
    ]


def _node_variables() -> list[dict[str, str]]:
    extra = f"request.userInfo.extra[{cel_string(NODE_NAME_EXTRA)}]"
    return [
        {
            "name": "nodeName",
            "expression": f"has(request.userInfo.extra) && {cel_string(NODE_NAME_EXTRA)} in request.userInfo.extra"
            f" && size({extra}) == 1 ? {extra}[0] : ''",
        },
        {"name": "subResource", "expression": "has(request.subResource) ? request.subResource : ''"},
        {"name": "resource", "expression": "request.resource.resource"},
    ]


def _own_slice(obj: str, driver: str) -> str:
    """CEL: ``obj`` is a ResourceSlice of ``driver`` for the token's node."""
    return (
        f"has({obj}.spec) && has({obj}.spec.driver) && {obj}.spec.driver == {cel_string(driver)}"
        f" && has({obj}.spec.nodeName) && {obj}.spec.nodeName == variables.nodeName"
    )


def _slice_validation(driver: str) -> dict[str, str]:
    own = " && ".join(
        [
            f"(request.operation == 'DELETE' || ({_own_slice('object', driver)}))",
            f"(request.operation == 'CREATE' || ({_own_slice('oldObject', driver)}))",
        ]
    )
    return refuse(
        f"variables.resource != 'resourceslices' || ({own})",
        f"the {driver} DRA driver may write only ResourceSlices of driver {driver} for its own node",
    )


def _neuron_node_validations() -> list[dict[str, str]]:
    own = "oldObject.metadata.name == variables.nodeName"
    labels_only = " && ".join(
        [
            same_except("object", "oldObject", ["metadata", "status"]),
            same_except(
                "object.metadata", "oldObject.metadata", ["labels", "annotations", *_SERVER_METADATA]
            ),
        ]
    )
    status_only = " && ".join(
        [
            same_except("object", "oldObject", ["metadata", "status"]),
            same_except("object.metadata", "oldObject.metadata", list(_SERVER_METADATA)),
        ]
    )
    return [
        refuse(
            f"variables.resource != 'nodes' || ({own})",
            "the Neuron DRA driver may change only its own node",
        ),
        refuse(
            f"variables.resource != 'nodes' || variables.subResource != '' || ({labels_only})",
            "the Neuron DRA driver may change only the labels and annotations of its node",
        ),
        refuse(
            f"variables.resource != 'nodes' || variables.subResource != 'status' || ({status_only})",
            "the Neuron DRA driver may change only the status of its node through nodes/status",
        ),
    ]


def _efa_claim_validations() -> list[dict[str, str]]:
    driver = cel_string(EFA_DRA_DRIVER)

    def others(obj: str) -> str:
        return f"(has({obj}.status) && has({obj}.status.devices) ? {obj}.status.devices.filter(d, d.driver != {driver}) : [])"

    def same(name: str) -> str:
        new, old = (f"(has({o}.status) && has({o}.status.{name}))" for o in ("object", "oldObject"))
        return f"({new} ? ({old} && object.status.{name} == oldObject.status.{name}) : !{old})"

    own_devices = (
        "has(oldObject.status) && has(oldObject.status.allocation) && has(oldObject.status.allocation.devices)"
        " && has(oldObject.status.allocation.devices.results) && oldObject.status.allocation.devices.results.exists(r,"
        f" r.driver == {driver} && r.pool == variables.nodeName)"
    )
    unchanged = " && ".join(
        [
            same("allocation"),
            same("reservedFor"),
            f"{others('object')} == {others('oldObject')}",
            same_except("object", "oldObject", ["metadata", "status"]),
        ]
    )
    is_status = "variables.resource == 'resourceclaims' && variables.subResource == 'status'"
    return [
        refuse(
            f"!({is_status}) || ({own_devices})",
            f"the EFA DRA driver may write the status only of a claim that holds a {EFA_DRA_DRIVER} device of its own node",
        ),
        refuse(
            f"!({is_status}) || ({unchanged})",
            f"the EFA DRA driver may change only the {EFA_DRA_DRIVER} entries of a claim's status.devices",
        ),
    ]


def _driver_policy(driver: str, username: str) -> dict[str, Any]:
    resources: dict[str, list[str]] = {_DRA: ["resourceslices"]}
    extra: list[dict[str, str]] = []
    if driver == NEURON_DRA_DRIVER:
        resources[""] = ["nodes", "nodes/status"]
        extra = _neuron_node_validations()
    else:
        resources[_DRA].append("resourceclaims/status")
        extra = _efa_claim_validations()
    return _own_node_policy(
        username, resources, who=f"the {driver} DRA driver", validations=[_slice_validation(driver), *extra]
    )


def _own_node_policy(
    username: str,
    resources: Mapping[str, Sequence[str]],
    *,
    who: str,
    validations: Sequence[Mapping[str, str]],
) -> dict[str, Any]:
    """A policy judging only ``username``'s writes of ``resources``, which must come with a token
    bound to a pod (its node in ``variables.nodeName``), then ``validations``."""
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": _rules(resources, ("CREATE", "UPDATE", "DELETE"))},
        "matchConditions": [
            {
                "name": "this-service-account-only",
                "expression": f"has(request.userInfo.username) && request.userInfo.username == {cel_string(username)}",
            }
        ],
        "variables": _node_variables(),
        "validations": [
            refuse(
                "variables.nodeName != ''",
                f"{who} must call with a pod-bound service-account token (user extra {NODE_NAME_EXTRA})",
            ),
            *validations,
        ],
    }


def _objects_policy(exempt: Sequence[str], node_check: str) -> dict[str, Any]:
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": _rules(
                {_DRA: ["resourceslices", "deviceclasses", "devicetaintrules", "devicetaintrules/status"]},
                ("CREATE", "UPDATE", "DELETE"),
            )
        },
        "matchConditions": [
            {
                "name": "service-accounts-only",
                "expression": "has(request.userInfo.username) && request.userInfo.username.startsWith('system:serviceaccount:')"
                f" && !(request.userInfo.username in {cel_list(exempt)})",
            }
        ],
        "validations": [
            refuse(
                f"request.resource.resource in ['devicetaintrules'] && request.userInfo.username == {cel_string(node_check)}",
                "only the DRA drivers write ResourceSlices and only the node check writes DeviceTaintRules; "
                "no service account writes DeviceClasses",
            )
        ],
    }


def _node_check_devices_policy(username: str) -> dict[str, Any]:
    """The node check may only create a DeviceTaintRule that fences one Neuron device of its own node,
    owned by that node, with the faulty-device taint (cluster_programs/node_check_devices.py); it
    never changes or deletes one (the garbage collector deletes them with the node)."""
    rule = "object.spec"
    own_device = " && ".join(
        [
            f"has({rule}.deviceSelector) && has({rule}.deviceSelector.driver) && has({rule}.deviceSelector.pool)",
            f"has({rule}.deviceSelector.device) && {rule}.deviceSelector.driver == {cel_string(NEURON_DRA_DRIVER)}",
            f"{rule}.deviceSelector.pool == variables.nodeName",
            f"{rule}.deviceSelector.device.matches('^neuron-device-[0-9]+$')",
            f"has({rule}.taint) && {rule}.taint.key == {cel_string(FAULTY_DEVICE_TAINT_KEY)}",
            f"{rule}.taint.effect == 'NoExecute'",
        ]
    )
    owned = (
        "has(object.metadata.ownerReferences) && size(object.metadata.ownerReferences) == 1"
        " && object.metadata.ownerReferences.all(o, o.kind == 'Node' && o.apiVersion == 'v1'"
        " && o.name == variables.nodeName)"
    )
    who = "the node check"
    return _own_node_policy(
        username,
        {_DRA: ["devicetaintrules", "devicetaintrules/status"]},
        who=who,
        validations=[
            refuse(
                "request.operation == 'CREATE' && variables.subResource == ''",
                f"{who} may only create DeviceTaintRules",
            ),
            refuse(
                f"request.operation != 'CREATE' || ({own_device})",
                f"{who} may only fence a Neuron device (neuron-device-<n>) of the {NEURON_DRA_DRIVER} driver "
                f"on its own node, with the taint {FAULTY_DEVICE_TAINT_KEY}:NoExecute",
            ),
            refuse(
                f"request.operation != 'CREATE' || ({owned})",
                f"{who}'s DeviceTaintRule must be owned by its own node",
            ),
        ],
    )


class DraAdmissionChart(cdk8s.Chart):
    """The drivers' own-node policies and the service-account fence of DRA objects, with bindings."""

    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        drivers = {
            NEURON_DRA_DRIVER: service_account_username(
                neuron_dra_driver.NAMESPACE, neuron_dra_driver.SERVICE_ACCOUNT
            ),
            EFA_DRA_DRIVER: service_account_username(
                efa_dra_driver.NAMESPACE, efa_dra_driver.SERVICE_ACCOUNT
            ),
        }
        for driver, username in drivers.items():
            admission_policy(
                Construct(self, DRIVER_POLICIES[driver]),
                name=DRIVER_POLICIES[driver],
                labels=_LABELS,
                spec=_driver_policy(driver, username),
                binding_spec={"validationActions": ["Deny"]},
            )
        admission_policy(
            Construct(self, "Objects"),
            name=OBJECTS_POLICY,
            labels=_LABELS,
            spec=_objects_policy(
                [*drivers.values(), *_CONTROLLERS],
                service_account_username(NODE_CHECK_NAMESPACE, NODE_CHECK_NAME),
            ),
            binding_spec={"validationActions": ["Deny"]},
        )
        admission_policy(
            Construct(self, "NodeCheckDevices"),
            name=NODE_CHECK_DEVICES_POLICY,
            labels=_LABELS,
            spec=_node_check_devices_policy(service_account_username(NODE_CHECK_NAMESPACE, NODE_CHECK_NAME)),
            binding_spec={"validationActions": ["Deny"]},
        )


def _claim_requests(spec: str) -> str:
    """CEL: the requests of ``spec`` (a ResourceClaimSpec), or none."""
    return f"(has({spec}.devices) && has({spec}.devices.requests) ? {spec}.devices.requests : [])"


def _team_claims_policy(classes: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    allowed = (
        "{"
        + ", ".join(
            f"{cel_string(ns)}: {cel_list(names) if names else '[]'}" for ns, names in classes.items()
        )
        + "}"
    )
    spec = "(request.resource.resource == 'resourceclaimtemplates' ? object.spec.spec : object.spec)"
    exactly_ok = (
        "!has(r.exactly) || ((has(r.exactly.deviceClassName) && r.exactly.deviceClassName in variables.classes)"
        " && !(has(r.exactly.adminAccess) && r.exactly.adminAccess == true))"
    )
    first_ok = (
        "!has(r.firstAvailable) || r.firstAvailable.all(s, s.deviceClassName in variables.classes"
        " && !(has(s.adminAccess) && s.adminAccess == true))"
    )
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": _rules(
                {_DRA: ["resourceclaims", "resourceclaimtemplates"]}, ("CREATE", "UPDATE")
            )
        },
        "variables": [
            {"name": "ns", "expression": "has(request.namespace) ? request.namespace : ''"},
            {"name": "classes", "expression": f"variables.ns in {allowed} ? {allowed}[variables.ns] : []"},
            {"name": "spec", "expression": spec},
        ],
        "validations": [
            refuse(
                f"{_claim_requests('variables.spec')}.all(r, ({exactly_ok}) && ({first_ok}))",
                "a team's device claims may ask only for the DeviceClasses of its dra node groups, never with admin access",
            )
        ],
    }


class TeamClaimsAdmissionChart(cdk8s.Chart):
    """``team-device-claims`` and its binding to the team namespaces (``classes``: namespace -> the
    DeviceClasses its team's dra node groups serve)."""

    def __init__(self, scope: Construct, id: str, *, classes: Mapping[str, Sequence[str]]) -> None:
        super().__init__(scope, id)
        admission_policy(
            self,
            name=TEAM_CLAIMS_POLICY,
            labels=_LABELS,
            spec=_team_claims_policy(classes),
            binding_spec={
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {
                        "matchExpressions": [{"key": TEAM_NAMESPACE_LABEL, "operator": "Exists"}]
                    }
                },
            },
        )
