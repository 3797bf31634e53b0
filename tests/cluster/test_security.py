"""Scenario g: the claims of docs/security.md that the API server decides, asked of the real one.

Who asks: a team member (impersonated: the group an EKS access entry maps the member's role to), the
platform's service accounts with tokens of their own (the gang watchdog's; the Neuron device
plugin's, bound to its pod on a node, as the kubelet mounts it), and the cluster admin, whose
requests the admission policies and Pod Security judge like anyone's. The offline models these
twin (tests/admission.py, tests/pod_security.py) stay for the fast tier, and say so at their top.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from cluster_facts.kubernetes_names import (
    GANG_WATCHDOG_ANNOTATION,
    NEURON_RESOURCE,
    PLATFORM_NAMESPACE,
    TRAINING_NAMESPACE,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_JOB_NAMESPACE_LABEL,
    team_rbac_group,
)
from config import StackConfig
from tests.cluster.control_plane import ControlPlane, Kubectl
from tests.cluster.nodes import group_nodes
from tests.cluster.plans import deployed_plan
from tests.cluster.runs import run_handle
from tests.tenant_cases import volcano_pod

MEMBER = ("alice@training", (team_rbac_group(TRAINING_NAMESPACE),))
GROUP = "trn1-32xl"


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, default_config: StackConfig) -> Iterator[ControlPlane]:
    control_plane.apply_plan(deployed_plan(default_config))
    names = control_plane.add_nodes(
        group_nodes(default_config, GROUP, (f"{GROUP}-sec-{index}" for index in range(2)))
    )
    yield control_plane
    control_plane.remove_nodes(names)


def _team_pod(cluster: ControlPlane, config: StackConfig, name: str, *, job_labels: bool) -> str:
    """A pod of the default run as Volcano's controller creates it: everything the team namespace's
    Pod Security (restricted) and the team admission policy ask for, so that only the policy under
    test can refuse it; with ``job_labels`` False, without the job's labels and owner."""
    pod = volcano_pod(run_handle(cluster, deployed_plan(config), config.runs[0].name).job)
    pod["metadata"]["name"] = name
    if not job_labels:
        for label in (VOLCANO_JOB_NAME_LABEL, VOLCANO_JOB_NAMESPACE_LABEL):
            pod["metadata"]["labels"].pop(label)
        pod["metadata"].pop("ownerReferences")
    return json.dumps(pod)


def _refused(result: Any, *words: str) -> str:
    assert result.returncode != 0, f"accepted: {result.stdout}"
    for word in words:
        assert word in result.stderr, result.stderr
    return str(result.stderr)


def _pod(name: str, *, labels: dict[str, str] | None = None, **spec: Any) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "example.invalid/x:1"}], **spec},
        }
    )


# ----- a team member ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "resource", "namespace", "allowed"),
    [
        ("create", "jobs.batch.volcano.sh", TRAINING_NAMESPACE, True),
        ("delete", "jobs.batch.volcano.sh", TRAINING_NAMESPACE, True),
        ("watch", "podgroups.scheduling.volcano.sh", TRAINING_NAMESPACE, True),
        ("get", "pods/log", TRAINING_NAMESPACE, True),
        ("create", "pods/portforward", TRAINING_NAMESPACE, True),
        ("create", "pods", TRAINING_NAMESPACE, False),
        ("create", "pods/exec", TRAINING_NAMESPACE, False),
        ("get", "secrets", TRAINING_NAMESPACE, False),
        ("update", "jobs.batch.volcano.sh", TRAINING_NAMESPACE, False),
        ("create", "jobs.batch.volcano.sh", PLATFORM_NAMESPACE, False),
        ("list", "pods", "kube-system", False),
        ("create", "queues.scheduling.volcano.sh", None, False),
        ("list", "nodes", None, False),
    ],
)
def test_a_team_member_acts_only_in_the_teams_namespace_and_only_as_its_role_says(
    cluster: ControlPlane, verb: str, resource: str, namespace: str | None, allowed: bool
) -> None:
    member = cluster.impersonate(*MEMBER)
    resource, _, subresource = resource.partition("/")
    assert member.can_i(verb, resource, namespace=namespace, subresource=subresource or None) is allowed


