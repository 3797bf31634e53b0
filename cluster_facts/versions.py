"""Versions the project supports or pins, and how to compare two version strings.

- Kubernetes: a minor version is supported exactly when its kubectl Lambda layer package is pinned
  in requirements.txt and listed in ``KUBECTL_LAYERS`` (the kubectl handler that applies manifests
  must run a kubectl of the cluster's minor version). Adding a version is one line here and one
  there, its dates in cluster_facts/kubernetes_versions.py and its AMI releases in
  cluster_facts/ami_releases.py; ``constructs_trn.kubectl_layer`` builds the layer.
- EKS add-ons: the names of the managed add-ons the cluster runs (version pins are configuration).
- Cluster Autoscaler: the Helm chart release and, per Kubernetes minor version, the image (the
  autoscaler's minor version must match the cluster's).
- Volcano: the Helm chart release the cluster installs. Both charts are kept in the repository,
  ``charts/<name>-<version>/`` (cluster_facts.vendored_charts; ``make vendor-charts`` copies a new
  version from its tag). Its CRD schemas live in
  ``VOLCANO_CRD_SCHEMAS`` (``tests/schemas/volcano-<VOLCANO_CHART_VERSION>``): the tests validate
  Queues and Jobs against them and ``make crds`` generates the typed classes in
  ``k8s_charts/imports/`` from them, so bumping the chart without adding its schemas fails both.
"""

from __future__ import annotations

import re

__all__ = [
    "ADDON_NAMES",
    "AMAZON_CLOUDWATCH_OBSERVABILITY",
    "AWS_FSX_CSI_DRIVER",
    "CLUSTER_AUTOSCALER_CHART_VERSION",
    "CLUSTER_AUTOSCALER_IMAGE_REPOSITORY",
    "CLUSTER_AUTOSCALER_IMAGE_TAGS",
    "COREDNS",
    "EKS_NODE_MONITORING_AGENT",
    "EKS_POD_IDENTITY_AGENT",
    "KUBECTL_LAYERS",
    "KUBE_PROXY",
    "VOLCANO_CHART_VERSION",
    "VOLCANO_CRD_SCHEMAS",
    "VOLCANO_IMAGE_NAMES",
    "VOLCANO_IMAGE_REGISTRY",
    "VOLCANO_IMAGE_TAG",
    "VPC_CNI",
    "VPC_CNI_EFA_ONLY_MINIMUM",
    "version_key",
]

# Kubernetes minor version -> (Python module, layer class) of the aws-cdk.lambda-layer-kubectl-vNN package.
KUBECTL_LAYERS: dict[str, tuple[str, str]] = {
    "1.33": ("aws_cdk.lambda_layer_kubectl_v33", "KubectlV33Layer"),
    "1.34": ("aws_cdk.lambda_layer_kubectl_v34", "KubectlV34Layer"),
    "1.35": ("aws_cdk.lambda_layer_kubectl_v35", "KubectlV35Layer"),
    "1.36": ("aws_cdk.lambda_layer_kubectl_v36", "KubectlV36Layer"),
}

VPC_CNI = "vpc-cni"
KUBE_PROXY = "kube-proxy"
EKS_POD_IDENTITY_AGENT = "eks-pod-identity-agent"
COREDNS = "coredns"
AWS_FSX_CSI_DRIVER = "aws-fsx-csi-driver"
AMAZON_CLOUDWATCH_OBSERVABILITY = "amazon-cloudwatch-observability"
EKS_NODE_MONITORING_AGENT = "eks-node-monitoring-agent"
ADDON_NAMES = (
    VPC_CNI,
    KUBE_PROXY,
    EKS_POD_IDENTITY_AGENT,
    COREDNS,
    AWS_FSX_CSI_DRIVER,
    AMAZON_CLOUDWATCH_OBSERVABILITY,
    EKS_NODE_MONITORING_AGENT,
)
"""The EKS add-ons the cluster runs, in the order ClusterAddons creates them."""
# The first VPC CNI that attaches efa-only interfaces (no IP address on EFA cards 1..N-1).
VPC_CNI_EFA_ONLY_MINIMUM = "1.18.5"

# The Kubernetes Cluster Autoscaler's chart (kubernetes/autoscaler, tag cluster-autoscaler-chart-9.59.0,
# vendored in charts/cluster-autoscaler-9.59.0)
# and the newest patch release of the autoscaler for each supported minor version (git tags
# cluster-autoscaler-1.33.6, -1.34.5, -1.35.2, -1.36.1: the newest of each minor in the repository's
# tags as read on 2026-11-28 (its snapshot of 2026-08-22); 1.36.1 released 2026-07-23, commit 35e8a28,
# "registry.k8s.io/autoscaling/cluster-autoscaler:v1.36.1" on its GitHub release page). A new entry in
# KUBECTL_LAYERS needs one here (tests/stacks/test_capacity.py).
CLUSTER_AUTOSCALER_CHART_VERSION = "9.59.0"
CLUSTER_AUTOSCALER_IMAGE_REPOSITORY = "registry.k8s.io/autoscaling/cluster-autoscaler"
CLUSTER_AUTOSCALER_IMAGE_TAGS: dict[str, str] = {
    "1.33": "v1.33.6",
    "1.34": "v1.34.5",
    "1.35": "v1.35.2",
    "1.36": "v1.36.1",
}

VOLCANO_CHART_VERSION = "1.15.1"
# The images the chart runs with admission, controller and scheduler on (its defaults), all from
# ``basic.image_registry`` (docker.io) and tagged ``basic.image_tag_version`` (values.yaml of v1.15.1).
# Where Volcano publishes them: its release workflow at v1.15.1 (.github/workflows/release.yaml, run on
# every v*.*.* tag) pushes to Docker Hub (volcanosh/vc-*) and to the GitHub Container Registry
# (ghcr.io/volcano-sh/vc-*, since commit 3cda63c52); not to public.ecr.aws, registry.k8s.io or quay.io,
# the registries ECR caches without a credential. ECR caches Docker Hub and GHCR only with a Secrets
# Manager secret (ECR user guide, "Sync an upstream registry"), so neither is free of a credential:
# Volcano stays on the chart's Docker Hub names: through the cache when ecr.upstream_credentials
# names a Docker Hub secret, else copied into the account at deploy (constructs_trn/image_mirror.py),
# and from Docker Hub anonymously only with the cache off (docs/supply-chain.md: the rate limit).
VOLCANO_IMAGE_REGISTRY = "docker.io"
VOLCANO_IMAGE_NAMES = (
    "volcanosh/vc-webhook-manager",
    "volcanosh/vc-controller-manager",
    "volcanosh/vc-scheduler",
)
VOLCANO_IMAGE_TAG = f"v{VOLCANO_CHART_VERSION}"
# Relative to the repository root; the CRD files of exactly this chart release (Job, Queue, PodGroup).
VOLCANO_CRD_SCHEMAS = f"tests/schemas/volcano-{VOLCANO_CHART_VERSION}"


def version_key(version: str) -> tuple[int, ...]:
    """``"v1.20.4-eksbuild.1"`` -> ``(1, 20, 4)``; ``"1.34"`` -> ``(1, 34)``: comparable release numbers.

    A leading ``v`` and anything after the first ``-`` (a build or pre-release suffix) are ignored,
    as are non-numeric parts.
    """
    release = version.strip().removeprefix("v").split("-", 1)[0]
    return tuple(int(part) if re.fullmatch(r"\d+", part) else 0 for part in release.split("."))
