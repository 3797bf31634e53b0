"""A team's rendezvous etcd: three members that TorchElastic's ``etcd`` backend dials at etcd-server:2379.

``torch.distributed.run --rdzv_backend etcd --rdzv_endpoint etcd-server:2379`` talks to etcd
through python-etcd, i.e. the etcd **v2** API. etcd 3.6 removed it, so the image is a 3.5.x
release and every member runs with ``enable-v2``.

Why three (torch 2.9 and python-etcd 0.4.5, read in their source and shown with the real programs in
tests/runtime/test_etcd_members.py): while a run trains, every agent asks etcd every 0.1 s
(``--monitor-interval``) how many nodes wait to join (``EtcdRendezvousHandler.num_nodes_waiting``),
and catches only ``EtcdKeyNotFound`` there: a connection failure (``EtcdConnectionFailed``) leaves
the agent's loop, the agent stops its workers and exits with an error, and Volcano restarts the
whole gang, spending a retry. With one member, any moment without it (a drain of its system node,
a lost node, its memory limit, a manifest change) ends every run of the team in flight. python-etcd,
as torch creates it (``allow_reconnect=True``), reads the members' client URLs from ``/v2/machines``
when it starts and, when a request fails, tries the next one: with three members the agents move to
a live one and the runs go on. A member that has lost its peers still answers these reads (v2 reads
are served locally, not through the quorum), so a healthy run also outlives the loss of two; a new
rendezvous needs the quorum (two of three).

The objects, all in the team's namespace:

- StatefulSet ``etcd-server``: members ``etcd-server-0..2``, started together (``Parallel``: a member
  is not ready until the cluster has a quorum, so one at a time would never start), on an emptyDir
  (no volume provisioner in the stack; rendezvous state lives as long as a run). Spread one per
  system node as far as nodes allow. Each pod's init container (cluster_programs/etcd_member.py,
  on the platform's Python image) writes etcd's configuration and, for a pod that replaced a member
  whose data is gone, removes the old member and adds itself, so it joins and copies the data from
  the leader. Updates replace one member at a time, each ready (``/readyz``: a leader and a
  linearizable read) before the next. ``Parallel`` is also why an update goes on over members that
  are not ready: Kubernetes' StatefulSet controller (1.36, stateful_set_control.go) replaces the
  highest member not yet updated and waits only on the updated ones, where ``OrderedReady`` first
  waits for every member to be ready, forever if none ever is (Kubernetes' "Forced rollback": a pod
  deleted by hand). A cluster deployed with the probes before their fix (never ready:
  ``_etcd_flags``) rolls to the fixed template by itself (tests/cluster/test_run_pods.py). That holds
  while the ``MaxUnavailableStatefulSet`` feature gate is off (beta and off in 1.36): with it on,
  the controller replaces no member while ``maxUnavailable`` (1) or more are unavailable.
- PodDisruptionBudget: at most one member unavailable, so a drain (a node group's update) takes one
  at a time and waits for its replacement to be ready; an unready member may always be evicted
  (``unhealthyPodEvictionPolicy: AlwaysAllow``), so a broken one never blocks a drain. The
  StatefulSet controller deletes the members it replaces without the eviction API: the budget
  does not pace an update.
- Service ``etcd-server`` (ClusterIP, 2379): the ready members, where the launchers dial. Headless
  Service ``etcd-server-peers``: each member's own name (``etcd-server-<i>.etcd-server-peers.<ns>.svc``,
  published before it is ready: members find each other while they start), its client URL in
  ``/v2/machines`` and its peer URL.
- NetworkPolicy ``etcd-server``: 2379 only from pods of the same namespace that carry
  ``client_label`` (default ``volcano.sh/job-name``, which Volcano's job controller puts on every
  pod of a Job and which, in a team's namespace, no one else may set: k8s_charts/teams/job_pod_admission.py)
  and from the members; 2380 only from the members; egress only to DNS and the members (the team
  namespace denies the rest). Enforced where network policy is on: on EKS, the VPC CNI's
  ``enableNetworkPolicy``; its agent always admits the node's own IP, so kubelet probes keep working.
"""

from __future__ import annotations

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.image_pins import ETCD_IMAGE, GANG_WATCHDOG_IMAGE
from cluster_facts.kubernetes_names import (
    ETCD_CLIENT_PORT,
    ETCD_LABELS,
    ETCD_METRICS_PORT,
    ETCD_PEER_PORT,
    ETCD_REPLICAS,
    ETCD_SERVICE_NAME,
    PLATFORM_PRIORITY_CLASS,
    VOLCANO_JOB_NAME_LABEL,
)
from cluster_facts.script_files import program_text
from k8s_charts.network.tenant_network import dns_egress_rule, tcp_port
from k8s_charts.shared.policy_exceptions import (
    PINNED_PULL_POLICY,
    digest_exceptions,
    policy_exceptions,
    pull_policy_exceptions,
)
from k8s_charts.shared.resources import container_resources

