"""The EFA DRA driver (DRANET): publishes each EFA interface of a ``devices: dra`` node as a device of
a ResourceSlice (with its PCI address, NUMA node and the Neuron device groups it serves) and moves
the interfaces of a pod's claim into the pod.

Written from the chart the EKS user guide installs ("Manage EFA devices", ``helm install aws-dranet
eks/aws-dranet``): aws/eks-charts ``stable/aws-dranet`` 1.0.0 (Chart.yaml, daemonset.yaml,
serviceaccount.yaml and clusterrolebinding.yaml at commit c043cef46c7e, clusterrole.yaml and
deviceclass.yaml at 79203dcc999b, values.yaml), not vendored (k8s_charts/devices/neuron_dra_driver.py says
why). What the chart renders with its defaults, and where this differs:

- a DaemonSet ``aws-dranet`` in ``kube-system``: ``/dranet --v=4 --hostname-override=$(NODE_NAME)
  --bind-address=:9177 --cloud-provider-hint=AWS --filter=<the chart's CEL filter>`` (only EFA
  interfaces: no veth, no ENA), host network (it moves interfaces between network namespaces and
  reads IMDS), not privileged, root, read-only root file system, every capability dropped (the
  chart's ``securityContext``), its health on ``/healthz``, the kubelet's ``plugins`` and
  ``plugins_registry``, ``/var/run/nri``, ``/var/run/netns`` and ``/dev/infiniband`` (host to
  container propagation), ``/var/run/dranet`` from the host and a small ``/tmp`` in memory. Here
  only on ``devices: dra`` nodes of the catalog (the chart's affinity lists every EFA instance type);
  also tolerating the Trainium taint and the node check's startup taint (the chart tolerates only
  ``CriticalAddonsOnly``: it would never run on a Trainium node);
- the chart's ClusterRole and binding, unchanged: nodes (get), resourceslices (list, watch, create,
  update, delete), resourceclaims and deviceclasses (get), resourceclaims/status (patch, update),
  resourceclaims/driver ``associated-node:patch``/``update`` for ``dra.net`` (Kubernetes 1.36's
  per-driver status authorization). The API server confines its slices to its own node and driver,
  and its claim status writes to its own driver's device entries (k8s_charts/devices/dra_admission.py);
- the DeviceClass ``efa.networking.k8s.aws``: ``dra.net`` devices whose PCI device is an EFA.

The image is in EKS's regional registry (cluster_facts/image_pins.py ``efa_dra_driver_image``). It
must not run on a node that runs the EFA device plugin (cluster_facts/dra.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
import cdk8s_plus_27 as kplus
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.dra import EFA_DEVICE_CLASS, EFA_DRA_DRIVER
from cluster_facts.image_pins import efa_dra_driver_image
from k8s_charts.devices.neuron_dra_driver import KUBELET_PLUGINS_DIR, KUBELET_REGISTRY_DIR, device_class
from k8s_charts.devices.trainium_scheduling import (
    device_plugin_daemonset,
    device_plugin_tolerations,
    distinct_instance_types,
    instance_type_affinity,
)
from k8s_charts.shared.policy_exceptions import PINNED_PULL_POLICY, digest_exceptions, pull_policy_exceptions
from k8s_charts.shared.resources import container_resources

__all__ = ["HEALTH_PORT", "NAME", "NAMESPACE", "SERVICE_ACCOUNT", "EfaDraDriverChart"]

NAME = "aws-dranet"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "aws-dranet"
HEALTH_PORT = 9177
# The chart's default filter (values.yaml ``filter``): EFA and RDMA devices only.
_FILTER = (
    '(!("dra.net/type" in attributes) || attributes["dra.net/type"].StringValue != "veth") && '
    '(!("dra.net/pciDevice" in attributes) || attributes["dra.net/pciDevice"].StringValue != '
    '"Elastic Network Adapter (ENA)")'
)
_LABELS = {"app.kubernetes.io/name": NAME}

_EXCEPTIONS = {
    "CKV_K8S_19": "on the host network as in the EKS chart: the driver moves EFA interfaces into pods' "
    "network namespaces and reads the instance metadata service (IMDSv2, hop limit 1)",
    "CKV2_K8S_6": "a host-network pod is outside NetworkPolicy; it serves the kubelet over unix sockets "
    "and its health on a host port, and calls only the API server",
    "CKV_K8S_23": "root as in the EKS chart: it creates its sockets in the kubelet's root-owned plugin "
    "directories and opens the host's RDMA devices",
    "CKV_K8S_40": "root as in the EKS chart: it creates its sockets in the kubelet's root-owned plugin "
    "directories and opens the host's RDMA devices",
    "CKV_K8S_8": "the EKS chart gives the driver a readiness probe only; the kubelet's plugin "
    "registration is its liveness",
    "CKV_K8S_38": "the driver publishes ResourceSlices and claim status with the token of its own "
    "service account",
}


class EfaDraDriverChart(cdk8s.Chart):
    """ServiceAccount, ClusterRole(+Binding), DaemonSet and DeviceClass of the EFA DRA driver."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        region: str,
        instance_types: Sequence[str],
        image: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        image = image or efa_dra_driver_image(region)
        instance_types = distinct_instance_types("EfaDraDriverChart", instance_types)
        service_account = kplus.ServiceAccount(
            self,
            "ServiceAccount",
            metadata=cdk8s.ApiObjectMetadata(name=SERVICE_ACCOUNT, namespace=NAMESPACE, labels=_LABELS),
            automount_token=True,
        )
        role = kplus.ClusterRole(
            self, "ClusterRole", metadata=cdk8s.ApiObjectMetadata(name=NAME, labels=_LABELS)
        )
        resource = kplus.ApiResource.custom
        role.allow(["get"], kplus.ApiResource.NODES)
        role.allow(
            ["list", "watch", "create", "update", "delete"],
            resource(api_group="resource.k8s.io", resource_type="resourceslices"),
        )
        role.allow(["get"], resource(api_group="resource.k8s.io", resource_type="resourceclaims"))
        role.allow(["get"], resource(api_group="resource.k8s.io", resource_type="deviceclasses"))
        role.allow(
            ["patch", "update"], resource(api_group="resource.k8s.io", resource_type="resourceclaims/status")
        )
        # Kubernetes 1.36's per-driver authorization of status.devices (DRAResourceClaimGranularStatusAuthorization),
        # for this driver's own node: a verb cdk8s-plus does not know, hence the raw rule below.
        binding = kplus.ClusterRoleBinding(
            self, "ClusterRoleBinding", role=role, metadata=cdk8s.ApiObjectMetadata(name=NAME, labels=_LABELS)
        )
        binding.add_subjects(service_account)
        cluster_role = role.node.default_child
        assert isinstance(cluster_role, cdk8s.ApiObject)
        cluster_role.add_json_patch(
            cdk8s.JsonPatch.add(
                "/rules/-",
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceclaims/driver"],
                    "verbs": ["associated-node:patch", "associated-node:update"],
                    "resourceNames": [EFA_DRA_DRIVER],
                },
            )
        )
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
            name=EFA_DEVICE_CLASS,
            expression=f'device.driver == "{EFA_DRA_DRIVER}" && '
            f"device.attributes[\"{EFA_DRA_DRIVER}\"].pciDevice == 'Elastic Fabric Adapter (EFA)'",
            labels=_LABELS,
        )


