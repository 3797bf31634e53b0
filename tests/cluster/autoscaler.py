"""The real Kubernetes Cluster Autoscaler on the harness's API server, its kwok cloud provider in the
place of AWS.

What is real: the autoscaler binary (tools/cluster_binaries.py builds release ``AUTOSCALER_RELEASE``
with ``-tags kwok``; ``AUTOSCALER_INSTEAD_OF`` says how it differs from the 1.36.1 the product
deploys), run as a local process with the arguments of the Deployment the product's Helm release
rendered (read back from the API server, as tests/cluster/control_plane.py does for Volcano) and the
token of that release's ServiceAccount, so the chart's RBAC is what lets it work. Its scale-up
decisions (which group, how many nodes), its startup-taint handling and its scale-down are its own.

What stands in for AWS: the kwok provider (cloudprovider/kwok at that release). It reads its
configuration from the ConfigMap ``kwok-provider-config`` (``KWOK_PROVIDER_CONFIGMAP``) in the
namespace ``POD_NAMESPACE``, here ``readNodesFrom: configmap``: node templates, Node objects in the
ConfigMap ``KWOK_TEMPLATES``, grouped by the label ``fromNodeLabelKey`` (the stack's node-group label),
each group's bounds in the annotations ``cluster-autoscaler.kwok.nodegroup/{min,max}-count``. A
scale-up creates copies of its group's template as Node objects (annotated ``kwok.x-k8s.io/node:
fake``, so the harness's kwok makes them Ready), a scale-down deletes them. It talks to the API server
with the admin kubeconfig (``KWOK_PROVIDER_MODE=local``, ``KUBECONFIG``): it plays the cloud, which
the autoscaler's own credentials do not reach either. One template per configured Trainium group, from
``tests.cluster.nodes.trainium_node`` (the one conversion of the Auto Scaling group's node-template tags
to a Node, with the node check's startup taint every Trainium node registers with).

Where the AWS provider would read the Auto Scaling group (aws_manager.go ``buildNodeFromTemplate``:
the instance type's cpu and memory, the tags' labels, taints and resources, 110 pods), the template
here is the same tags read by tests/cluster/nodes.py: a model written here of that function, checked
only by reading it.

``NodeAgent`` plays what runs on a new node and is not in the cluster here: the kubelet's hostname
label and CSINode (with the FSx CSI driver, as the add-on's node DaemonSet registers it, owned by the
Node so the garbage collector removes it with the node), and the node check lifting its startup taint
``hold_taint_seconds`` after the node is Ready (the check itself, on Neuron devices, cannot run here),
or, given ``check``, the node check's program run on each new node (test_failing_group.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cluster_facts.autoscaling import AUTOSCALER_NAME, AUTOSCALER_NAMESPACE, AUTOSCALER_STATUS_CONFIGMAP
from cluster_facts.instance_catalog import instance_type
from cluster_facts.kubernetes_names import NODE_GROUP_LABEL
from config import StackConfig
from tests.cluster.control_plane import ControlPlane, Kubectl
from tests.cluster.nodes import FSX_CSI_DRIVER, trainium_node
from tests.cluster.processes import Process, free_port, wait_until
from tools.cluster_binaries import AUTOSCALER_RELEASE

__all__ = [
    "GROUP_ANNOTATION",
    "KWOK_CONFIG",
    "KWOK_TEMPLATES",
    "MAX_COUNT_ANNOTATION",
    "MIN_COUNT_ANNOTATION",
    "STARTUP_TAINT_PREFIX",
    "TEST_TIMINGS",
    "Autoscaler",
    "NodeAgent",
    "autoscaler_args",
    "kwok_templates",
    "node_template",
    "start_autoscaler",
]

KWOK_CONFIG = "kwok-provider-config"
"""The kwok provider's own ConfigMap name (its default; ``KWOK_PROVIDER_CONFIGMAP``)."""
KWOK_TEMPLATES = "kwok-provider-templates"
GROUP_ANNOTATION = "cluster-autoscaler.kwok.nodegroup/name"
"""What the kwok provider annotates each template, and so each node it creates, with: its group."""
MIN_COUNT_ANNOTATION = "cluster-autoscaler.kwok.nodegroup/min-count"
MAX_COUNT_ANNOTATION = "cluster-autoscaler.kwok.nodegroup/max-count"
STARTUP_TAINT_PREFIX = "startup-taint.cluster-autoscaler.kubernetes.io/"
"""The autoscaler's (utils/taints/taints.go ``StartupTaintPrefix``, the same at 1.33.0 and 1.36.1)."""

