"""JobPodAdmissionChart: in a team's namespace only Volcano's job controller labels pods as a job's.

The rendered policy's CEL runs on real requests, as the API server would run it (tests/admission.py).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cluster_facts.kubernetes_names import TEAM_NAMESPACE_LABEL
from cluster_facts.kubernetes_plan import ManifestSet
from config import load_config
from k8s_charts.teams.job_pod_admission import POLICY_NAME, JobPodAdmissionChart, volcano_controller
from tests.admission import Decision, admission_request, admit
from tests.conftest import DEFAULT_CONFIG
from tests.k8s_charts.manifests import Manifest, synth
from tests.k8s_validation import assert_valid
from tests.plans import shared_review_plan

CONTROLLER = volcano_controller(namespace="volcano-system", release="volcano")
TEAM = {TEAM_NAMESPACE_LABEL: "training"}
JOB = "bert-large-0123abcd"
MEMBER = "arn:aws:sts::111122223333:assumed-role/MlTeam/alice"

NOT_THE_CONTROLLER = (
    "in a team namespace only Volcano's job controller may create pods labelled "
    "volcano.sh/job-name and volcano.sh/job-namespace"
)
NOT_OWNED = "a pod labelled as a Volcano job's must be controlled by that Job (batch.volcano.sh/v1alpha1) in its own namespace"
RELABELLED = "only Volcano's job controller may add, change or remove volcano.sh/job-name and volcano.sh/job-namespace on a pod"


def job_pod(*, job: str = JOB, namespace: str = "training", owner: str | None = JOB) -> dict[str, Any]:
    """A pod as Volcano's createJobPod writes it (labels over the template's, controller reference)."""
    metadata: dict[str, Any] = {
        "name": f"{job}-worker-0",
        "namespace": namespace,
        "labels": {
            "trainium/role": "training",
            "volcano.sh/job-name": job,
            "volcano.sh/job-namespace": namespace,
            "volcano.sh/task-spec": "worker",
            "volcano.sh/queue-name": "test",
        },
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "batch.volcano.sh/v1alpha1",
                "kind": "Job",
                "name": owner,
                "uid": "6f1c0000-0000-4000-8000-000000000001",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "trainer", "image": "public.ecr.aws/neuron/x:1"}]},
    }


def plain_pod(labels: dict[str, str] | None = None) -> dict[str, Any]:
    pod = job_pod()
    pod["metadata"]["labels"] = dict(labels or {"app": "notebook"})
    del pod["metadata"]["ownerReferences"]
    return pod


def relabelled(pod: dict[str, Any], key: str, value: str) -> dict[str, Any]:
    pod["metadata"]["labels"][key] = value
    return pod


def decide(
    manifests: list[Manifest],
    *,
    user: str,
    operation: str,
    obj: dict[str, Any],
    old: dict[str, Any] | None = None,
    sub_resource: str = "",
    namespace_labels: dict[str, str] = TEAM,
) -> Decision:
    request = admission_request(
        user=user,
        operation=operation,
        resource="pods",
        name=obj["metadata"]["name"],
        namespace=obj["metadata"]["namespace"],
        sub_resource=sub_resource,
    )
    return admit(manifests, request, obj=obj, old=old, namespace_labels=namespace_labels)


MANIFESTS = synth(lambda app: JobPodAdmissionChart(app, "job-pods", controller_username=CONTROLLER))


def test_every_object_is_valid_and_named() -> None:
    assert_valid(MANIFESTS)
    assert sorted((m["kind"], m["metadata"]["name"]) for m in MANIFESTS) == [
        ("ValidatingAdmissionPolicy", POLICY_NAME),
        ("ValidatingAdmissionPolicyBinding", POLICY_NAME),
    ]


def test_the_controller_is_the_volcano_charts_controller_service_account() -> None:
    assert CONTROLLER == "system:serviceaccount:volcano-system:volcano-controllers"


# --- Allowed: what Volcano and the cluster do ---


def test_volcano_creates_its_job_pods() -> None:
    assert decide(MANIFESTS, user=CONTROLLER, operation="CREATE", obj=job_pod()) == Decision(
        matched=True, allowed=True
    )


def test_pods_without_the_labels_are_not_judged() -> None:
    # etcd's pods, created by the ReplicaSet controller, and anything else unlabelled.
    user = "system:serviceaccount:kube-system:replicaset-controller"
    decision = decide(
        MANIFESTS, user=user, operation="CREATE", obj=plain_pod({"app.kubernetes.io/name": "etcd"})
    )
    assert decision == Decision(matched=False, allowed=True)


@pytest.mark.parametrize(
    "user, sub_resource",
    [
        ("system:node:ip-10-0-1-10.ec2.internal", "status"),  # the kubelet's status updates
        ("system:serviceaccount:kube-system:neuron-device-plugin", ""),  # allocation annotations
        ("system:serviceaccount:volcano-system:volcano-scheduler", "status"),  # PodScheduled conditions
        (MEMBER, ""),
    ],
)
def test_updates_that_keep_the_labels_are_allowed(user: str, sub_resource: str) -> None:
    old = job_pod()
    new = copy.deepcopy(old)
    new["metadata"].setdefault("annotations", {})["AWS_NEURON_IDS"] = "0,1"
    new["status"] = {"phase": "Running"}
    assert decide(
        MANIFESTS, user=user, operation="UPDATE", obj=new, old=old, sub_resource=sub_resource
    ).allowed


def test_the_controller_may_change_the_labels() -> None:
    old = job_pod()
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["volcano.sh/job-name"] = "other"
    assert decide(MANIFESTS, user=CONTROLLER, operation="UPDATE", obj=new, old=old).allowed


def test_other_namespaces_are_not_judged() -> None:
    pod = job_pod(namespace="default")
    assert decide(MANIFESTS, user=MEMBER, operation="CREATE", obj=pod, namespace_labels={}) == Decision(
        matched=False, allowed=True
    )


# --- Refused: posing as a job's pod ---


@pytest.mark.parametrize("user", [MEMBER, "kubernetes-admin", "system:serviceaccount:training:default"])
def test_no_one_else_may_create_a_labelled_pod(user: str) -> None:
    decision = decide(MANIFESTS, user=user, operation="CREATE", obj=job_pod())
    assert decision == Decision(matched=True, allowed=False, messages=(NOT_THE_CONTROLLER,))


@pytest.mark.parametrize("label", ["volcano.sh/job-name", "volcano.sh/job-namespace"])
def test_either_label_alone_is_guarded(label: str) -> None:
    pod = plain_pod({label: "x"})
    decision = decide(MANIFESTS, user=MEMBER, operation="CREATE", obj=pod)
    assert not decision.allowed and NOT_THE_CONTROLLER in decision.messages


@pytest.mark.parametrize(
    "pod",
    [
        job_pod(owner=None),  # no owner
        job_pod(owner="another-job"),  # another job's name in the label
        relabelled(job_pod(), "volcano.sh/job-namespace", "research"),  # names another namespace
    ],
    ids=["no-owner", "other-owner", "other-namespace-label"],
)
def test_even_the_controller_creates_only_pods_owned_by_the_job_they_name(pod: dict[str, Any]) -> None:
    decision = decide(MANIFESTS, user=CONTROLLER, operation="CREATE", obj=pod)
    assert decision == Decision(matched=True, allowed=False, messages=(NOT_OWNED,))


def test_an_owner_reference_that_is_not_the_controller_or_not_volcano_does_not_count() -> None:
    for edit in ({"controller": False}, {"apiVersion": "batch/v1"}, {"kind": "CronJob"}):
        pod = job_pod()
        pod["metadata"]["ownerReferences"][0].update(edit)
        assert not decide(MANIFESTS, user=CONTROLLER, operation="CREATE", obj=pod).allowed, edit


@pytest.mark.parametrize("sub_resource", ["", "status", "ephemeralcontainers"])
def test_no_one_else_may_add_change_or_remove_the_labels(sub_resource: str) -> None:
    unlabelled = plain_pod()
    added = copy.deepcopy(unlabelled)
    added["metadata"]["labels"]["volcano.sh/job-name"] = JOB
    labelled = job_pod()
    changed = copy.deepcopy(labelled)
    changed["metadata"]["labels"]["volcano.sh/job-name"] = "other-job"
    removed = copy.deepcopy(labelled)
    del removed["metadata"]["labels"]["volcano.sh/job-namespace"]
    for old, new in ((unlabelled, added), (labelled, changed), (labelled, removed)):
        decision = decide(
            MANIFESTS, user=MEMBER, operation="UPDATE", obj=new, old=old, sub_resource=sub_resource
        )
        assert decision == Decision(matched=True, allowed=False, messages=(RELABELLED,))


def test_deletes_and_reads_are_not_judged() -> None:
    request = admission_request(
        user=MEMBER, operation="DELETE", resource="pods", name="p", namespace="training"
    )
    assert admit(MANIFESTS, request, obj=None, old=job_pod(), namespace_labels=TEAM) == Decision(
        matched=False, allowed=True
    )


def test_the_plan_binds_it_to_every_team_namespace_before_any_run() -> None:
    plan = shared_review_plan(load_config(DEFAULT_CONFIG))
    step = plan.step("volcano-job-pod-admission")
    assert isinstance(step, ManifestSet) and step.applied
    assert [dict(m) for m in step.manifests] == MANIFESTS
    for run in (s for s in plan.manifest_sets() if s.name.startswith("run-")):
        assert step.name in run.after
    namespaces = plan.step("training-namespace")
    assert isinstance(namespaces, ManifestSet)
    for namespace in (m for m in namespaces.manifests if m["kind"] == "Namespace"):
        labels = namespace["metadata"]["labels"]
        assert labels[TEAM_NAMESPACE_LABEL] == namespace["metadata"]["name"]
        pod = job_pod(namespace=namespace["metadata"]["name"])
        assert not decide(
            MANIFESTS, user=MEMBER, operation="CREATE", obj=pod, namespace_labels=labels
        ).allowed


def test_empty_values_are_refused() -> None:
    with pytest.raises(ValueError, match="required"):
        synth(lambda app: JobPodAdmissionChart(app, "x", controller_username=""))
    with pytest.raises(ValueError, match="CEL string"):
        synth(lambda app: JobPodAdmissionChart(app, "x", controller_username="a'b"))
