"""The rule every rendered container keeps: requests and limits for cpu and memory, with one exception.

A pod that holds Neuron devices (a training run's worker, the fabric check's worker), by the device
plugin's extended resource or, on a ``devices: dra`` group, by a claim of its node's devices, owns its node:
it requests 7/8 of the node's CPU and memory, the rest being the kubelet's and the DaemonSets'. It
has requests (they place it) and no cpu or memory limit: a CPU limit would throttle its data loading
and collectives' host threads (the kernel's CFS quota), and a memory limit would have the kernel
kill the one pod the node exists for rather than let it use the node it was placed on. The node's
allocatable bounds it; the platform's DaemonSets beside it carry limits of their own. The fabric
check's worker, in the platform namespace, is limited to its requests all the same: that namespace's
LimitRange would give a container without limits 1 CPU and 512 MiB, and the API server refuses a
request above its limit (tests/cluster/test_dra.py saw it refuse the workers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster_facts.kubernetes_names import NEURON_RESOURCE

__all__ = ["OWNS_ITS_NODE", "holds_devices", "missing_resources"]

OWNS_ITS_NODE = "holds Neuron devices, so owns its node: requests only (tests/k8s_charts/resources.py)"


def missing_resources(container: Mapping[str, Any]) -> list[str]:
    """What of ``requests.cpu``, ``requests.memory``, ``limits.cpu``, ``limits.memory`` the
    container lacks (limits are not asked of a container that holds Neuron devices)."""
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    wanted = [("requests", requests)] + ([] if holds_devices(container) else [("limits", limits)])
    return [f"{kind}.{name}" for kind, given in wanted for name in ("cpu", "memory") if name not in given]


def holds_devices(container: Mapping[str, Any]) -> bool:
    """The container holds Neuron devices: the device plugin's resource, or a DRA claim (the only
    claims the platform's containers name are of their node's devices: k8s_charts/runs/training_run.py)."""
    resources = container.get("resources") or {}
    return NEURON_RESOURCE in (resources.get("limits") or {}) or bool(resources.get("claims"))
