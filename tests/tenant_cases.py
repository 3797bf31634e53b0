"""What a team's member may and may not submit, as data: an object, who sends it, the expected verdict.

The cases are judged today by the CEL model of the API server's admission (tests/admission.py,
``decide``) and are written so that a real kube-apiserver can judge them too: each is one request
(operation, resource, namespace, object, user), and its expectation is the verdict and the exact
messages of the rendered policies (k8s_charts/tenant_admission.py). The objects are what the
policies see on a real server: a Volcano Job after Volcano's job webhook (queue and scheduler
filled in), a pod as Volcano's job controller creates it (``volcano_pod``) after the API server's
own mutating admission (DefaultTolerationSeconds, ExtendedResourceToleration).

The team namespaces and their values come from config/example.yaml (two teams, each on its own
node group): ``training`` (queue ``test``, group ``trn1n-32xl``) and ``research`` (queue
``research``, group ``trn1-32xl-block``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cluster_facts.kubernetes_names import (
    FABRIC_CHECK_TAINT_KEY,
    NODE_GROUP_LABEL,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_JOB_NAMESPACE_LABEL,
    VOLCANO_QUEUE_LABEL,
    team_rbac_group,
)
from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet
from k8s_charts.job_pod_admission import volcano_controller
from k8s_charts.tenant_admission import JOBS_POLICY, PODS_POLICY, Message
from tests.admission import Decision, admission_request, admit

__all__ = [
    "CONTROLLER",
    "MEMBER",
    "RESERVED_NAMES",
    "AdmissionCase",
    "decide",
    "etcd_pod",
    "plan_namespace_labels",
    "refused_variants",
    "reserved_name_cases",
    "tenant_admission_manifests",
    "tenant_cases",
    "volcano_pod",
]

Manifest = dict[str, Any]
CONTROLLER = volcano_controller(namespace="volcano-system", release="volcano")
MEMBER = "arn:aws:sts::444455556666:assumed-role/MlTeam/alice"
HANDLER = "arn:aws:sts::444455556666:assumed-role/TrainiumStack-ClusterKubectlProviderHandlerRole/x"
STATEFULSET_CONTROLLER = "system:serviceaccount:kube-system:statefulset-controller"
RESERVED_NAMES = Message.reserved([]).split("; reserved here")[0]
"""The reserved-name rule's message up to its list of names (which differs per plan)."""
_ZONE_LABEL = "topology.kubernetes.io/zone"


@dataclass(frozen=True, kw_only=True)
class AdmissionCase:
    """One request and what the team policies answer."""

    id: str
    policy: str
    """JOBS_POLICY or PODS_POLICY: which rendered policy judges it."""
    obj: Manifest
    user: str
    groups: tuple[str, ...] = ()
    operation: str = "CREATE"
    old: Manifest | None = None
    allowed: bool
    messages: tuple[str, ...] = ()
    """Exactly these, in any order; () for an allowed request."""
    judged: bool = True
    """False: the policy does not match the request at all (its match conditions leave it out)."""

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"]["namespace"])

    @property
    def resource(self) -> tuple[str, str, str, str]:
        """(group, version, resource, kind)."""
        if self.policy == JOBS_POLICY:
            return ("batch.volcano.sh", "v1alpha1", "jobs", "Job")
        return ("", "v1", "pods", "Pod")


def decide(
    manifests: list[Mapping[str, Any]], case: AdmissionCase, namespace_labels: Mapping[str, str]
) -> Decision:
    """The CEL model's verdict on ``case`` (the rendered policy of ``case.policy`` and its binding)."""
    group, version, resource, kind = case.resource
    request = admission_request(
        user=case.user,
        operation=case.operation,
        resource=resource,
        name=case.obj["metadata"]["name"],
        namespace=case.namespace,
        kind=kind,
        group=group,
        version=version,
        groups=case.groups,
    )
    chosen = [dict(m) for m in manifests if m["metadata"]["name"] == case.policy]
    return admit(chosen, request, obj=case.obj, old=case.old, namespace_labels=namespace_labels)


