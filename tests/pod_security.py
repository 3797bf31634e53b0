"""A checker of the Pod Security Standards (baseline, restricted) for rendered pod specs.

It implements the checks of the Kubernetes Pod Security Standards page
(kubernetes.io/docs/concepts/security/pod-security-standards, as of v1.33) over the fields a
PodSpec can hold, and returns the names of the failed checks, as Pod Security Admission reports
them (``k8s.io/pod-security-admission/policy/check_*.go``): an empty list passes. Windows
(hostProcess) and AppArmor annotations are out of scope: nothing here sets them.

A model written here. It stays for the fast tier and because it checks every rendered pod spec
against ``restricted``, which the namespaces only warn and audit on (they enforce ``baseline``).
The real API server's PodSecurity admission decides enforcement with the plan applied
(tests/cluster/test_security.py::test_a_pod_cannot_run_privileged_on_the_host_network_or_with_host_paths)
and admits every pod of the plan (tests/cluster/test_deploy.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["LEVELS", "violations"]

LEVELS = ("privileged", "baseline", "restricted")

_BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
_SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
_RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _context_checks(contexts: list[Mapping[str, Any]]) -> list[str]:
    """Baseline's checks of security contexts that apply at pod and container level alike."""
    failed = []

    def selinux_bad(options: Mapping[str, Any]) -> bool:
        return options.get("type", "") not in _SELINUX_TYPES or bool(
            options.get("user") or options.get("role")
        )

    if any(selinux_bad(ctx.get("seLinuxOptions") or {}) for ctx in contexts):
        failed.append("seLinuxOptions")
    if any((ctx.get("seccompProfile") or {}).get("type") == "Unconfined" for ctx in contexts):
        failed.append("seccompProfile")
    if any((ctx.get("appArmorProfile") or {}).get("type") == "Unconfined" for ctx in contexts):
        failed.append("appArmorProfile")
    return failed


def _baseline(spec: Mapping[str, Any]) -> list[str]:
    failed = []
    pod_context = spec.get("securityContext") or {}
    containers = list(_containers(spec))
    contexts = [c.get("securityContext") or {} for c in containers]
    if any(spec.get(key) for key in ("hostNetwork", "hostPID", "hostIPC")):
        failed.append("host namespaces")
    if any(ctx.get("privileged") for ctx in contexts):
        failed.append("privileged")
    if any(
        set((ctx.get("capabilities") or {}).get("add") or []) - _BASELINE_CAPABILITIES for ctx in contexts
    ):
        failed.append("capabilities")
    if any("hostPath" in volume for volume in spec.get("volumes") or []):
        failed.append("hostPath volumes")
    if any(port.get("hostPort") for c in containers for port in c.get("ports") or []):
        failed.append("hostPorts")
    failed += _context_checks([pod_context, *contexts])
    if any((ctx.get("procMount") or "Default") != "Default" for ctx in contexts):
        failed.append("procMount")
    if any(sysctl["name"] not in _SAFE_SYSCTLS for sysctl in pod_context.get("sysctls") or []):
        failed.append("sysctls")
    return failed


def _restricted(spec: Mapping[str, Any]) -> list[str]:
    failed = []
    pod_context = spec.get("securityContext") or {}
    contexts = [c.get("securityContext") or {} for c in _containers(spec)]
    if any(not set(volume) - {"name"} <= _RESTRICTED_VOLUMES for volume in spec.get("volumes") or []):
        failed.append("restricted volume types")
    if any(ctx.get("allowPrivilegeEscalation") is not False for ctx in contexts):
        failed.append("allowPrivilegeEscalation != false")
    pod_non_root = pod_context.get("runAsNonRoot") is True
    if any(ctx.get("runAsNonRoot") is False for ctx in contexts) or not all(
        pod_non_root or ctx.get("runAsNonRoot") is True for ctx in contexts
    ):
        failed.append("runAsNonRoot != true")
    if pod_context.get("runAsUser") == 0 or any(ctx.get("runAsUser") == 0 for ctx in contexts):
        failed.append("runAsUser=0")
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type")
    for ctx in contexts:
        kind = (ctx.get("seccompProfile") or {}).get("type", pod_seccomp)
        if kind not in ("RuntimeDefault", "Localhost"):
            failed.append("seccompProfile")
            break
    for ctx in contexts:
        capabilities = ctx.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []) or set(capabilities.get("add") or []) - {
            "NET_BIND_SERVICE"
        }:
            failed.append("unrestricted capabilities")
            break
    return failed


def violations(spec: Mapping[str, Any], level: str) -> list[str]:
    """The checks of ``level`` that the pod spec fails (restricted includes baseline)."""
    if level not in LEVELS:
        raise ValueError(f"unknown Pod Security level {level!r}")
    if level == "privileged":
        return []
    failed = _baseline(spec)
    if level == "restricted":
        failed += _restricted(spec)
    return failed
