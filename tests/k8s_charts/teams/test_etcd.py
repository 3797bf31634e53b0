"""EtcdChart: a team's three-member v2-API etcd that TorchElastic's rendezvous dials at etcd-server:2379.

What the members do when one is lost or replaced is shown with the real programs in
tests/runtime/test_etcd_members.py; what the API server, the scheduler and the disruption controller
decide about these objects, in tests/cluster/test_etcd.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import ETCD_REPLICAS, VOLCANO_JOB_NAME_LABEL
from k8s_charts.checks.gang_watchdog import DEFAULT_IMAGE as WATCHDOG_IMAGE
from k8s_charts.teams.etcd import MEMBER_IMAGE, MEMBER_PROGRAM, EtcdChart
from tests.k8s_charts.manifests import only, pod_spec, synth
from tests.k8s_validation import assert_valid
from tests.pod_programs import program
from tests.runtime.harness import option_value

LABELS = {"app.kubernetes.io/name": "etcd", "app.kubernetes.io/component": "rendezvous"}


def etcd(**props: Any) -> list[dict[str, Any]]:
    props.setdefault("namespace", "training")
    manifests = synth(lambda app: EtcdChart(app, "etcd", **props))
    assert_valid(manifests)
    return manifests


@pytest.fixture(scope="module")
def manifests() -> list[dict[str, Any]]:
    return etcd()


def container(manifests: list[dict[str, Any]], which: str = "containers") -> dict[str, Any]:
    [found] = pod_spec(only(manifests, "StatefulSet"))[which]
    return dict(found)


def service(manifests: list[dict[str, Any]], name: str) -> dict[str, Any]:
    [found] = [m for m in manifests if m["kind"] == "Service" and m["metadata"]["name"] == name]
    return found


def test_chart_is_a_statefulset_its_budget_two_services_and_a_network_policy(manifests) -> None:
    assert sorted(manifest["kind"] for manifest in manifests) == [
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "Service",
        "StatefulSet",
    ]
    assert {manifest["metadata"]["namespace"] for manifest in manifests} == {"training"}


def test_three_members_start_together_and_are_replaced_one_at_a_time(manifests) -> None:
    statefulset = only(manifests, "StatefulSet")["spec"]
    assert statefulset["replicas"] == ETCD_REPLICAS == 3
    # A member is ready only once the cluster has a quorum: started one by one, none would be.
    assert statefulset["podManagementPolicy"] == "Parallel"
    assert statefulset["updateStrategy"] == {"type": "RollingUpdate"}
    assert statefulset["selector"] == {"matchLabels": LABELS}
    assert statefulset["template"]["metadata"]["labels"] == LABELS
    assert statefulset["serviceName"] == "etcd-server-peers"


def test_a_drain_takes_one_member_at_a_time_and_a_broken_one_never_blocks_it(manifests) -> None:
    budget = only(manifests, "PodDisruptionBudget")["spec"]
    assert budget == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": LABELS},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }


def test_members_spread_over_the_untainted_nodes(manifests) -> None:
    by_key = {
        c["topologyKey"]: c for c in pod_spec(only(manifests, "StatefulSet"))["topologySpreadConstraints"]
    }
    hostname = by_key["kubernetes.io/hostname"]
    # At most one more on any node than on another; tainted (Trainium) nodes are not counted.
    assert (hostname["maxSkew"], hostname["whenUnsatisfiable"], hostname["nodeTaintsPolicy"]) == (
        1,
        "DoNotSchedule",
        "Honor",
    )
    assert hostname["labelSelector"] == {"matchLabels": LABELS}
    assert by_key["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "ScheduleAnyway"


def test_etcd_reads_the_configuration_its_init_container_writes(manifests) -> None:
    etcd_container, member = container(manifests), container(manifests, "initContainers")
    config = option_value(member["args"], "--config")
    assert etcd_container["args"] == [f"--config-file={config}"]
    assert member["command"] == ["python3", "-c", MEMBER_PROGRAM]
    assert MEMBER_IMAGE == WATCHDOG_IMAGE  # the platform's Python image
    mounts = {json.dumps(c["volumeMounts"]) for c in (etcd_container, member)}
    [[mount]] = [json.loads(m) for m in mounts]
    assert config.startswith(mount["mountPath"] + "/")
    [volume] = pod_spec(only(manifests, "StatefulSet"))["volumes"]
    assert volume["name"] == mount["name"] and "emptyDir" in volume
    assert option_value(member["args"], "--data-dir").startswith(mount["mountPath"] + "/")
    assert member["env"] == [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]


def test_each_member_serves_the_v2_api_under_its_own_name(manifests) -> None:
    args = container(manifests, "initContainers")["args"]
    assert "--enable-v2=true" in args
    assert option_value(args, "--name") == "$(POD_NAME)"
    assert option_value(args, "--listen-client-urls") == "http://0.0.0.0:2379"
    assert option_value(args, "--listen-peer-urls") == "http://0.0.0.0:2380"
    own = "$(POD_NAME).etcd-server-peers.training.svc"
    assert option_value(args, "--advertise-client-urls") == f"http://{own}:2379"
    assert option_value(args, "--initial-advertise-peer-urls") == f"http://{own}:2380"
    names = [f"etcd-server-{i}" for i in range(3)]
    assert option_value(args, "--initial-cluster") == ",".join(
        f"{name}=http://{name}.etcd-server-peers.training.svc:2380" for name in names
    )
    assert option_value(args, "--members") == ",".join(
        f"{name}=http://{name}.etcd-server-peers.training.svc:2379" for name in names
    )
    assert option_value(args, "--initial-cluster-token") == "etcd-training"


def test_image_is_a_pinned_3_5_release(manifests) -> None:
    # etcd 3.6 removed the v2 API that TorchElastic needs.
    assert re.fullmatch(r"[\w./-]+/etcd:v?3\.5\.\d+(-\d+)?", container(manifests)["image"])


def test_probes_ask_etcd_itself_on_its_metrics_listener(manifests) -> None:
    """With the v2 API on, the client port (2379) answers /readyz and /livez with 404 (etcd 3.5's v2
    client handler; tests/cluster/test_run_pods.py runs the members): the probes ask the metrics
    listener, which the members' flags open."""
    etcd_container = container(manifests)
    assert etcd_container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 2381}
    assert etcd_container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": 2381}
    args = container(manifests, "initContainers")["args"]
    assert "--enable-v2=true" in args
    assert "--listen-metrics-urls=http://0.0.0.0:2381" in args


