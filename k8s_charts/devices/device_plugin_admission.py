"""Confine the Neuron device plugin's service account to its own node, at admission.

The plugin's ClusterRole (k8s_charts.devices.neuron_device_plugin, as upstream grants it) may update and
patch every pod and every node's status in the cluster, and RBAC cannot say "only on this node".
A pod's image is mutable, so whoever holds the plugin's token could swap the image of any pod,
kube-system's included: a cluster takeover from one Trainium node.

This chart adds a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes
1.30) and its binding that let that one service account make only the changes the plugin needs:

- UPDATE (patch or update) of a pod on its own node that changes nothing but annotations (the
  Neuron stack records device allocations as pod annotations);
- UPDATE of its own node's ``status`` that changes nothing but the ``aws.amazon.com/neuron*``
  entries of ``capacity`` and ``allocatable``;
- CONNECT to its own node's ``proxy`` (the kubelet API): the plugin's RBAC has ``nodes/proxy``
  get and list since the Helm chart's device plugins after 2.22.4.0, and RBAC cannot name the node.
  A proxied request is a CONNECT to admission (the API server's node proxy is a ``rest.Connecter``),
  with the node as ``request.name``: any other node's kubelet, and so exec into its pods through a
  WebSocket upgrade that the kubelet authorizes as a get, is refused.

"Its own node" is the node named in the token: a pod's projected service-account token carries
the name of the node the pod was scheduled to, and the API server puts it in the user's extra
``authentication.kubernetes.io/node-name`` (ServiceAccountTokenPodNodeInfo: beta and on by
default in 1.30, GA in 1.32). A request of the plugin without that extra (a legacy Secret token, a
TokenRequest not bound to a pod) is refused. Every other principal is filtered out by the match
condition on the username before any validation runs. The plugin's reads (get, list, watch)
never reach admission and are unaffected; RBAC already denies it everything else.

Sources and the plugin's observed requests: docs/security-policies.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
from constructs import Construct

from cluster_facts.kubernetes_names import NEURON_RESOURCE
from k8s_charts.devices.neuron_device_plugin import NAME as PLUGIN_NAME
from k8s_charts.devices.neuron_device_plugin import NAMESPACE as PLUGIN_NAMESPACE
from k8s_charts.shared.admission_policy import (
    admission_policy,
    cel_string,
    refuse,
    same_except,
    service_account_policy_spec,
    service_account_username,
)

__all__ = ["NODE_NAME_EXTRA", "POLICY_NAME", "DevicePluginAdmissionChart"]

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
"""The user-info extra in which the API server names the node of a pod-bound token."""
POLICY_NAME = "neuron-device-plugin-own-node"

_LABELS = {"app.kubernetes.io/name": PLUGIN_NAME}
# Metadata the API server itself changes on every write (server-side apply's record, the version).
_SERVER_METADATA = ("managedFields", "resourceVersion")
# The node status maps of extended resources the plugin publishes.
_RESOURCE_LISTS = ("capacity", "allocatable")


def _same_except_prefix(new: str, old: str, prefix: str) -> str:
    """CEL: the maps agree on every key that does not start with ``prefix``."""
    start = cel_string(prefix)
    return (
        f"{new}.all(r, r.startsWith({start}) || (r in {old} && {new}[r] == {old}[r])) && "
        f"{old}.all(r, r.startsWith({start}) || r in {new})"
    )


def _variables(resource_prefix: str) -> list[dict[str, str]]:
    """Named expressions, in order. Each guards itself, so none can fail on any request: a failing
    expression would deny (failurePolicy Fail), and a refused allocation fails the training pod."""
    return [*_request_variables(), *_node_status_variables(resource_prefix)]


def _request_variables() -> list[dict[str, str]]:
    """Who calls (the node its token is bound to) and what: a pod update, a node proxy or a node
    status update, on its own node; for a pod, whether only its annotations changed."""
    extra = f"request.userInfo.extra[{cel_string(NODE_NAME_EXTRA)}]"
    return [
        {
            # The node the token is bound to, or '' when the token names none.
            "name": "nodeName",
            "expression": f"has(request.userInfo.extra) && {cel_string(NODE_NAME_EXTRA)} in request.userInfo.extra"
            f" && size({extra}) == 1 ? {extra}[0] : ''",
        },
        {
            # subResource is omitted from the request when empty: reading it directly would fail.
            "name": "subResource",
            "expression": "has(request.subResource) ? request.subResource : ''",
        },
        {
            "name": "isPodUpdate",
            "expression": "request.operation == 'UPDATE' && request.resource.resource == 'pods'"
            " && variables.subResource == ''",
        },
        {
            "name": "isNodeProxy",
            "expression": "request.operation == 'CONNECT' && request.resource.resource == 'nodes'"
            " && variables.subResource == 'proxy'",
        },
        {
            "name": "isNodeStatusUpdate",
            "expression": "request.operation == 'UPDATE' && request.resource.resource == 'nodes'"
            " && variables.subResource == 'status'",
        },
        {
            # The pod runs on (or the node status is of) the token's node, as stored before the change.
            "name": "onOwnNode",
            "expression": "variables.nodeName != '' && (variables.isPodUpdate"
            " ? has(oldObject.spec.nodeName) && oldObject.spec.nodeName == variables.nodeName"
            " : variables.isNodeProxy ? request.name == variables.nodeName"
            " : variables.isNodeStatusUpdate && oldObject.metadata.name == variables.nodeName)",
        },
        {
            # Everything of the pod is unchanged but its annotations (and the server's own metadata).
            "name": "onlyAnnotationsChanged",
            "expression": " && ".join(
                [
                    "variables.isPodUpdate",
                    same_except("object", "oldObject", ["metadata"]),
                    same_except("object.metadata", "oldObject.metadata", ["annotations", *_SERVER_METADATA]),
                ]
            ),
        },
    ]


def _node_status_variables(resource_prefix: str) -> list[dict[str, str]]:
    """A node status update's resource lists, and whether only their ``resource_prefix`` entries changed."""
    only_neuron_resources = " && ".join(
        [
            "variables.isNodeStatusUpdate",
            "has(object.status) && has(oldObject.status)",
            same_except("object", "oldObject", ["metadata", "status"]),
            same_except("object.metadata", "oldObject.metadata", _SERVER_METADATA),
            same_except("object.status", "oldObject.status", _RESOURCE_LISTS),
            *(
                _same_except_prefix(
                    f"variables.new{field.title()}", f"variables.old{field.title()}", resource_prefix
                )
                for field in _RESOURCE_LISTS
            ),
        ]
    )
    # A node's status.capacity and status.allocatable, before and after; {} when absent.
    resource_lists = [
        {
            "name": f"{age}{field.title()}",
            "expression": f"variables.isNodeStatusUpdate && has({obj}.status) && has({obj}.status.{field})"
            f" ? {obj}.status.{field} : {{}}",
        }
        for field in _RESOURCE_LISTS
        for age, obj in (("new", "object"), ("old", "oldObject"))
    ]
    return [
        *resource_lists,
        {
            # Everything of the node is unchanged but the Neuron entries of capacity and allocatable.
            "name": "onlyNeuronResourcesChanged",
            "expression": only_neuron_resources,
        },
    ]