TEST_TIMINGS: dict[str, str] = {
    "scale-down-unneeded-time": "20s",
    "scale-down-delay-after-add": "20s",
    "scan-interval": "2s",
}
"""The product's minutes (config autoscaler.*, rendered into extraArgs) shortened so a test sees a
scale-down; and the loop's 10 s default, so a scale-up is seen within seconds."""

_DROPPED_FLAGS = ("--cloud-provider", "--node-group-auto-discovery", "--aws-region")
"""AWS's: the provider is kwok here, its groups come from its ConfigMap, not from tags."""


def node_template(config: StackConfig, group: str) -> dict[str, Any]:
    """The kwok node template of one configured Trainium group: the node as it registers
    (``trainium_node``: the tags' labels, taints and resources, and the node check's startup taint,
    which the autoscaler drops from a template when it simulates, taints.SanitizeTaints), its size
    bounds from the configuration."""
    (settings,) = [g for g in config.trainium.node_groups if g.name == group]
    node = trainium_node(
        f"template-{group}",
        instance=instance_type(settings.instance_type),
        node_group=group,
        zone=config.trainium.availability_zone,
        dra=settings.uses_dra,
    )
    node["metadata"]["annotations"].update(
        {MIN_COUNT_ANNOTATION: str(settings.min_size), MAX_COUNT_ANNOTATION: str(settings.max_size)}
    )
    return node


def kwok_templates(config: StackConfig) -> dict[str, Any]:
    """The templates ConfigMap's one document: a List of every Trainium group's template."""
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [node_template(config, group.name) for group in config.trainium.node_groups],
    }


def _kwok_config() -> dict[str, Any]:
    return {
        "apiVersion": "v1alpha1",
        "readNodesFrom": "configmap",
        "nodegroups": {"fromNodeLabelKey": NODE_GROUP_LABEL},
        # No `kwok-provider` taint: a real node does not carry it, and no pod here tolerates it.
        "nodes": {"skipTaint": True},
        "configmap": {"name": KWOK_TEMPLATES},
    }


