"""Admission cases (tests/tenant_cases.py) sent to the real API server by their requesters, and its
verdict compared with the case's: what the CEL model says, the real server must say too.

Each case is one request, sent with ``--dry-run=server`` (every admission step runs, Volcano's
webhooks included, and nothing is stored) by the case's requester, impersonated: a team member as the
group its access entry maps to, Volcano's job controller and the ReplicaSet controller as their
service accounts, and the kubectl handler as a cluster admin (its EKS access entry is the cluster
admin policy). What the real server adds to the model:

- the order of admission: Pod Security (the team namespaces enforce ``restricted``) judges a pod
  before the policies, so a pod both refuse is refused with Pod Security's message;
- RBAC before both: a member's request in another team's namespace never reaches the policy, so that
  case is sent again by the admin, whom the policy judges like anyone;
- one message per refusal: the API server reports the first failed validation of a policy, so a
  case expecting several messages is checked for one of them.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from tests.cluster.control_plane import ControlPlane, Kubectl
from tests.tenant_cases import HANDLER, AdmissionCase

__all__ = ["requester", "send", "verdict"]

CLUSTER_ADMINS = "system:masters"


def requester(plane: ControlPlane, user: str, groups: tuple[str, ...]) -> Kubectl:
    return plane.impersonate(user, [*groups, CLUSTER_ADMINS] if user == HANDLER else groups)


def send(plane: ControlPlane, case: AdmissionCase, who: Kubectl) -> tuple[int, str]:
    body = json.dumps(case.obj)
    if case.operation == "CREATE":
        result = who("create", "--dry-run=server", "-f", "-", input=body, check=False)
        return result.returncode, result.stderr
    assert case.operation == "UPDATE" and case.old is not None, case.id
    old = json.dumps(case.old)
    # The old object as the cluster holds it (the example applies its first run), else created.
    created = plane.kubectl("get", "-f", "-", input=old, check=False).returncode != 0
    if created:
        plane.kubectl("create", "-f", "-", input=old)
    try:
        # kubectl replace reads the object's resourceVersion, then sends the update: Volcano's
        # controller writing the Job's status in between makes it a Conflict, which is no verdict.
        for _ in range(5):
            result = who("replace", "--dry-run=server", "-f", "-", input=body, check=False)
            if "the object has been modified" not in result.stderr:
                break
    finally:
        if created:
            plane.kubectl("delete", "-f", "-", "--wait=true", input=old)
    return result.returncode, result.stderr


_REFUSED_FIRST = {
    "violates PodSecurity": "refused by Pod Security first",
    "is invalid: ": "refused by the API server's validation first",
}


def _refused_first(error: str) -> str | None:
    """Who refused a request before the case's own policy could, if that is all that happened. The
    object's own validation runs before validating admission (a pod both privileged and without
    privilege escalation, or with an unmasked /proc outside a user namespace, never reaches a policy),
    Pod Security before the team's policy, and another of the platform's policies may refuse first
    (Volcano's controller writes only its Jobs' objects: trainium-volcano-controller-writes). Refused
    is what the case asks; its own policy is judged against its model in tests/test_tenant_admission.py."""
    found = next((who for said, who in _REFUSED_FIRST.items() if said in error), None)
    other = re.search(r"ValidatingAdmissionPolicy '(trainium-[a-z-]+)' with binding '\1' denied", error)
    return found or (f"refused by {other.group(1)} first" if other else None)


def verdict(plane: ControlPlane, case: AdmissionCase, how: Counter[str]) -> str | None:
    """None when the real server agrees with the case; otherwise what it did. ``how`` counts who
    decided the cases it agrees with."""
    status, error = send(plane, case, requester(plane, case.user, case.groups))
    if status != 0 and "cannot " in error and "is forbidden: User" in error and not case.allowed:
        # RBAC refused the requester before admission: the policy judges the admin's request too.
        how["RBAC first, then sent by the admin"] += 1
        status, error = send(plane, case, requester(plane, HANDLER, ()))
    if case.allowed:
        how["accepted"] += status == 0
        return None if status == 0 else f"refused: {error.strip()}"
    if status == 0:
        return "accepted"
    denied = f"ValidatingAdmissionPolicy '{case.policy}' with binding '{case.policy}' denied request: "
    if denied not in error:
        first = _refused_first(error)
        if first is None:
            return f"refused otherwise: {error.strip()}"
        how[first] += 1
        return None
    said = error.split(denied, 1)[1].strip()
    if any(said.startswith(message) for message in case.server_says or case.messages):
        how[f"refused by {case.policy}"] += 1
        return None
    return f"refused with: {said}"
