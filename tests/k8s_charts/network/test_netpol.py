"""tests/netpol.py on hand-written policies, then the facts of the project's rendered policies."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

import pytest

from cluster_facts.kubernetes_names import (
    ETCD_CLIENT_PORT,
    ETCD_PEER_PORT,
    PLATFORM_NAMESPACE,
    TORCHX_POD_LABELS,
    TRAINING_POD_LABELS,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_JOB_NAMESPACE_LABEL,
)
from config import load_config
from k8s_charts.network.tenant_network import API_SERVER_SERVICE_IPS
from tests.conftest import EXAMPLE_CONFIG
from tests.netpol import NAMESPACE_NAME_LABEL, Cluster, NetworkPolicyError, Pod
from tests.plans import shared_review_plan

IMDS = "169.254.169.254"
EXTERNAL = "203.0.113.10"  # TEST-NET-3: an address outside the cluster


def policy(name: str, namespace: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": dict(spec),
    }


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


WEB = Pod("shop", {"app": "web"}, "10.0.0.10", "web")
DB = Pod("shop", {"app": "db"}, "10.0.0.11", "db")
SHOP_OTHER = Pod("shop", {}, "10.0.0.12", "unlabelled")
MONITOR = Pod("ops", {"app": "prometheus"}, "10.0.1.10", "prometheus")
OPS_WEB = Pod("ops", {"app": "web"}, "10.0.1.11", "ops-web")
DEV_WEB = Pod("dev", {"app": "web"}, "10.0.2.10", "dev-web")
PODS = (WEB, DB, SHOP_OTHER, MONITOR, OPS_WEB, DEV_WEB)
NAMESPACES = (namespace("shop", team="a"), namespace("ops", team="platform"), namespace("dev", team="a"))


def cluster(*policies: dict[str, Any], **options: Any) -> Cluster:
    return Cluster([*NAMESPACES, *policies], PODS, **options)


# --- Isolation: which pods a policy selects, and for which direction ---


def test_without_policies_everything_may_connect() -> None:
    c = cluster()
    assert all(c.may_connect(a, b, 5432) for a in PODS for b in PODS)
    assert c.may_connect_to_ip(WEB, IMDS, 80)
    assert c.may_be_reached_from_ip(EXTERNAL, DB, 5432)


def test_an_empty_pod_selector_selects_every_pod_of_its_namespace_only() -> None:
    c = cluster(policy("deny-all", "shop", {"podSelector": {}}))  # Ingress by default, no rule
    for pod in (WEB, DB, SHOP_OTHER):
        assert not c.may_connect(MONITOR, pod, 80)
        assert not c.may_be_reached_from_ip(EXTERNAL, pod, 80)
        assert c.policies_selecting(pod, "Ingress") == ["shop/deny-all"]
    assert c.may_connect(WEB, MONITOR, 80)  # ops is not selected, and shop's egress is not isolated
    assert c.policies_selecting(MONITOR, "Ingress") == []


def test_policy_types_default_to_ingress_plus_egress_only_when_egress_rules_exist() -> None:
    only_ingress = cluster(
        policy("p", "shop", {"podSelector": {"matchLabels": {"app": "web"}}, "egress": []})
    )
    assert only_ingress.policies_selecting(WEB, "Egress") == []
    assert only_ingress.may_connect_to_ip(WEB, EXTERNAL, 443)
    assert not only_ingress.may_connect(MONITOR, WEB, 80)

    # An egress rule makes the policy an Egress one too, and its missing ingress rules deny all ingress.
    egress_rule = {"to": [{"podSelector": {"matchLabels": {"app": "db"}}}]}
    both = cluster(
        policy("p", "shop", {"podSelector": {"matchLabels": {"app": "web"}}, "egress": [egress_rule]})
    )
    assert both.policies_selecting(WEB, "Egress") == both.policies_selecting(WEB, "Ingress") == ["shop/p"]
    assert both.may_connect(WEB, DB, 5432)
    assert not both.may_connect_to_ip(WEB, EXTERNAL, 443)
    assert not both.may_connect(MONITOR, WEB, 80)


def test_an_egress_policy_without_rules_denies_all_egress_and_leaves_ingress_alone() -> None:
    c = cluster(
        policy(
            "no-egress", "shop", {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"]}
        )
    )
    assert not c.may_connect(WEB, DB, 5432)
    assert not c.may_connect_to_ip(WEB, IMDS, 80)
    assert not c.may_connect_to_ip(WEB, EXTERNAL, 443, "UDP")
    assert c.may_connect(MONITOR, WEB, 80)
    assert c.may_connect(DB, WEB, 80)  # DB is not selected


def test_a_rule_without_peers_or_ports_admits_everything() -> None:
    c = cluster(policy("allow-all", "shop", {"podSelector": {}, "ingress": [{}], "egress": [{}]}))
    assert c.may_connect(DEV_WEB, WEB, 1, "SCTP")
    assert c.may_be_reached_from_ip(EXTERNAL, DB, 65535, "UDP")
    assert c.may_connect_to_ip(WEB, IMDS, 80)


def test_empty_from_and_ports_lists_mean_everyone_and_every_port() -> None:
    c = cluster(policy("p", "shop", {"podSelector": {}, "ingress": [{"from": [], "ports": []}]}))
    assert c.may_be_reached_from_ip(EXTERNAL, WEB, 22, "UDP")


def test_a_peer_with_no_selector_and_no_ip_block_is_refused_as_the_api_server_does() -> None:
    """``from: [{}]`` reads like "from anyone" but is invalid ("must specify a peer")."""
    with pytest.raises(NetworkPolicyError, match="must specify a peer"):
        cluster(policy("p", "shop", {"podSelector": {}, "ingress": [{"from": [{}]}]}))
    with pytest.raises(NetworkPolicyError, match="must specify a peer"):
        cluster(policy("p", "shop", {"podSelector": {}, "egress": [{"to": [{}]}]}))


def test_every_pod_of_the_namespace_and_every_pod_of_the_cluster_are_written_with_empty_selectors() -> None:
    same_namespace = cluster(
        policy("p", "shop", {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]})
    )
    assert same_namespace.may_connect(SHOP_OTHER, DB, 5432)
    assert not same_namespace.may_connect(MONITOR, DB, 5432)
    assert not same_namespace.may_be_reached_from_ip(EXTERNAL, DB, 5432)

    whole_cluster = cluster(
        policy("p", "shop", {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]})
    )
    assert whole_cluster.may_connect(MONITOR, DB, 5432)
    assert whole_cluster.may_connect(DEV_WEB, DB, 5432)
    assert not whole_cluster.may_be_reached_from_ip(
        EXTERNAL, DB, 5432
    )  # selectors never name outside addresses


# --- Peers ---


def test_namespace_and_pod_selector_in_one_peer_are_an_and() -> None:
    peer = {
        "namespaceSelector": {"matchLabels": {"team": "platform"}},
        "podSelector": {"matchLabels": {"app": "prometheus"}},
    }
    c = cluster(
        policy("p", "shop", {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"from": [peer]}]})
    )
    assert c.may_connect(MONITOR, DB, 5432)
    assert not c.may_connect(OPS_WEB, DB, 5432)  # right namespace, wrong pod
    assert not c.may_connect(
        Pod("dev", {"app": "prometheus"}, "10.0.2.11"), DB, 5432
    )  # right pod, wrong namespace


def test_namespace_and_pod_selector_in_two_peers_are_an_or() -> None:
    peers = [
        {"namespaceSelector": {"matchLabels": {"team": "platform"}}},
        {"podSelector": {"matchLabels": {"app": "web"}}},
    ]
    c = cluster(
        policy("p", "shop", {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"from": peers}]})
    )
    assert c.may_connect(MONITOR, DB, 5432)
    assert c.may_connect(OPS_WEB, DB, 5432)  # any pod of ops
    assert c.may_connect(WEB, DB, 5432)  # app=web of the policy's namespace
    assert not c.may_connect(DEV_WEB, DB, 5432)  # app=web elsewhere is not of the policy's namespace
    assert not c.may_connect(SHOP_OTHER, DB, 5432)


def test_a_pod_selector_alone_names_pods_of_the_policy_namespace() -> None:
    c = cluster(
        policy(
            "p",
            "shop",
            {"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]},
        )
    )
    assert c.may_connect(WEB, DB, 5432)
    assert not c.may_connect(OPS_WEB, DB, 5432)
    assert not c.may_connect(DEV_WEB, DB, 5432)


def test_every_namespace_has_its_name_label_even_without_a_namespace_object() -> None:
    by_name = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "elsewhere"}}}
    c = Cluster([policy("p", "shop", {"podSelector": {}, "ingress": [{"from": [by_name]}]})])
    assert c.may_connect(Pod("elsewhere", {}, "10.9.0.1"), DB, 5432)
    assert not c.may_connect(MONITOR, DB, 5432)
    assert c.namespace_labels("elsewhere") == {NAMESPACE_NAME_LABEL: "elsewhere"}


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        ({"key": "app", "operator": "In", "values": ["web", "api"]}, {"web", "ops-web", "dev-web"}),
        (
            {"key": "app", "operator": "NotIn", "values": ["web"]},
            {"db", "unlabelled", "prometheus"},
        ),  # absent key matches
        ({"key": "app", "operator": "Exists"}, {"web", "db", "prometheus", "ops-web", "dev-web"}),
        ({"key": "app", "operator": "DoesNotExist"}, {"unlabelled"}),
    ],
)
def test_match_expressions(expression: dict[str, Any], matches: set[str]) -> None:
    peer = {"namespaceSelector": {}, "podSelector": {"matchExpressions": [expression]}}
    target = Pod("vault", {}, "10.0.9.9", "target")
    c = Cluster([policy("p", "vault", {"podSelector": {}, "ingress": [{"from": [peer]}]})], PODS)
    assert {pod.name for pod in PODS if c.may_connect(pod, target, 8200)} == matches


def test_ip_block_with_except() -> None:
    block = {"ipBlock": {"cidr": "0.0.0.0/0", "except": [f"{IMDS}/32", "10.0.0.0/8"]}}
    c = cluster(
        policy(
            "p",
            "shop",
            {
                "podSelector": {"matchLabels": {"app": "web"}},
                "policyTypes": ["Egress"],
                "egress": [{"to": [block]}],
            },
        )
    )
    assert c.may_connect_to_ip(WEB, EXTERNAL, 443)
    assert not c.may_connect_to_ip(WEB, IMDS, 80)
    assert not c.may_connect_to_ip(WEB, "10.200.0.1", 443)
    assert not c.may_connect_to_ip(WEB, "2001:db8::1", 443)  # an IPv4 block never matches IPv6
    assert not c.may_connect(WEB, DB, 5432)  # DB's address is in an excepted range


def test_ip_blocks_and_pod_addresses() -> None:
    """Whether an ipBlock matches a pod's address is left to the implementation: both are modelled."""
    spec = {
        "podSelector": {"matchLabels": {"app": "db"}},
        "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}]}],
    }
    assert cluster(policy("p", "shop", spec)).may_connect(WEB, DB, 5432)
    assert not cluster(policy("p", "shop", spec), ip_block_matches_pods=False).may_connect(WEB, DB, 5432)
    assert cluster(policy("p", "shop", spec)).may_be_reached_from_ip("10.0.0.200", DB, 5432)