def autoscaler_args(deployment: Mapping[str, Any], overrides: Mapping[str, str]) -> list[str]:
    """The container's arguments (its command after the program, then its args), with AWS's
    provider flags dropped and each ``overrides`` key set (replaced where the chart set it)."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = [*container.get("command", [])[1:], *container.get("args", [])]
    kept = [a for a in args if a.split("=", 1)[0] not in _DROPPED_FLAGS]
    kept = [a for a in kept if a.split("=", 1)[0].removeprefix("--") not in overrides]
    return [*kept, *(f"--{key}={value}" for key, value in overrides.items())]


@dataclass
class NodeAgent:
    """What a new node's own software does here (module docstring): a thread polling the nodes of
    the autoscaler's groups every half second."""

    kubectl: Kubectl
    hold_taint_seconds: float
    check: Callable[[str], None] | None = None
    """Instead of lifting the startup taint itself: run this (the node check's program) on each new
    node once it is Ready, in a thread of its own, as each node's check pod runs at once."""
    checked: set[str] = field(default_factory=set)
    selector: str = ""
    """A label selector of the groups' nodes: with thousands of other nodes (tests/cluster/bench_scale.py)
    a poll of every node each half second would be most of the work."""
    ready_at: dict[str, float] = field(default_factory=dict)
    lifted_at: dict[str, float] = field(default_factory=dict)
    seen: dict[str, float] = field(default_factory=dict)
    registered_tainted: set[str] = field(default_factory=set)
    """Nodes that carried a startup taint when the agent first saw them."""
    on_register: Callable[[Mapping[str, Any]], None] | None = None
    """More of what a new node's software does, once it is registered (the DRA drivers' slices:
    tests/cluster/dra.py)."""
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="node-agent", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.step()
            except Exception as error:  # noqa: BLE001 - kept for the test's failure message
                self.errors.append(repr(error))

    def step(self) -> None:
        now = time.time()  # wall clock: the tests compare it with the API server's timestamps
        for node in self.kubectl.json("get", "nodes", *(["-l", self.selector] if self.selector else []))[
            "items"
        ]:
            metadata = node["metadata"]
            if GROUP_ANNOTATION not in metadata.get("annotations", {}):
                continue
            name = metadata["name"]
            startup = [
                t["key"] for t in node["spec"].get("taints", []) if t["key"].startswith(STARTUP_TAINT_PREFIX)
            ]
            if name not in self.seen:
                self.seen[name] = now
                if startup:
                    self.registered_tainted.add(name)
                self._register(node)
            ready = any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in node.get("status", {}).get("conditions", [])
            )
            if ready and name not in self.ready_at:
                self.ready_at[name] = now
            if startup and name in self.ready_at and self.check is not None:
                if name not in self.checked:
                    self.checked.add(name)
                    threading.Thread(
                        target=self._check, args=(name,), name=f"check-{name}", daemon=True
                    ).start()
            elif startup and name in self.ready_at and now - self.ready_at[name] >= self.hold_taint_seconds:
                self.kubectl("taint", "node", name, *(f"{key}-" for key in startup))
                self.lifted_at[name] = now
            elif not startup and name in self.ready_at and name not in self.lifted_at:
                self.lifted_at[name] = now

    def _check(self, name: str) -> None:
        assert self.check is not None
        try:
            self.check(name)
        except Exception as error:  # noqa: BLE001 - kept for the test's failure message
            self.errors.append(f"check of {name}: {error!r}")

    def _register(self, node: Mapping[str, Any]) -> None:
        name = node["metadata"]["name"]
        self.kubectl("label", "node", name, f"kubernetes.io/hostname={name}", "--overwrite")
        csi_node = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {
                "name": name,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
                ],
            },
            "spec": {"drivers": [{"name": FSX_CSI_DRIVER, "nodeID": name}]},
        }
        self.kubectl("create", "-f", "-", input=json.dumps(csi_node))
        if self.on_register is not None:
            self.on_register(node)


@dataclass
class Autoscaler:
    plane: ControlPlane
    process: Process
    agent: NodeAgent
    args: list[str]

    def nodes(self, group: str | None = None) -> list[dict[str, Any]]:
        """The nodes the autoscaler's provider created (of ``group``), not being deleted."""
        found = self.plane.kubectl.json("get", "nodes")["items"]
        return [
            n
            for n in found
            if GROUP_ANNOTATION in n["metadata"].get("annotations", {})
            and (group is None or n["metadata"]["annotations"][GROUP_ANNOTATION] == group)
        ]

    def log(self) -> str:
        return self.process.log.read_text(errors="replace")

    def status(self) -> str:
        """What the autoscaler wrote into its status ConfigMap ('' before its first loop)."""
        found = self.plane.kubectl(
            "get", "configmap", AUTOSCALER_STATUS_CONFIGMAP, "-n", AUTOSCALER_NAMESPACE,
            "-o", "jsonpath={.data.status}", check=False,
        )  # fmt: skip
        return found.stdout if found.returncode == 0 else ""

    def stop(self) -> None:
        """The process, the agent, every node the provider created, and its ConfigMaps."""
        self.plane.processes.stop(self.process.name)
        self.agent.stop()
        for node in self.nodes():
            self.plane.kubectl(
                "delete", "node", node["metadata"]["name"], "--ignore-not-found", "--wait=false"
            )
        for name in (KWOK_CONFIG, KWOK_TEMPLATES):
            self.plane.kubectl("delete", "configmap", name, "-n", AUTOSCALER_NAMESPACE, "--ignore-not-found")


