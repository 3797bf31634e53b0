"""Pod Security's ``restricted`` profile as CEL over a pod spec, for the objects Pod Security never sees.

Pod Security Admission judges pods only. A Volcano Job's task templates reach it only when Volcano's
job controller creates their pods, and a refused pod is a failed sync that the controller retries
(pkg/controllers/job/job_controller.go ``handleJobError``): a Job of 1,500 replicas whose pods the
namespace refuses kept the controller, whose client rate limit every team shares, sending refused
creations for minutes (issue 34). The team admission policy (k8s_charts/teams/tenant_admission.py) holds
each template to these rules at the Job instead, so such a Job is refused before it is stored.

The checks of the Pod Security Standards as the team namespaces enforce them (``restricted``,
pinned at the version k8s_charts/addons/pod_security.py names; k8s.io/pod-security-admission/policy,
``check_*.go``), except those the team policy already makes stricter (host namespaces, host path
and every volume type but the few a run needs, non-root and a uid other than 0):

- ``privileged`` unset or false; ``allowPrivilegeEscalation: false``; capabilities ``drop: [ALL]``
  and ``add`` at most ``NET_BIND_SERVICE`` (``check_privileged.go``,
  ``check_allowPrivilegeEscalation.go``, ``check_capabilities_restricted.go``);
- ``seccompProfile.type`` RuntimeDefault or Localhost on the pod (no container then sets it to
  anything else) or on every container (``check_seccompProfile_restricted.go``);
- no ``hostPort`` other than 0 (``check_hostPorts.go``);
- ``procMount`` Default, only the safe sysctls, SELinux without user or role and of a container
  type, AppArmor never unconfined (field or annotation), no Windows host process
  (``check_procMount.go``, ``check_sysctls.go``, ``check_seLinuxOptions.go``,
  ``check_appArmorProfile.go``, ``check_windowsHostProcess.go``).

Windows pods are exempt from some checks in the standard; here they are not (no Trainium node runs
Windows), so these rules are never weaker than the standard. Every expression runs over ``p`` (a pod
spec) and, for the AppArmor annotation, ``m`` (its metadata); a field it reads is guarded by
``has()``, so none can fail on a well-formed object.
"""

from __future__ import annotations

from k8s_charts.shared.admission_policy import cel_list

__all__ = ["PodSecurityMessage", "pod_metadata_rules", "pod_spec_rules"]

# check_sysctls.go: the safe set as of the pinned version v1.33 (1.27 added ip_local_reserved_ports,
# 1.29 the three tcp_keepalive ones and tcp_fin_timeout).
_SAFE_SYSCTLS = (
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
)
# check_seLinuxOptions.go (container_engine_t since 1.31).
_SELINUX_TYPES = ("container_t", "container_init_t", "container_kvm_t", "container_engine_t")
_SECCOMP_CONFINED = ("RuntimeDefault", "Localhost")
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


class PodSecurityMessage:
    PRIVILEGE = (
        "a team's containers run without privilege (Pod Security restricted): privileged false, "
        "allowPrivilegeEscalation false, capabilities drop ALL and add nothing but NET_BIND_SERVICE"
    )
    SECCOMP = (
        "a team's pods set seccompProfile RuntimeDefault or Localhost, on the pod or on every "
        "container (Pod Security restricted)"
    )
    HOST_PORTS = "a team's containers open no hostPort (Pod Security baseline)"
    KERNEL = (
        "a team's pods keep the kernel's confinement (Pod Security baseline): procMount Default, only "
        "the safe sysctls, no SELinux user or role and only a container SELinux type, AppArmor never "
        "Unconfined, no Windows host process"
    )


def _containers(p: str) -> str:
    return (
        f"((has({p}.containers) ? {p}.containers : []) + (has({p}.initContainers) ? {p}.initContainers : []))"
    )


def _context(c: str) -> str:
    """CEL: the container's (or pod's) securityContext, or an empty map."""
    return f"(has({c}.securityContext) ? {c}.securityContext : {{}})"


def _privilege(p: str) -> str:
    caps = "s.capabilities"
    added = f"(!has({caps}.add) || {caps}.add.all(a, a == 'NET_BIND_SERVICE'))"
    return (
        f"{_containers(p)}.map(c, {_context('c')}).all(s,"
        " (!has(s.privileged) || s.privileged == false)"
        " && has(s.allowPrivilegeEscalation) && s.allowPrivilegeEscalation == false"
        f" && has(s.capabilities) && has({caps}.drop) && 'ALL' in {caps}.drop && {added})"
    )


def _seccomp(p: str) -> str:
    def confined(s: str) -> str:
        return (
            f"(has({s}.seccompProfile) && has({s}.seccompProfile.type)"
            f" && {s}.seccompProfile.type in {cel_list(_SECCOMP_CONFINED)})"
        )

    pod = _context(p)
    return (
        f"{_containers(p)}.map(c, {_context('c')}).all(s,"
        f" has(s.seccompProfile) ? {confined('s')} : {confined(pod)})"
    )


def _host_ports(p: str) -> str:
    return f"{_containers(p)}.all(c, !has(c.ports) || c.ports.all(q, !has(q.hostPort) || q.hostPort == 0))"


def _kernel(p: str) -> str:
    def selinux(s: str) -> str:
        options = f"{s}.seLinuxOptions"
        return (
            f"(!has({options}) || ((!has({options}.user) || {options}.user == '')"
            f" && (!has({options}.role) || {options}.role == '')"
            f" && (!has({options}.type) || {options}.type == '' || {options}.type in {cel_list(_SELINUX_TYPES)})))"
        )

    def apparmor(s: str) -> str:
        return f"(!has({s}.appArmorProfile) || !has({s}.appArmorProfile.type) || {s}.appArmorProfile.type != 'Unconfined')"

    def host_process(s: str) -> str:
        return f"(!has({s}.windowsOptions) || !has({s}.windowsOptions.hostProcess) || {s}.windowsOptions.hostProcess == false)"

    pod = _context(p)
    sysctls = (
        f"(!has({pod}.sysctls) || {pod}.sysctls.all(x, has(x.name) && x.name in {cel_list(_SAFE_SYSCTLS)}))"
    )
    per_context = f"{selinux('s')} && {apparmor('s')} && {host_process('s')}"
    return (
        f"{sysctls} && [{pod}].all(s, {per_context})"
        f" && {_containers(p)}.map(c, {_context('c')}).all(s,"
        f" (!has(s.procMount) || s.procMount == 'Default') && {per_context})"
    )


def pod_spec_rules(p: str) -> list[tuple[str, str]]:
    """(expression over the pod spec ``p``, message) for each group of checks."""
    return [
        (_privilege(p), PodSecurityMessage.PRIVILEGE),
        (_seccomp(p), PodSecurityMessage.SECCOMP),
        (_host_ports(p), PodSecurityMessage.HOST_PORTS),
        (_kernel(p), PodSecurityMessage.KERNEL),
    ]


def pod_metadata_rules(m: str) -> list[tuple[str, str]]:
    """(expression over the pod's metadata ``m``, message): the AppArmor annotations."""
    annotations = f"{m}.annotations"
    return [
        (
            (
                f"!has({annotations}) || {annotations}.all(k, !k.startsWith('{_APPARMOR_ANNOTATION}')"
                f" || {annotations}[k] == 'runtime/default' || {annotations}[k].startsWith('localhost/'))"
            ),
            PodSecurityMessage.KERNEL,
        )
    ]