def test_an_address_of_a_known_pod_is_that_pod() -> None:
    c = cluster(policy("db-deny", "shop", {"podSelector": {"matchLabels": {"app": "db"}}}))
    assert not c.may_connect_to_ip(WEB, DB.ip, 5432)  # DB's ingress applies
    assert c.may_connect_to_ip(WEB, "10.0.0.99", 5432)  # nobody's address: only WEB's egress applies
    assert not c.may_be_reached_from_ip(WEB.ip, DB, 5432)


# --- Ports ---


def test_a_port_without_protocol_is_tcp_and_a_protocol_without_port_is_every_port() -> None:
    rule = {"ports": [{"port": 53}, {"protocol": "UDP"}]}
    c = cluster(policy("p", "shop", {"podSelector": {}, "ingress": [rule]}))
    assert c.may_connect(MONITOR, DB, 53)
    assert not c.may_connect(MONITOR, DB, 54)
    assert c.may_connect(MONITOR, DB, 5353, "UDP")
    assert not c.may_connect(MONITOR, DB, 53, "SCTP")


def test_end_port_is_an_inclusive_range() -> None:
    c = cluster(
        policy("p", "shop", {"podSelector": {}, "ingress": [{"ports": [{"port": 32000, "endPort": 32768}]}]})
    )
    assert [port for port in (31999, 32000, 32400, 32768, 32769) if c.may_connect(MONITOR, DB, port)] == [
        32000,
        32400,
        32768,
    ]


