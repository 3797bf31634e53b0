"""DevicePluginAdmissionChart: the Neuron device plugin may touch only its own node, at admission.

The rendered policy's CEL runs on real requests, as the API server would run it (tests/admission.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from cluster_facts.kubernetes_plan import ManifestSet
from config import load_config
from k8s_charts.devices.device_plugin_admission import (
    NODE_NAME_EXTRA,
    POLICY_NAME,
    DevicePluginAdmissionChart,
)
from k8s_charts.devices.neuron_device_plugin import NAME, NAMESPACE
from k8s_charts.shared.admission_policy import service_account_username
from tests.admission import CelError, Decision, admit, evaluate
from tests.admission import admission_request as request_of
from tests.conftest import DEFAULT_CONFIG
from tests.k8s_charts.manifests import only, synth
from tests.k8s_validation import assert_valid
from tests.plans import shared_review_plan

PLUGIN = service_account_username(NAMESPACE, NAME)
OWN_NODE = "ip-10-0-1-10.ec2.internal"
OTHER_NODE = "ip-10-0-1-11.ec2.internal"

# The policy's refusals, as the API server would report them.
NO_NODE_TOKEN = (
    "the Neuron device plugin must call with a pod-bound service-account token "
    "(user extra authentication.kubernetes.io/node-name)"
)
NOT_AN_UPDATE = "the Neuron device plugin may only update pods and nodes/status, and connect to nodes/proxy"
NOT_ITS_NODE = (
    "the Neuron device plugin may only change pods on its own node and its own node's status, "
    "and reach only its own node's kubelet"
)
NOT_ANNOTATIONS = "the Neuron device plugin may only change the annotations of a pod"
NOT_NEURON_RESOURCES = (
    "the Neuron device plugin may only change the aws.amazon.com/neuron* entries of its node's "
    "status.capacity and status.allocatable"
)


# --- Requests as the API server hands them to admission ---


def admission_request(
    *,
    user: str,
    operation: str,
    resource: str,
    name: str,
    namespace: str = "",
    sub_resource: str = "",
    node: str | None = None,
    kind: str = "Pod",
) -> dict[str, Any]:
    """An AdmissionRequest; with ``node``, from a pod-bound projected token of a scheduled pod
    (ServiceAccountTokenPodNodeInfo puts the node in the user's extra)."""
    extra = (
        {
            NODE_NAME_EXTRA: [node],
            "authentication.kubernetes.io/node-uid": ["2f0c5c5e-0000-4000-8000-000000000001"],
            "authentication.kubernetes.io/pod-name": ["neuron-device-plugin-x7k2p"],
            "authentication.kubernetes.io/pod-uid": ["9a1b2c3d-0000-4000-8000-000000000002"],
        }
        if node is not None
        else None
    )
    return request_of(
        user=user,
        operation=operation,
        resource=resource,
        name=name,
        namespace=namespace,
        sub_resource=sub_resource,
        extra=extra,
        kind=kind,
    )


def pod(*, node: str | None = OWN_NODE, name: str = "bert-train-worker-0") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "serviceAccountName": "default",
        "containers": [
            {
                "name": "worker",
                "image": "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0",
                "resources": {
                    "limits": {"aws.amazon.com/neuron": "16"},
                    "requests": {"aws.amazon.com/neuron": "16"},
                },
            }
        ],
        "tolerations": [{"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "training",
            "uid": "0c2f7e4a-0000-4000-8000-000000000003",
            "resourceVersion": "1001",
            "labels": {"trainium/role": "training"},
            "managedFields": [{"manager": "volcano", "operation": "Update", "time": "2026-11-20T10:00:00Z"}],
        },
        "spec": spec,
        "status": {"phase": "Pending", "podIP": "10.0.1.50"},
    }


def node(name: str = OWN_NODE) -> dict[str, Any]:
    resources = {
        "cpu": "128",
        "memory": "527672060Ki",
        "pods": "737",
        "aws.amazon.com/neuron": "16",
        "aws.amazon.com/neuroncore": "32",
        "vpc.amazonaws.com/efa": "8",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": "2f0c5c5e-0000-4000-8000-000000000001",
            "resourceVersion": "2002",
            "labels": {"node.kubernetes.io/instance-type": "trn1.32xlarge", "kubernetes.io/hostname": name},
            "annotations": {"alpha.kubernetes.io/provided-node-ip": "10.0.1.10"},
            "managedFields": [{"manager": "kubelet", "operation": "Update", "subresource": "status"}],
        },
        "spec": {
            "providerID": "aws:///us-east-1a/i-0123456789abcdef0",
            "taints": [{"key": "aws.amazon.com/neuron", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.1.10"}],
        },
    }


def changed(obj: dict[str, Any], edit: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    """A copy of ``obj`` after ``edit``, with the metadata the server rewrites on every write."""
    new = copy.deepcopy(obj)
    edit(new)
    new["metadata"]["managedFields"] = [
        *obj["metadata"]["managedFields"],
        {"manager": "neuron-device-plugin", "operation": "Update"},
    ]
    return new


def annotate(key: str, value: str) -> Callable[[dict[str, Any]], object]:
    return lambda obj: obj["metadata"].setdefault("annotations", {}).__setitem__(key, value)


def plugin_pod_update(
    old: dict[str, Any], new: dict[str, Any], *, token_node: str | None = OWN_NODE
) -> Decision:
    request = admission_request(
        user=PLUGIN,
        operation="UPDATE",
        resource="pods",
        name=old["metadata"]["name"],
        namespace="training",
        node=token_node,
    )
    return admit(MANIFESTS, request, obj=new, old=old)


def plugin_node_update(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    sub_resource: str = "status",
    token_node: str | None = OWN_NODE,
) -> Decision:
    request = admission_request(
        user=PLUGIN,
        operation="UPDATE",
        resource="nodes",
        name=old["metadata"]["name"],
        sub_resource=sub_resource,
        node=token_node,
        kind="Node",
    )
    return admit(MANIFESTS, request, obj=new, old=old)


MANIFESTS = synth(lambda app: DevicePluginAdmissionChart(app, "device-plugin-admission"))


def test_every_object_is_valid_and_named() -> None:
    assert_valid(MANIFESTS)
    assert sorted((m["kind"], m["metadata"]["name"]) for m in MANIFESTS) == [
        ("ValidatingAdmissionPolicy", POLICY_NAME),
        ("ValidatingAdmissionPolicyBinding", POLICY_NAME),
    ]
    assert all("namespace" not in m["metadata"] for m in MANIFESTS)  # both are cluster-scoped


def test_the_policy_judges_only_the_plugin_service_account() -> None:
    [condition] = only(MANIFESTS, "ValidatingAdmissionPolicy")["spec"]["matchConditions"]
    assert PLUGIN == "system:serviceaccount:kube-system:neuron-device-plugin"
    assert f"'{PLUGIN}'" in condition["expression"]


# --- Allowed: what the plugin needs ---


def test_plugin_may_annotate_a_pod_on_its_node() -> None:
    old = pod()
    decision = plugin_pod_update(old, changed(old, annotate("AWS_NEURON_IDS", "0,1,2,3")))
    assert decision == Decision(matched=True, allowed=True)


def test_plugin_may_change_and_remove_annotations_of_a_pod_on_its_node() -> None:
    old = changed(pod(), annotate("NEURON_ALLOCATED", "false"))
    assert plugin_pod_update(old, changed(old, annotate("NEURON_ALLOCATED", "true"))).allowed
    assert plugin_pod_update(old, changed(old, lambda p: p["metadata"].pop("annotations"))).allowed


def test_plugin_may_update_the_neuron_resources_of_its_own_node_status() -> None:
    old = node()

    def publish(n: dict[str, Any]) -> None:
        for field in ("capacity", "allocatable"):
            n["status"][field]["aws.amazon.com/neuron"] = "15"
            n["status"][field]["aws.amazon.com/neurondevice"] = "0"  # added
            del n["status"][field]["aws.amazon.com/neuroncore"]  # removed

    assert plugin_node_update(old, changed(old, publish)) == Decision(matched=True, allowed=True)


# --- Denied: everything else the plugin's ClusterRole would let it do ---


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(
            lambda p: p["spec"]["containers"][0].__setitem__("image", "attacker.example/x:1"), id="image"
        ),
        pytest.param(lambda p: p["spec"]["containers"][0].__setitem__("command", ["/bin/sh"]), id="command"),
        pytest.param(lambda p: p["spec"]["tolerations"].append({"operator": "Exists"}), id="tolerations"),
        pytest.param(lambda p: p["metadata"]["labels"].__setitem__("app", "etcd"), id="labels"),
        pytest.param(lambda p: p["metadata"].__setitem__("finalizers", ["x/block"]), id="finalizers"),
        pytest.param(lambda p: p["metadata"].__setitem__("ownerReferences", []), id="new-metadata-key"),
        pytest.param(lambda p: p["status"].__setitem__("phase", "Running"), id="status"),
        pytest.param(lambda p: p.pop("status"), id="status-removed"),
    ],
)
def test_plugin_may_not_change_anything_of_a_pod_but_annotations(
    edit: Callable[[dict[str, Any]], object],
) -> None:
    old = pod()
    decision = plugin_pod_update(old, changed(old, edit))
    assert decision.matched and not decision.allowed
    assert decision.messages == (NOT_ANNOTATIONS,)


def test_plugin_may_not_annotate_a_pod_on_another_node_or_an_unscheduled_one() -> None:
    for old in (pod(node=OTHER_NODE), pod(node=None)):
        decision = plugin_pod_update(old, changed(old, annotate("AWS_NEURON_IDS", "0")))
        assert not decision.allowed
        assert decision.messages == (NOT_ITS_NODE,)


def test_plugin_may_not_update_another_node_status() -> None:
    old = node(OTHER_NODE)
    decision = plugin_node_update(
        old, changed(old, lambda n: n["status"]["capacity"].__setitem__("aws.amazon.com/neuron", "0"))
    )
    assert not decision.allowed
    assert decision.messages == (NOT_ITS_NODE,)


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda n: n["status"]["capacity"].__setitem__("cpu", "1024"), id="cpu-capacity"),
        pytest.param(
            lambda n: n["status"]["allocatable"].__setitem__("vpc.amazonaws.com/efa", "0"),
            id="efa-allocatable",
        ),
        pytest.param(lambda n: n["status"]["allocatable"].pop("memory"), id="memory-removed"),
        pytest.param(
            lambda n: n["status"]["capacity"].__setitem__("example.com/fake", "1"), id="new-resource"
        ),
        pytest.param(lambda n: n["status"]["conditions"][0].__setitem__("status", "False"), id="conditions"),
        pytest.param(lambda n: n["status"].__setitem__("addresses", []), id="addresses"),
        pytest.param(
            lambda n: n["metadata"]["labels"].__setitem__("node-role.kubernetes.io/control-plane", ""),
            id="labels",
        ),
        pytest.param(lambda n: n["metadata"]["annotations"].__setitem__("x", "y"), id="annotations"),
        pytest.param(lambda n: n["spec"].__setitem__("taints", []), id="taints"),
    ],
)
def test_plugin_may_change_only_neuron_resources_in_its_node_status(
    edit: Callable[[dict[str, Any]], object],
) -> None:
    old = node()
    decision = plugin_node_update(old, changed(old, edit))
    assert not decision.allowed
    assert decision.messages == (NOT_NEURON_RESOURCES,)


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda n: n["spec"].__setitem__("taints", []), id="spec-taints"),
        pytest.param(lambda n: n["spec"].__setitem__("unschedulable", True), id="spec-unschedulable"),
        pytest.param(lambda n: n["metadata"]["labels"].__setitem__("trainium/node-group", "x"), id="labels"),
        pytest.param(annotate("NEURON_DEV_USAGE_MAP", "false"), id="annotations"),
    ],
)
def test_plugin_may_not_update_its_node_object(edit: Callable[[dict[str, Any]], object]) -> None:
    """The node itself (not its status): spec, labels, taints, annotations."""
    old = node()
    decision = plugin_node_update(old, changed(old, edit), sub_resource="")
    assert not decision.allowed
    assert NOT_AN_UPDATE in decision.messages


