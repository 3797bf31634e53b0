"""The deployment check's fence: its group may create only the rendered fabric-check Jobs.

RBAC gives the check ``create`` on every Volcano Job in the platform namespace; the admission
policy of k8s_charts/deployment_check_rbac.py is what narrows it. Its CEL runs here (tests/admission.py)
on the Job the synth renders for the pipeline, and on that Job changed one field at a time.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from cluster_facts.kubernetes_names import DEPLOYMENT_CHECK_GROUP, PLATFORM_NAMESPACE
from config import StackConfig, parse_config
from k8s_charts.deployment_check_rbac import DeploymentCheckRbacChart, fabric_check_job, job_fence_name
from stacks.fabric_check_commands import pipeline_fabric_check_manifests
from tests.admission import Decision, admission_request, admit
from tests.conftest import REPO_ROOT
from tests.k8s.manifests import synth
from tests.k8s_validation import assert_valid
from tests.plans import shared_review_plan

Manifest = dict[str, Any]
CHECK_USER = "arn:aws:sts::111111111111:assumed-role/trainium-dev-us-west-2-deploy-check/check"
OTHER_IMAGE = "docker.io/library/busybox@sha256:" + "a" * 64


def fabric_config(*, taint: bool) -> StackConfig:
    data = yaml.safe_load((REPO_ROOT / "config" / "environments" / "dev.yaml").read_text())
    data["fabric_check"] = {"pipeline": True, "taint_failed_nodes": taint}
    return parse_config(data)


def rendered(taint: bool) -> tuple[list[Manifest], Manifest]:
    """The chart as the stack builds it from the plan, and the one Job the pipeline creates."""
    config = fabric_config(taint=taint)
    [job] = pipeline_fabric_check_manifests(config, shared_review_plan(config))
    manifests = synth(
        lambda app: DeploymentCheckRbacChart(
            app,
            "rbac",
            group=DEPLOYMENT_CHECK_GROUP,
            fabric_check_jobs=[fabric_check_job(job)],
            fabric_check_namespace=PLATFORM_NAMESPACE,
        )
    )
    return manifests, copy.deepcopy(dict(job))


@pytest.fixture(scope="module")
def tainting() -> tuple[list[Manifest], Manifest]:
    return rendered(taint=True)


def fence(manifests: list[Manifest]) -> list[Manifest]:
    return [m for m in manifests if m["kind"].startswith("ValidatingAdmissionPolicy")]


def decide(
    manifests: list[Manifest],
    job: Manifest,
    *,
    groups: tuple[str, ...] = (DEPLOYMENT_CHECK_GROUP,),
    operation: str = "CREATE",
    namespace: str = PLATFORM_NAMESPACE,
) -> Decision:
    request = admission_request(
        user=CHECK_USER,
        operation=operation,
        resource="jobs",
        name=job["metadata"]["name"],
        namespace=namespace,
        kind="Job",
        group="batch.volcano.sh",
        version="v1alpha1",
        groups=groups,
    )
    return admit(fence(manifests), request, obj=job, old=job if operation == "UPDATE" else None)


def as_volcano_defaults_it(job: Manifest) -> Manifest:
    """What Volcano's mutating webhook (v1.15.1 mutate_job.go) writes before validation runs: the
    tasks re-marshalled with minAvailable and maxRetry, and the job's maxRetry."""
    job = copy.deepcopy(job)
    job["spec"].setdefault("maxRetry", 3)
    for task in job["spec"]["tasks"]:
        task.setdefault("minAvailable", task["replicas"])
        task.setdefault("maxRetry", 3)
    return job


