"""The fabric check: prove that a Trainium node group's collectives run over EFA at EFA speed.

A node can advertise its EFA interfaces and still run collectives over TCP, at a fraction of the
speed and with no error (a missing security-group rule, a wrong libfabric provider, a pod that
does not request the interfaces). This chart renders a Volcano Job, ``fabric-check-<group>``, in
the shape of the multi-node nccom-test run of the Neuron documentation and of EKS's own Neuron
tests (aws-k8s-tester: a launcher and one SSH-serving worker per node):

- task ``worker``: one pod per node of the group (``nodes`` replicas, each requesting every Neuron
  device and every EFA interface of its node, so no two share a node), serving SSH
  (cluster_programs/fabric_check_worker.sh);
- task ``launcher``: one small pod on the same node group, which waits for the workers and runs
  ``nccom-test allr -N <nodes>`` across them (nccom-test starts the ranks through mpirun over
  SSH), then judges the output (cluster_programs/fabric_check_launcher.sh and
  fabric_verdict.py) and exits 0 (PASS) or 1 (FAIL);
- Volcano's ``ssh`` plugin gives every pod the job's key pair, ``svc`` the workers' DNS names,
  and the launcher's policies end the job: ``Completed`` when the check passed, ``Terminated``
  when it failed (the failed launcher pod and its log are kept). The verdict line is also the
  launcher container's termination message (``kubectl describe pod``);
- with ``taint``, a failed verdict that implicates the nodes taints every node the check ran on
  (``FABRIC_CHECK_TAINT``), so no training pod lands there (cluster_programs/fabric_taint.py).

``FabricCheckAccessChart`` holds what the job needs in place and is applied at deploy: a
NetworkPolicy admitting the check's pods to each other (SSH, mpirun, the Neuron runtime's
bootstrap and nccom-test's data collector use dynamic TCP ports on the pod network) and, with
``taint``, the launcher's service account, its RBAC (get its worker pods, get and patch nodes) and
a ValidatingAdmissionPolicy that lets it add that one taint to its own group's nodes and change
nothing else. The job alone is rendered for ``kubectl apply`` on demand (its spec is immutable:
a second run deletes it first); docs/fabric-check.md says how to run and read it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.dra import NodeDevices, node_claim_template
from cluster_facts.images import pinned_image_problem
from cluster_facts.instance_catalog import TrainiumInstanceType
from cluster_facts.kubernetes_names import (
    EFA_RESOURCE,
    FABRIC_CHECK_TAINT,
    NEURON_RESOURCE,
    NEURON_TAINT_KEY,
    NODE_GROUP_LABEL,
    SAFE_TO_EVICT_ANNOTATION,
)
from cluster_facts.kubernetes_plan import ManifestSet
from cluster_facts.script_files import program_body, program_text
from cluster_facts.volcano_retries import VOLCANO_DEFAULT_MAX_RETRY
from k8s_charts.devices.device_claims import NodeClaimTemplatesChart
from k8s_charts.network.tenant_network import api_server_egress_rules, dns_egress_rule
from k8s_charts.shared.admission_policy import (
    admission_policy,
    cel_string,
    refuse,
    same_except,
    service_account_policy_spec,
    service_account_username,
)
from k8s_charts.shared.pod_programs import API_CLIENT
from k8s_charts.shared.policy_exceptions import policy_exceptions

__all__ = [
    "ACCESS_STEP",
    "DATA_COLLECTOR_PORT",
    "DEFAULT_MESSAGE_BYTES",
    "DEFAULT_THRESHOLD",
    "LAUNCHER_SCRIPT",
    "LAUNCHER_TASK",
    "ROOT_COMM_PORT",
    "RUN_TIMEOUT_SECONDS",
    "SSHD_CAPABILITIES",
    "TAINT_PROGRAM",
    "VERDICT_PROGRAM",
    "WAIT_TIMEOUT_SECONDS",
    "WORKER_SCRIPT",
    "WORKER_TASK",
    "FabricCheckAccessChart",
    "FabricCheckChart",
    "FabricCheckValues",
    "fabric_check_labels",
    "fabric_check_steps",
    "job_name",
    "launcher_pod",
    "skip_reason",
    "taint_text",
    "worker_pods",
]

DEFAULT_THRESHOLD = 0.25
"""Fraction of the instance type's EFA bandwidth the all-reduce bus bandwidth must reach.

