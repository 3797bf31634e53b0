"""The namespace of the training workload: etcd, the FSx claim, the staging and training jobs."""

from __future__ import annotations

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

__all__ = ["TrainingNamespaceChart"]


class TrainingNamespaceChart(cdk8s.Chart):
    """A namespace of its own, so the workload's objects, policies and quotas stay out of ``default``.

    Pod Security Admission enforces the baseline profile (no host namespaces, host paths or
    privileged containers: the device plugins live in kube-system) and warns about anything the
    restricted profile would refuse.
    """

    def __init__(self, scope: Construct, id: str, *, name: str) -> None:
        super().__init__(scope, id)
        k8s.KubeNamespace(
            self,
            "Namespace",
            metadata=k8s.ObjectMeta(
                name=name,
                labels={
                    "pod-security.kubernetes.io/enforce": "baseline",
                    "pod-security.kubernetes.io/warn": "restricted",
                },
            ),
        )