def _validations(resource_prefix: str) -> list[dict[str, str]]:
    return [
        refuse(
            "variables.nodeName != ''",
            f"the Neuron device plugin must call with a pod-bound service-account token (user extra {NODE_NAME_EXTRA})",
        ),
        refuse(
            "variables.isPodUpdate || variables.isNodeStatusUpdate || variables.isNodeProxy",
            "the Neuron device plugin may only update pods and nodes/status, and connect to nodes/proxy",
        ),
        refuse(
            "!(variables.isPodUpdate || variables.isNodeStatusUpdate || variables.isNodeProxy)"
            " || variables.onOwnNode",
            "the Neuron device plugin may only change pods on its own node and its own node's status, "
            "and reach only its own node's kubelet",
        ),
        refuse(
            "!variables.isPodUpdate || variables.onlyAnnotationsChanged",
            "the Neuron device plugin may only change the annotations of a pod",
        ),
        refuse(
            "!variables.isNodeStatusUpdate || variables.onlyNeuronResourcesChanged",
            f"the Neuron device plugin may only change the {resource_prefix}* entries of its node's "
            "status.capacity and status.allocatable",
        ),
    ]


class DevicePluginAdmissionChart(cdk8s.Chart):
    """ValidatingAdmissionPolicy ``name`` and its binding: the service account ``namespace/service_account``
    may only annotate pods on its own node and change the ``resource_prefix*`` resources of its
    own node's status. Other principals are not matched.

    ``validation_actions`` is the binding's: ``("Deny",)`` enforces; ``("Audit", "Warn")`` only
    reports what would be refused (a first rollout on a cluster whose plugin version is new).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        namespace: str = PLUGIN_NAMESPACE,
        service_account: str = PLUGIN_NAME,
        resource_prefix: str = NEURON_RESOURCE,
        name: str = POLICY_NAME,
        validation_actions: Sequence[str] = ("Deny",),
    ) -> None:
        super().__init__(scope, id)
        for prop, value in (
            ("namespace", namespace),
            ("service_account", service_account),
            ("resource_prefix", resource_prefix),
        ):
            if not value:
                raise ValueError(f"DevicePluginAdmissionChart: {prop} must not be empty")
        actions = list(dict.fromkeys(validation_actions))
        # Deny refuses; Audit records in the audit log, Warn returns a warning (both without refusing):
        # ["Audit", "Warn"] observes what the policy would refuse before it is enforced.
        if not actions or not set(actions) <= {"Deny", "Warn", "Audit"} or {"Deny", "Warn"} <= set(actions):
            raise ValueError(
                f"DevicePluginAdmissionChart: validation_actions must be Deny, Warn and/or Audit "
                f"(not Deny with Warn), got {list(validation_actions)}"
            )
        username = service_account_username(namespace, service_account)
        admission_policy(
            self,
            name=name,
            labels=_LABELS,
            spec=service_account_policy_spec(
                username=username,
                resources=["pods", "pods/*", "nodes", "nodes/*"],
                variables=_variables(resource_prefix),
                validations=_validations(resource_prefix),
                # CONNECT too: its nodes/proxy grant is confined to its own node (above).
                operations=("CREATE", "UPDATE", "DELETE", "CONNECT"),
            ),
            binding_spec={"validationActions": actions},
        )
