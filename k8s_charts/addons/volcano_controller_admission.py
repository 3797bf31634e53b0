"""Volcano's controller writes only what its own Jobs own, and only where Volcano Jobs run.

The Volcano 1.15.1 chart binds its controllers' service account (``<release>-controllers``) to a
ClusterRole that creates, updates and deletes pods, Services, ConfigMaps and Secrets, creates and
deletes NetworkPolicies, creates claims, PriorityClasses and CustomResourceDefinitions, in every
namespace (charts/volcano-1.15.1/templates/controllers.yaml). The chart is kept as upstream ships it,
so RBAC stays wide; this ValidatingAdmissionPolicy (``trainium-volcano-controller-writes``,
admissionregistration.k8s.io/v1) narrows what the account's requests may do, whatever a fault of
Volcano or a thief of its token asks:

- pods, Services, ConfigMaps, Secrets, PersistentVolumeClaims (core) and NetworkPolicies: CREATE
  only of an object whose controlling owner is a Volcano Job (``batch.volcano.sh``), UPDATE and
  DELETE only of an object that already has one (``oldObject``), and only in the namespaces where
  Volcano Jobs run (the teams' and the platform's). What its job controller and plugins write
  carries that owner (v1.15.1 ``createJobPod``, svc.go ``createServiceIfNotExist`` and
  ``createNetworkPolicyIfNotExist``, helpers.go ``CreateOrUpdateConfigMap``, ssh.go, ``createPVC``);
  a team's default-deny, its etcd, the platform's objects have no such owner, so a Job named after
  one of them (which the team policy refuses anyway) or a fault deletes nothing of theirs;
- PriorityClasses and CustomResourceDefinitions: nothing (no controller of v1.15.1 writes either;
  its Job controller only reads PriorityClasses).

Pods Volcano's podgroup controller annotates for a plain pod scheduled by ``volcano`` (not a Job's)
would be refused: no pod of the platform is one, and team members create pods only through Jobs.
Reads stay as RBAC grants them (every Secret of the cluster by name): admission sees no reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
from constructs import Construct

from k8s_charts.shared.admission_policy import admission_policy, cel_list, cel_string

__all__ = ["POLICY_NAME", "VolcanoControllerAdmissionChart"]

POLICY_NAME = "trainium-volcano-controller-writes"
_LABELS = {"app.kubernetes.io/name": POLICY_NAME}
_JOB_GROUP = "batch.volcano.sh"
_OWNED_CORE = ("pods", "services", "configmaps", "secrets", "persistentvolumeclaims")


def _job_owned(obj: str) -> str:
    return (
        f"{obj} != null && has({obj}.metadata.ownerReferences) && {obj}.metadata.ownerReferences.exists(r,"
        f" has(r.controller) && r.controller == true && r.kind == 'Job'"
        f" && r.apiVersion.startsWith({cel_string(_JOB_GROUP + '/')}))"
    )


class VolcanoControllerAdmissionChart(cdk8s.Chart):
    """The policy and its binding: ``controller_username``'s writes held to its Jobs' objects in
    ``namespaces``."""

    def __init__(
        self, scope: Construct, id: str, *, controller_username: str, namespaces: Sequence[str]
    ) -> None:
        super().__init__(scope, id)
        if not controller_username or not namespaces:
            raise ValueError(
                "VolcanoControllerAdmissionChart: the controller and its namespaces are required"
            )
        owned = (
            f"(request.operation == 'CREATE' || {_job_owned('oldObject')})"
            f" && (request.operation == 'DELETE' || {_job_owned('object')})"
        )
        where = f"has(request.namespace) && request.namespace in {cel_list(sorted(set(namespaces)))}"
        admission_policy(
            self,
            name=POLICY_NAME,
            labels=_LABELS,
            spec={
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE", "DELETE"],
                            "resources": list(_OWNED_CORE),
                        },
                        {
                            "apiGroups": ["networking.k8s.io"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE", "UPDATE", "DELETE"],
                            "resources": ["networkpolicies"],
                        },
                        {
                            "apiGroups": ["scheduling.k8s.io", "apiextensions.k8s.io"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE", "UPDATE", "DELETE"],
                            "resources": ["priorityclasses", "customresourcedefinitions"],
                        },
                    ]
                },
                "matchConditions": [
                    {
                        # Only Volcano's controller is judged; everyone else's requests are not touched.
                        "name": "volcano-controller-only",
                        "expression": "has(request.userInfo.username)"
                        f" && request.userInfo.username == {cel_string(controller_username)}",
                    }
                ],
                "validations": [
                    {
                        "expression": "!(request.resource.resource in ['priorityclasses', 'customresourcedefinitions'])",
                        "message": "Volcano's controller may not write PriorityClasses or CustomResourceDefinitions",
                        "reason": "Forbidden",
                    },
                    {
                        "expression": f"request.resource.resource in ['priorityclasses', 'customresourcedefinitions'] || ({where})",
                        "message": "Volcano's controller writes only in the namespaces where Volcano Jobs run "
                        "(the teams' and the platform's)",
                        "reason": "Forbidden",
                    },
                    {
                        "expression": f"request.resource.resource in ['priorityclasses', 'customresourcedefinitions'] || ({owned})",
                        "message": "Volcano's controller may create, change and delete only objects a Volcano Job "
                        "controls (ownerReferences): never a team's or the platform's own",
                        "reason": "Forbidden",
                    },
                ],
            },
            binding_spec={"validationActions": ["Deny"]},
        )