The Neuron nccom-test user guide's two-node trn1.32xlarge all-reduce reaches 47.09 GiB/s at 1 GiB
(404.5 Gbps, 0.51 of 800 Gbps): 0.25 leaves that a 2x margin. A TCP fallback runs over the pod's
one ENA interface, whose network card carries 1/8 (trn1.32xlarge) or 1/16 (trn1n, trn2) of the
instance's bandwidth, and a single TCP flow is capped at 10 Gbps even in a cluster placement
group; it cannot reach 0.25. For trn1n and trn2 no published multi-node figure was found: there
0.25 is a conservative guess. docs/fabric-check.md has the derivation.
"""
DEFAULT_MESSAGE_BYTES = 1024**3
"""The largest all-reduce, judged by the verdict (1 GiB: bandwidth-bound, as in the user guide)."""
# The sweep runs from a 16th of it in x2 steps: five rows, enough to see the curve flatten.
_SIZE_STEPS = 16

LAUNCHER_TASK = "launcher"
WORKER_TASK = "worker"
# nccom-test's multi-node settings, as in the aws-k8s-tester Neuron manifest.
ROOT_COMM_PORT = 63182
DATA_COLLECTOR_PORT = 60006  # nccom-test's default
_SSH_PORT = 22  # mpirun's ssh dials the default port; the launcher waits for it
WAIT_TIMEOUT_SECONDS = 20 * 60
"""How long the launcher waits for every worker's sshd (the first pull of the image is long)."""
RUN_TIMEOUT_SECONDS = 30 * 60
"""How long nccom-test may run (it compiles a NEFF per size before timing it)."""
# Backstop for every pod: the launcher ends the job well before this.
ACTIVE_DEADLINE_SECONDS = WAIT_TIMEOUT_SECONDS + RUN_TIMEOUT_SECONDS + 10 * 60
"""How long any pod of the check may run once started; a waiter adds the time to get nodes."""

_NODE_GROUP_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")

WORKER_SCRIPT = program_body("fabric_check_worker.sh")
LAUNCHER_SCRIPT = program_body("fabric_check_launcher.sh")
# The whole Python module (docstring included): python3 -c runs it as __main__.
VERDICT_PROGRAM = program_text("fabric_verdict.py")
TAINT_PROGRAM = program_text("fabric_taint.py")


def job_name(node_group: str) -> str:
    """``fabric-check-<node_group>``: also the name of the plan step and of its YAML file."""
    return f"fabric-check-{node_group}"


def worker_pods(node_group: str, nodes: int) -> list[str]:
    """The worker pods' names: Volcano names a task's pods ``<job>-<task>-<index>``."""
    return [f"{job_name(node_group)}-{WORKER_TASK}-{index}" for index in range(nodes)]


def launcher_pod(node_group: str) -> str:
    """The launcher pod's name: its log holds the table and the verdict, its status the verdict."""
    return f"{job_name(node_group)}-{LAUNCHER_TASK}-0"


def taint_text(taint: dict[str, str] = FABRIC_CHECK_TAINT) -> str:
    """``key=value:Effect``, as kubectl taint writes it."""
    return f"{taint['key']}={taint['value']}:{taint['effect']}"


def fabric_check_labels(node_group: str) -> dict[str, str]:
    """What every object and pod of one group's check carries; the NetworkPolicy selects on it."""
    return {
        "app.kubernetes.io/name": "fabric-check",
        "app.kubernetes.io/instance": job_name(node_group),
        NODE_GROUP_LABEL: node_group,
    }


def launcher_labels(node_group: str) -> dict[str, str]:
    """The launcher pod's labels: the check's, and its component (its API-server egress selects it)."""
    return {**fabric_check_labels(node_group), "app.kubernetes.io/component": LAUNCHER_TASK}


def _check_inputs(*, node_group: str, nodes: int, image: str, threshold: float, message_bytes: int) -> None:
    if not _NODE_GROUP_NAME.fullmatch(node_group):
        # Pod host names are <job>-<task>-<index>: a longer group name would overflow a DNS label.
        raise ValueError(
            f"node_group {node_group!r} must be 1-32 lowercase letters, digits and '-', starting with a letter"
        )
    if nodes < 2:
        raise ValueError(
            f"a fabric check needs at least 2 nodes (EFA carries traffic between nodes), got nodes={nodes}"
        )
    # `not a <= b` also refuses NaN.
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be a fraction in (0, 1], got threshold={threshold!r}")
    if message_bytes < _SIZE_STEPS:
        raise ValueError(f"message_bytes must be at least {_SIZE_STEPS}, got {message_bytes}")
    problem = pinned_image_problem(image)
    if problem is not None:
        raise ValueError(problem)