__all__ = [
    "BOOTSTRAP_WAIT_SECONDS",
    "DEFAULT_IMAGE",
    "ETCD_LABELS",
    "MEMBER_IMAGE",
    "MEMBER_PROGRAM",
    "PEER_SERVICE_NAME",
    "EtcdChart",
    "member_name",
]

# The etcd release pinned in cluster_facts/image_pins.py (with its source): distroless-static, no
# shell, any uid works.
DEFAULT_IMAGE = ETCD_IMAGE
MEMBER_IMAGE = GANG_WATCHDOG_IMAGE
"""The init container's image: the platform's Python image (the gang watchdog's), for a program that
uses the standard library only. The etcd image has no shell and no Python."""
MEMBER_PROGRAM = program_text("etcd_member.py")
PEER_SERVICE_NAME = f"{ETCD_SERVICE_NAME}-peers"
BOOTSTRAP_WAIT_SECONDS = 10
"""How long a member with no data waits for another to answer before it starts a new cluster: once
per cluster (every member of a first start waits it out together), and long enough that a running
cluster is not taken for none."""
_MEMBER_DEADLINE_SECONDS = 600
"""How long the init container tries to change the membership (it needs the quorum) before it
exits 1 and the kubelet starts it again (with a growing delay: the pod shows Init:CrashLoopBackOff)."""

_DATA_DIR = "/var/lib/etcd"
_CONFIG_FILE = f"{_DATA_DIR}/etcd.conf.json"
_UID = 65532  # distroless "nonroot"; etcd needs no root, and the emptyDir is writable by any uid
_POD_NAME = "$(POD_NAME)"


def member_name(index: int) -> str:
    return f"{ETCD_SERVICE_NAME}-{index}"


def _member_host(member: str, namespace: str) -> str:
    # In .svc, which every pod's no_proxy exempts (cluster_facts/metadata_proxy.py).
    return f"{member}.{PEER_SERVICE_NAME}.{namespace}.svc"


