"""The Kubernetes layer in the cluster: each applied step of a plan as one custom resource, in order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aws_cdk import CfnResource, Duration, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct, IDependable

from cluster_facts.deploy_timeouts import service_timeout_seconds, too_slow_to_answer
from cluster_facts.kubernetes_plan import HelmRelease, KubernetesLayerPlan, KubernetesStep, ReadinessGate
from cluster_facts.step_needs import FILE_SYSTEM, RUNNING_PODS, deploy_needs
from cluster_facts.vendored_charts import repository_path
from constructs_trn.nag import acknowledge, nag_rendering

__all__ = ["KubernetesLayer", "StepWaits"]


@dataclass(frozen=True, kw_only=True)
class StepWaits:
    """What the layer's steps wait for in the stack, by what they need (cluster_facts.step_needs)."""

    every_step: Sequence[IDependable] = ()
    """Whatever any step needs (the pull-through cache rules: a first pull through a missing rule fails)."""
    running_pods: Sequence[IDependable] = ()
    """For a step that waits for pods to run: the nodes and the add-ons every pod uses."""
    file_system: Sequence[IDependable] = ()
    """For a step whose objects mount the file system: its CSI driver."""
    by_step: Mapping[str, Sequence[IDependable]] = field(default_factory=dict)
    """For one step by name: what only its pods use (the autoscaler's Pod Identity)."""

    def of(self, step: KubernetesStep) -> list[IDependable]:
        needs = deploy_needs(step)
        return [
            *self.every_step,
            *(self.running_pods if RUNNING_PODS in needs else ()),
            *(self.file_system if FILE_SYSTEM in needs else ()),
            *self.by_step.get(step.name, ()),
        ]


class KubernetesLayer(Construct):
    """Every applied step of ``plan``: a Helm release as an ``eks.HelmChart``, a set of manifests as
    one ``eks.KubernetesManifest`` (one kubectl apply, with overwrite so that a second deployment
    updates objects instead of failing on them, and prune, so that objects it no longer holds are
    deleted), a readiness gate as an ``eks.KubernetesObjectValue`` (a kubectl get, retried).

    Manifests and charts wait only for the cluster by default. Each step also waits for the steps
    the plan says it follows, and for what it needs at deploy time (``waits``, by
    cluster_facts.step_needs): nothing more, so the layer starts as soon as the cluster exists and
    only the steps that wait for pods to run wait for the nodes and the add-ons those pods use.

    A failed step fails the deploy in minutes: each step's own timeout leaves the kubectl handler
    time to answer CloudFormation (a step that would not is refused here), and each custom resource
    carries a ``ServiceTimeout`` just above what its handler may take, instead of CloudFormation's
    one hour (cluster_facts/deploy_timeouts.py).

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
        waits: StepWaits,
    ) -> None:
        super().__init__(scope, construct_id)
        self.applied: dict[str, Construct] = {}
        chart_assets: list[s3_assets.Asset] = []
        for step in plan.applied():
            problem = too_slow_to_answer(step)
            if problem is not None:
                raise ValueError(problem)
            construct: Construct
            if isinstance(step, HelmRelease):
                release_id = "".join(part.capitalize() for part in step.name.split("-"))
                chart_asset = _chart_asset(self, f"{release_id}Chart", step)
                if chart_asset is not None:
                    chart_assets.append(chart_asset)
                construct = eks.HelmChart(
                    self,
                    release_id,
                    cluster=cluster,
                    chart_asset=chart_asset,
                    # None for a kept chart: the handler takes its name and version from Chart.yaml.
                    chart=step.chart if step.repository is not None else None,
                    repository=step.repository,
                    version=step.version if step.repository is not None else None,
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
            _custom_resource(construct).add_property_override("ServiceTimeout", service_timeout_seconds(step))
            for dependency in waits.of(step):
                construct.node.add_dependency(dependency)
            for prerequisite in step.after:
                construct.node.add_dependency(self.applied[prerequisite])
            self.applied[step.name] = construct
        if chart_assets:
            _acknowledge_chart_reads(cluster, chart_assets[0])


def _custom_resource(construct: Construct) -> CfnResource:
    """The CloudFormation resource of an aws-eks-v2 HelmChart, KubernetesManifest or
    KubernetesObjectValue: each wraps one ``CustomResource`` with the id ``Resource``, whose props
    offer no ``serviceTimeout`` (aws-cdk-lib 2.273), so it is set on the resource itself."""
    resource = construct.node.find_child("Resource").node.default_child
    assert isinstance(resource, CfnResource)
    return resource


def _chart_asset(scope: Construct, asset_id: str, step: HelmRelease) -> s3_assets.Asset | None:
    """A kept chart directory as an S3 asset (None for a chart from a Helm repository).

    The kubectl handler copies the asset's zip from S3, unzips it and runs ``helm upgrade --install``
    on the directory; it refuses Chart, Repository or Version beside ChartAssetURL (aws-cdk-lib
    2.273, custom-resource-handlers aws-eks-v2 kubectl-handler/helm), so the chart's name and
    version come from its Chart.yaml. Only the source changes: the release keeps the construct id it
    had when its chart came from a repository (a new id would uninstall it), and the asset sits
    beside it. The asset's hash is its content's, so an unchanged chart is neither uploaded again
    nor an update of the release.
    """
    if step.chart_directory is None:
        return None
    return s3_assets.Asset(scope, asset_id, path=str(repository_path(step.chart_directory)))


def _acknowledge_chart_reads(cluster: eks.ICluster, asset: s3_assets.Asset) -> None:
    """``eks.HelmChart`` with a chart asset grants the kubectl handler ``bucket.grantRead`` on the
    assets bucket; the grant is aws-cdk-lib's and there is no narrower one to give instead."""
    role = cluster.kubectl_provider.role if cluster.kubectl_provider is not None else None
    if role is None:
        raise ValueError("a chart asset needs the cluster's kubectl provider, whose handler reads it")
    reason = (
        "aws-eks-v2's HelmChart lets the kubectl handler read the CDK assets bucket so that it can copy "
        "a chart asset (charts/, vendored and checked); the bucket holds this app's assets, and the "
        "handler, which is cluster admin already, gets no write"
    )
    for action in ("s3:GetBucket*", "s3:GetObject*", "s3:List*"):
        acknowledge(role, f"IAM5[Action::{action}]", reason=reason)
    objects = nag_rendering(Stack.of(asset), asset.bucket.arn_for_objects("*"))
    acknowledge(role, f"IAM5[Resource::{objects}]", reason=reason)


def _construct_id(name: str, identity: str | None) -> str:
    return f"{name}-{identity}" if identity else name
