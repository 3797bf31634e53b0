"""What the device plugins share: a DaemonSet on Trainium nodes only, through their taint."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.dra import DEVICES_LABEL, DRA_DEVICES
from cluster_facts.kubernetes_names import INSTANCE_TYPE_LABEL, NEURON_TAINT_KEY
from cluster_facts.node_check import NODE_CHECK_TAINT_KEY
from k8s_charts.shared.policy_exceptions import policy_exceptions

__all__ = [
    "DEVICE_PLUGIN_EXCEPTIONS",
    "device_plugin_daemonset",
    "device_plugin_tolerations",
    "distinct_instance_types",
    "instance_type_affinity",
    "runtime_default_seccomp",
]


def distinct_instance_types(chart: str, instance_types: Sequence[str]) -> list[str]:
    """``instance_types`` without repeats, order kept; at least one, or the affinity matches nothing."""
    distinct = list(dict.fromkeys(instance_types))
    if not distinct:
        raise ValueError(f"{chart} needs at least one instance type for its node affinity")
    return distinct


def device_plugin_daemonset(
    scope: Construct,
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    pod_spec: k8s.PodSpec,
    exceptions: Mapping[str, str],
) -> k8s.KubeDaemonSet:
    """A raw DaemonSet: the cdk8s-plus L2 cannot express the plugins' host access without imposing
    its own security-context and resource defaults. ``exceptions`` are the policy checks (id to
    reason) the plugin must break; they are recorded on the DaemonSet and on its pods."""
    annotations = policy_exceptions(exceptions)
    return k8s.KubeDaemonSet(
        scope,
        "DaemonSet",
        metadata=k8s.ObjectMeta(name=name, namespace=namespace, labels=dict(labels), annotations=annotations),
        spec=k8s.DaemonSetSpec(
            selector=k8s.LabelSelector(match_labels=dict(labels)),
            update_strategy=k8s.DaemonSetUpdateStrategy(type="RollingUpdate"),
            template=k8s.PodTemplateSpec(
                metadata=k8s.ObjectMeta(labels=dict(labels), annotations=annotations), spec=pod_spec
            ),
        ),
    )


def runtime_default_seccomp() -> k8s.PodSecurityContext:
    """The container runtime's default seccomp profile for every container of the pod."""
    return k8s.PodSecurityContext(seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"))


# What every device plugin must break, and why: it serves the kubelet over a socket in a root-owned
# host directory and has no endpoint of its own to probe.
DEVICE_PLUGIN_EXCEPTIONS = {
    "CKV_K8S_8": "a device plugin serves the kubelet over a unix socket; the kubelet's registration "
    "is its liveness signal and there is no endpoint to probe",
    "CKV_K8S_9": "a device plugin serves the kubelet over a unix socket; it is ready once registered "
    "and there is no endpoint to probe",
    "CKV_K8S_22": "the plugin writes its socket and state under host paths; its image is not built "
    "or tested for a read-only root file system",
    "CKV_K8S_23": "the plugin creates its socket in the kubelet's root-owned device-plugins directory",
    "CKV_K8S_40": "the plugin creates its socket in the kubelet's root-owned device-plugins directory",
}


def device_plugin_tolerations() -> list[k8s.Toleration]:
    return [
        k8s.Toleration(key="CriticalAddonsOnly", operator="Exists"),
        # The Trainium node groups carry this taint; the plugins are what those nodes need.
        k8s.Toleration(key=NEURON_TAINT_KEY, operator="Exists", effect="NoSchedule"),
        # A new node's devices are advertised before its node check runs (cluster_facts/node_check.py).
        k8s.Toleration(key=NODE_CHECK_TAINT_KEY, operator="Exists", effect="NoSchedule"),
    ]


def instance_type_affinity(instance_types: Sequence[str], *, dra: bool | None = None) -> k8s.Affinity:
    """Required node affinity: one of ``instance_types`` (the kubelet's instance-type label); with
    ``dra`` True only the nodes of ``devices: dra`` groups, False none of them (a node without the
    label, of a group that predates it, counts as a device-plugin node), None either."""
    requirements = [
        k8s.NodeSelectorRequirement(key=INSTANCE_TYPE_LABEL, operator="In", values=list(instance_types))
    ]
    if dra is not None:
        requirements.append(
            k8s.NodeSelectorRequirement(
                key=DEVICES_LABEL, operator="In" if dra else "NotIn", values=[DRA_DEVICES]
            )
        )
    return k8s.Affinity(
        node_affinity=k8s.NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.NodeSelector(
                node_selector_terms=[k8s.NodeSelectorTerm(match_expressions=requirements)]
            )
        )
    )
