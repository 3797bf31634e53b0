"""TensorBoardChart: TensorBoard over the runs on FSx, read-only, non-root, reachable by port-forward only."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from cluster_facts.images import is_pinned_image
from cluster_facts.kubernetes_names import (
    DATA_MOUNT,
    NEURON_TAINT_KEY,
    PLATFORM_NAMESPACE,
    TORCHX_POD_LABELS,
    TRAINING_POD_LABELS,
)
from cluster_facts.kubernetes_plan import ManifestSet
from cluster_facts.neuron_stack import TRAINING_IMAGE
from config import load_config, parse_config
from k8s_charts.plan import PLATFORM_STEP
from k8s_charts.runs.tensorboard import (
    DEFAULT_IMAGE,
    PORT,
    TENSORBOARD_LABELS,
    TensorBoardChart,
    runs_directory,
)
from tests.conftest import DEFAULT_CONFIG
from tests.k8s_charts.manifests import Manifest, only, pod_spec, synth
from tests.k8s_validation import assert_valid
from tests.netpol import Cluster, Pod
from tests.plans import shared_review_plan
from tests.yaml_edits import with_change

CLAIM = "fsx-abc123"


def tensorboard(**props: Any) -> list[Manifest]:
    props = {"namespace": PLATFORM_NAMESPACE, "claim_name": CLAIM, **props}
    manifests = synth(lambda app: TensorBoardChart(app, "tensorboard", **props))
    assert_valid(manifests)
    return manifests


@pytest.fixture(scope="module")
def manifests() -> list[Manifest]:
    return tensorboard()


def containers_by_name(manifests: list[Manifest]) -> dict[str, dict[str, Any]]:
    spec = pod_spec(only(manifests, "Deployment"))
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec["containers"]]}


def test_chart_is_a_deployment_a_service_and_a_network_policy(manifests: list[Manifest]) -> None:
    assert sorted((m["kind"], m["metadata"]["name"]) for m in manifests) == [
        ("Deployment", "tensorboard"),
        ("NetworkPolicy", "tensorboard"),
        ("Service", "tensorboard"),
    ]
    assert {m["metadata"]["namespace"] for m in manifests} == {PLATFORM_NAMESPACE}


def test_tensorboard_reads_the_runs_directory_through_the_claim_read_only(manifests: list[Manifest]) -> None:
    spec = pod_spec(only(manifests, "Deployment"))
    [data] = [volume for volume in spec["volumes"] if "persistentVolumeClaim" in volume]
    assert data["persistentVolumeClaim"] == {"claimName": CLAIM, "readOnly": True}
    server = containers_by_name(manifests)["tensorboard"]
    [mount] = [m for m in server["volumeMounts"] if m["name"] == data["name"]]
    assert mount == {"name": data["name"], "mountPath": DATA_MOUNT, "readOnly": True}
    # Each team's runs write their output (and the BERT script its neuron_tblogs_* directories) under
    # /teams/<team>/runs/<run id>/ of the file system: TensorBoard reads every team's directory.
    assert f"--logdir={DATA_MOUNT}/teams" in server["args"]
    assert runs_directory() == f"{DATA_MOUNT}/teams"


def test_the_logdir_is_where_the_runs_write(manifests: list[Manifest]) -> None:
    """The run Job's OUTPUT_DIR is /data/runs/<id> in a team's view: /teams/<team>/runs/<id> in TensorBoard's."""
    plan = shared_review_plan(load_config(DEFAULT_CONFIG))
    run = plan.step("run-bert-large")
    assert isinstance(run, ManifestSet)
    [job] = run.manifests
    [task] = job["spec"]["tasks"]
    [trainer] = task["template"]["spec"]["containers"]
    output_dir = {env["name"]: env.get("value") for env in trainer["env"]}["OUTPUT_DIR"]
    team = job["metadata"]["namespace"]
    assert output_dir == f"{DATA_MOUNT}/runs/{job['metadata']['name']}"
    team_storage = plan.step("fsx-storage")
    assert isinstance(team_storage, ManifestSet)
    [team_volume] = [m for m in team_storage.manifests if m["metadata"]["name"].endswith(f"-{team}")]
    assert team_volume["spec"]["csi"]["volumeAttributes"]["mountname"].endswith(f"/teams/{team}")


