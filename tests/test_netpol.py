"""tests/netpol.py on hand-written policies, then today's facts about the project's rendered policies."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

import pytest

from cluster_facts.kubernetes_names import (
    ETCD_CLIENT_PORT,
    PLATFORM_NAMESPACE,
    TORCHX_POD_LABELS,
    TRAINING_NAMESPACE,
    TRAINING_POD_LABELS,
)
from config import load_config
from stacks.kubernetes_values import review_plan
from tests.conftest import DEFAULT_CONFIG
from tests.netpol import NAMESPACE_NAME_LABEL, Cluster, NetworkPolicyError, Pod

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


# --- Today's facts: the project's rendered objects (config/default.yaml, as `make synth` writes them) ---


@cache
def rendered() -> tuple[dict[str, Any], ...]:
    plan = review_plan(load_config(DEFAULT_CONFIG))
    return tuple(dict(manifest) for step in plan.manifest_sets() for manifest in step.manifests)


def rendered_workload(kind: str, name: str) -> dict[str, Any]:
    """The one rendered workload of ``kind`` named ``name``, or ``name-<hash>`` (runs, staging Jobs)."""
    [workload] = [
        m
        for m in rendered()
        if m["kind"] == kind and re.fullmatch(rf"{re.escape(name)}(-[0-9a-f]{{8}})?", m["metadata"]["name"])
    ]
    return workload


def pod_labels(kind: str, name: str) -> dict[str, str]:
    """The labels of the pods a rendered workload creates (a Volcano Job: its single task's)."""
    workload = rendered_workload(kind, name)
    spec = workload["spec"]
    [template] = [spec["template"]] if "template" in spec else [task["template"] for task in spec["tasks"]]
    return dict(template["metadata"]["labels"])


def workload_pod(kind: str, name: str, ip: str) -> Pod:
    workload = rendered_workload(kind, name)
    return Pod(workload["metadata"]["namespace"], pod_labels(kind, name), ip, workload["metadata"]["name"])


@pytest.fixture(scope="module")
def project() -> dict[str, Pod]:
    return {
        "etcd": workload_pod("Deployment", "etcd-server", "10.0.1.5"),
        "train": workload_pod("Job", "bert-large", "10.0.1.20"),
        "data-staging": workload_pod("Job", "stage-bert-wikicorpus-128", "10.0.1.22"),
        "neuron-device-plugin": workload_pod("DaemonSet", "neuron-device-plugin", "10.0.1.30"),
        # TorchX submits its own Volcano Jobs; its scheduler labels every pod it creates.
        "torchx": Pod(
            TRAINING_NAMESPACE, {**TORCHX_POD_LABELS, "app.kubernetes.io/name": "bert"}, "10.0.1.40", "torchx"
        ),
        # Anyone allowed to create pods in the namespace can put either label on any pod.
        "self-labelled-torchx": Pod(TRAINING_NAMESPACE, dict(TORCHX_POD_LABELS), "10.0.1.41", "debug-shell"),
        "self-labelled-training": Pod(
            TRAINING_NAMESPACE, dict(TRAINING_POD_LABELS), "10.0.1.42", "debug-shell-2"
        ),
        "unlabelled": Pod(TRAINING_NAMESPACE, {"app": "notebook"}, "10.0.1.43", "notebook"),
        "other-namespace-training-label": Pod("default", dict(TRAINING_POD_LABELS), "10.0.2.10", "elsewhere"),
    }


@pytest.fixture(scope="module")
def today(project: dict[str, Pod]) -> Cluster:
    return Cluster(rendered(), project.values())


def test_the_project_renders_the_policies_these_facts_are_about(
    today: Cluster, project: dict[str, Pod]
) -> None:
    assert today.policies_selecting(project["etcd"], "Ingress") == [f"{TRAINING_NAMESPACE}/etcd-server"]
    assert today.policies_selecting(project["neuron-device-plugin"], "Ingress") == [
        "kube-system/neuron-device-plugin"
    ]
    assert today.policies_selecting(project["data-staging"], "Ingress") == [
        f"{PLATFORM_NAMESPACE}/{project['data-staging'].name}"
    ]
    assert TRAINING_POD_LABELS.items() <= project["train"].labels.items()


@pytest.mark.parametrize("client", ["train", "torchx", "self-labelled-torchx", "self-labelled-training"])
def test_etcd_admits_every_pod_of_the_namespace_that_carries_a_client_label(
    today: Cluster, project: dict[str, Pod], client: str
) -> None:
    """A label is not an identity: any pod in the training namespace that sets the TorchX (or the
    training) label reaches etcd, whatever it runs."""
    assert today.may_connect(project[client], project["etcd"], ETCD_CLIENT_PORT)


@pytest.mark.parametrize(
    "client", ["data-staging", "unlabelled", "other-namespace-training-label", "neuron-device-plugin"]
)
def test_etcd_refuses_pods_without_a_client_label_or_outside_the_namespace(
    today: Cluster, project: dict[str, Pod], client: str
) -> None:
    assert not today.may_connect(project[client], project["etcd"], ETCD_CLIENT_PORT)


def test_etcd_admits_only_its_client_port(today: Cluster, project: dict[str, Pod]) -> None:
    assert not today.may_connect(project["train"], project["etcd"], 2380)
    assert not today.may_connect(project["train"], project["etcd"], ETCD_CLIENT_PORT, "UDP")
    assert not today.may_be_reached_from_ip(EXTERNAL, project["etcd"], ETCD_CLIENT_PORT)


@pytest.mark.parametrize("pod", ["train", "data-staging"])
def test_workload_pods_reach_the_instance_metadata_service_and_the_internet(
    today: Cluster, project: dict[str, Pod], pod: str
) -> None:
    """No Egress policy selects them today: IMDS (hop limit 1 drops the reply, but the request
    leaves) and any outside address are reachable on any port."""
    assert today.policies_selecting(project[pod], "Egress") == []
    assert today.may_connect_to_ip(project[pod], IMDS, 80)
    assert today.may_connect_to_ip(project[pod], EXTERNAL, 443)


def test_training_pods_accept_connections_from_any_pod(today: Cluster, project: dict[str, Pod]) -> None:
    """No Ingress policy selects the training pods: torchrun's and the collectives' ports are open
    to every pod of the cluster (the workers need each other; nothing else needs them)."""
    assert today.policies_selecting(project["train"], "Ingress") == []
    assert today.may_connect(project["other-namespace-training-label"], project["train"], 29500)
    assert today.may_connect(project["unlabelled"], project["train"], 29500)


def test_no_pod_may_connect_to_the_device_plugin(today: Cluster, project: dict[str, Pod]) -> None:
    plugin = project["neuron-device-plugin"]
    assert not any(
        today.may_connect(pod, plugin, port)
        for pod in project.values()
        if pod != plugin
        for port in (80, 443, 8080)
    )
