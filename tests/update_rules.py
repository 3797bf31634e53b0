"""What a second deployment does to the Kubernetes layer, and what Kubernetes and Volcano refuse.

Each applied step of the plan is one custom resource, keyed by its construct id (step name and
identity; constructs_trn/kubernetes_layer.py). Between two deployments, CloudFormation

- updates a custom resource whose id is in both: the kubectl handler runs ``kubectl apply --prune``
  on its new manifest, which updates the objects it still holds and deletes, among those it no
  longer holds, the ones of kinds in kubectl's default prune allowlist;
  (objects in a namespace it prunes go with the namespace);
- creates a custom resource whose id is new: ``kubectl apply`` (overwrite), an update for objects
  that exist already;
- deletes, after all of that, a custom resource whose id is gone: ``kubectl delete`` of its last
  manifest, whatever other resource now holds the same objects.

``update_problems`` lists every step of that the API server or an admission webhook would refuse,
and every object that would be left behind or deleted by mistake. The rules are the API's own:

- Volcano Job (volcano v1.15.1, pkg/webhooks/admission/jobs/validate/admit_job.go,
  validateJobUpdate): only minAvailable, tasks[*].replicas, tasks[*].minAvailable and
  priorityClassName may change;
- batch/v1 Job: spec.template, spec.selector, spec.completionMode, spec.podFailurePolicy are
  immutable (kubernetes pkg/apis/batch/validation, ValidateJobSpecUpdate);
- PersistentVolume: the volume source, volumeMode and nodeAffinity are immutable
  (pkg/apis/core/validation, ValidatePersistentVolumeUpdate); capacity may change;
- PersistentVolumeClaim: the spec is immutable but for resources.requests, which may grow only for
  a claim of an expandable StorageClass (never ``storageClassName: ""``), and
  volumeAttributesClassName (ValidatePersistentVolumeClaimUpdate);
- Deployment, DaemonSet: spec.selector is immutable (apps validation); StatefulSet: every field of
  its spec but replicas, ordinals, template, updateStrategy, persistentVolumeClaimRetentionPolicy
  and minReadySeconds (pkg/apis/apps/validation, ValidateStatefulSetUpdate);
- Service: spec.clusterIP(s) once set; RoleBinding and ClusterRoleBinding: roleRef.

A Helm release is one custom resource too, keyed by its construct id (the step name in CamelCase).
An update runs ``helm upgrade --install <release> <chart>`` with the new chart source (repository
or chart asset) and values, whatever the source was; a deleted resource runs ``helm uninstall``.
So a release must keep its id, release name and namespace: a new id uninstalls the release the
new resource has just upgraded, and a new name or namespace installs a second release beside the
old one, which stays (``helm_release_problems``).

A model written here. It stays because it checks every configuration change of
tests/stacks/test_update_safety.py, in both directions, in the fast tier. The real API server and
Volcano's webhook take nine of those changes, one over the other, in tests/cluster/test_redeploy.py;
where the two disagree, the real ones are right.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cluster_facts.kubernetes_plan import HelmRelease, KubernetesLayerPlan, ManifestSet

__all__ = [
    "PRUNABLE_KINDS",
    "ObjectKey",
    "helm_release_problems",
    "helm_release_updates",
    "node_group_resizes",
    "refused_update",
    "update_problems",
]

Manifest = Mapping[str, Any]
Spec = Mapping[str, Any]

# kubectl apply --prune's default allowlist (kubectl/pkg/cmd/apply/prune.go, defaultNamespacedPruneResources
# and defaultNonNamespacedPruneResources): custom resources, RBAC and NetworkPolicies are not pruned.
PRUNABLE_KINDS = {
    ("v1", "ConfigMap"),
    ("v1", "Endpoints"),
    ("v1", "Namespace"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "PersistentVolume"),
    ("v1", "Pod"),
    ("v1", "ReplicationController"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
    ("networking.k8s.io/v1", "Ingress"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "StatefulSet"),
}


@dataclass(frozen=True, order=True)
class ObjectKey:
    api_version: str
    kind: str
    namespace: str
    name: str

    @staticmethod
    def of(manifest: Manifest) -> ObjectKey:
        metadata = manifest["metadata"]
        return ObjectKey(
            manifest["apiVersion"], manifest["kind"], metadata.get("namespace", ""), metadata["name"]
        )

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


def _resources(plan: KubernetesLayerPlan) -> dict[str, dict[ObjectKey, Manifest]]:
    """Applied manifest sets by construct id, each with its objects by key."""
    found: dict[str, dict[ObjectKey, Manifest]] = {}
    for step in plan.applied():
        if isinstance(step, ManifestSet):
            construct_id = f"{step.name}-{step.identity}" if step.identity else step.name
            found[construct_id] = {ObjectKey.of(manifest): manifest for manifest in step.manifests}
    return found


def _without(spec: Mapping[str, Any], *paths: str) -> Any:
    """``spec`` with the dotted ``paths`` removed; ``tasks[*].x`` removes x from every task."""
    copied = copy.deepcopy(dict(spec))
    for path in paths:
        head, _, rest = path.partition(".")
        if head.endswith("[*]"):
            for item in copied.get(head[:-3], []):
                item.pop(rest, None)
        else:
            copied.pop(head, None)
    return copied


def _changed(old: Spec, new: Spec, *fields: str) -> list[str]:
    return [field for field in fields if old.get(field) != new.get(field)]


def _volcano_job(before: Spec, after: Spec) -> list[str]:
    mutable = ("minAvailable", "priorityClassName", "tasks[*].replicas", "tasks[*].minAvailable")
    if _without(before, *mutable) != _without(after, *mutable):
        return [
            "Volcano refuses a Job update other than minAvailable, tasks[*].replicas and priorityClassName"
        ]
    return []


def _batch_job(before: Spec, after: Spec) -> list[str]:
    fields = _changed(before, after, "template", "selector", "completionMode", "podFailurePolicy")
    return [f"spec.{field} of a Job is immutable" for field in fields]


# A PersistentVolume's fields that may change; everything else in its spec (the volume source:
# csi, nfs, ...; volumeMode; nodeAffinity) may not.
_PV_MUTABLE = {
    "capacity",
    "accessModes",
    "claimRef",
    "mountOptions",
    "persistentVolumeReclaimPolicy",
    "storageClassName",
    "volumeAttributesClassName",
}


def _persistent_volume(before: Spec, after: Spec) -> list[str]:
    fields = _changed(before, after, *sorted((set(before) | set(after)) - _PV_MUTABLE))
    return [f"spec.{field} of a PersistentVolume is immutable" for field in fields]


def _claim(before: Spec, after: Spec) -> list[str]:
    fields = _changed(before, after, *sorted((set(before) | set(after)) - {"volumeAttributesClassName"}))
    return [f"spec.{field} of a claim without an expandable StorageClass is immutable" for field in fields]


def _workload(before: Spec, after: Spec) -> list[str]:
    return [f"spec.{field} is immutable" for field in _changed(before, after, "selector")]


_STATEFULSET_MUTABLE = {
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
}


def _statefulset(before: Spec, after: Spec) -> list[str]:
    fields = _changed(before, after, *sorted((set(before) | set(after)) - _STATEFULSET_MUTABLE))
    return [f"spec.{field} of a StatefulSet is immutable" for field in fields]


def _service(before: Spec, after: Spec) -> list[str]:
    fields = _changed(before, after, "clusterIP", "clusterIPs")
    return [f"spec.{field} of a Service is immutable" for field in fields if before.get(field) is not None]


_SPEC_RULES: dict[tuple[str, str], Callable[[Spec, Spec], list[str]]] = {
    ("batch.volcano.sh/v1alpha1", "Job"): _volcano_job,
    ("batch/v1", "Job"): _batch_job,
    ("v1", "PersistentVolume"): _persistent_volume,
    ("v1", "PersistentVolumeClaim"): _claim,
    ("apps/v1", "Deployment"): _workload,
    ("apps/v1", "DaemonSet"): _workload,
    ("apps/v1", "StatefulSet"): _statefulset,
    ("v1", "Service"): _service,
}


def refused_update(old: Manifest, new: Manifest) -> list[str]:
    """Why the API server or Volcano's webhook would refuse updating ``old`` into ``new``."""
    if new["kind"] in ("RoleBinding", "ClusterRoleBinding") and old.get("roleRef") != new.get("roleRef"):
        return [f"roleRef of a {new['kind']} is immutable"]
    rule = _SPEC_RULES.get((new["apiVersion"], new["kind"]))
    return rule(old.get("spec", {}), new.get("spec", {})) if rule else []