class EtcdChart(cdk8s.Chart):
    """StatefulSet, PodDisruptionBudget, Services ``etcd-server`` and ``etcd-server-peers``, and the
    NetworkPolicy, all in ``namespace``."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        namespace: str,
        image: str = DEFAULT_IMAGE,
        member_image: str = MEMBER_IMAGE,
        client_label: str = VOLCANO_JOB_NAME_LABEL,
    ) -> None:
        super().__init__(scope, id)
        if not client_label:
            # An empty podSelector would admit every pod of the namespace.
            raise ValueError("client_label must name a label")
        metadata = k8s.ObjectMeta(name=ETCD_SERVICE_NAME, namespace=namespace, labels=ETCD_LABELS)
        k8s.KubeStatefulSet(
            self,
            "StatefulSet",
            metadata=k8s.ObjectMeta(
                name=ETCD_SERVICE_NAME,
                namespace=namespace,
                labels=ETCD_LABELS,
                annotations=policy_exceptions(
                    {**digest_exceptions(image, member_image), **pull_policy_exceptions()}
                ),
            ),
            spec=k8s.StatefulSetSpec(
                replicas=ETCD_REPLICAS,
                service_name=PEER_SERVICE_NAME,
                pod_management_policy="Parallel",
                update_strategy=k8s.StatefulSetUpdateStrategy(type="RollingUpdate"),
                selector=k8s.LabelSelector(match_labels=ETCD_LABELS),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=ETCD_LABELS),
                    spec=_pod_spec(image, member_image, namespace),
                ),
            ),
        )
        k8s.KubePodDisruptionBudget(
            self,
            "DisruptionBudget",
            metadata=metadata,
            spec=k8s.PodDisruptionBudgetSpec(
                max_unavailable=k8s.IntOrString.from_number(1),
                selector=k8s.LabelSelector(match_labels=ETCD_LABELS),
                unhealthy_pod_eviction_policy="AlwaysAllow",
            ),
        )
        _services(self, namespace)
        _network_policy(self, namespace, client_label)


def _services(scope: Construct, namespace: str) -> None:
    client = k8s.ServicePort(
        name="client", port=ETCD_CLIENT_PORT, target_port=k8s.IntOrString.from_number(ETCD_CLIENT_PORT)
    )
    peer = k8s.ServicePort(
        name="peer", port=ETCD_PEER_PORT, target_port=k8s.IntOrString.from_number(ETCD_PEER_PORT)
    )
    k8s.KubeService(
        scope,
        "Service",
        metadata=k8s.ObjectMeta(name=ETCD_SERVICE_NAME, namespace=namespace, labels=ETCD_LABELS),
        spec=k8s.ServiceSpec(type="ClusterIP", selector=ETCD_LABELS, ports=[client]),
    )
    k8s.KubeService(
        scope,
        "PeerService",
        metadata=k8s.ObjectMeta(name=PEER_SERVICE_NAME, namespace=namespace, labels=ETCD_LABELS),
        spec=k8s.ServiceSpec(
            cluster_ip="None",
            # Members resolve each other while they start, before any is ready.
            publish_not_ready_addresses=True,
            selector=ETCD_LABELS,
            ports=[client, peer],
        ),
    )


def _network_policy(scope: Construct, namespace: str, client_label: str) -> None:
    members = k8s.NetworkPolicyPeer(pod_selector=k8s.LabelSelector(match_labels=ETCD_LABELS))
    both_ports = [tcp_port(ETCD_CLIENT_PORT), tcp_port(ETCD_PEER_PORT)]
    k8s.KubeNetworkPolicy(
        scope,
        "NetworkPolicy",
        metadata=k8s.ObjectMeta(name=ETCD_SERVICE_NAME, namespace=namespace, labels=ETCD_LABELS),
        spec=k8s.NetworkPolicySpec(
            pod_selector=k8s.LabelSelector(match_labels=ETCD_LABELS),
            # Selected for both: everything not listed below is denied.
            policy_types=["Ingress", "Egress"],
            ingress=[
                k8s.NetworkPolicyIngressRule(
                    # Pods of this namespace only (no namespaceSelector) that carry the label.
                    from_=[
                        k8s.NetworkPolicyPeer(
                            pod_selector=k8s.LabelSelector(
                                match_expressions=[
                                    k8s.LabelSelectorRequirement(key=client_label, operator="Exists")
                                ]
                            )
                        )
                    ],
                    ports=[tcp_port(ETCD_CLIENT_PORT)],
                ),
                # The members: raft on the peer port, the init container's membership calls on 2379.
                k8s.NetworkPolicyIngressRule(from_=[members], ports=both_ports),
            ],
            egress=[dns_egress_rule(), k8s.NetworkPolicyEgressRule(to=[members], ports=both_ports)],
        ),
    )


def _etcd_flags(namespace: str) -> list[str]:
    """etcd's settings for the member the pod's name says; the init container writes them to the
    configuration file (the one setting that cannot be static is decided there)."""
    host = _member_host(_POD_NAME, namespace)
    initial_cluster = ",".join(
        f"{member_name(i)}=http://{_member_host(member_name(i), namespace)}:{ETCD_PEER_PORT}"
        for i in range(ETCD_REPLICAS)
    )
    return [
        f"--name={_POD_NAME}",
        f"--data-dir={_DATA_DIR}/data",
        # TorchElastic's etcd rendezvous (python-etcd) speaks only the v2 API.
        "--enable-v2=true",
        f"--listen-client-urls=http://0.0.0.0:{ETCD_CLIENT_PORT}",
        f"--advertise-client-urls=http://{host}:{ETCD_CLIENT_PORT}",
        f"--listen-peer-urls=http://0.0.0.0:{ETCD_PEER_PORT}",
        f"--initial-advertise-peer-urls=http://{host}:{ETCD_PEER_PORT}",
        f"--initial-cluster={initial_cluster}",
        # Every team's members have the same short names: the token keeps their clusters apart.
        f"--initial-cluster-token=etcd-{namespace}",
        # The probes' listener. With --enable-v2 the client port's handler is v2's, which serves
        # /health but not /readyz or /livez (etcd 3.5.33 embed/etcd.go serveClients,
        # v2http.NewClientHandler): probed there, every member answered 404, never became ready and
        # was restarted by its liveness probe every minute (tests/cluster/test_run_pods.py found it).
        # The metrics listener serves both (embed/etcd.go serveMetrics, etcdhttp.HandleHealth).
        f"--listen-metrics-urls=http://0.0.0.0:{ETCD_METRICS_PORT}",
    ]


def _member_container(member_image: str, namespace: str) -> k8s.Container:
    members = ",".join(
        f"{member_name(i)}=http://{_member_host(member_name(i), namespace)}:{ETCD_CLIENT_PORT}"
        for i in range(ETCD_REPLICAS)
    )
    return k8s.Container(
        name="member",
        image=member_image,
        image_pull_policy=PINNED_PULL_POLICY,
        # cluster_programs/etcd_member.py
        command=["python3", "-c", MEMBER_PROGRAM],
        args=[
            f"--config={_CONFIG_FILE}",
            f"--members={members}",
            f"--bootstrap-wait={BOOTSTRAP_WAIT_SECONDS}",
            f"--deadline={_MEMBER_DEADLINE_SECONDS}",
            *_etcd_flags(namespace),
        ],
        env=[
            k8s.EnvVar(
                name="POD_NAME",
                value_from=k8s.EnvVarSource(field_ref=k8s.ObjectFieldSelector(field_path="metadata.name")),
            )
        ],
        # A few HTTP calls and one small file.
        resources=container_resources(
            requests={"cpu": "10m", "memory": "32Mi"}, limits={"cpu": "200m", "memory": "128Mi"}
        ),
        security_context=_container_security(),
        volume_mounts=[k8s.VolumeMount(name="data", mount_path=_DATA_DIR)],
    )


def _container_security() -> k8s.SecurityContext:
    return k8s.SecurityContext(
        allow_privilege_escalation=False,
        capabilities=k8s.Capabilities(drop=["ALL"]),
        read_only_root_filesystem=True,
    )


def _etcd_container(image: str) -> k8s.Container:
    probe_port = k8s.IntOrString.from_number(ETCD_METRICS_PORT)
    return k8s.Container(
        name="etcd",
        image=image,
        command=["/usr/local/bin/etcd"],
        # Written by the init container; with a configuration file etcd reads no other flag.
        args=[f"--config-file={_CONFIG_FILE}"],
        env=[
            # Go's collector works harder near the container's limit instead of letting it be reached.
            k8s.EnvVar(
                name="GOMEMLIMIT",
                value_from=k8s.EnvVarSource(
                    resource_field_ref=k8s.ResourceFieldSelector(
                        container_name="etcd", resource="limits.memory"
                    )
                ),
            )
        ],
        # Pinned, from a repository that keeps its tags (k8s_charts/shared/policy_exceptions.py).
        image_pull_policy=PINNED_PULL_POLICY,
        ports=[
            k8s.ContainerPort(name="client", container_port=ETCD_CLIENT_PORT, protocol="TCP"),
            k8s.ContainerPort(name="peer", container_port=ETCD_PEER_PORT, protocol="TCP"),
        ],
        # The rendezvous is a few keys per run and a read every 0.1 s per agent; etcd holds its
        # data and the raft log since the last snapshot in memory.
        resources=container_resources(
            requests={"cpu": "100m", "memory": "256Mi"}, limits={"cpu": "1", "memory": "1Gi"}
        ),
        security_context=_container_security(),
        # /readyz and /livez exist since etcd 3.5.11, on the metrics listener (_etcd_flags says why
        # not the client port); readiness also waits for a leader and a
        # linearizable read (a member catching up is not ready), liveness does not (a member that
        # lost its quorum keeps serving the runs' reads).
        readiness_probe=k8s.Probe(
            http_get=k8s.HttpGetAction(path="/readyz", port=probe_port), period_seconds=5, timeout_seconds=3
        ),
        liveness_probe=k8s.Probe(
            http_get=k8s.HttpGetAction(path="/livez", port=probe_port),
            initial_delay_seconds=10,
            period_seconds=10,
            timeout_seconds=5,
            failure_threshold=6,
        ),
        volume_mounts=[k8s.VolumeMount(name="data", mount_path=_DATA_DIR)],
    )


def _pod_spec(image: str, member_image: str, namespace: str) -> k8s.PodSpec:
    return k8s.PodSpec(
        # etcd never calls the Kubernetes API.
        automount_service_account_token=False,
        priority_class_name=PLATFORM_PRIORITY_CLASS,
        enable_service_links=False,
        security_context=k8s.PodSecurityContext(
            run_as_non_root=True,
            run_as_user=_UID,
            run_as_group=_UID,
            fs_group=_UID,
            seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
        ),
        # One member per system node while there are nodes enough (a node's loss then takes one),
        # and across zones where they can. Trainium nodes are tainted, so they do not count.
        topology_spread_constraints=[
            k8s.TopologySpreadConstraint(
                max_skew=1,
                topology_key=key,
                when_unsatisfiable=when,
                label_selector=k8s.LabelSelector(match_labels=ETCD_LABELS),
                node_taints_policy="Honor",
            )
            for key, when in (
                ("kubernetes.io/hostname", "DoNotSchedule"),
                ("topology.kubernetes.io/zone", "ScheduleAnyway"),
            )
        ],
        init_containers=[_member_container(member_image, namespace)],
        containers=[_etcd_container(image)],
        # Rendezvous state lives as long as a run; a replaced member copies it from the others.
        volumes=[
            k8s.Volume(
                name="data", empty_dir=k8s.EmptyDirVolumeSource(size_limit=k8s.Quantity.from_string("1Gi"))
            )
        ],
    )