def _host_path(name: str, path: str) -> k8s.Volume:
    return k8s.Volume(name=name, host_path=k8s.HostPathVolumeSource(path=path, type="DirectoryOrCreate"))


def _pod_spec(instance_types: list[str], image: str) -> k8s.PodSpec:
    propagated = "HostToContainer"
    return k8s.PodSpec(
        service_account_name=SERVICE_ACCOUNT,
        host_network=True,
        host_pid=False,
        priority_class_name="system-node-critical",
        tolerations=device_plugin_tolerations(),
        affinity=instance_type_affinity(instance_types, dra=True),
        containers=[
            k8s.Container(
                name="dranet",
                image=image,
                image_pull_policy=PINNED_PULL_POLICY,
                args=[
                    "/dranet",
                    "--v=4",
                    "--hostname-override=$(NODE_NAME)",
                    f"--bind-address=:{HEALTH_PORT}",
                    "--cloud-provider-hint=AWS",
                    f"--filter={_FILTER}",
                ],
                env=[
                    k8s.EnvVar(
                        name="NODE_NAME",
                        value_from=k8s.EnvVarSource(
                            field_ref=k8s.ObjectFieldSelector(field_path="spec.nodeName")
                        ),
                    )
                ],
                # The chart's (values.yaml resources).
                resources=container_resources(
                    requests={"cpu": "100m", "memory": "50Mi"}, limits={"cpu": "500m", "memory": "256Mi"}
                ),
                security_context=k8s.SecurityContext(
                    privileged=False,
                    run_as_user=0,
                    run_as_group=0,
                    read_only_root_filesystem=True,
                    allow_privilege_escalation=False,
                    capabilities=k8s.Capabilities(drop=["ALL"]),
                    seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
                ),
                readiness_probe=k8s.Probe(
                    http_get=k8s.HttpGetAction(path="/healthz", port=k8s.IntOrString.from_number(HEALTH_PORT))
                ),
                volume_mounts=[
                    k8s.VolumeMount(name="device-plugin", mount_path=KUBELET_PLUGINS_DIR),
                    k8s.VolumeMount(name="plugin-registry", mount_path=KUBELET_REGISTRY_DIR),
                    k8s.VolumeMount(name="nri-plugin", mount_path="/var/run/nri"),
                    k8s.VolumeMount(name="netns", mount_path="/var/run/netns", mount_propagation=propagated),
                    k8s.VolumeMount(
                        name="infiniband", mount_path="/dev/infiniband", mount_propagation=propagated
                    ),
                    k8s.VolumeMount(name="tmp", mount_path="/tmp"),
                    k8s.VolumeMount(name="dranet-run", mount_path="/var/run/dranet"),
                ],
            )
        ],
        volumes=[
            _host_path("device-plugin", KUBELET_PLUGINS_DIR),
            _host_path("plugin-registry", KUBELET_REGISTRY_DIR),
            _host_path("nri-plugin", "/var/run/nri"),
            _host_path("netns", "/var/run/netns"),
            _host_path("infiniband", "/dev/infiniband"),
            k8s.Volume(
                name="tmp",
                empty_dir=k8s.EmptyDirVolumeSource(
                    medium="Memory", size_limit=k8s.Quantity.from_string("10Mi")
                ),
            ),
            _host_path("dranet-run", "/var/run/dranet"),
        ],
    )