def test_runs_on_the_system_nodes_as_non_root_with_a_read_only_root(manifests: list[Manifest]) -> None:
    spec = pod_spec(only(manifests, "Deployment"))
    # No toleration of the Trainium taint (so never on a Trainium node) and no selector needed.
    assert "tolerations" not in spec
    assert "nodeSelector" not in spec and "affinity" not in spec
    assert NEURON_TAINT_KEY not in str(spec)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    for container in containers_by_name(manifests).values():
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        }
        assert {"cpu", "memory"} <= set(container["resources"]["requests"])
        assert {"cpu", "memory"} <= set(container["resources"]["limits"])
        assert is_pinned_image(container["image"]) and container["image"].startswith("public.ecr.aws/")


def test_memory_is_requested_and_limited_as_configured() -> None:
    resources = containers_by_name(tensorboard(memory_gib=6))["tensorboard"]["resources"]
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == "6Gi"


def test_nothing_is_installed_at_run_time_the_image_has_tensorboard(manifests: list[Manifest]) -> None:
    """trainium-system denies all egress: TensorBoard comes in the image (the training image, whose
    Dockerfile installs it), not from PyPI in an init container."""
    spec = pod_spec(only(manifests, "Deployment"))
    assert "initContainers" not in spec
    [server] = spec["containers"]
    assert server["command"] == ["python3", "-m", "tensorboard.main"]
    assert server["image"] == DEFAULT_IMAGE == TRAINING_IMAGE
    assert "pip" not in str(spec)


def test_service_is_cluster_ip_on_the_tensorboard_pods(manifests: list[Manifest]) -> None:
    service = only(manifests, "Service")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == TENSORBOARD_LABELS
    [port] = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (PORT, PORT)
    server = containers_by_name(manifests)["tensorboard"]
    assert f"--port={PORT}" in server["args"] and "--bind_all" in server["args"]
    assert server["readinessProbe"]["httpGet"]["port"] == PORT


def test_no_pod_may_connect_to_tensorboard(manifests: list[Manifest]) -> None:
    """Port-forward comes from the pod's own node, which NetworkPolicy never blocks; pods get nothing."""
    board = Pod(PLATFORM_NAMESPACE, TENSORBOARD_LABELS, "10.0.1.50", "tensorboard")
    others = [
        Pod(PLATFORM_NAMESPACE, TRAINING_POD_LABELS, "10.0.1.20", "train"),
        Pod(PLATFORM_NAMESPACE, TORCHX_POD_LABELS, "10.0.1.40", "torchx"),
        Pod(PLATFORM_NAMESPACE, {}, "10.0.1.43", "notebook"),
        Pod("default", {}, "10.0.2.10", "elsewhere"),
    ]
    # The chart with the policies the plan deploys beside it in its namespace (the platform step:
    # deny-all), as tests/k8s_charts/network/test_netpol.py evaluates the whole plan.
    cluster = Cluster([*manifests, *platform_namespace_policies()], [board, *others])
    assert f"{PLATFORM_NAMESPACE}/tensorboard" in cluster.policies_selecting(board, "Ingress")
    assert not any(cluster.may_connect(pod, board, PORT) for pod in others)
    assert not cluster.may_be_reached_from_ip("198.51.100.7", board, PORT)
    # No egress at all: it needs none (nothing is installed at run time).
    assert cluster.policies_selecting(board, "Egress")
    assert not cluster.may_connect_to_ip(board, "198.51.100.7", 443)
    assert not cluster.may_connect_to_ip(board, "10.0.0.2", 53, "UDP")


def platform_namespace_policies() -> list[Manifest]:
    """The NetworkPolicies the plan applies to every pod of the platform namespace."""
    step = shared_review_plan(load_config(DEFAULT_CONFIG)).step(PLATFORM_STEP)
    assert isinstance(step, ManifestSet)
    return [dict(m) for m in step.manifests if m["kind"] == "NetworkPolicy"]


