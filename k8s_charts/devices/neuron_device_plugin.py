"""The Neuron device plugin: advertises Trainium chips and NeuronCores to the kubelet.

Without it a Trainium node reports no ``aws.amazon.com/neuron`` or ``aws.amazon.com/neuroncore``
capacity and no training pod can be scheduled. The objects follow the upstream manifests
(aws-neuron/aws-neuron-sdk ``src/k8/k8s-neuron-device-plugin*.yml`` and the neuron-helm-charts
``device-plugin`` templates): a ServiceAccount whose ClusterRole lets the plugin read nodes and
pods, patch node status and emit events, and a DaemonSet in kube-system pinned to Neuron
instance types.

The EKS AL2023 Neuron AMI ships the driver but not this plugin, and the Trainium node groups are
tainted ``aws.amazon.com/neuron:NoSchedule``, so the DaemonSet must tolerate that taint.
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
import cdk8s_plus_27 as kplus
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.instance_catalog import CATALOG
from cluster_facts.neuron_stack import DEVICE_PLUGIN_IMAGE
from k8s_charts.devices.trainium_scheduling import (
    DEVICE_PLUGIN_EXCEPTIONS,
    device_plugin_daemonset,
    device_plugin_tolerations,
    distinct_instance_types,
    instance_type_affinity,
    runtime_default_seccomp,
)
from k8s_charts.network.system_network import system_pod_policy
from k8s_charts.network.tenant_network import api_server_egress_rules, dns_egress_rule
from k8s_charts.shared.policy_exceptions import PINNED_PULL_POLICY, digest_exceptions, pull_policy_exceptions
from k8s_charts.shared.resources import container_resources

__all__ = ["DEFAULT_IMAGE", "NAME", "NAMESPACE", "NEURON_INSTANCE_TYPES", "NeuronDevicePluginChart"]

# The device plugin of the cluster's Neuron SDK release (cluster_facts/neuron_stack.py, with its
# sources). The RBAC rules and host paths below are what the Helm chart's device-plugin templates of
# that generation give it (neuron-helm-charts templates/device-plugin/device-plugin-rbac.yaml and
# values.yaml devicePlugin.volumeMounts): nodes/proxy get/list and /opt/aws read-only are new
# since 2.22.4.0 (the plain manifests' tag, which this replaces).
DEFAULT_IMAGE = DEVICE_PLUGIN_IMAGE
NAME = "neuron-device-plugin"
NAMESPACE = "kube-system"
NEURON_INSTANCE_TYPES: tuple[str, ...] = tuple(CATALOG)
"""Every catalog instance type carries Trainium chips, so the plugin runs on all of them."""

_LABELS = {"app.kubernetes.io/name": NAME}
_DEVICE_PLUGINS_DIR = "/var/lib/kubelet/device-plugins"
_AWS_DIR = "/opt/aws"


class NeuronDevicePluginChart(cdk8s.Chart):
    """ServiceAccount, ClusterRole(+Binding) and the kube-system DaemonSet of the Neuron device plugin."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        vpc_cidr: str,
        instance_types: Sequence[str] = NEURON_INSTANCE_TYPES,
        image: str = DEFAULT_IMAGE,
        beside_dra: bool = False,
    ) -> None:
        """``beside_dra``: some node groups take their devices through DRA; the plugin keeps off their
        nodes (the Neuron DRA driver must not run beside it: cluster_facts/dra.py)."""
        super().__init__(scope, id)
        instance_types = distinct_instance_types("NeuronDevicePluginChart", instance_types)

        service_account = kplus.ServiceAccount(
            self,
            "ServiceAccount",
            metadata=cdk8s.ApiObjectMetadata(name=NAME, namespace=NAMESPACE, labels=_LABELS),
            # The plugin talks to the API server (node status, pod annotations): it needs its token.
            automount_token=True,
        )
        role = kplus.ClusterRole(
            self, "ClusterRole", metadata=cdk8s.ApiObjectMetadata(name=NAME, labels=_LABELS)
        )
        role.allow(["get", "list", "watch"], kplus.ApiResource.NODES)
        # Extended resources are published through node status.
        role.allow(["patch", "update"], kplus.ApiResource.custom(api_group="", resource_type="nodes/status"))
        # Allocation decisions are recorded as pod annotations.
        role.allow(["get", "list", "watch", "update", "patch"], kplus.ApiResource.PODS)
        role.allow(["create", "patch"], kplus.ApiResource.EVENTS)
        # As the chart grants it (device-plugin-rbac.yaml): the plugin reads the kubelet's API through
        # the API server's node proxy. Read verbs only; no admission policy sees reads, so this is the
        # widest grant of the plugin: a stolen token reads (and, through a WebSocket upgrade, which
        # the kubelet authorizes as get, may exec in) pods of any node. The token lives only in the
        # plugin's pods on Trainium nodes, whose root already has the kubelet's own credentials.
        role.allow(["get", "list"], kplus.ApiResource.custom(api_group="", resource_type="nodes/proxy"))
        binding = kplus.ClusterRoleBinding(
            self, "ClusterRoleBinding", role=role, metadata=cdk8s.ApiObjectMetadata(name=NAME, labels=_LABELS)
        )
        binding.add_subjects(service_account)

        device_plugin_daemonset(
            self,
            name=NAME,
            namespace=NAMESPACE,
            labels=_LABELS,
            pod_spec=self._pod_spec(instance_types, image, beside_dra),
            exceptions={
                **DEVICE_PLUGIN_EXCEPTIONS,
                "CKV_K8S_38": "the plugin patches node status and annotates pods through the API server, "
                "with the token of its own service account",
                **digest_exceptions(image),
                **pull_policy_exceptions(),
            },
        )
        # The plugin serves the kubelet over a unix socket and opens no port: no ingress. It reaches
        # only the API server (node status, pod annotations).
        system_pod_policy(
            self,
            "NetworkPolicy",
            name=NAME,
            namespace=NAMESPACE,
            pod_labels=_LABELS,
            egress=[dns_egress_rule(), *api_server_egress_rules(vpc_cidr)],
        )

    @staticmethod
    def _pod_spec(instance_types: list[str], image: str, beside_dra: bool) -> k8s.PodSpec:
        return k8s.PodSpec(
            service_account_name=NAME,
            security_context=runtime_default_seccomp(),
            # A node without its device plugin cannot run its workload: evict other pods first.
            priority_class_name="system-node-critical",
            tolerations=device_plugin_tolerations(),
            affinity=instance_type_affinity(instance_types, dra=False if beside_dra else None),
            containers=[
                k8s.Container(
                    name=NAME,
                    image=image,
                    # Pinned, from a repository that keeps its tags (k8s_charts/shared/policy_exceptions.py).
                    image_pull_policy=PINNED_PULL_POLICY,
                    env=[
                        # As upstream sets it. /etc/kubernetes is not mounted, so the file is absent and
                        # the plugin uses its own service account (its logs, aws-neuron-sdk#794); never
                        # mount it: the plugin would act with the kubelet's credentials.
                        k8s.EnvVar(name="KUBECONFIG", value="/etc/kubernetes/kubelet.conf"),
                        k8s.EnvVar(
                            name="NODE_NAME",
                            value_from=k8s.EnvVarSource(
                                field_ref=k8s.ObjectFieldSelector(field_path="spec.nodeName")
                            ),
                        ),
                    ],
                    # The upstream chart sets none (aws-neuron/neuron-helm-charts values.yaml). A Go
                    # server that lists the node's Neuron devices and answers the kubelet's allocations;
                    # the limits are a ceiling several times what it holds, as for the EFA plugin.
                    resources=container_resources(
                        requests={"cpu": "50m", "memory": "64Mi"}, limits={"cpu": "200m", "memory": "256Mi"}
                    ),
                    # Host access is through the hostPath mounts only: no privilege, no capabilities.
                    security_context=k8s.SecurityContext(
                        allow_privilege_escalation=False,
                        capabilities=k8s.Capabilities(drop=["ALL"]),
                    ),
                    # The kubelet's device-plugin directory (and /opt/aws read-only). Upstream
                    # manifests also mount the host's whole /run (volume "infa-map") for
                    # /run/infa-map.json, the device map of Neuron Runtime 1.x (neuron-rtd, end of
                    # support in Neuron 2.3); current plugins run in "Driver Mode" and list devices
                    # from the driver through sysfs, which every container sees read-only. /run
                    # holds containerd's and D-Bus's root-owned sockets: root on the node for a
                    # root process. AWS's own operator runs the plugin without it
                    # (docs/security-policies.md, "Host mounts").
                    volume_mounts=[
                        k8s.VolumeMount(name="device-plugin", mount_path=_DEVICE_PLUGINS_DIR),
                        # The chart's "aws-config": the AMI's Neuron tools and configuration under
                        # /opt/aws, which newer plugins read; read-only.
                        k8s.VolumeMount(name="aws-config", mount_path=_AWS_DIR, read_only=True),
                    ],
                )
            ],
            volumes=[
                # The plugin serves its sockets here and registers through the kubelet's kubelet.sock;
                # the kubelet creates the directory at start (Directory: never an empty stand-in).
                k8s.Volume(
                    name="device-plugin",
                    host_path=k8s.HostPathVolumeSource(path=_DEVICE_PLUGINS_DIR, type="Directory"),
                ),
                # The Neuron AMI installs it (aws-neuronx-tools): never an empty stand-in.
                k8s.Volume(
                    name="aws-config", host_path=k8s.HostPathVolumeSource(path=_AWS_DIR, type="Directory")
                ),
            ],
        )