# What both tasks' containers get: the EFA settings of the training pods, and the collectives
# library's INFO log, which names the network provider each rank selected (the verdict reads it).
_FABRIC_ENVIRONMENT = {
    "CCOM_SOCKET_IFNAME": "eth0",
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_EFA_FORK_SAFE": "1",
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
}

# Root, as AWS ships and tests the Neuron images; sshd and mpirun's daemons run as root here.
_AS_ROOT = (
    "the Neuron training image runs as root, as AWS ships and tests it; the workers run sshd, "
    "which needs root to start sessions, and the launcher's mpirun logs in as root"
)
SSHD_CAPABILITIES: dict[str, list[str]] = {
    "drop": ["ALL"],
    "add": ["NET_BIND_SERVICE", "SETGID", "SETUID", "SYS_CHROOT"],
}
"""What root's sshd needs of the container runtime's default capabilities to serve mpirun's sessions
(no terminal), found with Debian 12's sshd (OpenSSH 9.2p1, PAM and Linux audit built in, as
Ubuntu's) started with each one left out in turn (tests/k8s_charts/checks/test_fabric_ssh.py): NET_BIND_SERVICE
to bind port 22 (below ``net.ipv4.ip_unprivileged_port_start``), SYS_CHROOT, SETGID and SETUID for
the pre-authentication child it locks into /run/sshd as user sshd ("chroot: Operation not
permitted", "setgroups", "setresuid"). CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_RAW,
SETFCAP, SETPCAP and AUDIT_WRITE go. A session with a terminal (``ssh -t``, never mpirun's) would
also need CHOWN (the pty's owner) and AUDIT_WRITE (the login record: "linux_audit_write_entry
failed"). The ranks the sessions start run with no capability, as the training pods do."""
# checkov reads a batch/v1 Job's spec.template; this Volcano Job's templates are in spec.tasks.
_NOT_A_BATCH_JOB = (
    "checkov reads a batch/v1 Job's spec.template; this Volcano Job's pod templates in spec.tasks set "
)
_POLICY_EXCEPTIONS = policy_exceptions(
    {
        "CKV_K8S_23": _AS_ROOT,
        "CKV_K8S_40": _AS_ROOT,
        "CKV_K8S_29": _NOT_A_BATCH_JOB + "a pod security context",
        "CKV_K8S_31": _NOT_A_BATCH_JOB + "seccompProfile RuntimeDefault",
        "CKV_K8S_38": _NOT_A_BATCH_JOB + "automountServiceAccountToken false",
    }
)