@pytest.mark.parametrize(
    ("operation", "resource", "sub_resource", "obj", "old"),
    [
        pytest.param("CREATE", "pods", "", pod(), None, id="create-pod"),
        pytest.param("DELETE", "pods", "", None, pod(), id="delete-pod"),
        pytest.param("UPDATE", "pods", "status", pod(), pod(), id="pod-status"),
        pytest.param("UPDATE", "pods", "ephemeralcontainers", pod(), pod(), id="ephemeral-containers"),
        pytest.param(
            "CREATE", "pods", "eviction", {"apiVersion": "policy/v1", "kind": "Eviction"}, None, id="evict"
        ),
        pytest.param("CREATE", "pods", "binding", {"apiVersion": "v1", "kind": "Binding"}, None, id="bind"),
        pytest.param("DELETE", "nodes", "", None, node(), id="delete-node"),
        pytest.param("CREATE", "nodes", "", node("fake-node"), None, id="create-node"),
        # exec and attach are CONNECTs too; its RBAC grants none, and the policy refuses them anyway
        pytest.param("CONNECT", "pods", "exec", {"kind": "PodExecOptions"}, None, id="exec"),
    ],
)
def test_plugin_may_do_nothing_else_to_pods_and_nodes(
    operation: str, resource: str, sub_resource: str, obj: dict[str, Any] | None, old: dict[str, Any] | None
) -> None:
    request = admission_request(
        user=PLUGIN,
        operation=operation,
        resource=resource,
        name="x",
        namespace="training" if resource == "pods" else "",
        sub_resource=sub_resource,
        node=OWN_NODE,
    )
    decision = admit(MANIFESTS, request, obj=obj, old=old)
    assert decision.matched and not decision.allowed
    assert NOT_AN_UPDATE in decision.messages


