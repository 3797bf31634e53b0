"""The real nodes' cluster DNS: CoreDNS as EKS's ``coredns`` add-on runs it, a pod in kube-system
behind the ``kube-dns`` Service, on a real node (tests/cluster/real_nodes.py).

The stack does not render CoreDNS: EKS installs it (cluster_facts/versions.py ``COREDNS``, an add-on
of the cluster). These are that add-on's objects as it creates them (the ``coredns`` ServiceAccount,
the ``system:coredns`` ClusterRole and binding, the ``coredns`` ConfigMap with the Corefile, the
Deployment whose pods carry ``k8s-app: kube-dns``, the ``kube-dns`` Service at the service range's
tenth address), with these differences:

- the image is the stand-in of tests/cluster/standin_images.py (``coredns_image``: CoreDNS built at
  tools/cluster-binaries/coredns's pin), not Amazon's build;
- one replica (EKS runs two) on the real system node named by the caller, by its hostname label;
- the Corefile has no ``forward`` (and so no ``loop``, which guards forwarding): the node network
  has no way out of this machine, so a name outside ``cluster.local`` has no upstream to ask and
  gets SERVFAIL; EKS's forwards to the VPC's resolver through the node's /etc/resolv.conf.

Why a pod and not a process on the node network: the team namespaces' policies admit DNS only to
kube-system's pods with the kube-dns labels (k8s_charts/network/tenant_network.py,
``dns_egress_rule``), which kube-router, the real nodes' enforcer, judges after kube-proxy
translated the Service address to the pod's. A resolver at another address would be refused, as it
would be on EKS. The kubelets send pods to it through ``clusterDNS`` (real_nodes.CLUSTER_DNS).
"""

from __future__ import annotations

import json
from typing import Any

from cluster_facts.kubernetes_names import KUBE_DNS_LABELS
from tests.cluster.real_nodes import CLUSTER_DNS, RealNode, RealNodes
from tests.cluster.standin_images import coredns_image
from tools.cluster_binaries import COMPONENTS, required_version

__all__ = ["COREDNS_IMAGE", "CoreDNS", "start_cluster_dns"]

NAMESPACE = "kube-system"
COREDNS_IMAGE = (
    f"registry.k8s.io/coredns/coredns:{required_version(COMPONENTS['coredns'], 'github.com/coredns/coredns')}"
)
"""The name the stand-in is imported under: upstream's, at the version built."""
COREFILE = """\
.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    prometheus :9153
    cache 30
    reload
    loadbalance
}
"""
"""EKS's Corefile without ``forward . /etc/resolv.conf`` and ``loop`` (the module's docstring)."""


class CoreDNS:
    """The add-on's objects, applied; ``address`` is the kube-dns Service's ClusterIP."""

    address = CLUSTER_DNS

    def __init__(self, nodes: RealNodes, node: RealNode) -> None:
        self.nodes = nodes
        self.node = node

    def objects(self) -> list[dict[str, Any]]:
        labels = dict(KUBE_DNS_LABELS)
        read = ["list", "watch"]
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns", "labels": {"eks.amazonaws.com/component": "coredns"}},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": read,
                },
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
            ],
        }
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": NAMESPACE}],
        }
        account = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "coredns", "namespace": NAMESPACE},
        }
        config = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns", "namespace": NAMESPACE},
            "data": {"Corefile": COREFILE},
        }
        dns_ports = [
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 9153, "protocol": "TCP"},
        ]
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "coredns", "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "priorityClassName": "system-cluster-critical",
                        "dnsPolicy": "Default",
                        "nodeSelector": {"kubernetes.io/hostname": self.node.name},
                        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                        "containers": [
                            {
                                "name": "coredns",
                                "image": COREDNS_IMAGE,
                                "imagePullPolicy": "IfNotPresent",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": dns_ports,
                                "resources": {
                                    "requests": {"cpu": "100m", "memory": "70Mi"},
                                    "limits": {"memory": "170Mi"},
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                                    "readOnlyRootFilesystem": True,
                                },
                                "livenessProbe": {
                                    "httpGet": {"path": "/health", "port": 8080},
                                    "initialDelaySeconds": 60,
                                    "timeoutSeconds": 5,
                                    "failureThreshold": 5,
                                },
                                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}},
                                "volumeMounts": [
                                    {"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}
                                ],
                            }
                        ],
                        "volumes": [
                            {
                                "name": "config-volume",
                                "configMap": {
                                    "name": "coredns",
                                    "items": [{"key": "Corefile", "path": "Corefile"}],
                                },
                            }
                        ],
                    },
                },
            },
        }
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "kube-dns",
                "namespace": NAMESPACE,
                "labels": {**labels, "kubernetes.io/name": "CoreDNS"},
            },
            "spec": {
                "selector": labels,
                "clusterIP": CLUSTER_DNS,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                    {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
                ],
            },
        }
        return [account, role, binding, config, deployment, service]

    def start(self) -> dict[str, Any]:
        """Import the image, apply the objects, wait for the pod Ready; the pod."""
        plane = self.nodes.plane
        self.nodes.import_images(self.node, [coredns_image(COREDNS_IMAGE)])
        plane.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": self.objects()}),
        )
        selector = ",".join(f"{k}={v}" for k, v in KUBE_DNS_LABELS.items())

        def ready() -> dict[str, Any] | None:
            for pod in plane.kubectl.json("get", "pods", "-n", NAMESPACE, "-l", selector)["items"]:
                conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
                if conditions.get("Ready") == "True" and "deletionTimestamp" not in pod["metadata"]:
                    return dict(pod)
            return None

        found: dict[str, Any] = plane.wait_for(ready, timeout=120, what="CoreDNS's pod Ready")
        return found

    def stop(self) -> None:
        plane = self.nodes.plane
        for kind, name in (("deployment", "coredns"), ("service", "kube-dns"), ("configmap", "coredns")):
            plane.kubectl("delete", kind, "-n", NAMESPACE, name, "--wait=false", check=False)


def start_cluster_dns(nodes: RealNodes, node: RealNode) -> CoreDNS:
    dns = CoreDNS(nodes, node)
    dns.start()
    return dns