@pytest.mark.parametrize("taint", [True, False], ids=["tainting", "not-tainting"])
def test_the_fence_admits_the_rendered_fabric_check_job(taint: bool) -> None:
    manifests, job = rendered(taint)
    assert_valid(manifests)
    assert_valid([job])
    for candidate, operation in [
        (job, "CREATE"),
        (as_volcano_defaults_it(job), "CREATE"),
        (as_volcano_defaults_it(job), "UPDATE"),
    ]:
        decision = decide(manifests, candidate, operation=operation)
        assert decision == Decision(matched=True, allowed=True), decision.messages
    # What it was read from: one name, the training image, the launcher's service account when it taints.
    [policy] = [m for m in manifests if m["kind"] == "ValidatingAdmissionPolicy"]
    assert (
        policy["metadata"]["name"]
        == job_fence_name(DEPLOYMENT_CHECK_GROUP)
        == "trainium-deployment-check-volcano-jobs"
    )
    facts = fabric_check_job(job)
    assert facts.name == "fabric-check-trn1-32xl"
    assert facts.images == (job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"],)
    assert facts.service_accounts == (("fabric-check-trn1-32xl",) if taint else ())
    assert facts.capabilities == ()


def test_the_fence_is_in_place_before_the_role_that_grants_create(
    tainting: tuple[list[Manifest], Manifest],
) -> None:
    manifests, _ = tainting
    kinds = [m["kind"] for m in manifests]
    runner = next(
        i
        for i, m in enumerate(manifests)
        if m["kind"] == "Role" and m["metadata"]["namespace"] == PLATFORM_NAMESPACE
    )
    assert kinds.index("ValidatingAdmissionPolicy") < runner
    assert kinds.index("ValidatingAdmissionPolicyBinding") < runner
    [binding] = [m for m in manifests if m["kind"] == "ValidatingAdmissionPolicyBinding"]
    # Every namespace: the policy itself refuses any but the checks'.
    assert binding["spec"] == {
        "policyName": "trainium-deployment-check-volcano-jobs",
        "validationActions": ["Deny"],
    }


def _pods(job: Manifest) -> list[Manifest]:
    return [task["template"]["spec"] for task in job["spec"]["tasks"]]


def _worker(job: Manifest) -> Manifest:
    [worker] = _pods(job)[0]["containers"]
    return worker


def renamed(job: Manifest) -> None:
    job["metadata"]["name"] = "fabric-check-mine"


def other_image(job: Manifest) -> None:
    _worker(job)["image"] = OTHER_IMAGE


def init_container(job: Manifest) -> None:
    _pods(job)[1]["initContainers"] = [{"name": "setup", "image": OTHER_IMAGE, "command": ["sh"]}]


def host_path(job: Manifest) -> None:
    _pods(job)[0]["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
    _worker(job)["volumeMounts"] = [{"name": "root", "mountPath": "/host"}]


def secret_volume(job: Manifest) -> None:
    _pods(job)[1]["volumes"] = [{"name": "s", "secret": {"secretName": "any"}}]


def job_volume(job: Manifest) -> None:
    job["spec"]["volumes"] = [{"mountPath": "/data", "volumeClaimName": "someone-elses"}]


def privileged(job: Manifest) -> None:
    _worker(job)["securityContext"]["privileged"] = True


def capability(job: Manifest) -> None:
    _worker(job)["securityContext"]["capabilities"] = {"add": ["SYS_ADMIN"]}


def host_network(job: Manifest) -> None:
    _pods(job)[0]["hostNetwork"] = True


def host_pid(job: Manifest) -> None:
    _pods(job)[1]["hostPID"] = True


def secret_env(job: Manifest) -> None:
    _worker(job)["env"].append(
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "any", "key": "token"}}}
    )


def other_service_account(job: Manifest) -> None:
    _pods(job)[0].update(serviceAccountName="volcano-controllers", automountServiceAccountToken=True)


def deprecated_service_account(job: Manifest) -> None:
    _pods(job)[0].update(serviceAccount="volcano-controllers", automountServiceAccountToken=True)


def default_token(job: Manifest) -> None:
    _pods(job)[0]["automountServiceAccountToken"] = True


