"""Which Kubernetes versions this project can deploy: those with a kubectl Lambda layer installed.

The kubectl handler that applies manifests must run a kubectl of the cluster's minor version, so a
Kubernetes version is supported exactly when its layer package is pinned in requirements.txt and
listed here. Adding a version is one line here and one line there.

Pure data: the configuration model reads the keys without importing aws-cdk-lib.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aws_cdk import aws_lambda
    from constructs import Construct

__all__ = ["KUBECTL_LAYERS", "kubectl_layer"]

# Kubernetes minor version -> (Python module, layer class) of the aws-cdk.lambda-layer-kubectl-vNN package.
KUBECTL_LAYERS: dict[str, tuple[str, str]] = {
    "1.33": ("aws_cdk.lambda_layer_kubectl_v33", "KubectlV33Layer"),
    "1.34": ("aws_cdk.lambda_layer_kubectl_v34", "KubectlV34Layer"),
    "1.35": ("aws_cdk.lambda_layer_kubectl_v35", "KubectlV35Layer"),
}


def kubectl_layer(
    scope: Construct, construct_id: str, *, kubernetes_version: str
) -> aws_lambda.ILayerVersion:
    """The kubectl layer matching ``kubernetes_version`` (imported only for the version in use)."""
    module_name, class_name = KUBECTL_LAYERS[kubernetes_version]
    layer_class = getattr(importlib.import_module(module_name), class_name)
    layer: aws_lambda.ILayerVersion = layer_class(scope, construct_id)
    return layer