def test_plugin_requests_without_a_node_bound_token_are_refused() -> None:
    old = pod()
    decision = plugin_pod_update(old, changed(old, annotate("AWS_NEURON_IDS", "0")), token_node=None)
    assert not decision.allowed
    assert decision.messages == (NO_NODE_TOKEN, NOT_ITS_NODE)
    old_node = node()
    edit = changed(old_node, lambda n: n["status"]["capacity"].__setitem__("aws.amazon.com/neuron", "1"))
    assert not plugin_node_update(old_node, edit, token_node=None).allowed


# --- Not matched: every other principal, whatever it does ---


@pytest.mark.parametrize(
    "user",
    [
        "kubernetes-admin",
        f"system:node:{OWN_NODE}",
        "system:serviceaccount:kube-system:aws-node",
        "system:serviceaccount:training:neuron-device-plugin",  # same name, other namespace
        "system:serviceaccount:kube-system:neuron-device-plugin-2",
        "system:serviceaccount:kube-system:volcano-scheduler",
    ],
)
def test_other_principals_are_not_matched(user: str) -> None:
    old = pod(node=OTHER_NODE)
    image_swap = changed(old, lambda p: p["spec"]["containers"][0].__setitem__("image", "x.example/y:1"))
    for request, obj, previous in [
        (
            admission_request(
                user=user, operation="UPDATE", resource="pods", name="p", namespace="training", node=OWN_NODE
            ),
            image_swap,
            old,
        ),
        (
            admission_request(user=user, operation="CREATE", resource="pods", name="p", namespace="training"),
            old,
            None,
        ),
        (
            admission_request(user=user, operation="DELETE", resource="pods", name="p", namespace="training"),
            None,
            old,
        ),
        (
            admission_request(
                user=user,
                operation="UPDATE",
                resource="nodes",
                name=OTHER_NODE,
                sub_resource="status",
                kind="Node",
            ),
            changed(node(OTHER_NODE), lambda n: n["status"]["capacity"].__setitem__("cpu", "1")),
            node(OTHER_NODE),
        ),
    ]:
        assert admit(MANIFESTS, request, obj=obj, old=previous) == Decision(matched=False, allowed=True)