def start_autoscaler(
    plane: ControlPlane,
    config: StackConfig,
    *,
    overrides: Mapping[str, str] = TEST_TIMINGS,
    hold_taint_seconds: float = 5.0,
    templates: Callable[[StackConfig], dict[str, Any]] = kwok_templates,
    check: Callable[[str], None] | None = None,
    on_register: Callable[[Mapping[str, Any]], None] | None = None,
) -> Autoscaler:
    """The autoscaler as the applied plan's Helm release runs it (its Deployment must exist), on
    kwok node groups made from ``config``; waits until it has read them."""
    namespace = AUTOSCALER_NAMESPACE
    deployment = plane.kubectl.json("get", "deployment", AUTOSCALER_NAME, "-n", namespace)
    pod = deployment["spec"]["template"]["spec"]
    for name, data in (
        (KWOK_CONFIG, {"config": json.dumps(_kwok_config())}),
        (KWOK_TEMPLATES, {"templates": json.dumps(templates(config))}),
    ):
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        }
        plane.kubectl("apply", "-f", "-", input=json.dumps(configmap))
    token = plane.service_account_token(namespace, pod["serviceAccountName"])
    kubeconfig = plane._write_kubeconfig("cluster-autoscaler-sa", token=token)
    args = autoscaler_args(
        deployment,
        {
            **overrides,
            "cloud-provider": "kwok",
            "kubeconfig": str(kubeconfig),
            "address": f"127.0.0.1:{free_port()}",
            # 1.34 and later: the default (flags.go); 1.33.0's is false (tools/cluster_binaries.py AUTOSCALER_INSTEAD_OF).
            "cordon-node-before-terminating": "true",
        },
    )
    env = {
        "POD_NAMESPACE": namespace,
        "KWOK_PROVIDER_MODE": "local",
        "KUBECONFIG": str(plane.kubeconfig),
        "PATH": "/usr/bin:/bin",
    }
    groups = [group.name for group in config.trainium.node_groups]
    agent = NodeAgent(
        plane.kubectl,
        hold_taint_seconds,
        check,
        on_register=on_register,
        selector=f"{NODE_GROUP_LABEL} in ({','.join(groups)})",
    )
    agent.start()
    binary = plane.binaries.cluster_autoscaler
    plane.processes.stop("cluster-autoscaler")
    # A status of an earlier run would pass for this one's first loop.
    plane.kubectl("delete", "configmap", AUTOSCALER_STATUS_CONFIGMAP, "-n", namespace, "--ignore-not-found")
    process = plane.processes.start("cluster-autoscaler", [str(binary), *args], env=env)
    autoscaler = Autoscaler(plane=plane, process=process, agent=agent, args=args)
    try:
        wait_until(
            lambda: all(f"name: {group}" in autoscaler.status() for group in groups),
            timeout=60,
            what=f"the cluster autoscaler's first loop over the kwok node groups {groups}",
            processes=plane.processes,
            watch=[process],
        )
    except BaseException:
        autoscaler.stop()
        raise
    version = f"Cluster Autoscaler {AUTOSCALER_RELEASE}"
    if version not in autoscaler.log():
        autoscaler.stop()
        raise AssertionError(f"the autoscaler binary does not report {version!r}:\n{process.tail()}")
    return autoscaler


def bound_nodes(pods: Sequence[Mapping[str, Any]]) -> set[str]:
    return {str(p["spec"]["nodeName"]) for p in pods if p["spec"].get("nodeName")}


__all__ += ["bound_nodes"]
