"""What a team's member may and may not submit, as data: an object, who sends it, the expected verdict.

The cases are judged today by the CEL model of the API server's admission (tests/admission.py,
``decide``) and are written so that a real kube-apiserver can judge them too: each is one request
(operation, resource, namespace, object, user), and its expectation is the verdict and the exact
messages of the rendered policies (k8s_charts/teams/tenant_admission.py). The objects are what the
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
    CDK_PRUNE_LABEL_PREFIX,
    FABRIC_CHECK_TAINT_KEY,
    NEURON_RESOURCE,
    NODE_GROUP_LABEL,
    PLATFORM_NAMESPACE,
    STUCK_MINUTES_ANNOTATION,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_JOB_NAMESPACE_LABEL,
    VOLCANO_QUEUE_LABEL,
    team_rbac_group,
)
from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet
from cluster_facts.volcano_retries import MAX_RETRY
from k8s_charts.teams.job_pod_admission import volcano_controller
from k8s_charts.teams.tenant_admission import JOBS_POLICY, PODS_POLICY, Message
from tests.admission import Decision, admission_request, admit

__all__ = [
    "CONTROLLER",
    "MEMBER",
    "MEMBER_JOB_NAME",
    "RESERVED_NAMES",
    "AdmissionCase",
    "blocker_terms",
    "decide",
    "etcd_pod",
    "plan_namespace_labels",
    "refused_variants",
    "reserved_name_cases",
    "stuck_minutes_message",
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
    server_says: tuple[str, ...] = ()
    """What the real server's message starts with, where it differs from ``messages`` (a message
    naming when the stored object was created); () for ``messages`` themselves."""

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
    """A pod the StatefulSet controller would create for the team's etcd: the member after the last
    (``etcd-server-<replicas>``, as a scale-up names it), so that it never meets a running member."""
    [statefulset] = _objects(plan, "StatefulSet", namespace)
    template = copy.deepcopy(statefulset["spec"]["template"])
    template["metadata"].update(
        name=f"{statefulset['metadata']['name']}-{statefulset['spec']['replicas']}",
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
        _Variant(
            "no-security-context", (lambda j: _pod_spec(j).pop("securityContext"),), (M.NON_ROOT, M.SECCOMP)
        ),
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


def _anti_affinity(term: dict[str, Any], *, preferred: bool = False, kind: str = "podAntiAffinity") -> Edit:
    """An affinity term on the template (required, or preferred with weight 100), over every pod."""

    def edit(job: Manifest) -> None:
        full = {"labelSelector": {}, **term}
        rules = (
            {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": full}]}
            if preferred
            else {"requiredDuringSchedulingIgnoredDuringExecution": [full]}
        )
        _pod_spec(job).setdefault("affinity", {})[kind] = rules

    return edit


def blocker_terms(other_namespace: str) -> dict[str, dict[str, Any]]:
    """The anti-affinity terms by which one team's pod kept another team's pods (or the platform's)
    off every node (issue 34), by id: each selects every pod (``labelSelector: {}``)."""
    everyone: dict[str, Any] = {"namespaceSelector": {}}
    theirs: dict[str, Any] = {"namespaces": [other_namespace]}
    by_label = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": other_namespace}}}
    return {
        "every-namespace-by-os": {**everyone, "topologyKey": "kubernetes.io/os"},
        "every-namespace-by-zone": {**everyone, "topologyKey": _ZONE_LABEL},
        "named-namespace-by-os": {**theirs, "topologyKey": "kubernetes.io/os"},
        "named-namespace-by-zone": {**theirs, "topologyKey": _ZONE_LABEL},
        "selected-namespace-by-node": {**by_label, "topologyKey": "kubernetes.io/hostname"},
        "the-platform-by-os": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": PLATFORM_NAMESPACE}},
            "topologyKey": "kubernetes.io/os",
        },
        "own-namespace-by-os": {"topologyKey": "kubernetes.io/os"},
    }


def _with_container_security(key: str, value: Any) -> Edit:
    return lambda j: _container(j)["securityContext"].__setitem__(key, value)


def _pod_security_variants() -> list[_Variant]:
    M = Message
    return [
        _Variant("privileged", (_with_container_security("privileged", True),), (M.PRIVILEGE,)),
        _Variant("privilege-escalation", (_with_container_security("allowPrivilegeEscalation", True),), (M.PRIVILEGE,)),
        _Variant(
            "adds-sys-admin",
            (lambda j: _container(j)["securityContext"]["capabilities"].__setitem__("add", ["SYS_ADMIN"]),),
            (M.PRIVILEGE,),
        ),
        _Variant(
            "keeps-capabilities",
            (lambda j: _container(j)["securityContext"].pop("capabilities"),),
            (M.PRIVILEGE,),
        ),
        _Variant("seccomp-unconfined", (_with_container_security("seccompProfile", {"type": "Unconfined"}),), (M.SECCOMP,)),
        _Variant("no-seccomp", (lambda j: _sc(j).pop("seccompProfile"),), (M.SECCOMP,)),
        _Variant(
            "host-port",
            (lambda j: _container(j).__setitem__("ports", [{"containerPort": 8080, "hostPort": 8080}]),),
            (M.HOST_PORTS,),
        ),
        _Variant("unmasked-proc", (_with_container_security("procMount", "Unmasked"),), (M.KERNEL,)),
        _Variant(
            "unsafe-sysctl", (_set(_sc, "sysctls", [{"name": "kernel.msgmax", "value": "65536"}]),), (M.KERNEL,)
        ),
        _Variant("selinux-user", (_set(_sc, "seLinuxOptions", {"user": "system_u"}),), (M.KERNEL,)),
        _Variant(
            "apparmor-unconfined",
            (_with_container_security("appArmorProfile", {"type": "Unconfined"}),),
            (M.KERNEL,),
        ),
    ]  # fmt: skip


def _affinity_variants(other_namespace: str) -> list[_Variant]:
    M = Message
    variants = [
        _Variant(f"blocks-{key}", (_anti_affinity(term),), (M.AFFINITY,))
        for key, term in blocker_terms(other_namespace).items()
    ]
    return [
        *variants,
        _Variant(
            "prefers-away-from-every-namespace",
            (_anti_affinity({"namespaceSelector": {}, "topologyKey": "kubernetes.io/os"}, preferred=True),),
            (M.AFFINITY,),
        ),
        _Variant(
            "follows-another-teams-pods",
            (_anti_affinity({"namespaces": [other_namespace], "topologyKey": "kubernetes.io/hostname"}, kind="podAffinity"),),
            (M.AFFINITY,),
        ),
    ]  # fmt: skip


def _job_only_variants(other_namespace: str, stuck: str | None) -> list[_Variant]:
    """What only a Job can ask of Volcano: its plugins, claims, size, retries and overrides."""
    M = Message

    def plugin(name: str, args: list[str]) -> Edit:
        return lambda j: _job_spec(j)["plugins"].__setitem__(name, args)

    def over_pod_budget(j: Manifest) -> None:
        task = j["spec"]["tasks"][0]
        task["replicas"] = task["minAvailable"] = j["spec"]["minAvailable"] = 64
        _container(j)["resources"]["limits"].pop(NEURON_RESOURCE)
        _container(j)["resources"].get("requests", {}).pop(NEURON_RESOURCE, None)

    def beyond_every_queue(j: Manifest) -> None:
        # More chips than any configuration's queue holds (the largest, the example's, 12 nodes of 16
        # chips), within every team's pod budget: the documented job is not always its whole queue
        # (the native example's team queues a trn1 and a trn2 group; its TorchX job uses the trn2).
        task = j["spec"]["tasks"][0]
        task["replicas"] = 33

    variants = [
        _Variant("ssh-plugin", (plugin("ssh", []),), (M.PLUGINS,), also_for_pods=False),
        _Variant("ray-plugin", (plugin("ray", []),), (M.PLUGINS,), also_for_pods=False),
        _Variant("svc-with-another-flag", (plugin("svc", ["--some-flag"]),), (M.PLUGINS,), also_for_pods=False),
        _Variant(
            "claim-for-volcano-to-create",
            (_set(_job_spec, "volumes", [{"mountPath": "/big", "volumeClaim": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Pi"}},
                "storageClassName": "gp3"}}]),),
            (M.CLAIMS,), also_for_pods=False,
        ),
        _Variant(
            "claim-named-of-someone-else",
            (_set(_job_spec, "volumes", [{"mountPath": "/x", "volumeClaimName": "someone-elses"}]),),
            (M.CLAIMS,), also_for_pods=False,
        ),
        _Variant("more-pods-than-the-quota", (over_pod_budget,), (M.REPLICAS,), also_for_pods=False),
        _Variant("more-chips-than-the-queue", (beyond_every_queue,), (M.DEVICES,), also_for_pods=False),
        _Variant(
            "a-megabyte-of-environment",
            (lambda j: _container(j)["env"].append({"name": "PADDING", "value": "x" * (1 << 20)}),),
            (M.SIZE,), also_for_pods=False,
        ),
        _Variant("retries-without-end", (_set(_job_spec, "maxRetry", 1_000_000),), (M.RETRIES,), also_for_pods=False),
        _Variant(
            "a-task-retries-without-end",
            (lambda j: j["spec"]["tasks"][0].__setitem__("maxRetry", 1_000_000),),
            (M.RETRIES,), also_for_pods=False,
        ),
    ]  # fmt: skip
    if stuck is not None:
        for value in ("1e9", "100000", "0", "soon"):
            variants.append(
                _Variant(
                    f"stuck-minutes-{value}",
                    (lambda j, v=value: j["metadata"].setdefault("annotations", {}).__setitem__(STUCK_MINUTES_ANNOTATION, v),),  # type: ignore[misc]
                    (stuck,), also_for_pods=False,
                )
            )  # fmt: skip
    return variants


def _renamed(job: Manifest, name: str) -> Manifest:
    """``job`` under ``name``, its labels kept (a member's own copy of a run)."""
    return _edited(job, lambda j: j["metadata"].__setitem__("name", name))


MEMBER_JOB_NAME = "alices-run"
"""A member's Job: the stack's run under a name of the member's own (not an applied run's)."""


def stuck_minutes_message(manifests: list[Mapping[str, Any]]) -> str | None:
    """The rendered Job policy's stuck-minutes message (it names the plan's ceiling), if it has one."""
    [policy] = [
        m
        for m in manifests
        if m["kind"] == "ValidatingAdmissionPolicy" and m["metadata"]["name"] == JOBS_POLICY
    ]
    found = [
        v["message"]
        for v in policy["spec"]["validations"]
        if v["message"].startswith(f"annotation {STUCK_MINUTES_ANNOTATION}")
    ]
    return found[0] if found else None  # fmt: skip


def tenant_cases(plan: KubernetesLayerPlan) -> list[AdmissionCase]:
    """Every case, for the plan of config/example.yaml (teams training and research)."""
    job = _run_job(plan, "training")
    mine = _renamed(job, MEMBER_JOB_NAME)
    research_job = _run_job(plan, "research")
    groups = (team_rbac_group("training"),)
    other_group = _pod_spec(research_job)["nodeSelector"][NODE_GROUP_LABEL]
    other_queue = research_job["spec"]["queue"]
    stuck = stuck_minutes_message(tenant_admission_manifests(plan))
    cases = [
        AdmissionCase(id="the-stacks-run", policy=JOBS_POLICY, obj=job, user=HANDLER, allowed=True),
        AdmissionCase(
            id="the-stacks-other-run", policy=JOBS_POLICY, obj=research_job, user=HANDLER, allowed=True
        ),
        AdmissionCase(
            id="a-member-submits-the-run-under-a-name-of-their-own",
            policy=JOBS_POLICY,
            obj=mine,
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
    cases += refused_variants(
        mine, other_group=other_group, other_queue=other_queue, groups=groups, stuck=stuck
    )
    cases += _neighbour_cases(mine, groups, stuck)
    cases += _name_cases(job, mine, groups)
    cases += [
        AdmissionCase(
            id="job-names-the-data-sets-claim-in-its-volumes",
            policy=JOBS_POLICY,
            obj=_edited(
                mine,
                _set(_job_spec, "volumes", [{"mountPath": "/d", "volumeClaimName": _read_only_claim(job)}]),
            ),
            user=MEMBER,
            groups=groups,
            allowed=False,
            messages=(Message.READ_ONLY, Message.CLAIMS),
        ),
        AdmissionCase(
            id="job-in-another-teams-namespace-keeps-its-queue-and-group",
            policy=JOBS_POLICY,
            obj=_edited(mine, lambda j: j["metadata"].__setitem__("namespace", "research")),
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


def _read_only_claim(job: Manifest) -> str:
    return str(_datasets_volume(_pod_spec(job))["persistentVolumeClaim"]["claimName"])


def _own_claim(job: Manifest) -> str:
    data = next(v for v in _pod_spec(job)["volumes"] if v["name"] == "data")
    return str(data["persistentVolumeClaim"]["claimName"])


def _neighbour_cases(mine: Manifest, groups: tuple[str, ...], stuck: str | None) -> list[AdmissionCase]:
    """What stays admitted beside each new rule: a same-namespace anti-affinity on one node, a Job
    at the team's whole capacity (``mine`` is: every chip of the group's nodes), the team's own
    claim in spec.volumes, the most retries a run may have, the stuck-minutes ceiling."""
    spread = _anti_affinity(
        {
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "bert-large"}},
            "topologyKey": "kubernetes.io/hostname",
        }
    )
    ceiling = None if stuck is None else stuck.split(" to ", 1)[1].split(" ", 1)[0]
    edits: dict[str, tuple[Edit, ...]] = {
        "one-pod-per-node-in-its-own-namespace": (spread,),
        "the-teams-own-claim-in-its-volumes": (
            _set(_job_spec, "volumes", [{"mountPath": "/more", "volumeClaimName": _own_claim(mine)}]),
        ),
        "the-most-retries-a-run-may-have": (
            _set(_job_spec, "maxRetry", MAX_RETRY),
            lambda j: j["spec"]["tasks"][0].__setitem__("maxRetry", MAX_RETRY),
        ),
        **(
            {"the-stuck-minutes-ceiling": (
                lambda j: j["metadata"].setdefault("annotations", {}).__setitem__(STUCK_MINUTES_ANNOTATION, ceiling),
            )}
            if ceiling is not None
            else {}
        ),
    }  # fmt: skip
    cases = []
    for key, changes in edits.items():
        job = _edited(mine, *changes)
        cases.append(
            AdmissionCase(
                id=f"job-{key}", policy=JOBS_POLICY, obj=job, user=MEMBER, groups=groups, allowed=True
            )
        )
        cases.append(
            AdmissionCase(
                id=f"pod-{key}", policy=PODS_POLICY, obj=volcano_pod(job), user=CONTROLLER, allowed=True
            )
        )
    return cases  # fmt: skip


def _name_cases(job: Manifest, mine: Manifest, groups: tuple[str, ...]) -> list[AdmissionCase]:
    """An applied run's name is the stack's: a member may not create a Job under it (nor under the
    name its next version would get), and the stack's apply over a Job it did not create is refused
    with a line naming the Job and its creation; the stack's apply over its own Job is not."""
    name = job["metadata"]["name"]
    run = name.rsplit("-", 1)[0]
    prune = {f"{CDK_PRUNE_LABEL_PREFIX}c8{'0' * 40}": ""}
    applied = _edited(job, lambda j: j["metadata"]["labels"].update(prune))
    squatted = _edited(
        job,
        lambda j: j["metadata"].update(
            creationTimestamp="2026-11-27T09:30:00Z",
            managedFields=[{"manager": "kubectl-create", "operation": "Update"}],
        ),
    )
    said = (
        f"Volcano Job training/{name} was not created by the stack: created 2026-11-27T09:30:00Z by "
        "kubectl-create (the API server audit log names the user); the stack applies its runs only over "
        f"Jobs it created: delete it (kubectl delete jobs.batch.volcano.sh -n training {name}) and deploy again"
    )
    return [
        *(
            AdmissionCase(
                id=f"a-member-takes-{what}", policy=JOBS_POLICY, obj=_renamed(mine, taken), user=MEMBER,
                groups=groups, allowed=False, messages=(Message.APPLIED_NAME,),
            )
            for what, taken in (("an-applied-runs-name", name), ("its-next-versions-name", f"{run}-0123abcd"))
        ),
        AdmissionCase(
            id="a-member-may-name-a-job-after-the-run-otherwise", policy=JOBS_POLICY,
            obj=_renamed(mine, f"{run}-mine"), user=MEMBER, groups=groups, allowed=True,
        ),
        AdmissionCase(
            id="the-stack-applies-over-a-job-it-did-not-create", policy=JOBS_POLICY, operation="UPDATE",
            old=squatted, obj=applied, user=HANDLER, allowed=False, messages=(said,),
            server_says=(f"Volcano Job training/{name} was not created by the stack: created ",),
        ),
        AdmissionCase(
            id="the-stack-applies-over-its-own-job", policy=JOBS_POLICY, operation="UPDATE", old=applied,
            obj=_edited(applied, lambda j: j["metadata"]["annotations"].__setitem__(STUCK_MINUTES_ANNOTATION, "10")),
            user=HANDLER, allowed=True,
        ),
    ]  # fmt: skip


def refused_variants(
    job: Manifest,
    *,
    other_group: str,
    other_queue: str,
    groups: tuple[str, ...],
    other_namespace: str = "research",
    stuck: str | None = None,
) -> list[AdmissionCase]:
    """``job`` (one the policies admit) broken one rule at a time, as a member submits it (``job-<id>``)
    and as Volcano creates its first pod (``pod-<id>``): each refused with that rule's message.
    ``stuck``: the stuck-minutes rule's message, when the plan has the rule."""
    cases = []
    every = [
        *_variants(other_group, other_queue),
        *_affinity_variants(other_namespace),
        *_pod_security_variants(),
        *_job_only_variants(other_namespace, stuck),
    ]
    for variant in every:
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