def test_a_request_without_a_username_is_not_matched_and_raises_no_error() -> None:
    request = admission_request(user="", operation="UPDATE", resource="pods", name="p", namespace="training")
    del request["userInfo"]["username"]
    assert admit(MANIFESTS, request, obj=pod(), old=pod()) == Decision(matched=False, allowed=True)


def test_resources_outside_pods_and_nodes_are_not_matched() -> None:
    request = admission_request(
        user=PLUGIN, operation="CREATE", resource="events", name="e", namespace="kube-system", node=OWN_NODE
    )
    assert admit(MANIFESTS, request, obj={"kind": "Event"}, old=None) == Decision(matched=False, allowed=True)


def test_another_service_account_and_resource_prefix_can_be_confined() -> None:
    manifests = synth(
        lambda app: DevicePluginAdmissionChart(
            app,
            "other",
            namespace="kube-system",
            service_account="other-plugin",
            resource_prefix="example.com/dev",
            name="x",
        )
    )
    assert_valid(manifests)
    user = service_account_username("kube-system", "other-plugin")
    old = node()
    request = admission_request(
        user=user,
        operation="UPDATE",
        resource="nodes",
        name=OWN_NODE,
        sub_resource="status",
        node=OWN_NODE,
        kind="Node",
    )
    mine = changed(old, lambda n: n["status"]["capacity"].__setitem__("example.com/dev", "2"))
    neuron = changed(old, lambda n: n["status"]["capacity"].__setitem__("aws.amazon.com/neuron", "2"))
    assert admit(manifests, request, obj=mine, old=old).allowed
    assert not admit(manifests, request, obj=neuron, old=old).allowed
    plugin = admission_request(
        user=PLUGIN,
        operation="UPDATE",
        resource="nodes",
        name=OWN_NODE,
        sub_resource="status",
        node=OWN_NODE,
        kind="Node",
    )
    assert not admit(manifests, plugin, obj=neuron, old=old).matched