def volcano_pod(job: Mapping[str, Any], *, task: int = 0, index: int = 0) -> Manifest:
    """The pod Volcano v1.15.1's job controller creates for one replica of ``job`` (createJobPod:
    the template, the Job's scheduler and priority class where the template has none, its labels
    and annotations, the Job as controlling owner), after the API server's defaulting
    (schedulerName) and mutating admission (DefaultTolerationSeconds; ExtendedResourceToleration,
    which EKS enables: a toleration of each extended resource the pod requests)."""
    spec_of_job = job["spec"]
    template = copy.deepcopy(spec_of_job["tasks"][task]["template"])
    spec = template["spec"]
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    if not spec.get("schedulerName"):
        spec["schedulerName"] = spec_of_job.get("schedulerName") or "default-scheduler"
    if not spec.get("priorityClassName") and spec_of_job.get("priorityClassName"):
        spec["priorityClassName"] = spec_of_job["priorityClassName"]
    tolerations = spec.setdefault("tolerations", [])
    requested = {
        resource
        for container in spec.get("containers", [])
        for resource in (container.get("resources", {}).get("limits") or {})
        if "/" in resource
    }
    for resource in sorted(requested):
        if not any(t.get("key") == resource for t in tolerations):
            tolerations.append({"key": resource, "operator": "Exists", "effect": "NoSchedule"})
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tolerations):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    task_name = spec_of_job["tasks"][task]["name"]
    metadata = template.setdefault("metadata", {})
    metadata["name"] = f"{name}-{task_name}-{index}"
    metadata["namespace"] = namespace
    metadata["labels"] = {
        **metadata.get("labels", {}),
        VOLCANO_JOB_NAME_LABEL: name,
        VOLCANO_JOB_NAMESPACE_LABEL: namespace,
        VOLCANO_QUEUE_LABEL: spec_of_job["queue"],
        "volcano.sh/task-spec": task_name,
    }
    metadata["annotations"] = {
        **metadata.get("annotations", {}),
        "scheduling.k8s.io/group-name": f"{name}-0f0c0000-0000-4000-8000-000000000001",
        VOLCANO_QUEUE_LABEL: spec_of_job["queue"],
        "volcano.sh/job-version": "0",
    }
    metadata["ownerReferences"] = [
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "name": name,
            "uid": "0f0c0000-0000-4000-8000-000000000001",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _objects(plan: KubernetesLayerPlan, kind: str, namespace: str) -> list[Manifest]:
    return [
        copy.deepcopy(dict(m))
        for step in plan.manifest_sets()
        for m in step.manifests
        if m["kind"] == kind and m.get("metadata", {}).get("namespace") == namespace
    ]


def _run_job(plan: KubernetesLayerPlan, namespace: str) -> Manifest:
    jobs = [
        copy.deepcopy(dict(m))
        for step in plan.manifest_sets()
        if step.name.startswith("run-")
        for m in step.manifests
        if m["metadata"]["namespace"] == namespace
    ]
    return jobs[0]


def etcd_pod(plan: KubernetesLayerPlan, namespace: str) -> Manifest:
    """A pod the StatefulSet controller creates for the team's etcd (member 0)."""
    [statefulset] = _objects(plan, "StatefulSet", namespace)
    template = copy.deepcopy(statefulset["spec"]["template"])
    template["metadata"].update(
        name=f"{statefulset['metadata']['name']}-0",
        namespace=namespace,
        ownerReferences=[
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": statefulset["metadata"]["name"],
                "uid": "0f0c0000-0000-4000-8000-000000000002",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    )
    template["spec"].setdefault("schedulerName", "default-scheduler")
    return {"apiVersion": "v1", "kind": "Pod", **template}


Edit = Callable[[Manifest], object]


def _edited(obj: Manifest, *edits: Edit) -> Manifest:
    changed = copy.deepcopy(obj)
    for edit in edits:
        edit(changed)
    return changed


def _pod_spec(job: Manifest) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["tasks"][0]["template"]["spec"]
    return spec


def _container(job: Manifest) -> dict[str, Any]:
    container: dict[str, Any] = _pod_spec(job)["containers"][0]
    return container


def _datasets_volume(spec: dict[str, Any]) -> dict[str, Any]:
    return next(
        v
        for v in spec["volumes"]
        if v.get("persistentVolumeClaim", {}).get("claimName", "").endswith("-datasets")
    )


def _datasets_mount(spec: dict[str, Any]) -> dict[str, Any]:
    volume = _datasets_volume(spec)["name"]
    return next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume)


@dataclass(frozen=True)
class _Variant:
    id: str
    edits: tuple[Edit, ...]
    messages: tuple[str, ...]
    also_for_pods: bool = True
    """The same edit on a pod Volcano creates is refused with the same messages."""
    name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _set(path: Callable[[Manifest], dict[str, Any]], key: str, value: Any) -> Edit:
    return lambda obj: path(obj).__setitem__(key, value)


def _job_spec(obj: Manifest) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]
    return spec


