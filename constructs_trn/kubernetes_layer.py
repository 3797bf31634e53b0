"""The Kubernetes layer in the cluster: each applied step of a plan as one custom resource, in order."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IDependable

from cluster_facts.kubernetes_plan import HelmRelease, KubernetesLayerPlan, ReadinessGate

__all__ = ["KubernetesLayer"]


class KubernetesLayer(Construct):
    """Every applied step of ``plan``: a Helm release as an ``eks.HelmChart``, a set of manifests as
    one ``eks.KubernetesManifest`` (one kubectl apply, with overwrite so that a second deployment
    updates objects instead of failing on them, and prune, so that objects it no longer holds are
    deleted), a readiness gate as an ``eks.KubernetesObjectValue`` (a kubectl get, retried).

    Manifests and charts wait only for the cluster by default, so every step also waits for
    ``wait_for`` (the node groups and the add-ons whose pods must run first) and for the steps
    the plan says it follows.

    Construct ids are part of the deployed stack's logical ids: a step's id is its name (a Helm
    release's in CamelCase, ``volcano`` -> ``Volcano``), followed by its identity when it has one.
    A new id makes CloudFormation create the new resource and then delete the old one: right for
    a run whose identity changed, wrong for anything else (for a Helm release it would mean
    uninstalling it), so names never change.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        plan: KubernetesLayerPlan,
        wait_for: Sequence[IDependable],
    ) -> None:
        super().__init__(scope, construct_id)
        self.applied: dict[str, Construct] = {}
        for step in plan.applied():
            construct: Construct
            if isinstance(step, HelmRelease):
                construct = eks.HelmChart(
                    self,
                    "".join(part.capitalize() for part in step.name.split("-")),
                    cluster=cluster,
                    chart=step.chart,
                    repository=step.repository,
                    version=step.version,
                    release=step.release,
                    namespace=step.namespace,
                    create_namespace=True,
                    values=dict(step.values) or None,
                    wait=step.wait,
                    timeout=Duration.minutes(step.timeout_minutes),
                )
            elif isinstance(step, ReadinessGate):
                construct = eks.KubernetesObjectValue(
                    self,
                    _construct_id(step.name, step.identity),
                    cluster=cluster,
                    object_type=step.object_type,
                    object_name=step.object_name,
                    object_namespace=step.namespace,
                    json_path=step.json_path,
                    timeout=Duration.minutes(step.timeout_minutes),
                )
            else:
                construct = eks.KubernetesManifest(
                    self,
                    _construct_id(step.name, step.identity),
                    cluster=cluster,
                    manifest=[dict(manifest) for manifest in step.manifests],
                    overwrite=True,
                )
            for dependency in wait_for:
                construct.node.add_dependency(dependency)
            for prerequisite in step.after:
                construct.node.add_dependency(self.applied[prerequisite])
            self.applied[step.name] = construct


def _construct_id(name: str, identity: str | None) -> str:
    return f"{name}-{identity}" if identity else name