@pytest.mark.parametrize(
    ("port", "message"),
    [
        ({"port": "http"}, "named port"),
        ({"endPort": 90}, "endPort may not be specified without port"),
        ({"port": 90, "endPort": 80}, "greater than or equal"),
        ({"protocol": "ICMP"}, "unsupported protocol"),
    ],
)
def test_unsupported_or_invalid_ports_are_refused(port: dict[str, Any], message: str) -> None:
    with pytest.raises(NetworkPolicyError, match=message):
        cluster(policy("p", "shop", {"podSelector": {}, "ingress": [{"ports": [port]}]}))


# --- Several policies, both ends ---


def test_policies_add_up() -> None:
    web_on_80 = {"from": [{"podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": 80}]}
    ops_on_9100 = {
        "from": [{"namespaceSelector": {"matchLabels": {"team": "platform"}}}],
        "ports": [{"port": 9100}],
    }
    c = cluster(
        policy("web", "shop", {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [web_on_80]}),
        policy("metrics", "shop", {"podSelector": {}, "ingress": [ops_on_9100]}),
    )
    assert c.policies_selecting(DB, "Ingress") == ["shop/web", "shop/metrics"]
    assert c.may_connect(WEB, DB, 80)
    assert c.may_connect(MONITOR, DB, 9100)
    assert not c.may_connect(WEB, DB, 9100)
    assert not c.may_connect(MONITOR, DB, 80)
    assert not c.may_connect(WEB, SHOP_OTHER, 80)  # SHOP_OTHER is selected only by "metrics"


