"""EtcdChart: the v2-API etcd that TorchElastic's rendezvous dials at etcd-server:2379."""

from __future__ import annotations

import re

import pytest

from cluster_facts.kubernetes_names import VOLCANO_JOB_NAME_LABEL
from k8s_charts.etcd import EtcdChart
from tests.k8s.manifests import only, pod_spec, synth
from tests.k8s_validation import assert_valid


def etcd(**props):
    props.setdefault("namespace", "training")
    manifests = synth(lambda app: EtcdChart(app, "etcd", **props))
    assert_valid(manifests)
    return manifests


@pytest.fixture(scope="module")
def manifests():
    return etcd()


def container(manifests):
    [etcd_container] = pod_spec(only(manifests, "Deployment"))["containers"]
    return etcd_container


def test_chart_is_a_deployment_a_service_and_a_network_policy(manifests) -> None:
    assert sorted(manifest["kind"] for manifest in manifests) == ["Deployment", "NetworkPolicy", "Service"]
    assert {manifest["metadata"]["namespace"] for manifest in manifests} == {"training"}


def test_etcd_serves_the_v2_api_on_2379(manifests) -> None:
    args = container(manifests)["args"]
    assert "--enable-v2=true" in args
    assert "--listen-client-urls=http://0.0.0.0:2379" in args
    assert "--advertise-client-urls=http://etcd-server:2379" in args


def test_image_is_a_pinned_3_5_release(manifests) -> None:
    # etcd 3.6 removed the v2 API that TorchElastic needs.
    assert re.fullmatch(r"[\w./-]+/etcd:v?3\.5\.\d+(-\d+)?", container(manifests)["image"])


def test_one_replica_recreated_on_an_empty_dir(manifests) -> None:
    deployment = only(manifests, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    [volume] = pod_spec(deployment)["volumes"]
    assert "emptyDir" in volume
    [mount] = container(manifests)["volumeMounts"]
    assert mount["name"] == volume["name"]
    assert any(arg.startswith(f"--data-dir={mount['mountPath']}/") for arg in container(manifests)["args"])


def test_probes_ask_etcd_itself_on_the_client_port(manifests) -> None:
    etcd_container = container(manifests)
    assert etcd_container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 2379}
    assert etcd_container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": 2379}


def test_runs_as_non_root_with_limits(manifests) -> None:
    spec = pod_spec(only(manifests, "Deployment"))
    assert spec["securityContext"]["runAsNonRoot"] is True
    etcd_container = container(manifests)
    assert etcd_container["securityContext"]["allowPrivilegeEscalation"] is False
    assert etcd_container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert set(etcd_container["resources"]["limits"]) == {"cpu", "memory"}


def test_service_is_etcd_server_cluster_ip_2379_on_the_etcd_pods(manifests) -> None:
    service = only(manifests, "Service")
    assert service["metadata"]["name"] == "etcd-server"
    assert service["spec"]["type"] == "ClusterIP"
    [port] = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (2379, 2379)
    assert "nodePort" not in port
    assert (
        service["spec"]["selector"] == only(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    )


def test_network_policy_admits_only_pods_of_volcano_jobs_of_the_namespace(manifests) -> None:
    """volcano.sh/job-name, which only Volcano's job controller may set in a team's namespace
    (k8s_charts/job_pod_admission.py); not a label anyone can put on their own pod."""
    policy = only(manifests, "NetworkPolicy")["spec"]
    etcd_pod_labels = only(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"] == {"matchLabels": etcd_pod_labels}
    assert policy["policyTypes"] == ["Ingress"]  # selected for ingress: everything not listed is denied
    [rule] = policy["ingress"]
    assert rule["from"] == [
        {"podSelector": {"matchExpressions": [{"key": VOLCANO_JOB_NAME_LABEL, "operator": "Exists"}]}}
    ]
    assert rule["ports"] == [{"port": 2379, "protocol": "TCP"}]


def test_client_label_and_namespace_are_applied() -> None:
    manifests = etcd(namespace="research", client_label="example.com/job")
    assert {manifest["metadata"]["namespace"] for manifest in manifests} == {"research"}
    [rule] = only(manifests, "NetworkPolicy")["spec"]["ingress"]
    assert rule["from"] == [
        {"podSelector": {"matchExpressions": [{"key": "example.com/job", "operator": "Exists"}]}}
    ]


def test_an_empty_client_label_is_refused() -> None:
    # An empty podSelector would admit every pod of the namespace.
    with pytest.raises(ValueError, match="client_label"):
        etcd(client_label="")
