"""NetworkPolicies for the platform's own pods outside the team and platform namespaces.

``volcano-system`` denies everything by default (``default-deny``, as every namespace the stack
creates for workloads), and each of Volcano's pods (the vendored chart, charts/volcano-1.15.1) gets
back what it needs:

- the admission webhook (``volcano-admission``): ingress on its port (8443, the chart's
  ``basic.admission_port``; its Service maps 443 to it) from the VPC, where the EKS control plane's
  network interfaces sit: the API server calls a webhook from those interfaces, in the cluster's
  subnets and under the cluster security group (EKS User Guide, "View Amazon EKS security group
  requirements for clusters"). They share the private subnets with the nodes and their pods, so no
  address range admits the control plane and no pod; the webhook only answers AdmissionReviews.
  Egress: DNS and the API server (it patches its webhook configurations and reads Queues and Jobs).
- the controllers and the scheduler: DNS and the API server only; no ingress (their metrics ports,
  8081 and 8080, are scraped by nothing in this stack).
- the chart's ``volcano-admission-init`` Job (a pre-install and pre-upgrade hook that writes the
  webhook's certificate Secret through the API server): DNS and the API server. Its pod template
  has no labels; the Job controller labels the pod ``batch.kubernetes.io/job-name``.

``kube-system`` belongs to EKS's add-ons (CoreDNS, the VPC CNI, kube-proxy, the Pod Identity agent,
the FSx CSI driver, the node monitoring agent), whose pods EKS manages: no default-deny there, which
would select them too. The platform's own pods there get a policy each that selects only them, for
both directions, with what each needs:

- the cluster autoscaler (``AutoscalerNetworkChart``): DNS, the API server, HTTPS outside the
  cluster (the regional Auto Scaling, EC2 and EKS endpoints, reached through the NAT gateway: the
  VPC has no interface endpoints) and the Pod Identity agent (``pod_identity_egress_rule``); no
  ingress (its metrics port 8085 is scraped by nothing).
- the node check and the Neuron device plugin: their own charts (k8s_charts/checks/node_check.py,
  k8s_charts/devices/neuron_device_plugin.py) hold their policies.
- the EFA device plugin runs on the host network: NetworkPolicies do not apply to it.

Enforced by the VPC CNI's network policy agent in ``standard`` mode (docs/security-policies.md says
why not ``strict``). The rules are checked with tests/netpol.py, a model of NetworkPolicy
semantics, over the whole plan (tests/k8s_charts/network/test_system_netpol.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.autoscaling import AUTOSCALER_NAME, AUTOSCALER_NAMESPACE
from cluster_facts.vendored_charts import CLUSTER_AUTOSCALER_CHART
from k8s_charts.network.tenant_network import (
    NamespaceIsolationChart,
    api_server_egress_rules,
    dns_egress_rule,
    https_egress_rule,
    tcp_port,
)

__all__ = [
    "AUTOSCALER_POD_LABELS",
    "POD_IDENTITY_AGENT",
    "VOLCANO_ADMISSION_INIT_LABELS",
    "VOLCANO_ADMISSION_LABELS",
    "VOLCANO_CONTROLLER_LABELS",
    "VOLCANO_SCHEDULER_LABELS",
    "VOLCANO_WEBHOOK_PORT",
    "AutoscalerNetworkChart",
    "VolcanoNetworkChart",
    "pod_identity_egress_rule",
    "system_pod_policy",
]

# The pod labels of the vendored Volcano chart's Deployments (charts/volcano-1.15.1/templates/
# admission.yaml, controllers.yaml, scheduler.yaml: ``app: ...`` in each pod template), and the label
# the Job controller gives the pod of the chart's admission-init hook Job (admission-init.yaml).
VOLCANO_ADMISSION_LABELS: Mapping[str, str] = {"app": "volcano-admission"}
VOLCANO_CONTROLLER_LABELS: Mapping[str, str] = {"app": "volcano-controller"}
VOLCANO_SCHEDULER_LABELS: Mapping[str, str] = {"app": "volcano-scheduler"}
VOLCANO_ADMISSION_INIT_LABELS: Mapping[str, str] = {"batch.kubernetes.io/job-name": "volcano-admission-init"}
VOLCANO_WEBHOOK_PORT = 8443
"""The webhook manager's port (the chart's ``basic.admission_port``, its Service's targetPort)."""