def test_a_connection_needs_the_source_egress_and_the_destination_ingress() -> None:
    ingress_open = policy(
        "db-from-web", "shop", {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{}]}
    )
    egress_closed = policy(
        "web-no-egress", "shop", {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"]}
    )
    assert not cluster(ingress_open, egress_closed).may_connect(WEB, DB, 5432)
    assert cluster(ingress_open).may_connect(WEB, DB, 5432)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {
                "podSelector": {},
                "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}],
            },
            "both ipBlock",
        ),
        (
            {
                "podSelector": {},
                "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/24"]}}]}],
            },
            "strict subset",
        ),
        (
            {
                "podSelector": {},
                "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8"]}}]}],
            },
            "strict subset",
        ),
        ({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}, "cidr"),
        ({"podSelector": {}, "policyTypes": ["Sideways"]}, "policyTypes"),
        (
            {"podSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}},
            "at least one value",
        ),
        (
            {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}},
            "takes no values",
        ),
    ],
)
def test_policies_the_api_server_would_refuse_are_refused(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(NetworkPolicyError, match=message):
        cluster(policy("p", "shop", spec))


def test_a_policy_must_name_its_namespace() -> None:
    unplaced = policy("p", "shop", {"podSelector": {}})
    del unplaced["metadata"]["namespace"]
    with pytest.raises(NetworkPolicyError, match=r"no metadata\.namespace"):
        Cluster([unplaced])


# --- The project's facts: the example stack's rendered objects (two teams, as `make synth` writes them) ---
#
# docs/security-policies.md cites these tests by name.

TEAM_A, TEAM_B = "training", "research"
KUBE_DNS = Pod(
    "kube-system", {"k8s-app": "kube-dns", "eks.amazonaws.com/component": "coredns"}, "10.20.0.2", "coredns"
)
KUBERNETES_SERVICE = "172.20.0.1"  # the API server's ClusterIP (EKS picks 172.20.0.0/16 for a 10.x VPC)
API_ENDPOINT_ENI = "10.20.64.10"  # the API server's private endpoint: an ENI in the VPC


@cache
def rendered() -> tuple[dict[str, Any], ...]:
    plan = shared_review_plan(load_config(EXAMPLE_CONFIG))
    return tuple(dict(manifest) for step in plan.manifest_sets() for manifest in step.manifests)


def rendered_workload(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    """The one rendered workload of ``kind`` named ``name``, or ``name-<hash>`` (runs, staging Jobs)."""
    [workload] = [
        m
        for m in rendered()
        if m["kind"] == kind
        and re.fullmatch(rf"{re.escape(name)}(-[0-9a-f]{{8}})?", m["metadata"]["name"])
        and namespace in (None, m["metadata"].get("namespace"))
    ]
    return workload


def pod_labels(workload: Mapping[str, Any]) -> dict[str, str]:
    """The labels of the pods a rendered workload creates (a Volcano Job: its single task's)."""
    spec = workload["spec"]
    [template] = [spec["template"]] if "template" in spec else [task["template"] for task in spec["tasks"]]
    return dict(template["metadata"]["labels"])


def workload_pod(kind: str, name: str, ip: str, namespace: str | None = None) -> Pod:
    workload = rendered_workload(kind, name, namespace)
    return Pod(workload["metadata"]["namespace"], pod_labels(workload), ip, workload["metadata"]["name"])


def job_pod(job: str, namespace: str, template_labels: Mapping[str, str], ip: str, index: int = 0) -> Pod:
    """A pod as Volcano's job controller creates it: the template's labels, then its own over them
    (v1.15.1 pkg/controllers/job/job_controller_util.go, createJobPod)."""
    labels = {
        **template_labels,
        VOLCANO_JOB_NAME_LABEL: job,
        VOLCANO_JOB_NAMESPACE_LABEL: namespace,
        "volcano.sh/task-spec": "worker",
    }
    return Pod(namespace, labels, ip, f"{job}-worker-{index}")


def volcano_svc_policy(job: str, namespace: str) -> dict[str, Any]:
    """The NetworkPolicy Volcano's svc plugin creates for every Job that uses it
    (v1.15.1 pkg/controllers/job/plugins/svc/svc.go, createNetworkPolicyIfNotExist)."""
    same_job = {"matchLabels": {VOLCANO_JOB_NAME_LABEL: job, VOLCANO_JOB_NAMESPACE_LABEL: namespace}}
    return policy(
        job,
        namespace,
        {
            "podSelector": same_job,
            "ingress": [{"from": [{"podSelector": same_job}]}],
            "policyTypes": ["Ingress"],
        },
    )


@pytest.fixture(scope="module")
def project() -> dict[str, Pod]:
    run_a = rendered_workload("Job", "bert-large", TEAM_A)
    run_b = rendered_workload("Job", "llm", TEAM_B)
    return {
        "a-worker-0": job_pod(run_a["metadata"]["name"], TEAM_A, pod_labels(run_a), "10.20.1.20", 0),
        "a-worker-1": job_pod(run_a["metadata"]["name"], TEAM_A, pod_labels(run_a), "10.20.1.21", 1),
        # Another job of team A, submitted with TorchX (its pods carry TorchX's labels).
        "a-torchx": job_pod(
            "bert-torchx", TEAM_A, {**TORCHX_POD_LABELS, "app.kubernetes.io/name": "bert"}, "10.20.1.40"
        ),
        # Two of team A's etcd members (the StatefulSet's pods share their template's labels).
        "a-etcd": workload_pod("StatefulSet", "etcd-server", "10.20.1.5", TEAM_A),
        "a-etcd-1": workload_pod("StatefulSet", "etcd-server", "10.20.1.6", TEAM_A),
        # A pod of team A's namespace that is not a Volcano job's (what the admission policy allows:
        # it cannot carry volcano.sh/job-name), with the labels anyone can set.
        "a-self-labelled": Pod(
            TEAM_A, {**TORCHX_POD_LABELS, **TRAINING_POD_LABELS}, "10.20.1.41", "debug-shell"
        ),
        "b-worker-0": job_pod(run_b["metadata"]["name"], TEAM_B, pod_labels(run_b), "10.20.2.20"),
        "b-etcd": workload_pod("StatefulSet", "etcd-server", "10.20.2.5", TEAM_B),
        "staging": workload_pod("Job", "stage-wikitext", "10.20.3.22"),
        "tensorboard": workload_pod("Deployment", "tensorboard", "10.20.3.30"),
        "fsx-layout": workload_pod("Job", "fsx-layout", "10.20.3.31"),
        "neuron-device-plugin": workload_pod("DaemonSet", "neuron-device-plugin", "10.20.1.30"),
        "default-pod": Pod("default", dict(TRAINING_POD_LABELS), "10.20.4.10", "elsewhere"),
        "kube-dns": KUBE_DNS,
    }


@pytest.fixture(scope="module")
def cluster_now(project: dict[str, Pod]) -> Cluster:
    """The rendered policies plus the ones Volcano's svc plugin creates for the three jobs."""
    volcano = [
        volcano_svc_policy(project[pod].labels[VOLCANO_JOB_NAME_LABEL], project[pod].namespace)
        for pod in ("a-worker-0", "a-torchx", "b-worker-0")
    ]
    return Cluster([*rendered(), *volcano], project.values())


def test_every_team_namespace_denies_by_default(cluster_now: Cluster, project: dict[str, Pod]) -> None:
    for team in (TEAM_A, TEAM_B):
        unlabelled = Pod(team, {}, "10.20.9.9", "new")
        assert f"{team}/default-deny" in cluster_now.policies_selecting(unlabelled, "Ingress")
        assert f"{team}/default-deny" in cluster_now.policies_selecting(unlabelled, "Egress")
    for pod in project.values():
        if pod.namespace in (TEAM_A, TEAM_B, PLATFORM_NAMESPACE):
            assert cluster_now.policies_selecting(pod, "Egress"), pod.name


def test_a_team_pod_reaches_its_own_etcd_its_peers_and_dns(
    cluster_now: Cluster, project: dict[str, Pod]
) -> None:
    worker, peer = project["a-worker-0"], project["a-worker-1"]
    # Through the Service, and each member by its own address (python-etcd fails over to the
    # members' client URLs from /v2/machines when one is gone).
    for member in ("a-etcd", "a-etcd-1"):
        assert cluster_now.may_connect(worker, project[member], ETCD_CLIENT_PORT)
    for port in (29500, 40000, 62000):  # torchrun's store and the collectives' bootstrap, chosen at run time
        assert cluster_now.may_connect(worker, peer, port) and cluster_now.may_connect(peer, worker, port)
    assert cluster_now.may_connect(worker, KUBE_DNS, 53, "UDP") and cluster_now.may_connect(
        worker, KUBE_DNS, 53, "TCP"
    )
    assert cluster_now.may_connect(project["a-torchx"], project["a-etcd"], ETCD_CLIENT_PORT)


def test_dns_and_etcd_rules_use_their_services_selectors(cluster_now: Cluster) -> None:
    """The VPC CNI admits a Service's ClusterIP only when the egress rule selects the Service's
    pods with the Service's own selector; pods dial kube-dns and etcd-server by ClusterIP."""
    [job_pods] = [
        m
        for m in rendered()
        if m["kind"] == "NetworkPolicy"
        and m["metadata"]["name"] == "volcano-job-pods"
        and m["metadata"]["namespace"] == TEAM_A
    ]
    selectors = [
        peer.get("podSelector") for rule in job_pods["spec"]["egress"] for peer in rule.get("to", [])
    ]
    [etcd_service] = [
        m
        for m in rendered()
        if m["kind"] == "Service"
        and m["metadata"]["name"] == "etcd-server"
        and m["metadata"]["namespace"] == TEAM_A
    ]
    assert {"matchLabels": etcd_service["spec"]["selector"]} in selectors
    assert {"matchLabels": {"k8s-app": "kube-dns"}} in selectors  # EKS's kube-dns Service selector


def test_a_team_pod_cannot_reach_another_teams_etcd_or_workers(
    cluster_now: Cluster, project: dict[str, Pod]
) -> None:
    for source, target in (("a-worker-0", "b-etcd"), ("b-worker-0", "a-etcd")):
        assert not cluster_now.may_connect(project[source], project[target], ETCD_CLIENT_PORT)
    for port in (22, 29500, 40000):
        assert not cluster_now.may_connect(project["a-worker-0"], project["b-worker-0"], port)
        assert not cluster_now.may_connect(project["b-worker-0"], project["a-worker-0"], port)


def test_a_worker_admits_only_its_own_jobs_pods(cluster_now: Cluster, project: dict[str, Pod]) -> None:
    worker = project["a-worker-0"]
    for source in ("a-torchx", "a-self-labelled", "b-worker-0", "staging", "tensorboard", "default-pod"):
        assert not cluster_now.may_connect(project[source], worker, 29500), source
    assert not cluster_now.may_be_reached_from_ip(EXTERNAL, worker, 29500)


def test_workers_of_a_job_without_volcanos_policy_admit_no_one(project: dict[str, Pod]) -> None:
    """Peers rely on the svc plugin's policy: without it the namespace's default-deny refuses
    them (closed, not open)."""
    without = Cluster(rendered(), project.values())
    assert not without.may_connect(project["a-worker-1"], project["a-worker-0"], 29500)


def test_etcd_admits_only_volcano_job_pods_of_its_namespace(
    cluster_now: Cluster, project: dict[str, Pod]
) -> None:
    etcd = project["a-etcd"]
    for source in (
        "a-self-labelled",
        "b-worker-0",
        "b-etcd",
        "staging",
        "default-pod",
        "neuron-device-plugin",
    ):
        assert not cluster_now.may_connect(project[source], etcd, ETCD_CLIENT_PORT), source
        assert not cluster_now.may_connect(project[source], etcd, ETCD_PEER_PORT), source
    assert not cluster_now.may_connect(project["a-worker-0"], etcd, ETCD_PEER_PORT)
    assert not cluster_now.may_be_reached_from_ip(EXTERNAL, etcd, ETCD_CLIENT_PORT)


def test_etcd_members_reach_each_other_and_dns_only(cluster_now: Cluster, project: dict[str, Pod]) -> None:
    """Raft between the members on the peer port; the init container's membership calls on the
    client port; names through DNS. Nothing else: not the workers, another team's etcd, outside."""
    member, other = project["a-etcd"], project["a-etcd-1"]
    for port in (ETCD_CLIENT_PORT, ETCD_PEER_PORT):
        assert cluster_now.may_connect(member, other, port) and cluster_now.may_connect(other, member, port)
        assert not cluster_now.may_connect(member, project["b-etcd"], port)
    assert cluster_now.may_connect(member, KUBE_DNS, 53, "UDP")
    for target in ("a-worker-0", "a-torchx", "tensorboard", "staging"):
        assert not cluster_now.may_connect(member, project[target], 29500), target
    assert not cluster_now.may_connect_to_ip(member, EXTERNAL, 443)
    assert not cluster_now.may_connect_to_ip(member, KUBERNETES_SERVICE, 443)


@pytest.mark.parametrize(
    "pod", ["a-worker-0", "b-worker-0", "a-etcd", "staging", "tensorboard", "fsx-layout"]
)
def test_no_project_pod_reaches_the_instance_metadata_service(
    cluster_now: Cluster, project: dict[str, Pod], pod: str
) -> None:
    for port in (80, 443):
        assert not cluster_now.may_connect_to_ip(project[pod], IMDS, port)
    assert not cluster_now.may_connect_to_ip(project[pod], "169.254.170.23", 80)  # Pod Identity agent


@pytest.mark.parametrize("pod", ["a-worker-0", "staging"])
def test_https_goes_outside_the_cluster_only(cluster_now: Cluster, project: dict[str, Pod], pod: str) -> None:
    source = project[pod]
    assert cluster_now.may_connect_to_ip(source, EXTERNAL, 443)
    for port in (22, 80, 8080):
        assert not cluster_now.may_connect_to_ip(source, EXTERNAL, port)
    for address in (KUBERNETES_SERVICE, API_ENDPOINT_ENI, "10.20.1.10", "192.168.1.1", "100.64.0.1"):
        assert not cluster_now.may_connect_to_ip(source, address, 443), address
    assert not cluster_now.may_connect(source, project["b-worker-0"], 443)


def test_platform_services_reach_nothing(cluster_now: Cluster, project: dict[str, Pod]) -> None:
    for pod in ("tensorboard", "fsx-layout"):
        assert not cluster_now.may_connect_to_ip(project[pod], EXTERNAL, 443), pod
        assert not cluster_now.may_connect(project[pod], KUBE_DNS, 53, "UDP"), pod


def test_nothing_reaches_the_platform_pods(cluster_now: Cluster, project: dict[str, Pod]) -> None:
    for target in ("staging", "tensorboard", "fsx-layout"):
        for source in ("a-worker-0", "b-worker-0", "a-etcd", "staging"):
            assert not cluster_now.may_connect(project[source], project[target], 6006), (source, target)
    for target in ("staging", "fsx-layout"):
        assert not cluster_now.may_connect(project["default-pod"], project[target], 6006), target


def test_the_api_servers_service_proxy_reaches_tensorboard_on_its_port_only(
    cluster_now: Cluster, project: dict[str, Pod]
) -> None:
    """make canary reads TensorBoard's run list through the API server's service proxy: the API
    server dials the pod from the control plane's interfaces in the VPC (k8s_charts/runs/tensorboard.py)."""
    tensorboard = project["tensorboard"]
    assert cluster_now.may_be_reached_from_ip(API_ENDPOINT_ENI, tensorboard, 6006)
    assert not cluster_now.may_be_reached_from_ip(API_ENDPOINT_ENI, tensorboard, 22)
    assert not cluster_now.may_be_reached_from_ip(EXTERNAL, tensorboard, 6006)
    # The block holds the pods' addresses too: what stops a team's pods is their own egress ...
    for source in ("a-worker-0", "a-torchx", "a-self-labelled", "b-worker-0"):
        assert not cluster_now.may_connect(project[source], tensorboard, 6006), source
    # ... and a pod of a namespace without an egress policy (the cluster's own components) reaches it,
    # as the module says; the other platform pods admit no one.
    assert cluster_now.may_connect(project["default-pod"], tensorboard, 6006)
    assert not cluster_now.may_connect(project["default-pod"], tensorboard, 6007)


def test_no_pod_may_connect_to_the_device_plugin(cluster_now: Cluster, project: dict[str, Pod]) -> None:
    plugin = project["neuron-device-plugin"]
    assert not any(
        cluster_now.may_connect(pod, plugin, port)
        for pod in project.values()
        if pod != plugin
        for port in (80, 443, 8080)
    )


# --- The fabric check in the platform namespace -------------------------------------------------


def test_the_fabric_checks_pods_reach_each_other_dns_and_only_the_api_server_on_443() -> None:
    """trainium-system denies everything by default: the check's own policy must let its launcher
    and workers talk (SSH, mpirun, the runtime's bootstrap), resolve names, and let the launcher
    reach the API server to taint nodes. Nothing else gets in or out."""
    config = load_config(EXAMPLE_CONFIG)
    objects = [
        dict(manifest)
        for step in shared_review_plan(config).steps
        for manifest in getattr(step, "manifests", ())
    ]
    cluster = Cluster(objects)
    [job] = [
        o
        for o in objects
        if o["kind"] == "Job"
        and o["metadata"]["namespace"] == "trainium-system"
        and o["metadata"]["name"] == "fabric-check-trn1n-32xl"
    ]
    volcano = {"volcano.sh/job-name": job["metadata"]["name"], "volcano.sh/job-namespace": "trainium-system"}
    tasks = {
        task["name"]: {**task["template"]["metadata"]["labels"], **volcano} for task in job["spec"]["tasks"]
    }
    launcher = Pod("trainium-system", tasks["launcher"], "10.0.5.1", "launcher")
    worker = Pod("trainium-system", tasks["worker"], "10.0.5.2", "worker")
    dns = Pod("kube-system", {"k8s-app": "kube-dns"}, "10.0.6.2", "coredns")
    tensorboard = Pod("trainium-system", {"app.kubernetes.io/name": "tensorboard"}, "10.0.5.9", "tensorboard")
    assert cluster.may_connect(launcher, worker, 22)
    assert cluster.may_connect(worker, launcher, 41000)  # the runtime's bootstrap: a dynamic port
    assert cluster.may_connect(worker, dns, 53, "UDP")
    assert cluster.may_connect_to_ip(launcher, "10.20.0.10", 443)  # an API server endpoint in the VPC
    # The kubernetes Service's address, which the VPC CNI's policy agent judges (before translation).
    assert all(cluster.may_connect_to_ip(launcher, ip, 443) for ip in API_SERVER_SERVICE_IPS)
    assert not cluster.may_connect_to_ip(launcher, API_SERVER_SERVICE_IPS[0], 80)
    assert not cluster.may_connect_to_ip(worker, "10.20.0.10", 443)  # only the launcher taints
    assert not any(cluster.may_connect_to_ip(worker, ip, 443) for ip in API_SERVER_SERVICE_IPS)
    assert not cluster.may_connect_to_ip(launcher, "169.254.169.254", 80)
    assert not cluster.may_connect_to_ip(worker, "203.0.113.7", 443)
    assert not cluster.may_connect(tensorboard, worker, 22)
