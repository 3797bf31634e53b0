"""The Neuron DRA driver: publishes each Trainium chip of a ``devices: dra`` node as a device of a
ResourceSlice (with its instance type, topology and connected-group attributes) and prepares the
devices of a pod's claim, with its Logical NeuronCore size, for the container.

Written from Neuron's Helm chart (aws-neuron/neuron-helm-charts ``charts/neuron-helm-chart``,
``templates/dra-driver/dra-driver-daemonset.yaml`` and ``dra-driver-deviceclass.yaml`` at commit
97e1b7d310f2, ``dra-driver-rbac.yaml`` at 7324cd0e80bd; the values of chart 1.10.0, ``draDriver``),
not vendored: ``make vendor-charts`` copies a chart from its GitHub release tag, which this machine
cannot reach (docs/supply-chain.md, "Charts written from upstream"). What the chart renders with
``draDriver.enabled=true`` and the rest of its defaults, and where this differs:

- a DaemonSet ``neuron-dra-driver-kubelet-plugin`` running ``k8s-neuron-dra-driver`` on the host
  network (the driver reads the instance's topology from the instance metadata service, which IMDSv2
  with hop limit 1 answers only on the host network), the kubelet's ``plugins``,
  ``plugins_registry`` and the CDI directory from the host, its env (``NODE_NAME``, ``POD_UID``,
  ``CDI_ROOT``, the two kubelet directories, ``HEALTHCHECK_PORT`` 51515) and a gRPC liveness probe on
  that port, as the chart has them. Here in ``kube-system`` (the chart's ``namespaceOverride`` is
  ``neuron-dra-driver``), beside the device plugins; only on ``devices: dra`` nodes (the chart's
  affinity is every Trainium instance type); also tolerating the node check's startup taint (the
  devices are published before the check runs); priority ``system-node-critical`` (the chart sets
  none); no capabilities and no privilege escalation (the chart sets no security context: the
  runtime's default capabilities);
- the chart's ClusterRole ``neuron-dra-driver-clusterrole`` and its binding, unchanged: resourceslices
  (all verbs), resourceclaims and deviceclasses (read), nodes (read, patch, update), nodes/status
  (patch). The API server confines it to its own node and its own driver's slices
  (k8s_charts/devices/dra_admission.py);
- the DeviceClass ``neuron.aws.com``: every device of the driver ``neuron.aws.com``.

The driver must not run on a node that runs the Neuron device plugin (cluster_facts/dra.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
import cdk8s_plus_27 as kplus
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.dra import NEURON_DEVICE_CLASS, NEURON_DRA_DRIVER
from cluster_facts.image_pins import NEURON_DRA_DRIVER_IMAGE
from k8s_charts.devices.trainium_scheduling import (
    device_plugin_daemonset,
    device_plugin_tolerations,
    distinct_instance_types,
    instance_type_affinity,
    runtime_default_seccomp,
)
from k8s_charts.shared.policy_exceptions import PINNED_PULL_POLICY, digest_exceptions, pull_policy_exceptions
from k8s_charts.shared.resources import container_resources

__all__ = [
    "DEFAULT_IMAGE",
    "HEALTHCHECK_PORT",
    "KUBELET_PLUGINS_DIR",
    "KUBELET_REGISTRY_DIR",
    "NAME",
    "NAMESPACE",
    "SERVICE_ACCOUNT",
    "NeuronDraDriverChart",
    "device_class",
]

DEFAULT_IMAGE = NEURON_DRA_DRIVER_IMAGE
NAME = "neuron-dra-driver-kubelet-plugin"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "neuron-dra-driver-sa"
ROLE = "neuron-dra-driver-clusterrole"
HEALTHCHECK_PORT = 51515
KUBELET_PLUGINS_DIR = "/var/lib/kubelet/plugins"
KUBELET_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
CDI_DIR = "/var/run/cdi"

_LABELS = {"app.kubernetes.io/name": "neuron-dra-driver"}

# The checks the driver breaks, as a device plugin does, and why.
_EXCEPTIONS = {
    "CKV_K8S_19": "on the host network as in Neuron's chart: the driver reads the instance's topology from "
    "the instance metadata service, which answers pods only on the host network (IMDSv2, hop limit 1)",
    "CKV2_K8S_6": "a host-network pod is outside NetworkPolicy; it serves the kubelet over unix sockets "
    "and its health on a host port, and calls only the API server",
    "CKV_K8S_22": "the driver writes its sockets, state and CDI specs under host paths; its image is not "
    "built or tested for a read-only root file system",
    "CKV_K8S_23": "the driver creates its sockets in the kubelet's root-owned plugin directories",
    "CKV_K8S_40": "the driver creates its sockets in the kubelet's root-owned plugin directories",
    "CKV_K8S_9": "the driver is ready once the kubelet registered it; Neuron's chart gives it a liveness "
    "probe only",
    "CKV_K8S_38": "the driver publishes ResourceSlices with the token of its own service account",
}


def device_class(
    scope: Construct, id: str, *, name: str, expression: str, labels: dict[str, str]
) -> cdk8s.ApiObject:
    """A DeviceClass (resource.k8s.io/v1; cdk8s-plus-27 has no type for it) selecting by ``expression``."""
    device = cdk8s.ApiObject(
        scope,
        id,
        api_version="resource.k8s.io/v1",
        kind="DeviceClass",
        metadata=cdk8s.ApiObjectMetadata(name=name, labels=labels),
    )
    device.add_json_patch(cdk8s.JsonPatch.add("/spec", {"selectors": [{"cel": {"expression": expression}}]}))
    return device


class NeuronDraDriverChart(cdk8s.Chart):
    """ServiceAccount, ClusterRole(+Binding), DaemonSet and DeviceClass of the Neuron DRA driver."""

    def __init__(
        self, scope: Construct, id: str, *, instance_types: Sequence[str], image: str = DEFAULT_IMAGE
    ) -> None:
        super().__init__(scope, id)
        instance_types = distinct_instance_types("NeuronDraDriverChart", instance_types)
        service_account = kplus.ServiceAccount(
            self,
            "ServiceAccount",
            metadata=cdk8s.ApiObjectMetadata(name=SERVICE_ACCOUNT, namespace=NAMESPACE, labels=_LABELS),
            # The driver publishes ResourceSlices through the API server: it needs its token.
            automount_token=True,
        )
        role = kplus.ClusterRole(
            self, "ClusterRole", metadata=cdk8s.ApiObjectMetadata(name=ROLE, labels=_LABELS)
        )
        resource = kplus.ApiResource.custom
        role.allow(
            ["get", "list", "watch", "create", "update", "patch", "delete"],
            resource(api_group="resource.k8s.io", resource_type="resourceslices"),
        )
        role.allow(
            ["get", "list", "watch"], resource(api_group="resource.k8s.io", resource_type="resourceclaims")
        )
        role.allow(
            ["get", "list", "watch"], resource(api_group="resource.k8s.io", resource_type="deviceclasses")
        )
        role.allow(["get", "list", "watch", "patch", "update"], kplus.ApiResource.NODES)
        role.allow(["patch"], resource(api_group="", resource_type="nodes/status"))
        binding = kplus.ClusterRoleBinding(
            self,
            "ClusterRoleBinding",
            role=role,
            metadata=cdk8s.ApiObjectMetadata(name="neuron-dra-driver-binding", labels=_LABELS),
        )
        binding.add_subjects(service_account)
        device_plugin_daemonset(
            self,
            name=NAME,
            namespace=NAMESPACE,
            labels=_LABELS,
            pod_spec=_pod_spec(instance_types, image),
            exceptions={**_EXCEPTIONS, **digest_exceptions(image), **pull_policy_exceptions()},
        )
        device_class(
            self,
            "DeviceClass",
            name=NEURON_DEVICE_CLASS,
            expression=f'device.driver == "{NEURON_DRA_DRIVER}"',
            labels=_LABELS,
        )


def _host_path(name: str, path: str) -> k8s.Volume:
    # DirectoryOrCreate as the chart has it: the kubelet creates its plugin directories at start.
    return k8s.Volume(name=name, host_path=k8s.HostPathVolumeSource(path=path, type="DirectoryOrCreate"))


def _field(path: str) -> k8s.EnvVarSource:
    return k8s.EnvVarSource(field_ref=k8s.ObjectFieldSelector(field_path=path))


def _pod_spec(instance_types: list[str], image: str) -> k8s.PodSpec:
    return k8s.PodSpec(
        service_account_name=SERVICE_ACCOUNT,
        host_network=True,
        security_context=runtime_default_seccomp(),
        # A node without its device driver cannot run its workload: evict other pods first.
        priority_class_name="system-node-critical",
        tolerations=device_plugin_tolerations(),
        affinity=instance_type_affinity(instance_types, dra=True),
        containers=[
            k8s.Container(
                name="neuron-dra-driver",
                image=image,
                image_pull_policy=PINNED_PULL_POLICY,
                command=["k8s-neuron-dra-driver"],
                env=[
                    k8s.EnvVar(name="NODE_NAME", value_from=_field("spec.nodeName")),
                    k8s.EnvVar(name="POD_UID", value_from=_field("metadata.uid")),
                    k8s.EnvVar(name="CDI_ROOT", value=CDI_DIR),
                    k8s.EnvVar(name="KUBELET_REGISTRAR_DIRECTORY_PATH", value=KUBELET_REGISTRY_DIR),
                    k8s.EnvVar(name="KUBELET_PLUGINS_DIRECTORY_PATH", value=KUBELET_PLUGINS_DIR),
                    k8s.EnvVar(name="HEALTHCHECK_PORT", value=str(HEALTHCHECK_PORT)),
                ],
                # The chart's (draDriver.resources).
                resources=container_resources(
                    requests={"cpu": "10m", "memory": "128Mi"}, limits={"cpu": "20m", "memory": "256Mi"}
                ),
                security_context=k8s.SecurityContext(
                    allow_privilege_escalation=False, capabilities=k8s.Capabilities(drop=["ALL"])
                ),
                liveness_probe=k8s.Probe(
                    grpc=k8s.GrpcAction(port=HEALTHCHECK_PORT, service="liveness"),
                    failure_threshold=3,
                    period_seconds=10,
                    initial_delay_seconds=30,
                    timeout_seconds=5,
                ),
                volume_mounts=[
                    k8s.VolumeMount(name="kubelet-plugins-dir", mount_path=KUBELET_PLUGINS_DIR),
                    k8s.VolumeMount(name="kubelet-registry-dir", mount_path=KUBELET_REGISTRY_DIR),
                    k8s.VolumeMount(name="cdi-dir", mount_path=CDI_DIR),
                ],
            )
        ],
        volumes=[
            _host_path("kubelet-plugins-dir", KUBELET_PLUGINS_DIR),
            _host_path("kubelet-registry-dir", KUBELET_REGISTRY_DIR),
            _host_path("cdi-dir", CDI_DIR),
        ],
    )
