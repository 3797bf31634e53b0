"""NeuronDevicePluginChart: the plugin that makes Trainium chips schedulable."""

from __future__ import annotations

import pytest

from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import NEURON_TAINT_KEY
from cluster_facts.neuron_stack import NEURON_RELEASES, TRAINING_IMAGE, image_neuron_release
from cluster_facts.versions import version_key
from k8s_charts.devices.neuron_device_plugin import DEFAULT_IMAGE, NeuronDevicePluginChart
from tests.k8s_charts.manifests import host_paths, node_affinity_values, only, pod_spec, synth
from tests.k8s_validation import assert_valid


def neuron_plugin(**props):
    props.setdefault("vpc_cidr", "10.0.0.0/16")
    return synth(lambda app: NeuronDevicePluginChart(app, "neuron-device-plugin", **props))


@pytest.fixture(scope="module")
def manifests():
    return neuron_plugin()


def test_every_object_is_valid(manifests) -> None:
    assert_valid(manifests)
    assert sorted(manifest["kind"] for manifest in manifests) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "NetworkPolicy",
        "ServiceAccount",
    ]


def test_daemonset_runs_in_kube_system_as_system_node_critical(manifests) -> None:
    daemonset = only(manifests, "DaemonSet")
    assert daemonset["metadata"]["namespace"] == "kube-system"
    assert pod_spec(daemonset)["priorityClassName"] == "system-node-critical"
    assert pod_spec(daemonset)["serviceAccountName"] == only(manifests, "ServiceAccount")["metadata"]["name"]


def test_daemonset_tolerates_the_trainium_taint(manifests) -> None:
    tolerations = pod_spec(only(manifests, "DaemonSet"))["tolerations"]
    assert {"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in tolerations


def test_daemonset_selects_exactly_the_catalog_instance_types_by_default(manifests) -> None:
    values = node_affinity_values(only(manifests, "DaemonSet"), "node.kubernetes.io/instance-type")
    assert sorted(values) == sorted(CATALOG)


def test_given_instance_types_replace_the_default() -> None:
    values = node_affinity_values(
        only(neuron_plugin(instance_types=["trn1.32xlarge", "trn1.32xlarge"]), "DaemonSet"),
        "node.kubernetes.io/instance-type",
    )
    assert values == ["trn1.32xlarge"]


def test_no_instance_types_fails() -> None:
    with pytest.raises(ValueError, match="at least one instance type"):
        neuron_plugin(instance_types=[])


def test_the_host_paths_are_the_kubelet_device_plugin_dir_and_opt_aws_read_only(manifests) -> None:
    """Not the host's /run (containerd's and D-Bus's sockets), which upstream mounts for a file of
    Neuron Runtime 1.x; not /dev or /sys: the kubelet hands devices to the pods, sysfs is visible.
    /opt/aws read-only, as Neuron's Helm chart gives the plugin of this generation ("aws-config")."""
    daemonset = only(manifests, "DaemonSet")
    assert host_paths(daemonset) == {
        "/var/lib/kubelet/device-plugins": "/var/lib/kubelet/device-plugins",
        "/opt/aws": "/opt/aws",
    }
    volumes = {volume["name"]: volume["hostPath"] for volume in pod_spec(daemonset)["volumes"]}
    assert volumes == {
        "device-plugin": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"},
        "aws-config": {"path": "/opt/aws", "type": "Directory"},
    }
    [container] = pod_spec(daemonset)["containers"]
    [aws] = [mount for mount in container["volumeMounts"] if mount["name"] == "aws-config"]
    assert aws["readOnly"] is True


def test_container_env_names_the_kubeconfig_and_its_node(manifests) -> None:
    [container] = pod_spec(only(manifests, "DaemonSet"))["containers"]
    env = {variable["name"]: variable for variable in container["env"]}
    assert env["KUBECONFIG"]["value"] == "/etc/kubernetes/kubelet.conf"
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_container_is_unprivileged_without_capabilities(manifests) -> None:
    [container] = pod_spec(only(manifests, "DaemonSet"))["containers"]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert not context.get("privileged")


def test_image_is_the_pinned_default_or_the_given_one(manifests) -> None:
    [container] = pod_spec(only(manifests, "DaemonSet"))["containers"]
    # A tag of the plugin line Neuron's release manifest names for the SDK of the cluster's training
    # image, no older than the release's own package (the Helm chart names the image tags: see
    # cluster_facts/neuron_stack.py, DEVICE_PLUGIN_VERSION).
    sdk = image_neuron_release(TRAINING_IMAGE)
    assert sdk is not None
    package = NEURON_RELEASES[sdk].device_plugin
    assert package is not None
    tag = DEFAULT_IMAGE.rpartition(":")[2]
    assert tag.split(".")[:2] == package.split(".")[:2]
    assert version_key(tag) >= version_key(package)
    assert container["image"] == DEFAULT_IMAGE == "public.ecr.aws/neuron/neuron-device-plugin:2.29.149.0"
    custom = "public.ecr.aws/neuron/neuron-device-plugin:2.24.23.0"
    [container] = pod_spec(only(neuron_plugin(image=custom), "DaemonSet"))["containers"]
    assert container["image"] == custom


def test_cluster_role_grants_what_the_plugin_uses_and_nothing_more(manifests) -> None:
    role = only(manifests, "ClusterRole")
    assert "namespace" not in role["metadata"]
    granted = {}
    for rule in role["rules"]:
        assert rule["apiGroups"] == [""] and not rule.get("resourceNames")
        for resource in rule["resources"]:
            granted.setdefault(resource, set()).update(rule["verbs"])
    assert granted == {
        "nodes": {"get", "list", "watch"},
        "nodes/status": {"patch", "update"},
        "pods": {"get", "list", "watch", "update", "patch"},
        "events": {"create", "patch"},
        # Read only, as the Helm chart's device-plugin-rbac.yaml grants it since 2.22.4.0.
        "nodes/proxy": {"get", "list"},
    }


def test_binding_gives_the_role_to_the_plugin_service_account(manifests) -> None:
    binding = only(manifests, "ClusterRoleBinding")
    account = only(manifests, "ServiceAccount")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": only(manifests, "ClusterRole")["metadata"]["name"],
    }
    [subject] = binding["subjects"]
    assert (subject["kind"], subject["name"], subject["namespace"]) == (
        "ServiceAccount",
        account["metadata"]["name"],
        "kube-system",
    )
    assert account["metadata"]["namespace"] == "kube-system"