def _sc(job: Manifest) -> dict[str, Any]:
    security: dict[str, Any] = _pod_spec(job).setdefault("securityContext", {})
    return security


def _variants(other_group: str, other_queue: str) -> list[_Variant]:
    M = Message
    critical = "system-node-critical"
    return [
        # Placement.
        _Variant("node-name", (_set(_pod_spec, "nodeName", "ip-10-0-1-10.ec2.internal"),), (M.NODE_NAME,)),
        _Variant(
            "default-scheduler", (_set(_pod_spec, "schedulerName", "default-scheduler"),), (M.SCHEDULER,)
        ),
        _Variant(
            "another-team-group",
            (lambda j: _pod_spec(j)["nodeSelector"].__setitem__(NODE_GROUP_LABEL, other_group),),
            (M.NODE_GROUP,),
        ),
        _Variant(
            "system-node-by-zone",
            (_set(_pod_spec, "nodeSelector", {_ZONE_LABEL: "us-east-1a"}),),
            (M.NODE_GROUP,),
        ),
        _Variant("no-node-selector", (lambda j: _pod_spec(j).pop("nodeSelector"),), (M.NODE_GROUP,)),
        _Variant(
            "tolerates-everything",
            (lambda j: _pod_spec(j).setdefault("tolerations", []).append({"operator": "Exists"}),),
            (M.TOLERATIONS,),
        ),
        _Variant(
            "tolerates-cordons",
            (
                lambda j: (
                    _pod_spec(j)
                    .setdefault("tolerations", [])
                    .append(
                        {
                            "key": "node.kubernetes.io/unschedulable",
                            "operator": "Exists",
                            "effect": "NoSchedule",
                        }
                    )
                ),
            ),
            (M.TOLERATIONS,),
        ),
        _Variant(
            "tolerates-a-failed-fabric-check",
            (
                lambda j: (
                    _pod_spec(j)
                    .setdefault("tolerations", [])
                    .append({"key": FABRIC_CHECK_TAINT_KEY, "operator": "Exists"})
                ),
            ),
            (M.TOLERATIONS,),
        ),
        # Priority.
        _Variant(
            "critical-priority-on-the-template",
            (_set(_pod_spec, "priorityClassName", critical),),
            (M.PRIORITY,),
        ),
        _Variant(
            "critical-priority-on-the-job",
            (_set(_job_spec, "priorityClassName", "system-cluster-critical"),),
            (M.PRIORITY,),
            also_for_pods=True,
        ),
        _Variant("no-priority", (lambda j: _job_spec(j).pop("priorityClassName"),), (M.PRIORITY,)),
        # Queues.
        _Variant(
            "another-teams-queue",
            (_set(_job_spec, "queue", other_queue),),
            (M.JOB_QUEUE,),
            also_for_pods=False,
        ),
        _Variant(
            "volcanos-default-queue",
            (_set(_job_spec, "queue", "default"),),
            (M.JOB_QUEUE,),
            also_for_pods=False,
        ),
        # Root.
        _Variant("run-as-root", (_set(_sc, "runAsUser", 0),), (M.NON_ROOT,)),
        _Variant("run-as-non-root-false", (_set(_sc, "runAsNonRoot", False),), (M.NON_ROOT,)),
        _Variant("no-security-context", (lambda j: _pod_spec(j).pop("securityContext"),), (M.NON_ROOT,)),
        _Variant(
            "container-runs-as-root",
            (lambda j: _container(j)["securityContext"].__setitem__("runAsUser", 0),),
            (M.NON_ROOT,),
        ),
        # The host.
        _Variant("host-network", (_set(_pod_spec, "hostNetwork", True),), (M.HOST,)),
        _Variant(
            "host-path",
            (lambda j: _pod_spec(j)["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),),
            (M.VOLUMES,),
        ),
        _Variant(
            "inline-csi",
            (
                lambda j: _pod_spec(j)["volumes"].append(
                    {"name": "fsx", "csi": {"driver": "fsx.csi.aws.com"}}
                ),
            ),
            (M.VOLUMES,),
        ),
        # Data sets.
        _Variant(
            "data-set-claim-writable",
            (lambda j: _datasets_volume(_pod_spec(j))["persistentVolumeClaim"].pop("readOnly"),),
            (M.READ_ONLY,),
        ),
        _Variant(
            "data-set-mount-writable",
            (lambda j: _datasets_mount(_pod_spec(j)).__setitem__("readOnly", False),),
            (M.READ_ONLY,),
        ),
    ]


def tenant_cases(plan: KubernetesLayerPlan) -> list[AdmissionCase]:
    """Every case, for the plan of config/example.yaml (teams training and research)."""
    job = _run_job(plan, "training")
    research_job = _run_job(plan, "research")
    groups = (team_rbac_group("training"),)
    other_group = _pod_spec(research_job)["nodeSelector"][NODE_GROUP_LABEL]
    other_queue = research_job["spec"]["queue"]
    read_only_claim = _datasets_volume(_pod_spec(job))["persistentVolumeClaim"]["claimName"]
    cases = [
        AdmissionCase(id="the-stacks-run", policy=JOBS_POLICY, obj=job, user=HANDLER, allowed=True),
        AdmissionCase(
            id="the-stacks-other-run", policy=JOBS_POLICY, obj=research_job, user=HANDLER, allowed=True
        ),
        AdmissionCase(
            id="a-member-submits-the-run",
            policy=JOBS_POLICY,
            obj=job,
            user=MEMBER,
            groups=groups,
            allowed=True,
        ),
        AdmissionCase(
            id="volcano-creates-the-runs-pod",
            policy=PODS_POLICY,
            obj=volcano_pod(job),
            user=CONTROLLER,
            allowed=True,
        ),
        AdmissionCase(
            id="volcano-creates-the-other-runs-pod",
            policy=PODS_POLICY,
            obj=volcano_pod(research_job),
            user=CONTROLLER,
            allowed=True,
        ),
        AdmissionCase(
            id="the-statefulset-controller-creates-etcd",
            policy=PODS_POLICY,
            obj=etcd_pod(plan, "training"),
            user=STATEFULSET_CONTROLLER,
            allowed=True,
            judged=False,
        ),
        AdmissionCase(
            id="anyone-else-creates-an-etcd-lookalike",
            policy=PODS_POLICY,
            obj=etcd_pod(plan, "training"),
            user=CONTROLLER,
            allowed=False,
            messages=(Message.POD_QUEUE, Message.SCHEDULER, Message.PRIORITY, Message.NODE_GROUP),
        ),
    ]
    cases += refused_variants(job, other_group=other_group, other_queue=other_queue, groups=groups)
    cases += [
        AdmissionCase(
            id="job-names-the-data-sets-claim-in-its-volumes",
            policy=JOBS_POLICY,
            obj=_edited(
                job, _set(_job_spec, "volumes", [{"mountPath": "/d", "volumeClaimName": read_only_claim}])
            ),
            user=MEMBER,
            groups=groups,
            allowed=False,
            messages=(Message.READ_ONLY,),
        ),
        AdmissionCase(
            id="job-in-another-teams-namespace-keeps-its-queue-and-group",
            policy=JOBS_POLICY,
            obj=_edited(job, lambda j: j["metadata"].__setitem__("namespace", "research")),
            user=MEMBER,
            groups=groups,
            allowed=False,
            messages=(Message.JOB_QUEUE, Message.NODE_GROUP),
        ),
        AdmissionCase(
            id="an-admin-raises-a-jobs-priority",
            policy=JOBS_POLICY,
            operation="UPDATE",
            old=job,
            obj=_edited(job, _set(_job_spec, "priorityClassName", "system-node-critical")),
            user=HANDLER,
            allowed=False,
            messages=(Message.PRIORITY,),
        ),
    ]
    return cases


def refused_variants(
    job: Manifest, *, other_group: str, other_queue: str, groups: tuple[str, ...]
) -> list[AdmissionCase]:
    """``job`` (one the policies admit) broken one rule at a time, as a member submits it (``job-<id>``)
    and as Volcano creates its first pod (``pod-<id>``): each refused with that rule's message."""
    cases = []
    for variant in _variants(other_group, other_queue):
        bad = _edited(job, *variant.edits)
        cases.append(
            AdmissionCase(
                id=f"job-{variant.id}", policy=JOBS_POLICY, obj=bad, user=MEMBER, groups=groups,
                allowed=False, messages=variant.messages,
            )
        )  # fmt: skip
        if variant.also_for_pods:
            cases.append(
                AdmissionCase(
                    id=f"pod-{variant.id}", policy=PODS_POLICY, obj=volcano_pod(bad), user=CONTROLLER,
                    allowed=False, messages=variant.messages,
                )
            )  # fmt: skip
    # A pod of a Job in another queue (admitted before the policy, or by an admin's mistake).
    for queue_id, queue in (("another-teams-queue", other_queue), ("volcanos-default-queue", "default")):
        cases.append(
            AdmissionCase(
                id=f"pod-{queue_id}", policy=PODS_POLICY, obj=volcano_pod(_edited(job, _set(_job_spec, "queue", queue))),
                user=CONTROLLER, allowed=False, messages=(Message.POD_QUEUE,),
            )
        )  # fmt: skip
    return cases


def reserved_name_cases(plan: KubernetesLayerPlan, reserved_message: str) -> list[AdmissionCase]:
    """A member's Job named after a platform object of the namespace, or after one less a suffix
    Volcano appends: each refused on CREATE."""
    job = _run_job(plan, "training")
    groups = (team_rbac_group("training"),)
    names = ["default-deny", "volcano-job-pods", "etcd-server", "trainium-team-member", "team-quota"]
    return [
        AdmissionCase(
            id=f"job-named-{name}",
            policy=JOBS_POLICY,
            obj=_edited(job, lambda j, name=name: j["metadata"].__setitem__("name", name)),  # type: ignore[misc]
            user=MEMBER,
            groups=groups,
            allowed=False,
            messages=(reserved_message,),
        )
        for name in names
    ]


def plan_namespace_labels(plan: KubernetesLayerPlan) -> dict[str, dict[str, str]]:
    """Each namespace the plan creates, with its labels."""
    return {
        m["metadata"]["name"]: dict(m["metadata"].get("labels", {}))
        for step in plan.manifest_sets()
        for m in step.manifests
        if m["kind"] == "Namespace"
    }


def tenant_admission_manifests(plan: KubernetesLayerPlan) -> list[Mapping[str, Any]]:
    step = plan.step("team-admission")
    assert isinstance(step, ManifestSet)
    return list(step.manifests)
