"""NetworkPolicies that keep a team's pods to what a run needs, and the platform's pods to theirs.

Every namespace the stack creates for workloads denies all ingress and egress by default
(``default-deny``: every pod selected for both directions, no rule). What a run needs is added back:

- **DNS**: CoreDNS in kube-system (UDP and TCP 53). The rule's pod selector is exactly the kube-dns
  Service's selector: the VPC CNI's network policy controller adds a Service's ClusterIP to an
  egress rule only when the rule selects the Service's pods with the Service's own selector
  (aws/amazon-network-policy-controller-k8s#222, otterize/intents-operator#488), and pods resolve
  names through the ClusterIP.
- **The team's etcd**: the etcd pods of the namespace on 2379/TCP, again with the Service's selector.
- **Peers of the same job**: egress to pods of any Volcano job of the namespace, any port (torchrun's
  store and the collectives' bootstrap use ports chosen at run time); the *receiving* pod admits only
  pods of its own job: Volcano's svc plugin creates, for every Job that uses it (the stack's runs
  and TorchX's), a NetworkPolicy named after the job that selects the job's pods and admits
  ingress from the same job's pods only (volcano v1.15.1 pkg/controllers/job/plugins/svc/svc.go,
  ``createNetworkPolicyIfNotExist``; off only with ``--disable-network-policy``). A connection
  needs both, so a worker reaches exactly its own job's workers.
- **HTTPS outside the cluster** (``outside_cluster``): 443/TCP to every IPv4 address but the private,
  shared (100.64.0.0/10) and link-local ranges and the VPC. That refuses the instance metadata
  service (169.254.169.254), the Pod Identity agent (169.254.170.23), every node, pod, Service
  ClusterIP and the API server's private endpoint, whatever the cluster's pod and service ranges
  are (EKS picks the service range from 10.100.0.0/16 and 172.20.0.0/16). A run's pip installs
  and downloads go out through the NAT gateway. No IPv6 rule: the cluster is IPv4, and IPv6 egress
  (IMDS's fd00:ec2::254 included) stays denied.

Not pod traffic, so not here: the Lustre client is the node's kernel (the FSx CSI node plugin
mounts the file system on the host, and pods read it through that mount), image pulls are the
kubelet's and containerd's, and EFA traffic bypasses the kernel's IP stack. Kubelet probes and
``kubectl port-forward`` come from the node, which the VPC CNI's agent always admits.

Enforced where network policy is on: on EKS, the VPC CNI's ``enableNetworkPolicy`` (the stack sets it).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.kubernetes_names import (
    ETCD_CLIENT_PORT,
    ETCD_LABELS,
    KUBE_DNS_LABELS,
    VOLCANO_JOB_NAME_LABEL,
)

__all__ = [
    "API_SERVER_SERVICE_IPS",
    "DEFAULT_DENY",
    "JOB_PODS_POLICY",
    "NOT_OUTSIDE",
    "NamespaceIsolationChart",
    "TeamNetworkChart",
    "api_server_egress_rules",
    "dns_egress_rule",
    "https_egress",
    "https_egress_rule",
    "outside_cluster",
    "tcp_port",
]

DEFAULT_DENY = "default-deny"
JOB_PODS_POLICY = "volcano-job-pods"
NOT_OUTSIDE: tuple[str, ...] = (
    "10.0.0.0/8",
    "100.64.0.0/10",  # shared address space: the VPC CNI's custom networking often uses it
    "169.254.0.0/16",  # link-local: instance metadata, Pod Identity agent, time sync, DNS resolver
    "172.16.0.0/12",
    "192.168.0.0/16",
)
"""IPv4 ranges that are never "outside the cluster" for a pod's egress."""
_HTTPS = 443
API_SERVER_SERVICE_IPS: tuple[str, ...] = ("10.100.0.1", "172.20.0.1")
"""The ``kubernetes`` Service's ClusterIP: the first address of the service range, which EKS takes
from 10.100.0.0/16 or 172.20.0.0/16 when the cluster names none (the stack names none)."""
_DNS_PORT = 53
_KUBE_SYSTEM = "kube-system"


def outside_cluster(vpc_cidr: str) -> k8s.IpBlock:
    """Every IPv4 address but ``NOT_OUTSIDE`` and the VPC (when the VPC is not inside them)."""
    vpc = ipaddress.IPv4Network(vpc_cidr)
    excluded = [ipaddress.IPv4Network(cidr) for cidr in NOT_OUTSIDE]
    if not any(vpc.subnet_of(block) for block in excluded):
        excluded.append(vpc)
    return k8s.IpBlock(cidr="0.0.0.0/0", except_=[str(block) for block in sorted(excluded)])


def tcp_port(port: int) -> k8s.NetworkPolicyPort:
    return k8s.NetworkPolicyPort(protocol="TCP", port=k8s.IntOrString.from_number(port))