# The vendored cluster-autoscaler chart labels its pod with its "instance-name" helper
# (charts/cluster-autoscaler-9.59.0/templates/_helpers.tpl, lines 5-7 and 36-39): the release's name
# and "<cloudProvider>-<chart name>" (the values set cloudProvider "aws", no nameOverride).
AUTOSCALER_POD_LABELS: Mapping[str, str] = {
    "app.kubernetes.io/instance": AUTOSCALER_NAME,
    "app.kubernetes.io/name": f"aws-{CLUSTER_AUTOSCALER_CHART.name}",
}

POD_IDENTITY_AGENT = "169.254.170.23"
"""Where a pod gets its EKS Pod Identity credentials: the agent listens on this link-local address,
port 80, on every node (EKS User Guide, "Learn how EKS Pod Identity grants pods access to AWS
services": hostNetwork, ports 80 and 2703, 169.254.170.23)."""
_POD_IDENTITY_PORT = 80


def pod_identity_egress_rule() -> k8s.NetworkPolicyEgressRule:
    """HTTP to the Pod Identity agent on the pod's node, for a pod whose AWS role comes from it."""
    return k8s.NetworkPolicyEgressRule(
        to=[k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=f"{POD_IDENTITY_AGENT}/32"))],
        ports=[tcp_port(_POD_IDENTITY_PORT)],
    )


def system_pod_policy(
    scope: Construct,
    id: str,
    *,
    name: str,
    namespace: str,
    pod_labels: Mapping[str, str],
    egress: Sequence[k8s.NetworkPolicyEgressRule],
    ingress: Sequence[k8s.NetworkPolicyIngressRule] = (),
) -> k8s.KubeNetworkPolicy:
    """A policy that selects exactly ``pod_labels`` for both directions: what ``egress`` and
    ``ingress`` list is all the pods may do (nothing, where a list is empty)."""
    return k8s.KubeNetworkPolicy(
        scope,
        id,
        metadata=k8s.ObjectMeta(name=name, namespace=namespace),
        spec=k8s.NetworkPolicySpec(
            pod_selector=k8s.LabelSelector(match_labels=dict(pod_labels)),
            policy_types=["Ingress", "Egress"],
            ingress=list(ingress) or None,
            egress=list(egress) or None,
        ),
    )


class VolcanoNetworkChart(NamespaceIsolationChart):
    """``default-deny`` in Volcano's namespace, and a policy for each of its pods."""

    def __init__(self, scope: Construct, id: str, *, namespace: str, vpc_cidr: str) -> None:
        super().__init__(scope, id, namespace=namespace)
        to_api = [dns_egress_rule(), *api_server_egress_rules(vpc_cidr)]
        system_pod_policy(
            self,
            "Admission",
            name="volcano-admission",
            namespace=namespace,
            pod_labels=VOLCANO_ADMISSION_LABELS,
            ingress=[
                k8s.NetworkPolicyIngressRule(
                    from_=[k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=vpc_cidr))],
                    ports=[tcp_port(VOLCANO_WEBHOOK_PORT)],
                )
            ],
            egress=to_api,
        )
        for construct_id, name, labels in (
            ("Controllers", "volcano-controllers", VOLCANO_CONTROLLER_LABELS),
            ("Scheduler", "volcano-scheduler", VOLCANO_SCHEDULER_LABELS),
            ("AdmissionInit", "volcano-admission-init", VOLCANO_ADMISSION_INIT_LABELS),
        ):
            system_pod_policy(
                self, construct_id, name=name, namespace=namespace, pod_labels=labels, egress=to_api
            )


class AutoscalerNetworkChart(cdk8s.Chart):
    """The cluster autoscaler's policy in kube-system (its Helm release creates the pod)."""

    def __init__(self, scope: Construct, id: str, *, vpc_cidr: str) -> None:
        super().__init__(scope, id)
        system_pod_policy(
            self,
            "Autoscaler",
            name=AUTOSCALER_NAME,
            namespace=AUTOSCALER_NAMESPACE,
            pod_labels=AUTOSCALER_POD_LABELS,
            egress=[
                dns_egress_rule(),
                *api_server_egress_rules(vpc_cidr),
                https_egress_rule(vpc_cidr),
                pod_identity_egress_rule(),
            ],
        )