@pytest.mark.parametrize("value", ["a'b", 'a"b', "a\\b"])
def test_values_that_would_break_a_cel_string_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="CEL string literal"):
        synth(lambda app: DevicePluginAdmissionChart(app, "bad", service_account=value))


@pytest.mark.parametrize("props", [{"namespace": ""}, {"service_account": ""}, {"resource_prefix": ""}])
def test_empty_names_are_refused(props: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        synth(lambda app: DevicePluginAdmissionChart(app, "bad", **props))


def test_the_evaluator_reports_cel_errors_rather_than_passing_them() -> None:
    """The interpreter above would hide a broken policy if errors read as true: they do not."""
    with pytest.raises(CelError):
        evaluate("request.subResource == ''", {"request": {}})
    assert evaluate("request.subResource == '' || true", {"request": {}}) is True


def test_the_binding_can_only_report_for_a_first_rollout() -> None:
    manifests = synth(
        lambda app: DevicePluginAdmissionChart(app, "observe", validation_actions=("Audit", "Warn"))
    )
    assert_valid(manifests)
    assert only(manifests, "ValidatingAdmissionPolicyBinding")["spec"]["validationActions"] == [
        "Audit",
        "Warn",
    ]
    assert only(MANIFESTS, "ValidatingAdmissionPolicyBinding")["spec"]["validationActions"] == ["Deny"]


@pytest.mark.parametrize("actions", [(), ("Deny", "Warn"), ("Allow",)])
def test_invalid_validation_actions_are_refused(actions: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="validation_actions"):
        synth(lambda app: DevicePluginAdmissionChart(app, "bad", validation_actions=actions))


def test_the_plan_applies_the_policy_before_the_plugin_and_it_lets_the_plugin_work() -> None:
    """Wired into the deployment: its own step, applied, before the plugin's DaemonSet; and the
    rendered objects of the plan (not only the chart's) allow the plugin's own requests."""
    plan = shared_review_plan(load_config(DEFAULT_CONFIG))
    admission, plugin = plan.step("neuron-device-plugin-admission"), plan.step("neuron-device-plugin")
    assert isinstance(admission, ManifestSet) and isinstance(plugin, ManifestSet)
    assert admission.applied and plugin.applied
    assert admission.name in plugin.after
    assert plan.names.index(admission.name) < plan.names.index(plugin.name)
    planned = [dict(manifest) for manifest in admission.manifests]
    assert planned == MANIFESTS
    old = pod()
    pod_update = admission_request(
        user=PLUGIN, operation="UPDATE", resource="pods", name="p", namespace="training", node=OWN_NODE
    )
    assert admit(planned, pod_update, obj=changed(old, annotate("AWS_NEURON_IDS", "0")), old=old).allowed
    old_node = node()
    status = admission_request(
        user=PLUGIN, operation="UPDATE", resource="nodes", name=OWN_NODE, sub_resource="status",
        node=OWN_NODE, kind="Node",
    )  # fmt: skip
    new_node = changed(
        old_node, lambda n: n["status"]["allocatable"].__setitem__("aws.amazon.com/neuron", "15")
    )
    assert admit(planned, status, obj=new_node, old=old_node).allowed
    image = changed(old, lambda p: p["spec"]["containers"][0].__setitem__("image", "evil:1"))
    assert not admit(planned, pod_update, obj=image, old=old).allowed


# --- nodes/proxy: the kubelet API of its own node only ------------------------------------------


def plugin_node_proxy(node_name: str, *, token_node: str | None = OWN_NODE) -> Decision:
    """A request through the API server's node proxy: admission sees a CONNECT of nodes/proxy whose
    object is the NodeProxyOptions, named after the node (the proxy is a rest.Connecter)."""
    request = admission_request(
        user=PLUGIN,
        operation="CONNECT",
        resource="nodes",
        name=node_name,
        sub_resource="proxy",
        node=token_node,
        kind="NodeProxyOptions",
    )
    return admit(
        MANIFESTS, request, obj={"kind": "NodeProxyOptions", "apiVersion": "v1", "path": "/pods"}, old=None
    )


def test_plugin_may_reach_its_own_nodes_kubelet() -> None:
    assert plugin_node_proxy(OWN_NODE).allowed


def test_plugin_may_not_reach_another_nodes_kubelet() -> None:
    """RBAC's nodes/proxy (as the Helm chart grants it) names no node: the policy does."""
    decision = plugin_node_proxy("ip-10-0-9-9.us-west-2.compute.internal")
    assert decision.matched and decision.messages == (NOT_ITS_NODE,)
    decision = plugin_node_proxy(OWN_NODE, token_node=None)
    assert not decision.allowed


def test_the_policy_judges_connect_as_well() -> None:
    [policy] = [m for m in MANIFESTS if m["kind"] == "ValidatingAdmissionPolicy"]
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["CREATE", "UPDATE", "DELETE", "CONNECT"]