def _releases(plan: KubernetesLayerPlan) -> dict[str, HelmRelease]:
    """Applied Helm releases by construct id (constructs_trn/kubernetes_layer.py)."""
    return {
        "".join(part.capitalize() for part in step.name.split("-")): step
        for step in plan.applied()
        if isinstance(step, HelmRelease)
    }


def helm_release_updates(before: KubernetesLayerPlan, after: KubernetesLayerPlan) -> dict[str, str]:
    """Construct id -> what the kubectl handler does to a release that both deployments hold."""
    old, new = _releases(before), _releases(after)
    return {
        construct_id: f"helm upgrade --install {new[construct_id].release} from {new[construct_id].source} "
        f"(was {old[construct_id].source})"
        for construct_id in sorted(old.keys() & new.keys())
    }


def helm_release_problems(before: KubernetesLayerPlan, after: KubernetesLayerPlan) -> list[str]:
    """Releases that the second deployment would uninstall, or leave behind beside a new one."""
    old, new = _releases(before), _releases(after)
    problems: list[str] = []
    installed = {(release.namespace, release.release): construct_id for construct_id, release in new.items()}
    for construct_id in sorted(old.keys() - new.keys()):
        release = old[construct_id]
        successor = installed.get((release.namespace, release.release))
        if successor is not None:
            problems.append(
                f"{construct_id}: deleting the old resource uninstalls release {release.namespace}/"
                f"{release.release}, which {successor} has just upgraded"
            )
    for construct_id in sorted(old.keys() & new.keys()):
        was, now = old[construct_id], new[construct_id]
        if (was.namespace, was.release) != (now.namespace, now.release):
            problems.append(
                f"{construct_id}: installs {now.namespace}/{now.release}; {was.namespace}/{was.release} "
                "is left behind"
            )
    return problems


