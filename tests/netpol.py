"""Kubernetes NetworkPolicy semantics, evaluated on rendered objects: may this pod open that connection?

A model written here. A real enforcer now decides the central questions: kube-router's network
policy controller on the real nodes of tests/cluster (tests/cluster/real_nodes.py), asked by
tests/cluster/test_network_policy.py with real containers and the plan's own policies:

- a team's pod cannot open a connection to another team's etcd, and an etcd admits only its own
  namespace's job pods (``test_a_team_pod_cannot_open_a_connection_to_another_teams_etcd``);
- default deny in a team namespace, a worker admitting no other job's pod, HTTPS out on 443 only
  (``test_a_team_namespace_denies_by_default``);
- TensorBoard reached only from the VPC on its port, with no egress
  (``test_tensorboard_is_reached_only_through_the_api_servers_proxy_and_reaches_nothing``);
- the watchdog's way to the API server, etcd's peers, and the instance metadata address refused
  (``test_the_platforms_egress_reaches_what_it_needs_and_never_the_metadata_service``).

What stays here, and why: EKS's enforcer is the VPC CNI's policy agent, not kube-router, and they
differ where the platform's policies are written for it (the agent judges a Service's ClusterIP
before translation, kube-router the translated endpoint; tenant_network.py writes a rule for each):
this model is the reading of the VPC CNI's semantics, checked over the example configuration's whole
plan (two teams, every platform pod) in the fast tier. It also judges what does not run on the real
nodes: CoreDNS (no cluster DNS there), Volcano's, the autoscaler's, the node check's, the device
plugin's, the fabric check's and the staging Jobs' pods (tests/k8s_charts/network/).

``Cluster(objects, pods)`` reads the NetworkPolicy and Namespace objects among ``objects`` (others
are ignored) and answers, for a new connection:

- ``may_connect(source, destination, port, protocol)``: pod to pod; both the source's egress and
  the destination's ingress must allow it;
- ``may_connect_to_ip(source, ip, port, protocol)``: pod to an address (a known pod's address is
  treated as that pod; any other is outside the cluster, where no ingress policy applies);
- ``may_be_reached_from_ip(ip, destination, port, protocol)``: an outside address to a pod.

Semantics (networking.k8s.io/v1, https://kubernetes.io/docs/concepts/services-networking/network-policies/):

- A policy selects pods of its own namespace with ``spec.podSelector``; ``{}`` selects them all.
- ``policyTypes`` defaults to ``["Ingress"]``, plus ``"Egress"`` when ``spec.egress`` has at least
  one rule (``egress: []`` does not count), as the API server's defaulting does
  (pkg/apis/networking/v1/defaults.go).
- A pod that no policy of a type selects is unrestricted in that direction. A selected pod admits
  exactly the union of the rules of every policy that selects it: policies only ever add.
  A selected pod with no rule of that type admits nothing (``egress`` absent with
  ``policyTypes: [Egress]`` denies all egress).
- In a rule, ``from``/``to`` missing or empty means every peer (pods and outside addresses alike);
  ``ports`` missing or empty means every port of every protocol. A rule ``{}`` allows everything.
- A peer is exactly one of: ``podSelector`` (pods of the policy's namespace), ``namespaceSelector``
  (every pod of the matching namespaces), both (the AND: matching pods in matching namespaces),
  or ``ipBlock`` (``cidr`` minus ``except``; it may not be combined with a selector). The API
  server rejects a peer ``{}`` ("must specify a peer"), so ``from: [{}]`` never reaches a cluster:
  "everyone" is written by leaving ``from`` out; ``[{podSelector: {}}]`` is every pod of the
  policy's namespace, ``[{namespaceSelector: {}}]`` every pod of the cluster (neither admits an
  outside address). This evaluator refuses such a peer as the API server does.
- A port is a ``protocol`` (default TCP) and, optionally, a number with an optional ``endPort``
  (a range); no number means every port of that protocol.
- Every namespace carries ``kubernetes.io/metadata.name: <name>`` (set by the API server), in
  addition to the labels of its Namespace object, if one is given.

Out of scope, refused or stated here rather than guessed: named ports (``port: "http"``: refused);
whether ``ipBlock`` matches pod addresses (the documentation leaves it to the implementation;
``ip_block_matches_pods`` chooses, default yes); traffic of host-network pods and of the node
itself (implementations admit the node's own traffic, e.g. kubelet probes); Services (evaluate
against the pod behind the Service, with the target port); replies of an admitted connection,
which implementations allow statefully.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NAMESPACE_NAME_LABEL", "Cluster", "NetworkPolicyError", "Pod"]

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
_PROTOCOLS = frozenset({"TCP", "UDP", "SCTP"})
_TYPES = ("Ingress", "Egress")

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class NetworkPolicyError(ValueError):
    """A NetworkPolicy the API server would refuse, or one this evaluator does not model."""


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: Mapping[str, str]
    ip: str
    name: str = ""

    def __post_init__(self) -> None:
        ipaddress.ip_address(self.ip)  # refuse a malformed address early


@dataclass(frozen=True)
class _Selector:
    """A metav1.LabelSelector; the empty selector matches everything."""

    match_labels: Mapping[str, str]
    expressions: tuple[tuple[str, str, frozenset[str]], ...]

    @staticmethod
    def parse(raw: Mapping[str, Any] | None, where: str) -> _Selector:
        raw = raw or {}
        expressions = []
        for expression in raw.get("matchExpressions") or []:
            operator = expression["operator"]
            values = frozenset(expression.get("values") or [])
            if operator in ("In", "NotIn") and not values:
                raise NetworkPolicyError(f"{where}: {operator} needs at least one value")
            if operator in ("Exists", "DoesNotExist") and values:
                raise NetworkPolicyError(f"{where}: {operator} takes no values")
            if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
                raise NetworkPolicyError(f"{where}: unknown operator {operator!r}")
            expressions.append((expression["key"], operator, values))
        return _Selector(dict(raw.get("matchLabels") or {}), tuple(expressions))

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(key) != value for key, value in self.match_labels.items()):
            return False
        for key, operator, values in self.expressions:
            present = key in labels
            if operator == "In" and not (present and labels[key] in values):
                return False
            # NotIn also matches a pod without the key, as labels.Selector does.
            if operator == "NotIn" and present and labels[key] in values:
                return False
            if operator == "Exists" and not present:
                return False
            if operator == "DoesNotExist" and present:
                return False
        return True


@dataclass(frozen=True)
class _IPBlock:
    cidr: IPNetwork
    excepts: tuple[IPNetwork, ...]

    def contains(self, ip: str) -> bool:
        address = ipaddress.ip_address(ip)
        if address.version != self.cidr.version or address not in self.cidr:
            return False
        return not any(address in excluded for excluded in self.excepts)


@dataclass(frozen=True)
class _Peer:
    pod_selector: _Selector | None
    namespace_selector: _Selector | None
    ip_block: _IPBlock | None


@dataclass(frozen=True)
class _Port:
    protocol: str
    port: int | None
    end_port: int | None

    def matches(self, port: int, protocol: str) -> bool:
        if protocol != self.protocol:
            return False
        if self.port is None:
            return True
        return self.port <= port <= (self.end_port if self.end_port is not None else self.port)


@dataclass(frozen=True)
class _Rule:
    peers: tuple[_Peer, ...] | None
    """None: every peer (``from``/``to`` missing or empty)."""
    ports: tuple[_Port, ...] | None
    """None: every port and protocol (``ports`` missing or empty)."""


@dataclass(frozen=True)
class _Policy:
    name: str
    namespace: str
    selector: _Selector
    types: frozenset[str]
    rules: Mapping[str, tuple[_Rule, ...]]


@dataclass(frozen=True)
class _Other:
    """The other end of a connection, seen from the pod whose policies are read, and the port."""

    ip: str
    pod: Pod | None
    """None: an address outside the cluster."""
    port: int
    protocol: str


def _parse_cidr(text: str, where: str) -> IPNetwork:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError as error:
        raise NetworkPolicyError(f"{where}: {error}") from None


def _parse_peer(raw: Mapping[str, Any], where: str) -> _Peer:
    given = [key for key in ("podSelector", "namespaceSelector", "ipBlock") if raw.get(key) is not None]
    if not given:
        raise NetworkPolicyError(
            f"{where}: must specify a peer (the API server refuses a peer {{}}; leave 'from'/'to' out "
            "to admit everyone, or use podSelector: {} / namespaceSelector: {})"
        )
    if "ipBlock" in given and len(given) > 1:
        raise NetworkPolicyError(f"{where}: may not specify both ipBlock and another peer")
    ip_block = None
    if "ipBlock" in given:
        cidr = _parse_cidr(raw["ipBlock"]["cidr"], f"{where}.ipBlock.cidr")
        excepts = []
        for text in raw["ipBlock"].get("except") or []:
            excluded = _parse_cidr(text, f"{where}.ipBlock.except")
            if excluded.version != cidr.version or not excluded.subnet_of(cidr) or excluded == cidr:
                raise NetworkPolicyError(f"{where}.ipBlock.except: {text} must be a strict subset of {cidr}")
            excepts.append(excluded)
        ip_block = _IPBlock(cidr, tuple(excepts))
    return _Peer(
        pod_selector=_Selector.parse(raw["podSelector"], f"{where}.podSelector")
        if "podSelector" in given
        else None,
        namespace_selector=(
            _Selector.parse(raw["namespaceSelector"], f"{where}.namespaceSelector")
            if "namespaceSelector" in given
            else None
        ),
        ip_block=ip_block,
    )


def _parse_port(raw: Mapping[str, Any], where: str) -> _Port:
    protocol = raw.get("protocol") or "TCP"
    if protocol not in _PROTOCOLS:
        raise NetworkPolicyError(f"{where}: unsupported protocol {protocol!r}")
    port, end_port = raw.get("port"), raw.get("endPort")
    if isinstance(port, str):
        raise NetworkPolicyError(f"{where}: named port {port!r} is out of scope for this evaluator")
    if port is None and end_port is not None:
        raise NetworkPolicyError(f"{where}: endPort may not be specified without port")
    if end_port is not None and end_port < port:
        raise NetworkPolicyError(f"{where}: endPort must be greater than or equal to port")
    return _Port(protocol, port, end_port)


def _parse_rule(raw: Mapping[str, Any], peers_key: str, where: str) -> _Rule:
    raw_peers: Sequence[Mapping[str, Any]] = raw.get(peers_key) or []
    raw_ports: Sequence[Mapping[str, Any]] = raw.get("ports") or []
    return _Rule(
        peers=tuple(_parse_peer(peer, f"{where}.{peers_key}[{i}]") for i, peer in enumerate(raw_peers))
        or None,
        ports=tuple(_parse_port(port, f"{where}.ports[{i}]") for i, port in enumerate(raw_ports)) or None,
    )


def _parse_policy(manifest: Mapping[str, Any]) -> _Policy:
    metadata = manifest.get("metadata", {})
    name = metadata.get("name", "<unnamed>")
    namespace = metadata.get("namespace")
    if not namespace:
        # kubectl would put it in the context's namespace: a rendered policy must say which.
        raise NetworkPolicyError(f"NetworkPolicy/{name}: no metadata.namespace")
    where = f"NetworkPolicy {namespace}/{name}"
    spec = manifest.get("spec", {})
    types = spec.get("policyTypes") or (["Ingress", "Egress"] if spec.get("egress") else ["Ingress"])
    if any(kind not in _TYPES for kind in types):
        raise NetworkPolicyError(f"{where}: policyTypes must be Ingress and/or Egress, got {types}")
    return _Policy(
        name=name,
        namespace=namespace,
        selector=_Selector.parse(spec.get("podSelector"), f"{where}.podSelector"),
        types=frozenset(types),
        rules={
            "Ingress": tuple(
                _parse_rule(rule, "from", f"{where}.ingress[{i}]")
                for i, rule in enumerate(spec.get("ingress") or [])
            ),
            "Egress": tuple(
                _parse_rule(rule, "to", f"{where}.egress[{i}]")
                for i, rule in enumerate(spec.get("egress") or [])
            ),
        },
    )


@dataclass
class Cluster:
    """The NetworkPolicies and namespace labels of rendered ``objects``, and the ``pods`` known by address."""

    objects: Iterable[Mapping[str, Any]]
    pods: Iterable[Pod] = ()
    ip_block_matches_pods: bool = True
    _policies: tuple[_Policy, ...] = field(init=False)
    _namespace_labels: dict[str, dict[str, str]] = field(init=False)
    _pods_by_ip: dict[str, Pod] = field(init=False)

    def __post_init__(self) -> None:
        objects = list(self.objects)
        self._policies = tuple(_parse_policy(obj) for obj in objects if obj.get("kind") == "NetworkPolicy")
        self._namespace_labels = {
            obj["metadata"]["name"]: dict(obj["metadata"].get("labels") or {})
            for obj in objects
            if obj.get("kind") == "Namespace"
        }
        self._pods_by_ip = {}
        for pod in self.pods:
            if pod.ip in self._pods_by_ip:
                raise ValueError(f"two pods share the address {pod.ip}")
            self._pods_by_ip[pod.ip] = pod

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        return {**self._namespace_labels.get(namespace, {}), NAMESPACE_NAME_LABEL: namespace}

    def policies_selecting(self, pod: Pod, policy_type: str) -> list[str]:
        """``namespace/name`` of every policy of ``policy_type`` that selects ``pod``."""
        return [f"{p.namespace}/{p.name}" for p in self._selecting(pod, policy_type)]

    def may_connect(self, source: Pod, destination: Pod, port: int, protocol: str = "TCP") -> bool:
        return self._allows(
            source, "Egress", _Other(destination.ip, destination, port, protocol)
        ) and self._allows(destination, "Ingress", _Other(source.ip, source, port, protocol))

    def may_connect_to_ip(self, source: Pod, ip: str, port: int, protocol: str = "TCP") -> bool:
        destination = self._pods_by_ip.get(str(ipaddress.ip_address(ip)))
        if destination is not None:
            return self.may_connect(source, destination, port, protocol)
        return self._allows(source, "Egress", _Other(ip, None, port, protocol))

    def may_be_reached_from_ip(self, ip: str, destination: Pod, port: int, protocol: str = "TCP") -> bool:
        source = self._pods_by_ip.get(str(ipaddress.ip_address(ip)))
        if source is not None:
            return self.may_connect(source, destination, port, protocol)
        return self._allows(destination, "Ingress", _Other(ip, None, port, protocol))

    def _selecting(self, pod: Pod, policy_type: str) -> list[_Policy]:
        return [
            policy
            for policy in self._policies
            if policy_type in policy.types
            and policy.namespace == pod.namespace
            and policy.selector.matches(pod.labels)
        ]

    def _allows(self, subject: Pod, policy_type: str, other: _Other) -> bool:
        """Whether the policies of ``policy_type`` that select ``subject`` admit the other end."""
        if other.protocol not in _PROTOCOLS:
            raise ValueError(f"unsupported protocol {other.protocol!r}")
        policies = self._selecting(subject, policy_type)
        if not policies:
            return True  # not isolated in this direction
        return any(
            self._rule_admits(policy, rule, other)
            for policy in policies
            for rule in policy.rules[policy_type]
        )

    def _rule_admits(self, policy: _Policy, rule: _Rule, other: _Other) -> bool:
        if rule.ports is not None and not any(p.matches(other.port, other.protocol) for p in rule.ports):
            return False
        if rule.peers is None:
            return True
        return any(self._peer_matches(policy, candidate, other) for candidate in rule.peers)

    def _peer_matches(self, policy: _Policy, candidate: _Peer, other: _Other) -> bool:
        peer = other.pod
        if candidate.ip_block is not None:
            if peer is not None and not self.ip_block_matches_pods:
                return False
            return candidate.ip_block.contains(other.ip)
        if peer is None:
            return False  # selectors name pods, never outside addresses
        if candidate.namespace_selector is None:
            in_namespace = peer.namespace == policy.namespace
        else:
            in_namespace = candidate.namespace_selector.matches(self.namespace_labels(peer.namespace))
        pod_matches = candidate.pod_selector is None or candidate.pod_selector.matches(peer.labels)
        return in_namespace and pod_matches