# ----- labels that etcd and the workers trust --------------------------------------------------


def test_no_one_but_volcanos_controller_may_create_a_pod_labelled_as_a_jobs(
    cluster: ControlPlane, default_config: StackConfig
) -> None:
    """Even the cluster admin: the ValidatingAdmissionPolicy judges every user."""
    impostor = _team_pod(cluster, default_config, "impostor", job_labels=True)
    result = cluster.kubectl("create", "-n", TRAINING_NAMESPACE, "-f", "-", input=impostor, check=False)
    _refused(result, "trainium-volcano-job-pods", "job controller")


def test_no_one_else_may_label_an_existing_pod_as_a_jobs(
    cluster: ControlPlane, default_config: StackConfig
) -> None:
    plain = _team_pod(cluster, default_config, "plain", job_labels=False)
    cluster.kubectl("create", "-n", TRAINING_NAMESPACE, "-f", "-", input=plain)
    try:
        result = cluster.kubectl(
            "label", "pod", "plain", "-n", TRAINING_NAMESPACE, "volcano.sh/job-name=bert-large", check=False
        )
        _refused(result, "trainium-volcano-job-pods")
    finally:
        cluster.kubectl("delete", "pod", "plain", "-n", TRAINING_NAMESPACE, "--wait=false")


# ----- Pod Security --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("what", "spec"),
    [
        (
            "privileged",
            {"containers": [{"name": "c", "image": "x:1", "securityContext": {"privileged": True}}]},
        ),
        ("host network", {"hostNetwork": True}),
        ("host path", {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}),
    ],
)
@pytest.mark.parametrize("namespace", [TRAINING_NAMESPACE, PLATFORM_NAMESPACE])
def test_a_pod_cannot_run_privileged_on_the_host_network_or_with_host_paths(
    cluster: ControlPlane, namespace: str, what: str, spec: dict[str, Any]
) -> None:
    result = cluster.kubectl(
        "create", "-n", namespace, "-f", "-", input=_pod(f"pss-{what.replace(' ', '-')}", **spec), check=False
    )
    _refused(result, "violates PodSecurity")


# ----- the gang watchdog's token ------------------------------------------------------------------


@pytest.fixture(scope="module")
def watchdog(cluster: ControlPlane) -> Kubectl:
    return cluster.as_service_account(PLATFORM_NAMESPACE, "gang-watchdog")


@pytest.mark.parametrize(
    ("verb", "resource", "namespace", "allowed"),
    [
        ("list", "pods", None, True),
        ("get", "nodes", None, True),
        ("patch", "nodes", None, True),
        ("list", "podgroups.scheduling.volcano.sh", TRAINING_NAMESPACE, True),
        ("watch", "pods", None, False),
        # Its loop keeps the team namespaces' pods by watches (cluster_programs/kube_mirror.py): there only.
        ("watch", "pods", TRAINING_NAMESPACE, True),
        ("watch", "pods", PLATFORM_NAMESPACE, False),
        ("watch", "nodes", None, True),
        ("get", "secrets", TRAINING_NAMESPACE, False),
        ("update", "pods", TRAINING_NAMESPACE, False),
        ("delete", "nodes", None, False),
        ("list", "podgroups.scheduling.volcano.sh", PLATFORM_NAMESPACE, False),
    ],
)
def test_the_watchdogs_token_may_read_pods_nodes_and_podgroups_and_patch_nodes_nothing_more(
    watchdog: Kubectl, verb: str, resource: str, namespace: str | None, allowed: bool
) -> None:
    assert watchdog.can_i(verb, resource, namespace=namespace) is allowed


def _patch(who: Kubectl, node: str, patch: dict[str, Any]) -> Any:
    return who("patch", "node", node, "--type=merge", "-p", json.dumps(patch), check=False)