FORBIDDEN: dict[str, tuple[Callable[[Manifest], None], str]] = {
    "another name": (renamed, "a Volcano Job named fabric-check-trn1-32xl"),
    "another image": (other_image, "every container's image one of the check's"),
    "an init container of another image": (init_container, "every container's image one of the check's"),
    "a hostPath volume": (host_path, "no volume"),
    "a Secret volume": (secret_volume, "no volume"),
    "a Job volume": (job_volume, "no volume"),
    "privileged": (privileged, "no privileged container"),
    "an added capability": (capability, "no privileged container"),
    "hostNetwork": (host_network, "no host network"),
    "hostPID": (host_pid, "no host network"),
    "a Secret in the environment": (secret_env, "no Secret in a container's environment"),
    "another service account": (other_service_account, "no service account but the check's own"),
    "the deprecated serviceAccount field": (
        deprecated_service_account,
        "no service account but the check's own",
    ),
    "the default service account's token": (default_token, "no service account but the check's own"),
    "another queue": (lambda j: j["spec"].__setitem__("queue", "research"), "its own queue"),
    "Volcano's default queue": (lambda j: j["spec"].__setitem__("queue", "default"), "its own queue"),
    "a priority class": (
        lambda j: j["spec"].__setitem__("priorityClassName", "system-node-critical"),
        "the rendered priority class",
    ),
    "a task's priority class": (
        lambda j: _pods(j)[0].__setitem__("priorityClassName", "system-cluster-critical"),
        "the rendered priority class",
    ),
    "nodeName": (
        lambda j: _pods(j)[0].__setitem__("nodeName", "ip-10-0-0-1.ec2.internal"),
        "the rendered node group",
    ),
    "another node selector": (
        lambda j: _pods(j)[1].__setitem__("nodeSelector", {"topology.kubernetes.io/zone": "us-west-2a"}),
        "the rendered node group",
    ),
    "another toleration": (
        lambda j: _pods(j)[0]["tolerations"].append({"operator": "Exists"}),
        "the rendered node group",
    ),
    "node affinity": (
        lambda j: _pods(j)[0].__setitem__("affinity", {"nodeAffinity": {}}),
        "the rendered node group",
    ),
    "a runtime class": (
        lambda j: _pods(j)[0].__setitem__("runtimeClassName", "runc-host"),
        "no runtime class",
    ),
    "host aliases": (
        lambda j: _pods(j)[1].__setitem__("hostAliases", [{"ip": "10.0.0.1", "hostnames": ["pypi.org"]}]),
        "no runtime class or host aliases",
    ),
    "an extra Job label": (
        lambda j: j["metadata"]["labels"].__setitem__("volcano.sh/job-name", "x"),
        "the rendered labels",
    ),
    "an extra pod label": (
        lambda j: j["spec"]["tasks"][0]["template"]["metadata"]["labels"].__setitem__("k8s-app", "kube-dns"),
        "the rendered labels",
    ),
    "more replicas": (
        lambda j: j["spec"]["tasks"][0].__setitem__("replicas", 64),
        "the rendered tasks and replicas",
    ),
    "another minAvailable": (
        lambda j: j["spec"].__setitem__("minAvailable", 1),
        "the rendered tasks and replicas",
    ),
    "a task fewer": (lambda j: j["spec"]["tasks"].pop(), "the rendered tasks and replicas"),
}


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
@pytest.mark.parametrize("case", list(FORBIDDEN))
def test_the_fence_refuses_anything_but_the_rendered_job(
    tainting: tuple[list[Manifest], Manifest], case: str, operation: str
) -> None:
    manifests, job = tainting
    change, message = FORBIDDEN[case]
    changed = as_volcano_defaults_it(job)
    change(changed)
    assert_valid([changed])
    decision = decide(manifests, changed, operation=operation)
    assert decision.matched and not decision.allowed
    # Refused for that reason, and (but for the name: the images and identity allowed are the
    # named Job's) only that one.
    assert decision.messages[0].startswith(
        f"{DEPLOYMENT_CHECK_GROUP} may only create the fabric checks: {message}"
    )
    if change is not renamed:
        assert len(decision.messages) == 1, decision.messages


def test_the_fence_refuses_another_namespace(tainting: tuple[list[Manifest], Manifest]) -> None:
    manifests, job = tainting
    elsewhere = copy.deepcopy(job)
    elsewhere["metadata"]["namespace"] = "team-a"
    decision = decide(manifests, elsewhere, namespace="team-a")
    assert decision.messages == (
        f"{DEPLOYMENT_CHECK_GROUP} may only create the fabric checks: in namespace {PLATFORM_NAMESPACE}",
    )


def test_the_fence_applies_only_to_the_deployment_checks_group(
    tainting: tuple[list[Manifest], Manifest],
) -> None:
    manifests, job = tainting
    changed = copy.deepcopy(job)
    privileged(changed)
    # Anyone else's Volcano Jobs are not the fence's business (team RBAC and Pod Security judge them).
    assert decide(manifests, changed, groups=("team-a-members",)) == Decision(matched=False, allowed=True)
    assert decide(manifests, job, groups=()) == Decision(matched=False, allowed=True)


def test_the_fence_refuses_a_job_that_is_not_a_volcano_job() -> None:
    with pytest.raises(ValueError, match="is not a Volcano Job"):
        fabric_check_job({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": {}})