def _pod_template(
    *,
    labels: dict[str, str],
    node_group: str,
    container: dict[str, Any],
    service_account: str | None = None,
    devices: NodeDevices | None = None,
) -> dict[str, Any]:
    # Only a launcher that taints calls the Kubernetes API, with its own service account.
    identity: dict[str, Any] = (
        {"serviceAccountName": service_account, "automountServiceAccountToken": True}
        if service_account
        else {"automountServiceAccountToken": False}
    )
    return {
        # Not evictable by a scale-down, as the training pods: a node taken from under a running
        # check would turn a healthy group's verdict into a failure.
        "metadata": {
            "labels": labels,
            "annotations": {**_POLICY_EXCEPTIONS, SAFE_TO_EVICT_ANNOTATION: "false"},
        },
        "spec": {
            "restartPolicy": "Never",
            **identity,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "activeDeadlineSeconds": ACTIVE_DEADLINE_SECONDS,
            "nodeSelector": {NODE_GROUP_LABEL: node_group},
            # The launcher requests no Neuron device, so EKS's admission adds no toleration for it.
            "tolerations": [{"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [container],
            # On a DRA group the worker's devices come by claim, from the group's templates in this
            # namespace (``FabricCheckAccessChart``), as a training pod's do.
            **(
                {
                    "resourceClaims": [
                        {"name": claim, "resourceClaimTemplateName": node_claim_template(node_group, claim)}
                        for claim in devices.claims()
                    ]
                }
                if devices is not None
                else {}
            ),
        },
    }


def _environment(values: dict[str, str]) -> list[dict[str, Any]]:
    return [{"name": name, "value": value} for name, value in values.items()]


class FabricCheckChart(cdk8s.Chart):
    """The Volcano Job ``fabric-check-<node_group>`` and its NetworkPolicy, in ``namespace``.

    ``instance``: the group's catalog entry (devices to request, ranks per node, EFA bandwidth);
    ``nodes``: how many of the group's nodes to test (at least 2); ``threshold``: the fraction of
    the instance type's EFA bandwidth the all-reduce must reach, in (0, 1]
    (``DEFAULT_THRESHOLD``); ``message_bytes``: the largest all-reduce, which is judged;
    ``taint``: a failed verdict that implicates the nodes taints them (the launcher runs as the
    service account ``job_name(node_group)``, which ``FabricCheckAccessChart`` creates).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        instance: TrainiumInstanceType,
        node_group: str,
        nodes: int,
        image: str,
        queue: str,
        namespace: str,
        threshold: float,
        message_bytes: int = DEFAULT_MESSAGE_BYTES,
        taint: bool = False,
        devices: NodeDevices | None = None,
    ) -> None:
        super().__init__(scope, id)
        _check_inputs(
            node_group=node_group, nodes=nodes, image=image, threshold=threshold, message_bytes=message_bytes
        )
        name = job_name(node_group)
        labels = fabric_check_labels(node_group)

        worker = _worker_container(instance, image, devices)
        launcher = _launcher_container(
            image,
            _launcher_environment(
                instance,
                node_group=node_group,
                nodes=nodes,
                namespace=namespace,
                threshold=threshold,
                message_bytes=message_bytes,
                taint=taint,
            ),
        )
        job = cdk8s.ApiObject(
            self,
            "Job",
            api_version="batch.volcano.sh/v1alpha1",
            kind="Job",
            metadata=cdk8s.ApiObjectMetadata(
                name=name, namespace=namespace, labels=labels, annotations=_POLICY_EXCEPTIONS
            ),
        )
        job.add_json_patch(
            cdk8s.JsonPatch.add(
                "/spec",
                {
                    "schedulerName": "volcano",
                    "queue": queue,
                    # Gang: no pod starts before every worker and the launcher can.
                    "minAvailable": nodes + 1,
                    "plugins": {
                        # The job's key pair and ssh client config in /root/.ssh of every pod.
                        "ssh": [],
                        # Worker DNS names (VC_WORKER_HOSTS) before they are Ready; the chart's own
                        # NetworkPolicy replaces the one the plugin would create under the job's name.
                        "svc": ["--publish-not-ready-addresses", "--disable-network-policy"],
                    },
                    "tasks": [
                        _worker_task(node_group, nodes, labels=labels, container=worker, devices=devices),
                        _launcher_task(
                            node_group, container=launcher, service_account=name if taint else None
                        ),
                    ],
                },
            )
        )


def _worker_task(
    node_group: str,
    nodes: int,
    *,
    labels: dict[str, str],
    container: dict[str, Any],
    devices: NodeDevices | None,
) -> dict[str, Any]:
    return {
        "name": WORKER_TASK,
        "replicas": nodes,
        # What Volcano's job webhook writes into a task at create (minAvailable =
        # replicas, maxRetry 0 -> 3: cluster_facts/volcano_retries.py), written out:
        # a second kubectl apply replaces the task list (a merge patch), and
        # without them Volcano's update validation refuses the changed tasks.
        "minAvailable": nodes,
        "maxRetry": VOLCANO_DEFAULT_MAX_RETRY,
        "template": _pod_template(
            labels={**labels, "app.kubernetes.io/component": WORKER_TASK},
            node_group=node_group,
            container=container,
            devices=devices,
        ),
    }


def _launcher_task(
    node_group: str, *, container: dict[str, Any], service_account: str | None
) -> dict[str, Any]:
    return {
        "name": LAUNCHER_TASK,
        "replicas": 1,
        "minAvailable": 1,
        "maxRetry": VOLCANO_DEFAULT_MAX_RETRY,
        # The launcher decides the job's outcome; a lost worker makes its nccom-test fail.
        "policies": [
            {"event": "TaskCompleted", "action": "CompleteJob"},
            {"event": "PodFailed", "action": "TerminateJob"},
            {"event": "PodEvicted", "action": "TerminateJob"},
        ],
        "template": _pod_template(
            labels=launcher_labels(node_group),
            node_group=node_group,
            container=container,
            service_account=service_account,
        ),
    }


def _worker_container(
    instance: TrainiumInstanceType, image: str, devices: NodeDevices | None
) -> dict[str, Any]:
    """One worker per node, with every chip and EFA interface of it."""
    # As the training pods: 7/8 of the node, the rest for kubelet and DaemonSets (and the launcher).
    # Unlike them, limited to the same: the platform namespace's LimitRange gives a container without
    # a cpu or memory limit its defaults (k8s_charts/shared/resources.py: 1 CPU, 512 MiB), below these
    # requests, and the API server refuses such a pod ("must be less than or equal to cpu limit",
    # seen from the real one in tests/cluster/test_dra.py). nccom-test needs a few cores, not the cap.
    node = {"cpu": str(instance.vcpus * 7 // 8), "memory": f"{instance.memory_gib * 7 // 8}Gi"}
    # Every chip and EFA interface of the node, as a training pod takes them: one worker per node, and
    # the check measures what training gets. Extended resources are limits only; Kubernetes copies
    # them to requests. On a DRA group (``devices``) no plugin advertises them: the pod's claims hold
    # the node.
    devices_of_node = (
        {"limits": {**node, NEURON_RESOURCE: str(instance.chips), EFA_RESOURCE: str(instance.efa_interfaces)}}
        if devices is None
        else {"limits": node, "claims": [{"name": claim} for claim in devices.claims()]}
    )
    return {
        "name": "worker",
        "image": image,
        "command": ["/bin/bash", "-c", WORKER_SCRIPT, "fabric-check-worker"],
        "env": _environment(_FABRIC_ENVIRONMENT),
        "ports": [{"name": "ssh", "containerPort": _SSH_PORT, "protocol": "TCP"}],
        "resources": {**devices_of_node, "requests": node},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": SSHD_CAPABILITIES},
    }


def _launcher_environment(
    instance: TrainiumInstanceType,
    *,
    node_group: str,
    nodes: int,
    namespace: str,
    threshold: float,
    message_bytes: int,
    taint: bool,
) -> dict[str, str]:
    """What the launcher's script reads: the run's size, the verdict's threshold and, when it taints, whom."""
    return {
        **_FABRIC_ENVIRONMENT,
        # nccom-test starts mpirun, which refuses to run as root without both.
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "NODES": str(nodes),
        "CORES_PER_NODE": str(instance.processes_per_node),
        "NETWORK_GBPS": str(instance.network_gbps),
        "THRESHOLD": repr(threshold),
        "MIN_MESSAGE_BYTES": str(max(1, message_bytes // _SIZE_STEPS)),
        "MAX_MESSAGE_BYTES": str(message_bytes),
        "ROOT_COMM_PORT": str(ROOT_COMM_PORT),
        "DATA_COLLECTOR_PORT": str(DATA_COLLECTOR_PORT),
        "SSH_PORT": str(_SSH_PORT),
        "WAIT_TIMEOUT_SECONDS": str(WAIT_TIMEOUT_SECONDS),
        "RUN_TIMEOUT_SECONDS": str(RUN_TIMEOUT_SECONDS),
        **(
            {
                "TAINT": taint_text(),
                "POD_NAMESPACE": namespace,
                "WORKER_PODS": ",".join(worker_pods(node_group, nodes)),
            }
            if taint
            else {}
        ),
    }


def _launcher_container(image: str, environment: dict[str, str]) -> dict[str, Any]:
    """The launcher: runs nccom-test over the workers, judges it and, when told, taints."""
    return {
        "name": "launcher",
        "image": image,
        # cluster_programs/fabric_check_launcher.sh with fabric_verdict.py as "$1",
        # fabric_taint.py as "$2" and the API client it imports as "$3".
        "command": [
            "/bin/bash",
            "-c",
            LAUNCHER_SCRIPT,
            "fabric-check-launcher",
            VERDICT_PROGRAM,
            TAINT_PROGRAM,
            API_CLIENT,
        ],
        "env": [
            *_environment(environment),
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "ports": [
            {"name": "collector", "containerPort": DATA_COLLECTOR_PORT, "protocol": "TCP"},
        ],
        # nccom-test and mpirun only orchestrate here; the ranks run on the workers.
        "resources": {
            "requests": {"cpu": "1", "memory": "2Gi"},
            "limits": {"cpu": "2", "memory": "4Gi"},
        },
        # mpirun, ssh and nccom-test as root need no capability (its files are root's own).
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        # The script writes the verdict line here; if it dies first, the log's tail stands in.
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _is_the_taint(variable: str) -> str:
    taint = FABRIC_CHECK_TAINT
    return (
        f"{variable}.key == {cel_string(taint['key'])} && has({variable}.value) && {variable}.value == "
        f"{cel_string(taint['value'])} && {variable}.effect == {cel_string(taint['effect'])}"
    )


def _taint_policy(*, node_group: str, username: str) -> dict[str, Any]:
    """The admission policy's spec: ``username`` may only add FABRIC_CHECK_TAINT to a node of ``node_group``.

    RBAC cannot narrow ``patch nodes`` to one field or one group; this can. Every expression guards
    itself (failurePolicy Fail: an error refuses the request).
    """
    taints = "{age}.spec.taints"
    group_label = f"oldObject.metadata.labels[{cel_string(NODE_GROUP_LABEL)}]"
    variables = [
        {
            "name": "isNodeUpdate",
            "expression": "request.operation == 'UPDATE' && request.resource.resource == 'nodes'"
            " && !has(request.subResource)",
        },
        {
            "name": "newTaints",
            "expression": "variables.isNodeUpdate && has(object.spec) && has(object.spec.taints)"
            f" ? {taints.format(age='object')} : []",
        },
        {
            "name": "oldTaints",
            "expression": "variables.isNodeUpdate && has(oldObject.spec) && has(oldObject.spec.taints)"
            f" ? {taints.format(age='oldObject')} : []",
        },
        {
            "name": "newSpec",
            "expression": "variables.isNodeUpdate && has(object.spec) ? object.spec : {}",
        },
        {
            "name": "oldSpec",
            "expression": "variables.isNodeUpdate && has(oldObject.spec) ? oldObject.spec : {}",
        },
        {
            "name": "inGroup",
            "expression": "variables.isNodeUpdate && has(oldObject.metadata.labels)"
            f" && {cel_string(NODE_GROUP_LABEL)} in oldObject.metadata.labels && {group_label} == {cel_string(node_group)}",
        },
        {
            # Nothing but spec.taints and the server's own metadata changes.
            "name": "onlyTaintsChanged",
            "expression": " && ".join(
                [
                    "variables.isNodeUpdate",
                    same_except("object", "oldObject", ["metadata", "spec"]),
                    same_except(
                        "object.metadata", "oldObject.metadata", ["managedFields", "resourceVersion"]
                    ),
                    same_except("variables.newSpec", "variables.oldSpec", ["taints"]),
                ]
            ),
        },
        {
            # The taints are the old ones and the check's: every old one kept, every new one old or the check's.
            "name": "onlyTheTaintAdded",
            "expression": "variables.oldTaints.all(t, t in variables.newTaints)"
            f" && variables.newTaints.all(t, t in variables.oldTaints || ({_is_the_taint('t')}))",
        },
    ]

    who = f"the fabric check of node group {node_group}"
    validations = [
        refuse("variables.isNodeUpdate", f"{who} may only update nodes"),
        refuse("!variables.isNodeUpdate || variables.inGroup", f"{who} may only change nodes of that group"),
        refuse(
            "!variables.isNodeUpdate || (variables.onlyTaintsChanged && variables.onlyTheTaintAdded)",
            f"{who} may only add the taint {taint_text()} to a node",
        ),
    ]
    return service_account_policy_spec(
        username=username, resources=["nodes", "nodes/*"], variables=variables, validations=validations
    )


class FabricCheckAccessChart(cdk8s.Chart):
    """What one group's check needs in place, applied at deploy (inert until the job runs).

    - NetworkPolicy ``job_name(node_group)``: the check's pods admit each other, nothing else;
    - with ``taint``: ServiceAccount ``job_name(node_group)`` (the launcher's), a Role that gets
      the job's worker pods by name (their nodes), a ClusterRole that gets and patches nodes, and
      a ValidatingAdmissionPolicy (GA in Kubernetes 1.30) with its binding that lets the service
      account add ``FABRIC_CHECK_TAINT`` to a node of ``node_group`` and change nothing else.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        node_group: str,
        nodes: int,
        namespace: str,
        taint: bool,
        vpc_cidr: str,
    ) -> None:
        super().__init__(scope, id)
        name = job_name(node_group)
        labels = fabric_check_labels(node_group)
        self._pods_network(name=name, namespace=namespace, labels=labels)
        if not taint:
            return
        self._launcher_network(node_group, name=name, namespace=namespace, labels=labels, vpc_cidr=vpc_cidr)
        self._launcher_identity(node_group, nodes, name=name, namespace=namespace, labels=labels)
        admission_policy(
            self,
            name=name,
            labels=labels,
            spec=_taint_policy(node_group=node_group, username=service_account_username(namespace, name)),
            binding_spec={"validationActions": ["Deny"]},
            binding_id="PolicyBinding",
        )

    def _pods_network(self, *, name: str, namespace: str, labels: dict[str, str]) -> None:
        selector = k8s.LabelSelector(match_labels=labels)
        peers = [k8s.NetworkPolicyPeer(pod_selector=selector)]
        # The platform namespace denies all traffic by default (k8s_charts/network/tenant_network.py): the
        # check's pods reach each other on any port (SSH, mpirun, the runtime's bootstrap), resolve
        # the workers' names, and (only when it taints) the launcher reaches the API server (its
        # Service address and its endpoints in the VPC). Image pulls and the EFA traffic
        # itself do not cross the pod network.
        k8s.KubeNetworkPolicy(
            self,
            "NetworkPolicy",
            metadata=k8s.ObjectMeta(name=name, namespace=namespace, labels=labels),
            spec=k8s.NetworkPolicySpec(
                pod_selector=selector,
                policy_types=["Ingress", "Egress"],
                ingress=[k8s.NetworkPolicyIngressRule(from_=peers)],
                egress=[k8s.NetworkPolicyEgressRule(to=peers), dns_egress_rule()],
            ),
        )

    def _launcher_network(
        self, node_group: str, *, name: str, namespace: str, labels: dict[str, str], vpc_cidr: str
    ) -> None:
        launcher = launcher_labels(node_group)
        k8s.KubeNetworkPolicy(
            self,
            "LauncherToApiServer",
            metadata=k8s.ObjectMeta(name=f"{name}-{LAUNCHER_TASK}", namespace=namespace, labels=labels),
            spec=k8s.NetworkPolicySpec(
                # The launcher taints nodes: HTTPS to the API server at its Service address (what
                # the policy agent judges) and its endpoints in the VPC. The workers hold no token
                # and get no such rule.
                pod_selector=k8s.LabelSelector(match_labels=launcher),
                policy_types=["Egress"],
                egress=api_server_egress_rules(vpc_cidr),
            ),
        )

    def _launcher_identity(
        self, node_group: str, nodes: int, *, name: str, namespace: str, labels: dict[str, str]
    ) -> None:
        """The launcher's service account: it gets its workers (their nodes) and gets and patches nodes."""
        k8s.KubeServiceAccount(
            self,
            "ServiceAccount",
            metadata=k8s.ObjectMeta(name=name, namespace=namespace, labels=labels),
            # The launcher's pod asks for the token; nothing else running as this account gets one.
            automount_service_account_token=False,
        )
        subject = k8s.Subject(kind="ServiceAccount", name=name, namespace=namespace)
        k8s.KubeRole(
            self,
            "Role",
            metadata=k8s.ObjectMeta(name=name, namespace=namespace, labels=labels),
            rules=[
                k8s.PolicyRule(
                    api_groups=[""],
                    resources=["pods"],
                    resource_names=worker_pods(node_group, nodes),
                    verbs=["get"],
                )
            ],
        )
        k8s.KubeRoleBinding(
            self,
            "RoleBinding",
            metadata=k8s.ObjectMeta(name=name, namespace=namespace, labels=labels),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
            subjects=[subject],
        )
        # Node names are not known ahead: RBAC grants every node; the policy below narrows it.
        k8s.KubeClusterRole(
            self,
            "ClusterRole",
            metadata=k8s.ObjectMeta(name=name, labels=labels),
            rules=[k8s.PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "patch"])],
        )
        k8s.KubeClusterRoleBinding(
            self,
            "ClusterRoleBinding",
            metadata=k8s.ObjectMeta(name=name, labels=labels),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=name),
            subjects=[subject],
        )


ACCESS_STEP = "fabric-checks"
"""The applied plan step holding every group's FabricCheckAccessChart (no group's step can be named so)."""
RUN_NOTE = (
    "A Volcano Job's spec cannot change, so every run deletes the last one first:\n"
    "  kubectl delete -f {file} --ignore-not-found --cascade=foreground --wait\n"
    "  kubectl apply -f {file}\n"
    "`make fabric-check CONFIG=... GROUP={group}` prints these and how to wait and read the verdict."
)


@dataclass(frozen=True, kw_only=True)
class FabricCheckValues:
    """One Trainium node group's fabric check, as the plan renders it."""

    node_group: str
    instance: TrainiumInstanceType
    nodes: int
    """The group's max_size: the check runs on every node the group can have."""
    image: str
    queue: str | None
    """The Volcano queue of a team that may use the group; None when no team may."""
    threshold: float
    message_bytes: int
    taint: bool
    devices: NodeDevices | None = None
    """On a ``devices: dra`` group, what a worker claims of its node (cluster_facts/dra.py); None: the
    device plugins' resources."""


def skip_reason(check: FabricCheckValues) -> str | None:
    """Why this group gets no fabric check, or None."""
    if check.nodes < 2:
        return (
            f"node group {check.node_group} has max_size {check.nodes}; a fabric check needs at least 2 nodes "
            "(EFA carries traffic between nodes)"
        )
    if check.queue is None:
        return f"no team's queue may use node group {check.node_group} (teams[].node_groups)"
    return None


Renderer = Callable[[Callable[[cdk8s.App, str], cdk8s.Chart], str], tuple[Mapping[str, Any], ...]]


def fabric_check_steps(
    checks: tuple[FabricCheckValues, ...],
    *,
    namespace: str,
    vpc_cidr: str,
    after: tuple[str, ...],
    queue_gates: Mapping[str, str],
    render: Renderer,
) -> list[ManifestSet]:
    """``ACCESS_STEP`` (applied, when any group can be checked), then ``fabric-check-<group>`` per
    group, rendered and never applied: the job itself, or for a group that cannot be checked no
    object and the reason in the file's header."""
    runnable = [check for check in checks if skip_reason(check) is None]
    steps: list[ManifestSet] = []
    if runnable:
        steps.append(
            ManifestSet(
                name=ACCESS_STEP,
                manifests=(
                    *(
                        manifest
                        for check in runnable
                        for manifest in render(
                            partial(
                                FabricCheckAccessChart,
                                node_group=check.node_group,
                                nodes=check.nodes,
                                namespace=namespace,
                                taint=check.taint,
                                vpc_cidr=vpc_cidr,
                            ),
                            f"{ACCESS_STEP}-{check.node_group}",
                        )
                    ),
                    # A DRA group's claim templates, where its check's workers run (the teams' own are
                    # in their namespaces; a pod names a template of its own namespace only).
                    *_claim_templates(runnable, namespace=namespace, render=render),
                ),
                after=after,
            )
        )
    for check in checks:
        name = job_name(check.node_group)
        reason = skip_reason(check)
        if reason is not None or check.queue is None:
            steps.append(
                ManifestSet(name=name, manifests=(), applied=False, note=f"No fabric check: {reason}.")
            )
            continue
        steps.append(
            ManifestSet(
                name=name,
                manifests=render(
                    partial(
                        FabricCheckChart,
                        instance=check.instance,
                        node_group=check.node_group,
                        nodes=check.nodes,
                        image=check.image,
                        queue=check.queue,
                        namespace=namespace,
                        threshold=check.threshold,
                        message_bytes=check.message_bytes,
                        taint=check.taint,
                        devices=check.devices,
                    ),
                    name,
                ),
                after=(ACCESS_STEP, queue_gates[check.queue]),
                applied=False,
                note=RUN_NOTE.format(file=f"cdk.out/k8s/{name}.yaml", group=check.node_group),
            )
        )
    return steps


def _claim_templates(
    checks: list[FabricCheckValues], *, namespace: str, render: Renderer
) -> tuple[Mapping[str, Any], ...]:
    """``trainium-node-<group>`` (and ``-efa``) in ``namespace`` for each DRA group checked; none
    without one (a device-plugin cluster's access step is unchanged)."""
    groups = {check.node_group: check.devices for check in checks if check.devices is not None}
    if not groups:
        return ()
    return render(
        partial(NodeClaimTemplatesChart, namespace=namespace, groups=groups), f"{ACCESS_STEP}-claims"
    )
