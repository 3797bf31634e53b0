"""Only Volcano's job controller may label a pod as a Volcano job's pod, in a team's namespace.

etcd's NetworkPolicy admits, and the workers' policies trust, pods that carry ``volcano.sh/job-name``
(k8s_charts/teams/etcd.py, k8s_charts/network/tenant_network.py). A label is no identity: anyone who may create
or patch a pod can set it. This ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in
Kubernetes 1.30) makes it one, in every namespace labelled ``TEAM_NAMESPACE_LABEL``:

- CREATE of a pod carrying ``volcano.sh/job-name`` or ``volcano.sh/job-namespace`` is allowed only
  to Volcano's job controller (its service account, ``controller_username``), and only for a pod
  whose controlling owner is the Volcano Job (``batch.volcano.sh/v1alpha1``) its label names, in
  the namespace its other label names: what the controller's ``createJobPod`` writes.
- UPDATE (patch, update, status, ephemeral containers) may add, change or remove those labels only
  when the controller makes it; everyone else's update must leave them as they are (a pod's
  labels are mutable, and a status update does not reset them).

Team members submit Volcano Jobs, never pods (k8s_charts/teams/namespaces.py); the controller writes the
label from the Job's name, overwriting whatever the pod template says. Pods without these labels
(etcd's) are not judged at all. Reads, deletes and other namespaces are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
from constructs import Construct

from cluster_facts.kubernetes_names import (
    TEAM_NAMESPACE_LABEL,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_JOB_NAMESPACE_LABEL,
)
from k8s_charts.shared.admission_policy import (
    admission_policy,
    cel_string,
    core_match_constraints,
    service_account_username,
)

__all__ = [
    "GUARDED_LABELS",
    "POLICY_NAME",
    "VOLCANO_JOB_API_VERSION",
    "JobPodAdmissionChart",
    "volcano_controller",
    "volcano_controller_account",
]

POLICY_NAME = "trainium-volcano-job-pods"
GUARDED_LABELS: tuple[str, ...] = (VOLCANO_JOB_NAME_LABEL, VOLCANO_JOB_NAMESPACE_LABEL)
VOLCANO_JOB_API_VERSION = "batch.volcano.sh/v1alpha1"
_LABELS = {"app.kubernetes.io/name": POLICY_NAME}


def volcano_controller_account(release: str) -> str:
    """The Volcano chart's controllers' service account: ``<release>-controllers`` in the release's
    namespace (chart v1.15.1, templates/controllers.yaml)."""
    return f"{release}-controllers"


def volcano_controller(*, namespace: str, release: str) -> str:
    """The username of the Volcano chart's job controller (``volcano_controller_account``)."""
    return service_account_username(namespace, volcano_controller_account(release))


def _labels_of(obj: str) -> str:
    return f"{obj} != null && has({obj}.metadata.labels) ? {obj}.metadata.labels : {{}}"


def _variables(controller: str, guarded: Sequence[str]) -> list[dict[str, str]]:
    keys = "[" + ", ".join(cel_string(key) for key in guarded) + "]"
    job_name, job_namespace = (
        cel_string(key) for key in (VOLCANO_JOB_NAME_LABEL, VOLCANO_JOB_NAMESPACE_LABEL)
    )
    return [
        {"name": "newLabels", "expression": _labels_of("object")},
        {"name": "oldLabels", "expression": _labels_of("oldObject")},
        {
            "name": "byController",
            "expression": f"has(request.userInfo.username) && request.userInfo.username == {cel_string(controller)}",
        },
        {
            # Each guarded label is absent on both sides or present on both with the same value.
            "name": "guardedUnchanged",
            "expression": f"{keys}.all(k, (k in variables.newLabels) == (k in variables.oldLabels)"
            " && (!(k in variables.newLabels) || variables.newLabels[k] == variables.oldLabels[k]))",
        },
        {
            # The pod's controlling owner is the Volcano Job its labels name, in its own namespace.
            "name": "ownedByItsJob",
            "expression": f"{job_name} in variables.newLabels && {job_namespace} in variables.newLabels"
            f" && has(request.namespace) && variables.newLabels[{job_namespace}] == request.namespace"
            " && has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r,"
            f" r.apiVersion == {cel_string(VOLCANO_JOB_API_VERSION)} && r.kind == 'Job'"
            f" && has(r.controller) && r.controller == true && r.name == variables.newLabels[{job_name}])",
        },
    ]


class JobPodAdmissionChart(cdk8s.Chart):
    """ValidatingAdmissionPolicy ``trainium-volcano-job-pods`` and its binding to the namespaces
    labelled ``namespace_label``: only ``controller_username`` may put ``guarded_labels`` on pods."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        controller_username: str,
        namespace_label: str = TEAM_NAMESPACE_LABEL,
        guarded_labels: Sequence[str] = GUARDED_LABELS,
        name: str = POLICY_NAME,
    ) -> None:
        super().__init__(scope, id)
        guarded = list(dict.fromkeys(guarded_labels))
        if not guarded or not controller_username or not namespace_label:
            raise ValueError(
                "JobPodAdmissionChart: controller_username, namespace_label and guarded_labels are required"
            )
        keys = "[" + ", ".join(cel_string(key) for key in guarded) + "]"
        listed = " and ".join(guarded)
        admission_policy(
            self,
            name=name,
            labels=_LABELS,
            spec={
                # An error in an expression refuses the request rather than letting it through.
                "failurePolicy": "Fail",
                # Every way to write a pod object's labels.
                "matchConstraints": core_match_constraints(
                    ["CREATE", "UPDATE"], ["pods", "pods/status", "pods/ephemeralcontainers"]
                ),
                "matchConditions": [
                    {
                        # Pods that carry (or carried) none of the labels are not judged.
                        "name": "carries-a-volcano-job-label",
                        "expression": " || ".join(
                            f"({obj} != null && has({obj}.metadata.labels)"
                            f" && {keys}.exists(k, k in {obj}.metadata.labels))"
                            for obj in ("object", "oldObject")
                        ),
                    }
                ],
                "variables": _variables(controller_username, guarded),
                "validations": [
                    {
                        "expression": "request.operation != 'CREATE' || variables.byController",
                        "message": f"in a team namespace only Volcano's job controller may create pods "
                        f"labelled {listed}",
                        "reason": "Forbidden",
                    },
                    {
                        "expression": "request.operation != 'CREATE' || variables.ownedByItsJob",
                        "message": "a pod labelled as a Volcano job's must be controlled by that Job "
                        f"({VOLCANO_JOB_API_VERSION}) in its own namespace",
                        "reason": "Forbidden",
                    },
                    {
                        "expression": "request.operation != 'UPDATE' || variables.byController"
                        " || variables.guardedUnchanged",
                        "message": f"only Volcano's job controller may add, change or remove {listed} on a pod",
                        "reason": "Forbidden",
                    },
                ],
            },
            binding_spec={
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {
                        "matchExpressions": [{"key": namespace_label, "operator": "Exists"}]
                    }
                },
            },
        )