def update_problems(before: KubernetesLayerPlan, after: KubernetesLayerPlan) -> list[str]:
    """Everything the second deployment (``before`` deployed, ``after`` deploying) would get wrong."""
    old, new = _resources(before), _resources(after)
    problems: list[str] = helm_release_problems(before, after)
    live = {key: manifest for objects in old.values() for key, manifest in objects.items()}
    held = {key for objects in new.values() for key in objects}
    # A namespace no resource holds any more is pruned or deleted, and whatever lives in it with it.
    gone_namespaces = {
        key.name for key in live.keys() - held if (key.api_version, key.kind) == ("v1", "Namespace")
    }
    for construct_id, objects in new.items():
        for key, manifest in objects.items():
            if key in live:
                problems += [
                    f"{construct_id}: {key}: {reason}" for reason in refused_update(live[key], manifest)
                ]
        for key in old.get(construct_id, {}).keys() - objects.keys():
            if (key.api_version, key.kind) not in PRUNABLE_KINDS and key.namespace not in gone_namespaces:
                problems.append(
                    f"{construct_id}: {key} is dropped but kubectl does not prune a {key.kind}: left behind"
                )
    for construct_id in old.keys() - new.keys():
        for key in old[construct_id]:
            if key in held:
                problems.append(
                    f"{construct_id}: deleting the old resource deletes {key}, which the new deployment holds"
                )
    return problems


def objects(plan: KubernetesLayerPlan) -> Iterator[ObjectKey]:
    for resource in _resources(plan).values():
        yield from resource


def node_group_resizes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The managed node groups a stack update resizes: those whose ScalingConfig.DesiredSize changes
    (appears, goes or takes another value) between two templates.

    The EKS API (NodegroupScalingConfig, desiredSize): "Whenever this parameter changes, the number of
    worker nodes in the node group is updated to the specified size. [...] When using CloudFormation,
    no action occurs if you remove this parameter from your CFN template." A model of that sentence:
    the CloudFormation handler's source (aws-cloudformation-resource-providers-eks) could not be read
    here; its own docs say the same of DesiredSize. A resize sets the count the cluster autoscaler
    manages, terminating running nodes when it is lower: a redeploy must never do it by accident.
    """

    def sizes(template: Mapping[str, Any]) -> dict[str, Any]:
        return {
            logical_id: resource["Properties"].get("ScalingConfig", {}).get("DesiredSize")
            for logical_id, resource in template["Resources"].items()
            if resource["Type"] == "AWS::EKS::Nodegroup"
        }

    old, new = sizes(before), sizes(after)
    return [
        f"{logical_id}: DesiredSize {old[logical_id]} -> {new[logical_id]} resizes the group"
        for logical_id in sorted(old.keys() & new.keys())
        if old[logical_id] != new[logical_id] and new[logical_id] is not None
    ]