def test_the_watchdog_may_cordon_a_trainium_node_with_its_mark_and_lift_both(
    cluster: ControlPlane, watchdog: Kubectl
) -> None:
    node = f"{GROUP}-sec-0"
    mark = {"metadata": {"annotations": {GANG_WATCHDOG_ANNOTATION: "training/some-gang"}}}
    assert _patch(watchdog, node, {**mark, "spec": {"unschedulable": True}}).returncode == 0
    lifted = _patch(
        watchdog,
        node,
        {"metadata": {"annotations": {GANG_WATCHDOG_ANNOTATION: None}}, "spec": {"unschedulable": None}},
    )
    assert lifted.returncode == 0, lifted.stderr


@pytest.mark.parametrize(
    ("what", "patch"),
    [
        ("a cordon without its mark", {"spec": {"unschedulable": True}}),
        ("a label", {"metadata": {"labels": {"trainium/node-group": "elsewhere"}}}),
        ("a taint", {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}),
        ("another annotation", {"metadata": {"annotations": {"x": "y"}}}),
    ],
)
def test_any_other_change_of_a_trainium_node_by_the_watchdog_is_refused(
    watchdog: Kubectl, what: str, patch: dict[str, Any]
) -> None:
    _refused(_patch(watchdog, f"{GROUP}-sec-1", patch), "gang watchdog")


def test_the_watchdog_may_not_touch_a_system_node_or_a_node_someone_cordoned(
    cluster: ControlPlane, watchdog: Kubectl, default_config: StackConfig
) -> None:
    system = cluster.kubectl.json("get", "nodes", "-l", f"trainium/node-group={default_config.name}-system")[
        "items"
    ][0]
    mark = {
        "metadata": {"annotations": {GANG_WATCHDOG_ANNOTATION: "training/g"}},
        "spec": {"unschedulable": True},
    }
    _refused(_patch(watchdog, system["metadata"]["name"], mark), "Trainium node groups")
    node = f"{GROUP}-sec-1"
    cluster.kubectl("cordon", node)
    try:
        _refused(_patch(watchdog, node, mark), "someone else cordoned")
    finally:
        cluster.kubectl("uncordon", node)


# ----- the Neuron device plugin's token ---------------------------------------------------------


@pytest.fixture(scope="module")
def plugin(cluster: ControlPlane) -> tuple[Kubectl, dict[str, Any]]:
    """The plugin's own pod on a Trainium node (its DaemonSet's, simulated), and a token bound to it."""
    pod = cluster.wait_for(
        lambda: next(
            (
                p
                for p in cluster.kubectl.json("get", "pods", "-n", "kube-system")["items"]
                if p["metadata"]["name"].startswith("neuron-device-plugin") and p["spec"].get("nodeName")
            ),
            None,
        ),
        timeout=60,
        what="a Neuron device plugin pod on a Trainium node",
    )
    token = cluster.kubectl(
        "create", "token", pod["spec"]["serviceAccountName"], "-n", "kube-system",
        "--bound-object-kind=Pod", f"--bound-object-name={pod['metadata']['name']}",
        f"--bound-object-uid={pod['metadata']['uid']}",
    ).stdout.strip()  # fmt: skip
    return cluster.with_token(f"neuron-plugin-{pod['metadata']['name']}", token), pod


def test_the_device_plugin_may_annotate_a_pod_on_its_node_and_change_nothing_else(
    plugin: tuple[Kubectl, dict[str, Any]],
) -> None:
    kubectl, pod = plugin
    name = pod["metadata"]["name"]
    annotated = kubectl(
        "annotate", "pod", name, "-n", "kube-system", "AWS_NEURON_IDS=0", "--overwrite", check=False
    )
    assert annotated.returncode == 0, annotated.stderr
    _refused(kubectl("label", "pod", name, "-n", "kube-system", "x=y", check=False), "neuron-device-plugin")


def test_the_device_plugin_may_not_touch_another_nodes_neuron_resources(
    cluster: ControlPlane, plugin: tuple[Kubectl, dict[str, Any]]
) -> None:
    kubectl, pod = plugin
    other = next(n for n in (f"{GROUP}-sec-0", f"{GROUP}-sec-1") if n != pod["spec"]["nodeName"])
    patch = {"status": {"capacity": {NEURON_RESOURCE: "0"}}}
    result = kubectl(
        "patch", "node", other, "--subresource=status", "--type=merge", "-p", json.dumps(patch), check=False
    )
    _refused(result)
