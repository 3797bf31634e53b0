"""The gang watchdog's chart: its power (RBAC and the admission policy's leash), its network, its pod, its plan steps.

The admission policy's CEL runs on real node updates (tests/admission.py), the NetworkPolicies of
the whole default plan through tests/netpol.py, the pod through tests/pod_security.py.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest

from cluster_facts.kubernetes_names import (
    GANG_WATCHDOG_ANNOTATION,
    KUBE_DNS_LABELS,
    NEURON_TAINT_KEY,
    NODE_GROUP_LABEL,
    PLATFORM_NAMESPACE,
    STUCK_MINUTES_ANNOTATION,
    VOLCANO_JOB_NAME_LABEL,
)
from cluster_facts.kubernetes_plan import ManifestSet
from config import load_config, parse_config
from config.loader import read_yaml
from k8s_charts.checks.gang_watchdog import (
    ADMISSION_STEP,
    DEFAULT_IMAGE,
    GANG_WATCHDOG_LABELS,
    NAME,
    PROGRAM,
    PROGRAM_FILES,
    STEP,
    GangWatchdogAdmissionChart,
    GangWatchdogValues,
)
from k8s_charts.plan import TEAMS_STEP
from k8s_charts.shared.pod_programs import program_digest
from k8s_charts.teams.etcd import ETCD_LABELS
from tests.admission import Decision, admission_request, admit
from tests.conftest import DEFAULT_CONFIG, REPO_ROOT
from tests.k8s_charts.manifests import Manifest, only, pod_spec, synth
from tests.k8s_validation import assert_valid
from tests.netpol import Cluster, Pod
from tests.plans import shared_review_plan
from tests.pod_security import violations
from tests.yaml_edits import with_change

GROUPS = ("trn1", "trn2")
WATCHDOG = f"system:serviceaccount:{PLATFORM_NAMESPACE}:{NAME}"


@cache
def default_plan_steps() -> dict[str, ManifestSet]:
    return {step.name: step for step in shared_review_plan(load_config(DEFAULT_CONFIG)).manifest_sets()}


def manifests() -> list[Manifest]:
    return [dict(m) for m in default_plan_steps()[STEP].manifests]


@cache
def policy() -> list[Manifest]:
    rendered = synth(
        lambda app: GangWatchdogAdmissionChart(
            app, "admission", namespace=PLATFORM_NAMESPACE, node_groups=GROUPS
        )
    )
    assert_valid(rendered)
    # The node policy; the chart's second one (gang-watchdog-runs) judges only Volcano objects.
    return [m for m in rendered if m["metadata"]["name"] == NAME]


# --- RBAC ----------------------------------------------------------------------------------------------------


def test_it_may_read_pods_nodes_and_the_teams_podgroups_and_patch_nodes_and_end_team_runs_nothing_more() -> (
    None
):
    objects = manifests()
    assert_valid(objects)
    rules = {
        (m["kind"], m["metadata"].get("namespace")): [
            (tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r["verbs"]), r.get("resourceNames"))
            for r in m["rules"]
        ]
        for m in objects
        if m["kind"] in ("ClusterRole", "Role")
    }
    assert rules == {
        ("ClusterRole", None): [
            # Watch: the loop keeps each pass's lists current (cluster_programs/kube_mirror.py); pods
            # only in the team namespaces (below).
            (("",), ("pods",), ("get", "list"), None),
            (("",), ("nodes",), ("get", "list", "watch", "patch"), None),
        ],
        ("Role", "training"): [
            (("scheduling.volcano.sh",), ("podgroups",), ("get", "list", "watch"), None),
            (("",), ("pods",), ("watch",), None),
            # The stuck-run guard (cluster_programs/stuck_runs.py): judge a team's runs, end one.
            (("batch.volcano.sh",), ("jobs",), ("get", "list", "watch"), None),
            (("batch.volcano.sh",), ("jobs/status",), ("patch",), None),
            (("bus.volcano.sh",), ("commands",), ("create",), None),
            (("",), ("pods/log",), ("get",), None),
            (("",), ("events",), ("create",), None),
        ],
    }
    subjects = [s for m in objects if m["kind"].endswith("Binding") for s in m["subjects"]]
    assert subjects == [{"kind": "ServiceAccount", "name": NAME, "namespace": PLATFORM_NAMESPACE}] * 2
    account = only(objects, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    assert pod_spec(only(objects, "Deployment"))["automountServiceAccountToken"] is True


# --- The admission policy --------------------------------------------------------------------------------------


def trainium_node(*, group: str = "trn1", cordoned: bool = False, mark: str | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "ip-10-0-3-4.us-west-2.compute.internal",
            "resourceVersion": "100",
            "labels": {NODE_GROUP_LABEL: group},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {
            "providerID": "aws:///us-west-2d/i-0abc",
            "taints": [{"key": NEURON_TAINT_KEY, "value": "present", "effect": "NoSchedule"}],
        },
        "status": {"allocatable": {"aws.amazon.com/neuron": "16"}},
    }
    if cordoned:
        node["spec"]["unschedulable"] = True
    if mark is not None:
        node["metadata"]["annotations"][GANG_WATCHDOG_ANNOTATION] = mark
    return node


def cordon(node: dict[str, Any], mark: str | None = "training/bert") -> dict[str, Any]:
    updated = copy.deepcopy(node)
    updated["spec"]["unschedulable"] = True
    if mark is not None:
        updated["metadata"]["annotations"][GANG_WATCHDOG_ANNOTATION] = mark
    updated["metadata"]["resourceVersion"] = "101"
    return updated


def uncordon(node: dict[str, Any], *, unmark: bool = True) -> dict[str, Any]:
    updated = copy.deepcopy(node)
    updated["spec"].pop("unschedulable", None)
    if unmark:
        updated["metadata"]["annotations"].pop(GANG_WATCHDOG_ANNOTATION, None)
    updated["metadata"]["resourceVersion"] = "101"
    return updated


def decide(
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    *,
    operation: str = "UPDATE",
    user: str = WATCHDOG,
    sub_resource: str = "",
) -> Decision:
    request = admission_request(
        user=user,
        operation=operation,
        resource="nodes",
        name="ip-10-0-3-4",
        kind="Node",
        sub_resource=sub_resource,
    )
    return admit(policy(), request, obj=new, old=old)


def test_it_may_cordon_a_trainium_node_with_its_mark_and_lift_both() -> None:
    idle = trainium_node()
    assert decide(idle, cordon(idle)) == Decision(matched=True, allowed=True)
    ours = trainium_node(cordoned=True, mark="training/bert")
    assert decide(ours, uncordon(ours)).allowed
    # Kept for another gang: the mark changes, the cordon stays.
    assert decide(ours, cordon(ours, "research/llm")).allowed
    # A mark left on a node someone uncordoned: removed.
    stale = trainium_node(mark="training/bert")
    assert decide(stale, uncordon(stale)).allowed


def _labelled(node: dict[str, Any]) -> dict[str, Any]:
    changed = cordon(node)
    changed["metadata"]["labels"]["trainium/extra"] = "x"
    return changed


def _untainted(node: dict[str, Any]) -> dict[str, Any]:
    changed = cordon(node)
    changed["spec"]["taints"] = []
    return changed


def _tainted(node: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(node)
    changed["spec"]["taints"].append({"key": "evil", "effect": "NoExecute"})
    return changed


def _other_annotation(node: dict[str, Any]) -> dict[str, Any]:
    changed = cordon(node)
    changed["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/scale-down-disabled"] = "true"
    return changed


def _provider(node: dict[str, Any]) -> dict[str, Any]:
    changed = cordon(node)
    changed["spec"]["providerID"] = "aws:///us-west-2d/i-other"
    return changed


def _status(node: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(node)
    changed["status"]["allocatable"]["aws.amazon.com/neuron"] = "0"
    return changed


ONLY_ITS_FIELDS = (
    f"the gang watchdog may only change spec.unschedulable and the annotation {GANG_WATCHDOG_ANNOTATION}"
)
TOGETHER = f"the gang watchdog cordons a node only with its annotation {GANG_WATCHDOG_ANNOTATION}, and lifts both together"


@pytest.mark.parametrize(
    ("old", "change", "message"),
    [
        pytest.param(trainium_node(), _labelled, ONLY_ITS_FIELDS, id="label"),
        pytest.param(trainium_node(), _untainted, ONLY_ITS_FIELDS, id="remove-taint"),
        pytest.param(trainium_node(), _tainted, ONLY_ITS_FIELDS, id="add-taint"),
        pytest.param(trainium_node(), _other_annotation, ONLY_ITS_FIELDS, id="another-annotation"),
        pytest.param(trainium_node(), _provider, ONLY_ITS_FIELDS, id="spec-field"),
        pytest.param(trainium_node(), _status, ONLY_ITS_FIELDS, id="status"),
        pytest.param(trainium_node(), lambda n: cordon(n, mark=None), TOGETHER, id="cordon-without-mark"),
        pytest.param(
            trainium_node(cordoned=True, mark="training/bert"),
            lambda n: uncordon(n, unmark=False),
            TOGETHER,
            id="uncordon-keeping-mark",
        ),
        pytest.param(
            trainium_node(cordoned=True),
            uncordon,
            "the gang watchdog may not change a node that someone else cordoned",
            id="someone-elses-cordon",
        ),
        pytest.param(
            trainium_node(group="system"),
            cordon,
            "the gang watchdog may only change nodes of the Trainium node groups trn1, trn2",
            id="system-node",
        ),
    ],
)
def test_any_other_node_change_is_refused(old: dict[str, Any], change: Any, message: str) -> None:
    decision = decide(old, change(old))
    assert decision.matched and not decision.allowed
    assert message in decision.messages


def test_it_may_not_relabel_a_node_into_a_trainium_group() -> None:
    system = trainium_node(group="system")
    relabelled = cordon(system)
    relabelled["metadata"]["labels"][NODE_GROUP_LABEL] = "trn1"
    assert not decide(system, relabelled).allowed


@pytest.mark.parametrize(
    ("operation", "sub_resource"), [("CREATE", ""), ("DELETE", ""), ("UPDATE", "status")]
)
def test_it_may_not_create_delete_or_update_a_nodes_status(operation: str, sub_resource: str) -> None:
    node = trainium_node()
    old = None if operation == "CREATE" else node
    new = None if operation == "DELETE" else cordon(node)
    decision = decide(old, new, operation=operation, sub_resource=sub_resource)
    assert decision.matched and not decision.allowed
    assert "the gang watchdog may only update nodes" in decision.messages


def test_the_policy_binds_only_the_watchdog() -> None:
    node = trainium_node()
    decision = decide(node, _labelled(node), user="system:serviceaccount:kube-system:cluster-autoscaler")
    assert decision == Decision(matched=False, allowed=True)


# --- Network -----------------------------------------------------------------------------------------------------


def test_it_reaches_only_dns_and_the_api_server_and_no_pod_reaches_it() -> None:
    objects = [m for step in default_plan_steps().values() for m in step.manifests]
    watchdog = Pod(PLATFORM_NAMESPACE, GANG_WATCHDOG_LABELS, "10.0.1.30", "gang-watchdog")
    dns = Pod("kube-system", dict(KUBE_DNS_LABELS), "10.0.2.2", "coredns")
    etcd = Pod("training", ETCD_LABELS, "10.0.2.40", "etcd")
    worker = Pod("training", {VOLCANO_JOB_NAME_LABEL: "bert"}, "10.0.2.50", "worker")
    platform = Pod(PLATFORM_NAMESPACE, {"app.kubernetes.io/name": "tensorboard"}, "10.0.1.31", "tensorboard")
    cluster = Cluster(objects, [watchdog, dns, etcd, worker, platform])
    assert cluster.may_connect(watchdog, dns, 53, "UDP") and cluster.may_connect(watchdog, dns, 53, "TCP")
    # The API server: the kubernetes Service's ClusterIP (what KUBERNETES_SERVICE_HOST names, judged
    # before translation by the VPC CNI), and its endpoints in the VPC, on 443 only.
    for api_server in ("172.20.0.1", "10.100.0.1", "10.0.3.4"):
        assert cluster.may_connect_to_ip(watchdog, api_server, 443), api_server
        assert not cluster.may_connect_to_ip(watchdog, api_server, 80), api_server
    assert not cluster.may_connect_to_ip(watchdog, "172.20.0.10", 443)  # another Service
    assert not cluster.may_connect_to_ip(watchdog, "10.0.3.4", 10250)  # a kubelet
    assert not cluster.may_connect_to_ip(watchdog, "203.0.113.10", 443)  # the internet
    assert not cluster.may_connect_to_ip(watchdog, "169.254.169.254", 80)  # instance metadata
    assert not cluster.may_connect(watchdog, etcd, 2379)
    assert not cluster.may_connect(watchdog, worker, 443)
    for pod in (worker, etcd, platform, dns):
        assert not any(cluster.may_connect(pod, watchdog, port) for port in (80, 443, 8080))
    assert not cluster.may_be_reached_from_ip("10.0.3.4", watchdog, 443)


# --- The pod ---------------------------------------------------------------------------------------------------


def test_it_runs_the_program_from_its_config_map_as_a_restricted_pod_on_the_system_nodes() -> None:
    objects = manifests()
    deployment = only(objects, "Deployment")
    spec = pod_spec(deployment)
    assert deployment["metadata"]["namespace"] == PLATFORM_NAMESPACE
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert violations(spec, "restricted") == []
    [container] = spec["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert {"cpu", "memory"} <= set(container["resources"]["requests"]) and "memory" in container[
        "resources"
    ]["limits"]
    # No toleration for the Trainium taint: the system nodes.
    assert "tolerations" not in spec and "nodeSelector" not in spec
    # The program and the stuck-run guard it imports, beside the one API client the platform's programs share.
    assert only(objects, "ConfigMap")["data"] == {
        "gang_watchdog.py": PROGRAM,
        "stuck_runs.py": (REPO_ROOT / "cluster_programs" / "stuck_runs.py").read_text(),
        "kube_mirror.py": (REPO_ROOT / "cluster_programs" / "kube_mirror.py").read_text(),
        "kube_api.py": (REPO_ROOT / "cluster_programs" / "kube_api.py").read_text(),
    }
    assert container["command"] == ["python", "/opt/gang-watchdog/gang_watchdog.py"]
    assert container["args"] == [
        "--namespaces=training",
        "--node-groups=trn1-32xl",
        "--team=training=trn1-32xl",
        f"--node-group-label={NODE_GROUP_LABEL}",
        f"--annotation={GANG_WATCHDOG_ANNOTATION}",
        "--threshold-minutes=15",
        "--interval-seconds=60",
        "--stuck-minutes=10",
        f"--stuck-annotation={STUCK_MINUTES_ANNOTATION}",
        "--stuck-max-minutes=10",
    ]


def test_a_new_program_or_api_client_rolls_the_deployment() -> None:
    template = only(manifests(), "Deployment")["spec"]["template"]
    digest = template["metadata"]["annotations"]["trainium/program-sha256"]
    assert digest == program_digest(PROGRAM_FILES)
    for name in PROGRAM_FILES:
        changed = {**PROGRAM_FILES, name: PROGRAM_FILES[name] + "# changed\n"}
        assert program_digest(changed) != digest, name


def test_the_image_is_the_pinned_python_through_the_accounts_cache() -> None:
    assert DEFAULT_IMAGE.startswith("public.ecr.aws/docker/library/python:3.12")
    [container] = pod_spec(only(manifests(), "Deployment"))["containers"]
    assert container["image"] == (
        "111122223333.dkr.ecr.us-west-2.amazonaws.com/upstream/public.ecr.aws/docker/library/python:3.12.12-slim-trixie"
    )


# --- The plan and the configuration --------------------------------------------------------------------------------


def test_the_plan_applies_the_policy_before_the_watchdog_and_the_watchdog_after_the_namespaces() -> None:
    steps = default_plan_steps()
    names = list(steps)
    assert names.index(ADMISSION_STEP) < names.index(STEP)
    assert steps[ADMISSION_STEP].applied and steps[STEP].applied
    assert set(steps[STEP].after) == {ADMISSION_STEP, "platform-namespace", TEAMS_STEP}
    assert steps[ADMISSION_STEP].after == ()


def test_the_threshold_is_the_autoscalers_provision_time_and_the_switch_turns_it_off() -> None:
    data = read_yaml(DEFAULT_CONFIG)
    config = parse_config(with_change(data, "autoscaler.max_node_provision_minutes", 25))
    step = shared_review_plan(config).step(STEP)
    assert isinstance(step, ManifestSet)
    [container] = pod_spec(only([dict(m) for m in step.manifests], "Deployment"))["containers"]
    assert "--threshold-minutes=25" in container["args"]
    off = shared_review_plan(parse_config(with_change(data, "autoscaler.gang_watchdog", False)))
    assert not {ADMISSION_STEP, STEP} & {step.name for step in off}


def test_without_a_stuck_run_limit_it_neither_judges_runs_nor_holds_the_rights_to_end_them() -> None:
    config = parse_config(with_change(read_yaml(DEFAULT_CONFIG), "autoscaler.stuck_run_minutes", None))
    step = shared_review_plan(config).step(STEP)
    assert isinstance(step, ManifestSet)
    objects = [dict(m) for m in step.manifests]
    [container] = pod_spec(only(objects, "Deployment"))["containers"]
    assert not any(argument.startswith("--stuck") for argument in container["args"])
    role = only(objects, "Role")
    assert [rule["resources"] for rule in role["rules"]] == [["podgroups"], ["pods"]]


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"namespaces": ()}, "at least one team namespace and one Trainium node group"),
        ({"node_groups": ()}, "at least one team namespace and one Trainium node group"),
        ({"threshold_minutes": 0}, "threshold and interval must be positive"),
        ({"image": "public.ecr.aws/docker/library/python"}, "python"),
    ],
)
def test_bad_values_are_refused(props: dict[str, Any], message: str) -> None:
    values: dict[str, Any] = {
        "namespaces": ("training",),
        "node_groups": ("trn1",),
        "threshold_minutes": 15,
        **props,
    }
    with pytest.raises(ValueError, match=message):
        GangWatchdogValues(**values)