def test_the_api_servers_service_proxy_is_admitted_from_the_vpc_on_tensorboards_port_only() -> None:
    """With ``api_server_cidr`` (the plan passes the VPC's CIDR): the one rule the service proxy
    needs, TCP 6006 from the control plane's interfaces in the VPC, and nothing else."""
    manifests = tensorboard(api_server_cidr="10.0.0.0/16")
    policy = only(manifests, "NetworkPolicy")
    assert policy["spec"]["ingress"] == [
        {"from": [{"ipBlock": {"cidr": "10.0.0.0/16"}}], "ports": [{"port": PORT, "protocol": "TCP"}]}
    ]
    board = Pod(PLATFORM_NAMESPACE, TENSORBOARD_LABELS, "10.0.1.50", "tensorboard")
    cluster = Cluster(manifests, [board])
    control_plane_interface = "10.0.64.10"
    assert cluster.may_be_reached_from_ip(control_plane_interface, board, PORT)
    assert not cluster.may_be_reached_from_ip(control_plane_interface, board, 22)
    assert not cluster.may_be_reached_from_ip("198.51.100.7", board, PORT)
    # The plan passes the configuration's VPC.
    config = load_config(DEFAULT_CONFIG)
    [step] = [s for s in shared_review_plan(config).manifest_sets() if s.name == "tensorboard"]
    planned = only([dict(m) for m in step.manifests], "NetworkPolicy")
    assert planned["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": config.vpc.cidr}}]


def test_tensorboard_pods_carry_no_label_that_admits_them_to_etcd(manifests: list[Manifest]) -> None:
    labels = only(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert not TRAINING_POD_LABELS.items() <= labels.items()
    assert not TORCHX_POD_LABELS.items() <= labels.items()


def test_default_image_is_the_clusters_training_image() -> None:
    assert DEFAULT_IMAGE == TRAINING_IMAGE
    assert DEFAULT_IMAGE.startswith("public.ecr.aws/neuron/pytorch-training-neuronx:")


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"image": "python:3.12"}, "is not a pinned image"),
        ({"image": "public.ecr.aws/docker/library/python:latest"}, "is not a pinned image"),
        ({"memory_gib": 0}, "memory_gib must be at least 1"),
    ],
)
def test_bad_props_are_refused(props: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tensorboard(**props)


# --- In the plan -----------------------------------------------------------------------------------


@cache
def default_plan_step() -> ManifestSet:
    step = shared_review_plan(load_config(DEFAULT_CONFIG)).step("tensorboard")
    assert isinstance(step, ManifestSet)
    return step


def test_the_plan_applies_tensorboard_after_the_claim_it_mounts() -> None:
    plan = shared_review_plan(load_config(DEFAULT_CONFIG))
    step = default_plan_step()
    assert step.applied and step.after == ("fsx-storage",)
    assert plan.names.index("tensorboard") > plan.names.index("fsx-storage")
    storage = plan.step("fsx-storage")
    assert isinstance(storage, ManifestSet)
    [claim] = [
        m["metadata"]["name"]
        for m in storage.manifests
        if m["kind"] == "PersistentVolumeClaim" and m["metadata"]["namespace"] == PLATFORM_NAMESPACE
    ]
    deployment = only([dict(m) for m in step.manifests], "Deployment")
    [data] = [v for v in pod_spec(deployment)["volumes"] if "persistentVolumeClaim" in v]
    assert data["persistentVolumeClaim"]["claimName"] == claim


def test_configuration_turns_tensorboard_off_and_sizes_it() -> None:
    data = load_config(DEFAULT_CONFIG).model_dump(mode="json")
    off = parse_config(
        with_change(data, "observability", {"tensorboard": False, "tensorboard_memory_gib": 5})
    )
    step = shared_review_plan(off).step("tensorboard")
    assert isinstance(step, ManifestSet)
    assert not step.applied  # rendered for review, not deployed
    deployment = only([dict(m) for m in step.manifests], "Deployment")
    [server] = pod_spec(deployment)["containers"]
    assert server["resources"]["limits"]["memory"] == "5Gi"


def test_it_reads_the_team_directories_as_a_member_of_each_teams_group() -> None:
    """Team directories are 2750, owned by the team's uid and gid (k8s_charts/runs/fsx_layout.py)."""
    [deployment] = [m for m in tensorboard(team_groups=(200001, 200002)) if m["kind"] == "Deployment"]
    context = deployment["spec"]["template"]["spec"]["securityContext"]
    assert context["supplementalGroups"] == [200001, 200002]
    assert context["runAsNonRoot"] is True
