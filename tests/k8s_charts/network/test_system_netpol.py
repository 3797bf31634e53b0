"""The platform's pods in volcano-system and kube-system reach exactly what they need.

Judged by tests/netpol.py (a model of NetworkPolicy semantics written here) over every object of
the example configuration's plan. The pods of the two Helm releases (Volcano, the cluster
autoscaler) are not in the plan: they carry the labels the vendored charts give them, which
``test_the_vendored_charts_label_their_pods_as_the_policies_select_them`` reads from the charts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import PLATFORM_NAMESPACE
from cluster_facts.vendored_charts import CLUSTER_AUTOSCALER_CHART, VOLCANO_CHART
from k8s_charts.network.system_network import (
    AUTOSCALER_POD_LABELS,
    POD_IDENTITY_AGENT,
    VOLCANO_ADMISSION_INIT_LABELS,
    VOLCANO_ADMISSION_LABELS,
    VOLCANO_CONTROLLER_LABELS,
    VOLCANO_SCHEDULER_LABELS,
    VOLCANO_WEBHOOK_PORT,
)
from k8s_charts.network.tenant_network import API_SERVER_SERVICE_IPS
from k8s_charts.plan import CLUSTER_AUTOSCALER, VOLCANO, VOLCANO_NAMESPACE
from tests.conftest import REPO_ROOT
from tests.k8s_charts.network.test_netpol import (
    API_ENDPOINT_ENI,
    EXTERNAL,
    IMDS,
    KUBE_DNS,
    TEAM_A,
    job_pod,
    pod_labels,
    rendered,
    rendered_workload,
    workload_pod,
)
from tests.netpol import Cluster, Pod

CONTROL_PLANE_ENI = "10.20.0.77"  # an EKS control-plane interface in the cluster's subnets
LUSTRE = "10.20.40.5"  # the file system's interface in the Trainium subnet
NOT_OURS = {
    # EKS add-on pods in kube-system (labels of their charts); none of them is the plan's.
    "coredns": KUBE_DNS,
    "fsx-csi-controller": Pod(
        "kube-system", {"app": "fsx-csi-controller"}, "10.20.0.30", "fsx-csi-controller"
    ),
    "fsx-csi-node": Pod("kube-system", {"app": "fsx-csi-node"}, "10.20.1.31", "fsx-csi-node"),
    "unlabelled": Pod("kube-system", {}, "10.20.0.31", "some-add-on"),
}


@pytest.fixture(scope="module")
def pods() -> dict[str, Pod]:
    run = rendered_workload("Job", "bert-large", TEAM_A)
    return {
        "admission": Pod(
            VOLCANO_NAMESPACE, dict(VOLCANO_ADMISSION_LABELS), "10.20.0.40", "volcano-admission"
        ),
        "controllers": Pod(
            VOLCANO_NAMESPACE, dict(VOLCANO_CONTROLLER_LABELS), "10.20.0.41", "volcano-controllers"
        ),
        "scheduler": Pod(
            VOLCANO_NAMESPACE, dict(VOLCANO_SCHEDULER_LABELS), "10.20.0.42", "volcano-scheduler"
        ),
        "admission-init": Pod(
            VOLCANO_NAMESPACE,
            {**VOLCANO_ADMISSION_INIT_LABELS, "job-name": "volcano-admission-init"},
            "10.20.0.43",
            "volcano-admission-init",
        ),
        "autoscaler": Pod("kube-system", dict(AUTOSCALER_POD_LABELS), "10.20.0.50", "cluster-autoscaler"),
        "node-check": workload_pod("DaemonSet", "node-check", "10.20.1.51", "kube-system"),
        "neuron-device-plugin": workload_pod(
            "DaemonSet", "neuron-device-plugin", "10.20.1.52", "kube-system"
        ),
        "team-worker": job_pod(run["metadata"]["name"], TEAM_A, pod_labels(run), "10.20.1.20"),
        "default-pod": Pod("default", {}, "10.20.4.10", "elsewhere"),
        **NOT_OURS,
    }


@pytest.fixture(scope="module")
def cluster(pods: dict[str, Pod]) -> Cluster:
    return Cluster(rendered(), pods.values())


def reaches_api_server(cluster: Cluster, pod: Pod) -> bool:
    return all(cluster.may_connect_to_ip(pod, ip, 443) for ip in API_SERVER_SERVICE_IPS) and (
        cluster.may_connect_to_ip(pod, API_ENDPOINT_ENI, 443)
    )


def reaches_dns(cluster: Cluster, pod: Pod) -> bool:
    return cluster.may_connect(pod, KUBE_DNS, 53, "UDP") and cluster.may_connect(pod, KUBE_DNS, 53, "TCP")


def reaches_nothing_else(
    cluster: Cluster, pod: Pod, pods: dict[str, Pod], *, but: tuple[str, ...] = ()
) -> None:
    """No IMDS, no port but 443 outside, no other pod of the cluster (but ``but``), no port but 443
    (and ``but``'s) to the VPC."""
    for port in (80, 443):
        assert not cluster.may_connect_to_ip(pod, IMDS, port), pod.name
    for port in (22, 80, 8080):
        assert not cluster.may_connect_to_ip(pod, EXTERNAL, port), (pod.name, port)
    for name, other in pods.items():
        if other is not pod and other is not KUBE_DNS and name not in but:
            assert not cluster.may_connect(pod, other, 8443), (pod.name, name)
            assert not cluster.may_connect(pod, other, 9443), (pod.name, name)


def reached_by_nothing(cluster: Cluster, pod: Pod, pods: dict[str, Pod]) -> None:
    for other in pods.values():
        if other is not pod:
            for port in (80, 443, 8080, 8081, 8085, VOLCANO_WEBHOOK_PORT):
                assert not cluster.may_connect(other, pod, port), (other.name, pod.name, port)
    for address in (CONTROL_PLANE_ENI, EXTERNAL):
        for port in (80, 443, 8080, 8081, 8085, VOLCANO_WEBHOOK_PORT):
            assert not cluster.may_be_reached_from_ip(address, pod, port), (address, pod.name, port)


# --- volcano-system -------------------------------------------------------------------------------


def test_volcano_system_denies_by_default(cluster: Cluster) -> None:
    newcomer = Pod(VOLCANO_NAMESPACE, {"app": "something-else"}, "10.20.0.49", "newcomer")
    assert cluster.policies_selecting(newcomer, "Ingress") == [f"{VOLCANO_NAMESPACE}/default-deny"]
    assert cluster.policies_selecting(newcomer, "Egress") == [f"{VOLCANO_NAMESPACE}/default-deny"]
    assert not cluster.may_connect(newcomer, KUBE_DNS, 53, "UDP")
    assert not cluster.may_be_reached_from_ip(CONTROL_PLANE_ENI, newcomer, VOLCANO_WEBHOOK_PORT)


@pytest.mark.parametrize("name", ["admission", "controllers", "scheduler", "admission-init"])
def test_each_volcano_pod_reaches_dns_and_the_api_server_and_nothing_else(
    cluster: Cluster, pods: dict[str, Pod], name: str
) -> None:
    pod = pods[name]
    assert reaches_dns(cluster, pod) and reaches_api_server(cluster, pod)
    assert not cluster.may_connect_to_ip(pod, EXTERNAL, 443)
    reaches_nothing_else(cluster, pod, pods)


def test_the_control_plane_reaches_volcanos_webhook_on_its_port_only(
    cluster: Cluster, pods: dict[str, Pod]
) -> None:
    admission = pods["admission"]
    assert cluster.may_be_reached_from_ip(CONTROL_PLANE_ENI, admission, VOLCANO_WEBHOOK_PORT)
    for port in (443, 8080, 10250):
        assert not cluster.may_be_reached_from_ip(CONTROL_PLANE_ENI, admission, port)
    assert not cluster.may_be_reached_from_ip(EXTERNAL, admission, VOLCANO_WEBHOOK_PORT)
    # A team's pod may not leave for the VPC at all; what the window before a new pod's policies
    # (standard mode) or a pod of an open namespace can reach is the webhook's port, nothing more.
    assert not cluster.may_connect(pods["team-worker"], admission, VOLCANO_WEBHOOK_PORT)
    assert cluster.may_connect(pods["default-pod"], admission, VOLCANO_WEBHOOK_PORT)
    for name in ("controllers", "scheduler", "admission-init"):
        reached_by_nothing(cluster, pods[name], pods)


# --- kube-system: the platform's own pods ----------------------------------------------------------


def test_the_autoscaler_reaches_the_api_server_the_aws_apis_and_its_credentials_only(
    cluster: Cluster, pods: dict[str, Pod]
) -> None:
    autoscaler = pods["autoscaler"]
    assert reaches_dns(cluster, autoscaler) and reaches_api_server(cluster, autoscaler)
    assert cluster.may_connect_to_ip(autoscaler, EXTERNAL, 443)  # autoscaling, ec2, eks: via the NAT
    assert cluster.may_connect_to_ip(autoscaler, POD_IDENTITY_AGENT, 80)
    assert not cluster.may_connect_to_ip(autoscaler, POD_IDENTITY_AGENT, 2703)
    reaches_nothing_else(cluster, autoscaler, pods)
    reached_by_nothing(cluster, autoscaler, pods)


def test_the_node_check_reaches_the_api_server_aws_its_credentials_and_the_file_system_only(
    cluster: Cluster, pods: dict[str, Pod]
) -> None:
    check = pods["node-check"]
    assert reaches_dns(cluster, check) and reaches_api_server(cluster, check)
    assert cluster.may_connect_to_ip(check, EXTERNAL, 443)  # autoscaling set-instance-health
    assert cluster.may_connect_to_ip(check, POD_IDENTITY_AGENT, 80)
    assert cluster.may_connect_to_ip(check, LUSTRE, 988)
    assert not cluster.may_connect_to_ip(check, LUSTRE, 1018)  # the check opens 988 only
    reaches_nothing_else(cluster, check, pods)
    reached_by_nothing(cluster, check, pods)


def test_the_neuron_device_plugin_reaches_only_the_api_server(cluster: Cluster, pods: dict[str, Pod]) -> None:
    plugin = pods["neuron-device-plugin"]
    assert reaches_dns(cluster, plugin) and reaches_api_server(cluster, plugin)
    assert not cluster.may_connect_to_ip(plugin, EXTERNAL, 443)
    assert not cluster.may_connect_to_ip(plugin, POD_IDENTITY_AGENT, 80)
    reaches_nothing_else(cluster, plugin, pods)
    reached_by_nothing(cluster, plugin, pods)


def test_no_policy_of_the_plan_selects_an_eks_add_on_pod(cluster: Cluster) -> None:
    """EKS manages the add-ons' pods in kube-system: the plan's policies there select its own pods
    only, so CoreDNS, the FSx CSI driver and the rest keep what EKS gives them."""
    for pod in NOT_OURS.values():
        assert cluster.policies_selecting(pod, "Ingress") == [], pod.name
        assert cluster.policies_selecting(pod, "Egress") == [], pod.name
    assert not any(
        m["kind"] == "NetworkPolicy"
        and m["metadata"]["namespace"] == "kube-system"
        and not m["spec"]["podSelector"]
        for m in rendered()
    )


def pod_templates() -> list[tuple[str, dict[str, Any]]]:
    """Every pod template the plan renders (namespace, template), Volcano Jobs' tasks included."""
    found = []
    for manifest in rendered():
        spec = manifest.get("spec", {})
        templates = (
            [spec["template"]] if "template" in spec else [t["template"] for t in spec.get("tasks", [])]
        )
        found.extend(
            (manifest["metadata"]["namespace"], template) for template in templates if "spec" in template
        )
    return found


def test_every_pod_of_the_platform_is_selected_by_a_policy_both_ways(
    cluster: Cluster, pods: dict[str, Pod]
) -> None:
    """What strict mode would demand of the platform's own pods (docs/security-policies.md): every
    pod the plan or its Helm releases run, but for host-network pods, is selected by a policy for
    ingress and for egress. The EKS add-ons' pods are not (test_no_policy_of_the_plan_selects_an_eks_add_on_pod)."""
    templates = pod_templates()
    assert len(templates) > 10
    for namespace, template in templates:
        if template["spec"].get("hostNetwork"):
            assert template["metadata"]["labels"] == {"app.kubernetes.io/name": "aws-efa-k8s-device-plugin"}
            continue
        pod = Pod(namespace, template["metadata"].get("labels", {}), "10.20.9.9")
        assert cluster.policies_selecting(pod, "Ingress"), (namespace, template["metadata"])
        assert cluster.policies_selecting(pod, "Egress"), (namespace, template["metadata"])
    for name in ("admission", "controllers", "scheduler", "admission-init", "autoscaler"):
        assert cluster.policies_selecting(pods[name], "Ingress") and cluster.policies_selecting(
            pods[name], "Egress"
        )
    assert {namespace for namespace, _ in templates} >= {"kube-system", PLATFORM_NAMESPACE, TEAM_A}


# --- The labels the policies select, as the vendored charts give them --------------------------------


def _template(chart: Path, name: str) -> str:
    return (REPO_ROOT / chart / "templates" / name).read_text()


def test_the_vendored_charts_label_their_pods_as_the_policies_select_them() -> None:
    volcano = Path(VOLCANO_CHART.directory)
    for file, labels in (
        ("admission.yaml", VOLCANO_ADMISSION_LABELS),
        ("controllers.yaml", VOLCANO_CONTROLLER_LABELS),
        ("scheduler.yaml", VOLCANO_SCHEDULER_LABELS),
    ):
        [(key, value)] = labels.items()
        # The Deployment's pod template: "template:", "metadata:" (maybe annotations), "labels:", the label.
        pattern = rf"\n  template:\n    metadata:\n(?:      annotations:\n(?:        .*\n)+)?      labels:\n        {key}: {value}\n"
        assert re.search(pattern, _template(volcano, file)), file
    # The hook Job's pod template carries no labels: the Job controller's job-name label selects it.
    init = _template(volcano, "admission-init.yaml")
    [job] = [part for part in init.split("\n---") if "kind: Job" in part]
    assert "name: {{ .Release.Name }}-admission-init" in job  # the release is "volcano"
    assert "\n  template:\n    spec:\n" in job
    assert VOLCANO_ADMISSION_INIT_LABELS == {"batch.kubernetes.io/job-name": "volcano-admission-init"}
    # The webhook's port: the chart's value, the Service's targetPort.
    values = (REPO_ROOT / volcano / "values.yaml").read_text()
    assert f"\n  admission_port: {VOLCANO_WEBHOOK_PORT}\n" in values
    assert "targetPort: {{.Values.basic.admission_port}}" in _template(volcano, "admission.yaml").replace(
        " }}", "}}"
    )

    autoscaler = Path(CLUSTER_AUTOSCALER_CHART.directory)
    helpers = _template(autoscaler, "_helpers.tpl")
    assert 'default (printf "%s-%s" .Values.cloudProvider .Chart.Name) .Values.nameOverride' in helpers
    assert "app.kubernetes.io/instance: {{ .Release.Name | quote }}" in helpers
    assert "name: cluster-autoscaler\n" in (REPO_ROOT / autoscaler / "Chart.yaml").read_text()
    assert AUTOSCALER_POD_LABELS == {
        "app.kubernetes.io/instance": CLUSTER_AUTOSCALER,  # the release's name
        "app.kubernetes.io/name": "aws-cluster-autoscaler",
    }


def test_the_releases_go_in_after_their_policies() -> None:
    from tests.k8s_charts.network.test_netpol import EXAMPLE_CONFIG, load_config  # noqa: PLC0415
    from tests.plans import shared_review_plan  # noqa: PLC0415

    plan = shared_review_plan(load_config(EXAMPLE_CONFIG))
    steps = {step.name: step for step in plan.steps}
    names = [step.name for step in plan.steps]
    assert "volcano-network" in steps[VOLCANO].after
    assert names.index("volcano-namespace") < names.index("volcano-network") < names.index(VOLCANO)
    assert steps[VOLCANO].release == "volcano"  # the admission-init Job's name: <release>-admission-init
    assert "cluster-autoscaler-network" in steps[CLUSTER_AUTOSCALER].after
    assert names.index("cluster-autoscaler-network") < names.index(CLUSTER_AUTOSCALER)
    # The values set the cloud provider and no name override: the labels are made from them.
    assert steps[CLUSTER_AUTOSCALER].values["cloudProvider"] == "aws"
    assert "nameOverride" not in steps[CLUSTER_AUTOSCALER].values
