"""The Kubernetes layer in the cluster: Volcano from its Helm chart, then each cdk8s chart as one manifest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import cdk8s
from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IDependable

from k8s_charts.cluster_layer import CHART_PREREQUISITES, TRAINING_CHARTS

__all__ = ["VOLCANO_CHART_VERSION", "VOLCANO_REPOSITORY", "KubernetesLayer"]

VOLCANO_REPOSITORY = "https://volcano-sh.github.io/helm-charts"
VOLCANO_CHART_VERSION = "1.15.1"


class KubernetesLayer(Construct):
    """Volcano and the charts, in the order CHART_PREREQUISITES gives, after the nodes they need.

    Each chart is one ``KubernetesManifest`` (one kubectl apply, with overwrite so that a second
    deployment updates objects instead of failing on them). Manifests wait only for the cluster
    by default, so every one also waits for ``wait_for`` (the node groups and the add-ons whose
    pods must run first). The training jobs are applied only when ``apply_training`` is set.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        charts: Mapping[str, cdk8s.Chart],
        wait_for: Sequence[IDependable],
        apply_training: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        self.volcano = eks.HelmChart(
            self,
            "Volcano",
            cluster=cluster,
            chart="volcano",
            repository=VOLCANO_REPOSITORY,
            version=VOLCANO_CHART_VERSION,
            release="volcano",
            namespace="volcano-system",
            create_namespace=True,
            # Wait until the admission webhook serves: it rejects Queues and Jobs until then.
            wait=True,
            timeout=Duration.minutes(15),
        )
        applied: dict[str, Construct] = {"volcano": self.volcano}
        for name, chart in charts.items():
            if name in TRAINING_CHARTS and not apply_training:
                continue
            applied[name] = eks.KubernetesManifest(
                self, name, cluster=cluster, manifest=list(chart.to_json()), overwrite=True
            )
        for name, construct in applied.items():
            for dependency in wait_for:
                construct.node.add_dependency(dependency)
            for prerequisite in CHART_PREREQUISITES.get(name, ()):
                construct.node.add_dependency(applied[prerequisite])
        self.manifests: dict[str, Construct] = {name: c for name, c in applied.items() if name != "volcano"}
