"""A model of ``cdk deploy``'s critical path: the longest chain of waits in the synthesized template.

A model written here, because nothing here deploys: CloudFormation starts a resource as soon as
every resource it references (Ref, Fn::GetAtt) or names in DependsOn is complete, so the deploy
takes the longest path through that graph, each resource weighted by how long it takes to create.
The weights are estimates per resource type (MINUTES, each with its reason); the model's use is to
compare graphs of the same template, not to promise a wall-clock time.

The floor is the same template with every Kubernetes-layer step waiting only for what it uses
(USES below, by cluster_facts.step_needs): the path no ordering change can shorten.
tests/operator_tools/test_deploy_path.py keeps the template's path within 1.05 of its floor and fails on a step
that waits for an add-on it does not use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from cluster_facts.step_needs import FILE_SYSTEM, RUNNING_PODS

__all__ = [
    "MINUTES",
    "USES",
    "Path",
    "dependencies",
    "longest_path",
    "resource_minutes",
    "unused_waits",
    "without_unused_waits",
]

# Minutes to create, by resource type (and for add-ons and node groups, by what they are).
# Estimates from the AWS documentation's wording and common experience; the canary or a real
# deploy's CloudFormation events replace them.
MINUTES: dict[str, tuple[float, str]] = {
    "AWS::EKS::Cluster": (10, "EKS control plane: 'several minutes', about 10 in practice"),
    "AWS::FSx::FileSystem": (15, "FSx for Lustre creation: about 15 minutes for the configured sizes"),
    "AWS::EC2::NatGateway": (2, "a NAT gateway becomes available in a few minutes"),
    "nodegroup-with-nodes": (
        4,
        "a managed node group is ACTIVE once its desired nodes have launched and joined",
    ),
    "nodegroup-empty": (
        2,
        "a managed node group of 0 nodes: its launch template and Auto Scaling group only",
    ),
    "addon": (1, "an add-on is ACTIVE once its pods run (vpc-cni, kube-proxy, eks-pod-identity-agent)"),
    "addon-deployment": (
        2,
        "an add-on that runs a Deployment on the system nodes (coredns, the FSx CSI driver)",
    ),
    "amazon-cloudwatch-observability": (
        4,
        "the CloudWatch agent, Fluent Bit and the operator with its webhook",
    ),
    "eks-node-monitoring-agent": (2, "a DaemonSet on every node"),
    "Custom::AWSCDK-EKS-HelmChart": (3, "helm upgrade --install with --wait from the kubectl handler"),
    "Custom::AWSCDK-EKS-KubernetesResource": (0.5, "one kubectl apply from the kubectl handler"),
    "Custom::AWSCDK-EKS-KubernetesObjectValue": (1, "kubectl get every 10 s until the state appears"),
    "AWS::Lambda::Function": (0.5, "a function in the VPC: its network interfaces"),
    "AWS::Lambda::LayerVersion": (0.5, "a layer of tens of MB copied from the assets bucket"),
    "AWS::KMS::Key": (0.5, "a key with its policy"),
    "AWS::IAM::Role": (0.3, "a role (IAM is eventually consistent)"),
    "AWS::CloudFormation::Stack": (2, "a nested stack: the kubectl provider's functions"),
    "custom": (0.5, "a custom resource: one Lambda invocation"),
    "other": (0.1, "configuration resources (subnets, routes, rules, policies, tags, outputs)"),
}

# What each add-on (and the system node group) is used for by a step of the Kubernetes layer: a
# step may wait for it only when it has that need (cluster_facts.step_needs), for that reason.
USES: dict[str, tuple[str, str]] = {
    "system-nodes": (RUNNING_PODS, "pods that must run at deploy time run on the system nodes"),
    "vpc-cni": (RUNNING_PODS, "a pod gets its address and network from the VPC CNI"),
    "kube-proxy": (RUNNING_PODS, "a pod reaches the API server and Services through kube-proxy's rules"),
    "coredns": (RUNNING_PODS, "a pod resolves Service and AWS endpoint names through CoreDNS"),
    "aws-fsx-csi-driver": (FILE_SYSTEM, "a pod mounts the file system through the FSx CSI driver"),
}
"""amazon-cloudwatch-observability and eks-node-monitoring-agent are used by no step; the
eks-pod-identity-agent only by the steps that are given it by name (the autoscaler's release)."""


def _addon_minutes(name: str) -> float:
    if name in MINUTES:
        return MINUTES[name][0]
    if name in ("coredns", "aws-fsx-csi-driver"):
        return MINUTES["addon-deployment"][0]
    return MINUTES["addon"][0]


def resource_minutes(resource: Mapping[str, Any]) -> float:
    kind = resource["Type"]
    properties = resource.get("Properties", {})
    if kind == "AWS::EKS::Addon":
        return _addon_minutes(properties["AddonName"])
    if kind == "AWS::EKS::Nodegroup":
        scaling = properties.get("ScalingConfig", {})
        # A Trainium group's DesiredSize is read at deploy time (a GetAtt): a new group starts at
        # least with MinSize nodes; nothing waits for a Trainium node anyway.
        desired = scaling.get("DesiredSize")
        has_nodes = int(desired if isinstance(desired, int) else scaling.get("MinSize", 0) or 0) > 0
        return MINUTES["nodegroup-with-nodes" if has_nodes else "nodegroup-empty"][0]
    if kind in MINUTES:
        return MINUTES[kind][0]
    if kind.startswith("Custom::") or kind == "AWS::CloudFormation::CustomResource":
        return MINUTES["custom"][0]
    return MINUTES["other"][0]


def _references(node: Any, names: Mapping[str, Any]) -> set[str]:
    """The resources ``node`` names through Ref, Fn::GetAtt and Fn::Sub's ${Name} and ${Name.Attr}."""
    found: set[str] = set()
    if isinstance(node, dict):
        if isinstance(node.get("Ref"), str) and node["Ref"] in names:
            found.add(node["Ref"])
        if "Fn::GetAtt" in node:
            target = node["Fn::GetAtt"]
            found.add(target[0] if isinstance(target, list) else str(target).split(".")[0])
        if "Fn::Sub" in node:
            text = str(node["Fn::Sub"][0] if isinstance(node["Fn::Sub"], list) else node["Fn::Sub"])
            found.update(name for name in names if "${" + name + "}" in text or "${" + name + "." in text)
        for value in node.values():
            found |= _references(value, names)
    elif isinstance(node, list):
        for value in node:
            found |= _references(value, names)
    return found


def dependencies(template: Mapping[str, Any]) -> dict[str, set[str]]:
    """Each resource's direct waits: DependsOn, Ref, Fn::GetAtt and Fn::Sub references."""
    resources = template["Resources"]
    graph: dict[str, set[str]] = {}
    for logical_id, resource in resources.items():
        found = set(resource.get("DependsOn", [])) | _references(resource.get("Properties", {}), resources)
        found.discard(logical_id)
        graph[logical_id] = found & set(resources)
    return graph


@dataclass(frozen=True)
class Path:
    minutes: float
    resources: tuple[str, ...]
    """The chain, first created first."""


def longest_path(template: Mapping[str, Any], graph: Mapping[str, Iterable[str]]) -> Path:
    resources = template["Resources"]

    @cache
    def finish(logical_id: str) -> tuple[float, tuple[str, ...]]:
        before = max(
            (finish(dependency) for dependency in graph[logical_id]),
            default=(0.0, ()),
            key=lambda item: item[0],
        )
        return before[0] + resource_minutes(resources[logical_id]), (*before[1], logical_id)

    minutes, chain = max((finish(logical_id) for logical_id in graph), key=lambda item: item[0])
    return Path(round(minutes, 2), chain)


@dataclass(frozen=True)
class Step:
    """A step of the Kubernetes layer as the template holds it."""

    name: str
    needs: frozenset[str]
    also_uses: frozenset[str] = frozenset()
    """Logical ids this step alone may wait for (given by name, as the autoscaler's Pod Identity)."""


def _used_for(template: Mapping[str, Any], system_nodes: str) -> dict[str, str]:
    """Logical id -> USES key, for the add-ons and the system node group."""
    keys = {system_nodes: "system-nodes"}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::EKS::Addon":
            keys[logical_id] = resource["Properties"]["AddonName"]
    return keys


def unused_waits(
    template: Mapping[str, Any],
    graph: Mapping[str, Iterable[str]],
    steps: Mapping[str, Step],
    *,
    system_nodes: str,
) -> list[str]:
    """One line per direct wait of a step (by logical id) for an add-on or the system nodes that
    the step does not use."""
    kinds = _used_for(template, system_nodes)
    problems = []
    for logical_id, step in steps.items():
        for dependency in sorted(graph[logical_id]):
            if dependency not in kinds or dependency in step.also_uses:
                continue
            need, _ = USES.get(kinds[dependency], ("", ""))
            if need not in step.needs:
                why = f"it has no need {need!r}" if need else "no step uses it"
                problems.append(f"{step.name} waits for {kinds[dependency]} ({dependency}): {why}")
    return problems


def without_unused_waits(
    template: Mapping[str, Any],
    graph: Mapping[str, Iterable[str]],
    steps: Mapping[str, Step],
    *,
    system_nodes: str,
) -> dict[str, set[str]]:
    """The graph with every step's unused waits removed: the floor's graph."""
    kinds = _used_for(template, system_nodes)
    floor = {logical_id: set(waits) for logical_id, waits in graph.items()}
    for logical_id, step in steps.items():
        for dependency in list(floor[logical_id]):
            if dependency in kinds and dependency not in step.also_uses:
                need, _ = USES.get(kinds[dependency], ("", ""))
                if need not in step.needs:
                    floor[logical_id].discard(dependency)
    return floor
