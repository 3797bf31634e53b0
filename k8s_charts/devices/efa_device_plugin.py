"""The EFA device plugin: advertises ``vpc.amazonaws.com/efa`` (one per EFA interface) to the kubelet.

Training pods request every EFA interface of their node; without this plugin those requests can
never be met. The DaemonSet follows the ``aws-efa-k8s-device-plugin`` chart of aws/eks-charts
(appVersion v0.5.20): host network, privileged, the kubelet's device-plugin directory,
``/dev/infiniband`` and ``/opt/aws/neuron`` from the host.

The image lives in the EKS-owned ECR registry of the cluster's region (cluster_facts/image_pins.py:
``EKS_IMAGE_ACCOUNTS``, ``efa_plugin_image``, the tag ``EFA_DEVICE_PLUGIN_TAG``). An unknown region
fails at synth time rather than as an ImagePullBackOff after deployment.
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.image_pins import EFA_DEVICE_PLUGIN_TAG, EKS_IMAGE_ACCOUNTS, efa_plugin_image
from cluster_facts.instance_catalog import CATALOG
from k8s_charts.devices.trainium_scheduling import (
    DEVICE_PLUGIN_EXCEPTIONS,
    device_plugin_daemonset,
    device_plugin_tolerations,
    distinct_instance_types,
    instance_type_affinity,
    runtime_default_seccomp,
)
from k8s_charts.shared.policy_exceptions import PINNED_PULL_POLICY, digest_exceptions, pull_policy_exceptions
from k8s_charts.shared.resources import container_resources

__all__ = [
    "DEFAULT_IMAGE_TAG",
    "EFA_INSTANCE_TYPES",
    "EKS_IMAGE_ACCOUNTS",
    "NAME",
    "NAMESPACE",
    "EfaDevicePluginChart",
    "efa_plugin_image",
]

DEFAULT_IMAGE_TAG = EFA_DEVICE_PLUGIN_TAG
NAME = "aws-efa-k8s-device-plugin"
NAMESPACE = "kube-system"
EFA_INSTANCE_TYPES: tuple[str, ...] = tuple(
    name for name, entry in CATALOG.items() if entry.efa_network_cards > 0
)
"""Catalog instance types with EFA network cards: the only nodes where the plugin has work to do."""

_LABELS = {"app.kubernetes.io/name": NAME}
_DEVICE_PLUGINS_DIR = "/var/lib/kubelet/device-plugins"


class EfaDevicePluginChart(cdk8s.Chart):
    """The kube-system DaemonSet of the EFA device plugin, on EFA-capable Trainium nodes."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        region: str,
        instance_types: Sequence[str] = EFA_INSTANCE_TYPES,
        image_tag: str = DEFAULT_IMAGE_TAG,
        beside_dra: bool = False,
    ) -> None:
        """``beside_dra``: some node groups take their EFA interfaces through the EFA DRA driver; the
        plugin keeps off their nodes (the two on one node oversubscribe the devices: cluster_facts/dra.py)."""
        super().__init__(scope, id)
        image = efa_plugin_image(region, image_tag)
        instance_types = distinct_instance_types("EfaDevicePluginChart", instance_types)
        without_efa = [
            name for name in instance_types if name in CATALOG and CATALOG[name].efa_network_cards == 0
        ]
        if without_efa:
            raise ValueError(
                f"instance types without EFA network cards in the catalog: {', '.join(without_efa)}"
            )

        # Privileged and host-network: the cdk8s-plus L2 would refuse or rewrite such a pod.
        device_plugin_daemonset(
            self,
            name=NAME,
            namespace=NAMESPACE,
            labels=_LABELS,
            pod_spec=_pod_spec(instance_types, image, beside_dra),
            exceptions={**_EXCEPTIONS, **digest_exceptions(image), **pull_policy_exceptions()},
        )


_HOST_ACCESS = (
    "privileged as in the upstream chart: the plugin reads the host's EFA and Neuron devices and "
    "tools to pair each EFA interface with its Neuron device"
)
_EXCEPTIONS = {
    **DEVICE_PLUGIN_EXCEPTIONS,
    "CKV_K8S_16": _HOST_ACCESS,
    "CKV_K8S_20": "Kubernetes rejects allowPrivilegeEscalation false on a privileged container",
    "CKV_K8S_28": _HOST_ACCESS + " (a privileged container keeps every capability)",
    "CKV_K8S_37": _HOST_ACCESS + " (a privileged container keeps every capability)",
    "CKV_K8S_19": "the plugin lists the EFA interfaces of the host's network namespace",
    "CKV2_K8S_6": "a host-network pod is outside NetworkPolicy; it opens no port and talks only "
    "to the kubelet's socket",
}


def _host_path(name: str, path: str, type: str | None = None) -> k8s.Volume:
    return k8s.Volume(name=name, host_path=k8s.HostPathVolumeSource(path=path, type=type))


def _pod_spec(instance_types: list[str], image: str, beside_dra: bool) -> k8s.PodSpec:
    return k8s.PodSpec(
        # The plugin never calls the API server.
        automount_service_account_token=False,
        # The plugin discovers the EFA devices of the host's network namespace.
        host_network=True,
        security_context=runtime_default_seccomp(),
        priority_class_name="system-node-critical",
        tolerations=device_plugin_tolerations(),
        affinity=instance_type_affinity(instance_types, dra=False if beside_dra else None),
        containers=[
            k8s.Container(
                name=NAME,
                image=image,
                # Pinned, from a repository that keeps its tags (k8s_charts/shared/policy_exceptions.py).
                image_pull_policy=PINNED_PULL_POLICY,
                # The upstream chart's requests (eks-charts aws-efa-k8s-device-plugin values.yaml: 10m,
                # 20Mi; its commented limits: 100m, 128Mi). It lists the node's EFA devices once and
                # answers the kubelet's allocations; the CPU limit leaves room for its start.
                resources=container_resources(
                    requests={"cpu": "10m", "memory": "20Mi"}, limits={"cpu": "200m", "memory": "128Mi"}
                ),
                # Privileged and root, as in the upstream chart: recent plugin versions read the
                # host's Neuron devices and tools to pair EFA interfaces with Neuron devices, which a
                # capability-less container cannot. (Kubernetes rejects allowPrivilegeEscalation=false
                # on a privileged container, hence true.)
                security_context=k8s.SecurityContext(
                    privileged=True, allow_privilege_escalation=True, run_as_user=0
                ),
                # The upstream chart's three host paths, and no more (reviewed in
                # docs/security-policies.md, "Host mounts"): the plugin only reads the Neuron tools,
                # so they are read-only. Being privileged, the container could remount them; the
                # mounts say what it uses, the privilege is the exception that matters.
                volume_mounts=[
                    k8s.VolumeMount(name="device-plugin", mount_path=_DEVICE_PLUGINS_DIR),
                    k8s.VolumeMount(name="infiniband-volume", mount_path="/dev/infiniband"),
                    k8s.VolumeMount(name="neuron-tools", mount_path="/opt/aws/neuron", read_only=True),
                ],
            )
        ],
        volumes=[
            # The kubelet's device-plugin directory: the plugin registers its socket here (the
            # kubelet creates it at start; Directory: never an empty stand-in).
            _host_path("device-plugin", _DEVICE_PLUGINS_DIR, type="Directory"),
            # The EFA (verbs) device nodes it advertises.
            _host_path("infiniband-volume", "/dev/infiniband"),
            # Neuron tools of the AMI, used for the EFA-to-Neuron-device topology.
            _host_path("neuron-tools", "/opt/aws/neuron", type="DirectoryOrCreate"),
        ],
    )