def test_runs_as_non_root_with_requests_and_limits(manifests) -> None:
    spec = pod_spec(only(manifests, "StatefulSet"))
    assert spec["securityContext"]["runAsNonRoot"] is True
    for each in (container(manifests), container(manifests, "initContainers")):
        assert each["securityContext"]["allowPrivilegeEscalation"] is False
        assert each["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert each["securityContext"]["readOnlyRootFilesystem"] is True
        assert set(each["resources"]["limits"]) == set(each["resources"]["requests"]) == {"cpu", "memory"}
    # Go's collector keeps etcd under its memory limit.
    assert container(manifests)["env"] == [
        {
            "name": "GOMEMLIMIT",
            "valueFrom": {"resourceFieldRef": {"containerName": "etcd", "resource": "limits.memory"}},
        }
    ]


def test_the_launchers_service_is_etcd_server_on_the_ready_members(manifests) -> None:
    client = service(manifests, "etcd-server")["spec"]
    assert client["type"] == "ClusterIP"
    [port] = client["ports"]
    assert (port["port"], port["targetPort"]) == (2379, 2379)
    assert "nodePort" not in port
    assert client["selector"] == LABELS
    assert "publishNotReadyAddresses" not in client


def test_the_peer_service_names_every_member_before_it_is_ready(manifests) -> None:
    peers = service(manifests, "etcd-server-peers")["spec"]
    assert peers["clusterIP"] == "None"
    assert peers["publishNotReadyAddresses"] is True
    assert peers["selector"] == LABELS
    assert sorted((p["port"], p["targetPort"]) for p in peers["ports"]) == [(2379, 2379), (2380, 2380)]


def test_network_policy_admits_volcano_job_pods_and_the_members_only(manifests) -> None:
    """volcano.sh/job-name, which only Volcano's job controller may set in a team's namespace
    (k8s_charts/teams/job_pod_admission.py); not a label anyone can put on their own pod."""
    policy = only(manifests, "NetworkPolicy")["spec"]
    members = {"podSelector": {"matchLabels": LABELS}}
    both = [{"port": 2379, "protocol": "TCP"}, {"port": 2380, "protocol": "TCP"}]
    assert policy["podSelector"] == {"matchLabels": LABELS}
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["ingress"] == [
        {
            "from": [
                {"podSelector": {"matchExpressions": [{"key": VOLCANO_JOB_NAME_LABEL, "operator": "Exists"}]}}
            ],
            "ports": [{"port": 2379, "protocol": "TCP"}],
        },
        {"from": [members], "ports": both},
    ]
    dns, peers = policy["egress"]
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert peers == {"to": [members], "ports": both}


def test_client_label_and_namespace_are_applied() -> None:
    manifests = etcd(namespace="research", client_label="example.com/job")
    assert {manifest["metadata"]["namespace"] for manifest in manifests} == {"research"}
    first, _ = only(manifests, "NetworkPolicy")["spec"]["ingress"]
    assert first["from"] == [
        {"podSelector": {"matchExpressions": [{"key": "example.com/job", "operator": "Exists"}]}}
    ]
    args = container(manifests, "initContainers")["args"]
    assert option_value(args, "--initial-cluster-token") == "etcd-research"
    assert ".etcd-server-peers.research.svc:" in option_value(args, "--initial-cluster")


def test_an_empty_client_label_is_refused() -> None:
    # An empty podSelector would admit every pod of the namespace.
    with pytest.raises(ValueError, match="client_label"):
        etcd(client_label="")


# The init container's program (its decisions against real members: tests/runtime/test_etcd_members.py).


def test_the_program_writes_etcds_flags_as_its_configuration_file() -> None:
    member = program("etcd_member")
    config = member.etcd_flags(
        [
            "--name=a",
            "--data-dir=/d",
            "--enable-v2=true",
            "--initial-advertise-peer-urls=http://a:2380",
            "--initial-cluster=a=http://a:2380",
        ]
    )
    assert config == {
        "name": "a",
        "data-dir": "/d",
        "enable-v2": True,
        "initial-advertise-peer-urls": "http://a:2380",
        "initial-cluster": "a=http://a:2380",
    }
    with pytest.raises(SystemExit, match="--data-dir is required"):
        member.etcd_flags(["--name=a"])
    with pytest.raises(SystemExit, match="--key=value"):
        member.etcd_flags(["--name", "a"])


def test_a_joining_member_lists_the_running_cluster_under_its_own_name() -> None:
    members = [
        {"ID": "1", "name": "etcd-server-1", "peerURLs": ["http://b:2380"]},
        {"ID": "7", "peerURLs": ["http://a:2380"]},  # just added: no name until it starts
        {"ID": "9", "peerURLs": ["http://c:2380"]},  # added by another, not started
    ]
    assert program("etcd_member").initial_cluster(members, "etcd-server-0", "http://a:2380") == (
        "etcd-server-0=http://a:2380,etcd-server-1=http://b:2380,member-9=http://c:2380"
    )


def test_data_is_a_write_ahead_log(tmp_path: Path) -> None:
    member = program("etcd_member")
    assert not member.has_data(tmp_path)
    (tmp_path / "member" / "wal").mkdir(parents=True)
    assert not member.has_data(tmp_path)
    (tmp_path / "member" / "wal" / "0000000000000000-0000000000000000.wal").write_bytes(b"x")
    assert member.has_data(tmp_path)
