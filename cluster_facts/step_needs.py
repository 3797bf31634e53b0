"""What a step of the Kubernetes layer needs in the cluster while it is applied at deploy time.

A ``kubectl apply`` needs only the API server: objects whose pods cannot run yet (no node, no pod
network, no CSI driver) wait in the cluster and start when they can, so a step that only applies
objects waits for nothing but the steps it follows. A step that waits at deploy time for pods to
run (a Helm release with ``wait``, a readiness gate on what pods write) needs nodes, the pod
network, Services and DNS in place, or the deployment fails. constructs_trn/kubernetes_layer.py
turns these needs into CloudFormation dependencies; tests/operator_tools/test_deploy_path.py reads the template
back against them, so no step waits for an add-on it does not use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster_facts.kubernetes_plan import HelmRelease, KubernetesStep, ReadinessGate

__all__ = ["FILE_SYSTEM", "FSX_CSI_DRIVER", "RUNNING_PODS", "deploy_needs"]

RUNNING_PODS = "running-pods"
"""The step's deploy waits until pods run: system nodes, pod network, Services, DNS."""
FILE_SYSTEM = "file-system"
"""The step's objects mount the FSx for Lustre file system (its PersistentVolume, a pod with a claim)."""
FSX_CSI_DRIVER = "fsx.csi.aws.com"


def _mentions_file_system(node: Any) -> bool:
    if isinstance(node, Mapping):
        if "persistentVolumeClaim" in node:
            return True
        csi = node.get("csi")
        if isinstance(csi, Mapping) and csi.get("driver") == FSX_CSI_DRIVER:
            return True
        return any(_mentions_file_system(value) for value in node.values())
    if isinstance(node, list | tuple):
        return any(_mentions_file_system(value) for value in node)
    return False


def deploy_needs(step: KubernetesStep) -> frozenset[str]:
    needs: set[str] = set()
    if isinstance(step, HelmRelease):
        if step.wait:
            needs.add(RUNNING_PODS)
    elif isinstance(step, ReadinessGate):
        needs.add(RUNNING_PODS)
    elif _mentions_file_system(list(step.manifests)):
        needs.add(FILE_SYSTEM)
    return frozenset(needs)
