"""EfaDevicePluginChart: the plugin that makes EFA interfaces schedulable."""

from __future__ import annotations

import dataclasses

import pytest

from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import NEURON_TAINT_KEY
from k8s_charts.devices import efa_device_plugin
from k8s_charts.devices.efa_device_plugin import EfaDevicePluginChart, efa_plugin_image
from tests.k8s_charts.manifests import host_paths, node_affinity_values, only, pod_spec, synth
from tests.k8s_validation import assert_valid


def efa_plugin(**props):
    return synth(lambda app: EfaDevicePluginChart(app, "efa-device-plugin", **props))


@pytest.fixture(scope="module")
def daemonset():
    manifests = efa_plugin(region="us-west-2")
    assert_valid(manifests)
    return only(manifests, "DaemonSet")


def test_the_chart_is_one_valid_daemonset_in_kube_system(daemonset) -> None:
    assert daemonset["metadata"]["namespace"] == "kube-system"
    assert pod_spec(daemonset)["priorityClassName"] == "system-node-critical"


def test_image_for_us_west_2_is_the_pinned_eks_registry_image(daemonset) -> None:
    [container] = pod_spec(daemonset)["containers"]
    assert (
        container["image"]
        == "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20"
    )


@pytest.mark.parametrize(
    ("region", "registry"),
    [
        ("us-east-1", "602401143452.dkr.ecr.us-east-1.amazonaws.com"),
        ("af-south-1", "877085696533.dkr.ecr.af-south-1.amazonaws.com"),
        ("ap-east-1", "800184023465.dkr.ecr.ap-east-1.amazonaws.com"),
        ("me-south-1", "558608220178.dkr.ecr.me-south-1.amazonaws.com"),
        ("eu-south-1", "590381155156.dkr.ecr.eu-south-1.amazonaws.com"),
        ("cn-north-1", "918309763551.dkr.ecr.cn-north-1.amazonaws.com.cn"),
        ("cn-northwest-1", "961992271922.dkr.ecr.cn-northwest-1.amazonaws.com.cn"),
        ("us-gov-west-1", "013241004608.dkr.ecr.us-gov-west-1.amazonaws.com"),
        ("us-gov-east-1", "151742754352.dkr.ecr.us-gov-east-1.amazonaws.com"),
    ],
)
def test_image_comes_from_the_eks_registry_of_the_region(region: str, registry: str) -> None:
    assert efa_plugin_image(region) == f"{registry}/eks/aws-efa-k8s-device-plugin:v0.5.20"


def test_image_tag_can_be_changed() -> None:
    [container] = pod_spec(only(efa_plugin(region="us-east-2", image_tag="v0.5.21"), "DaemonSet"))[
        "containers"
    ]
    assert container["image"].endswith("/eks/aws-efa-k8s-device-plugin:v0.5.21")


@pytest.mark.parametrize("region", ["xx-nowhere-1", "${Token[AWS.Region.7]}", ""])
def test_unknown_region_fails_clearly(region: str) -> None:
    with pytest.raises(ValueError, match=r"no EKS image registry known for region .*known: af-south-1, "):
        efa_plugin(region=region)


def test_pod_uses_the_host_network_and_the_efa_host_paths(daemonset) -> None:
    assert pod_spec(daemonset)["hostNetwork"] is True
    assert host_paths(daemonset) == {
        "/var/lib/kubelet/device-plugins": "/var/lib/kubelet/device-plugins",
        "/dev/infiniband": "/dev/infiniband",
        "/opt/aws/neuron": "/opt/aws/neuron",
    }
    [container] = pod_spec(daemonset)["containers"]
    read_only = {mount["mountPath"] for mount in container["volumeMounts"] if mount.get("readOnly")}
    assert read_only == {"/opt/aws/neuron"}  # the plugin only reads the Neuron tools
    types = {
        volume["hostPath"]["path"]: volume["hostPath"].get("type")
        for volume in pod_spec(daemonset)["volumes"]
    }
    assert types["/var/lib/kubelet/device-plugins"] == "Directory"


def test_daemonset_tolerates_the_trainium_taint(daemonset) -> None:
    assert {"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in pod_spec(daemonset)[
        "tolerations"
    ]


def test_daemonset_selects_the_efa_capable_catalog_types(daemonset) -> None:
    values = node_affinity_values(daemonset, "node.kubernetes.io/instance-type")
    assert sorted(values) == sorted(name for name, entry in CATALOG.items() if entry.efa_network_cards > 0)


def test_a_catalog_type_without_efa_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    no_efa = dataclasses.replace(CATALOG["trn1.32xlarge"], name="trn1.2xlarge", efa_network_cards=0)
    monkeypatch.setattr(efa_device_plugin, "CATALOG", {**CATALOG, no_efa.name: no_efa})
    with pytest.raises(ValueError, match=r"without EFA network cards.*trn1\.2xlarge"):
        efa_plugin(region="us-west-2", instance_types=["trn1.32xlarge", "trn1.2xlarge"])


def test_no_instance_types_fails() -> None:
    with pytest.raises(ValueError, match="at least one instance type"):
        efa_plugin(region="us-west-2", instance_types=[])
