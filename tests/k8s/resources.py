"""The rule every rendered container keeps: requests and limits for cpu and memory, with one exception.

A pod that holds Neuron devices (a training run's worker, the fabric check's worker) owns its node:
it requests 7/8 of the node's CPU and memory, the rest being the kubelet's and the DaemonSets'. It
has requests (they place it) and no cpu or memory limit: a CPU limit would throttle its data loading
and collectives' host threads (the kernel's CFS quota), and a memory limit would have the kernel
kill the one pod the node exists for rather than let it use the node it was placed on. The node's
allocatable bounds it; the platform's DaemonSets beside it carry limits of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster_facts.kubernetes_names import NEURON_RESOURCE

__all__ = ["OWNS_ITS_NODE", "missing_resources"]

OWNS_ITS_NODE = "holds Neuron devices, so owns its node: requests only (tests/k8s/resources.py)"


def missing_resources(container: Mapping[str, Any]) -> list[str]:
    """What of ``requests.cpu``, ``requests.memory``, ``limits.cpu``, ``limits.memory`` the
    container lacks (limits are not asked of a container that holds Neuron devices)."""
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    wanted = [("requests", requests)] + ([] if NEURON_RESOURCE in limits else [("limits", limits)])
    return [f"{kind}.{name}" for kind, given in wanted for name in ("cpu", "memory") if name not in given]
