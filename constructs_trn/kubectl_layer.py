"""The kubectl Lambda layer of the cluster's Kubernetes minor version (see cluster_facts.versions)."""

from __future__ import annotations

import importlib

from aws_cdk import aws_lambda
from constructs import Construct

from cluster_facts.versions import KUBECTL_LAYERS

__all__ = ["kubectl_layer"]


def kubectl_layer(
    scope: Construct, construct_id: str, *, kubernetes_version: str
) -> aws_lambda.ILayerVersion:
    """The kubectl layer matching ``kubernetes_version``; only that version's package is imported."""
    module_name, class_name = KUBECTL_LAYERS[kubernetes_version]
    layer_class = getattr(importlib.import_module(module_name), class_name)
    layer: aws_lambda.ILayerVersion = layer_class(scope, construct_id)
    return layer