def dns_egress_rule() -> k8s.NetworkPolicyEgressRule:
    return k8s.NetworkPolicyEgressRule(
        to=[
            k8s.NetworkPolicyPeer(
                namespace_selector=k8s.LabelSelector(
                    match_labels={"kubernetes.io/metadata.name": _KUBE_SYSTEM}
                ),
                pod_selector=k8s.LabelSelector(match_labels=dict(KUBE_DNS_LABELS)),
            )
        ],
        ports=[
            k8s.NetworkPolicyPort(protocol=protocol, port=k8s.IntOrString.from_number(_DNS_PORT))
            for protocol in ("UDP", "TCP")
        ],
    )


def https_egress_rule(vpc_cidr: str) -> k8s.NetworkPolicyEgressRule:
    """HTTPS (443/TCP) to every address outside the cluster (``outside_cluster``)."""
    return k8s.NetworkPolicyEgressRule(
        to=[k8s.NetworkPolicyPeer(ip_block=outside_cluster(vpc_cidr))], ports=[tcp_port(_HTTPS)]
    )


def _job_pods() -> k8s.LabelSelector:
    return k8s.LabelSelector(
        match_expressions=[k8s.LabelSelectorRequirement(key=VOLCANO_JOB_NAME_LABEL, operator="Exists")]
    )


def _default_deny(scope: Construct, namespace: str) -> None:
    k8s.KubeNetworkPolicy(
        scope,
        "DefaultDeny",
        metadata=k8s.ObjectMeta(name=DEFAULT_DENY, namespace=namespace),
        spec=k8s.NetworkPolicySpec(pod_selector=k8s.LabelSelector(), policy_types=["Ingress", "Egress"]),
    )


class NamespaceIsolationChart(cdk8s.Chart):
    """``default-deny`` in ``namespace``: what its pods need comes from the policies of their charts."""

    def __init__(self, scope: Construct, id: str, *, namespace: str) -> None:
        super().__init__(scope, id)
        _default_deny(self, namespace)


class TeamNetworkChart(cdk8s.Chart):
    """A team's namespace: ``default-deny``, and what every pod of a Volcano job may reach."""

    def __init__(self, scope: Construct, id: str, *, namespace: str, vpc_cidr: str) -> None:
        super().__init__(scope, id)
        _default_deny(self, namespace)
        k8s.KubeNetworkPolicy(
            self,
            "JobPods",
            metadata=k8s.ObjectMeta(name=JOB_PODS_POLICY, namespace=namespace),
            spec=k8s.NetworkPolicySpec(
                # Pods of Volcano jobs: in a team's namespace only Volcano's controller may create a
                # pod with this label (k8s_charts/teams/job_pod_admission.py).
                pod_selector=_job_pods(),
                policy_types=["Egress"],
                egress=[
                    dns_egress_rule(),
                    # The team's own etcd (no namespace selector: this namespace only).
                    k8s.NetworkPolicyEgressRule(
                        to=[k8s.NetworkPolicyPeer(pod_selector=k8s.LabelSelector(match_labels=ETCD_LABELS))],
                        ports=[tcp_port(ETCD_CLIENT_PORT)],
                    ),
                    # Workers of this namespace's jobs, any port; each admits only its own job's.
                    k8s.NetworkPolicyEgressRule(to=[k8s.NetworkPolicyPeer(pod_selector=_job_pods())]),
                    https_egress_rule(vpc_cidr),
                ],
            ),
        )


def https_egress(
    scope: Construct, *, name: str, namespace: str, pod_labels: Mapping[str, str], vpc_cidr: str
) -> k8s.KubeNetworkPolicy:
    """Pods with ``pod_labels`` may resolve names and open HTTPS connections outside the cluster."""
    return k8s.KubeNetworkPolicy(
        scope,
        "HttpsEgress",
        metadata=k8s.ObjectMeta(name=name, namespace=namespace, labels=dict(pod_labels)),
        spec=k8s.NetworkPolicySpec(
            pod_selector=k8s.LabelSelector(match_labels=dict(pod_labels)),
            policy_types=["Egress"],
            egress=[dns_egress_rule(), https_egress_rule(vpc_cidr)],
        ),
    )


def api_server_egress_rules(vpc_cidr: str) -> list[k8s.NetworkPolicyEgressRule]:
    """HTTPS to the API server: its in-cluster address and its endpoints.

    A pod reaches the API server at the ``kubernetes`` Service's ClusterIP (KUBERNETES_SERVICE_HOST).
    The VPC CNI's policy agent judges a pod's egress before the Service address is translated (its
    probes sit on the pod's interface; amazon-network-policy-controller-k8s, resolvers/endpoints.go,
    ``getMatchingServiceClusterIPs``), and it adds a ClusterIP to a rule only for a Service with a
    selector, which ``kubernetes`` has not: so the ClusterIP itself is allowed, on 443 only. The
    endpoints (the control plane's interfaces in the VPC, 443) are allowed too, for evaluators that
    judge the translated address and for clients that dial the private endpoint by name.
    """
    return [
        k8s.NetworkPolicyEgressRule(
            to=[
                k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=f"{ip}/32")) for ip in API_SERVER_SERVICE_IPS
            ],
            ports=[tcp_port(_HTTPS)],
        ),
        k8s.NetworkPolicyEgressRule(
            to=[k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=vpc_cidr))], ports=[tcp_port(_HTTPS)]
        ),
    ]
