"""Pod Security Admission levels of the namespaces the stack creates, each with its reason.

Every namespace is labelled for enforce, audit and warn, each with a pinned version: the profile
as defined in Kubernetes ``POD_SECURITY_VERSION``, the oldest minor version the stack deploys
(config: 1.33 to 1.36), so an upgrade of the control plane never tightens or loosens it unseen.
Audit and warn always apply ``restricted``: whatever a namespace's workloads do beyond it is
recorded in the audit log and returned as a warning to whoever creates the pod.

``restricted`` is enforced wherever every pod of the namespace passes it; where one cannot, the
namespace enforces ``baseline`` (no host namespaces, host paths, privileged containers or added
capabilities beyond the runtime's defaults) and ``reason`` names the field that blocks restricted.
tests/pod_security.py checks every rendered pod against its namespace's level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "PLATFORM_POD_SECURITY",
    "POD_SECURITY_VERSION",
    "TEAM_POD_SECURITY",
    "VOLCANO_POD_SECURITY",
    "PodSecurity",
    "PodSecurityLevel",
]

PodSecurityLevel = Literal["privileged", "baseline", "restricted"]
POD_SECURITY_VERSION = "v1.33"
_PREFIX = "pod-security.kubernetes.io"


@dataclass(frozen=True, kw_only=True)
class PodSecurity:
    enforce: PodSecurityLevel
    reason: str = ""
    """Why the namespace cannot enforce restricted: the fields of its pods that break it."""

    def __post_init__(self) -> None:
        if self.enforce != "restricted" and not self.reason.strip():
            raise ValueError(f"enforcing {self.enforce} instead of restricted needs its reason")

    @property
    def labels(self) -> dict[str, str]:
        labels: dict[str, str] = {}
        for mode, level in (("enforce", self.enforce), ("audit", "restricted"), ("warn", "restricted")):
            labels[f"{_PREFIX}/{mode}"] = level
            labels[f"{_PREFIX}/{mode}-version"] = POD_SECURITY_VERSION
        return labels


TEAM_POD_SECURITY = PodSecurity(enforce="restricted")
"""A team's namespace: its runs' pods (k8s_charts/runs/training_run.py), the pods the TorchX component submits
(torchx_trn/) and its etcd, all restricted-clean."""

PLATFORM_POD_SECURITY = PodSecurity(
    enforce="baseline",
    reason="the fsx-layout Job runs as root, the first writer on the root-owned Lustre file system, to "
    "create and hand over each team's directory and /datasets (restricted requires runAsNonRoot true); "
    "data set staging (the platform's uid) and TensorBoard pass restricted",
)
"""trainium-system: data set staging, the file system's layout, TensorBoard."""

VOLCANO_POD_SECURITY = PodSecurity(
    enforce="baseline",
    reason="the Volcano 1.15.1 chart adds capability DAC_OVERRIDE to every container (values "
    "custom.default_csc; restricted allows only NET_BIND_SERVICE); otherwise its pods run as uid 1000 "
    "with RuntimeDefault seccomp and no privilege escalation",
)
"""volcano-system: the Helm release's scheduler, controllers, admission webhook and its init Job."""
