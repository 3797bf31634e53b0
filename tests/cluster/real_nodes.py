"""Real nodes beside kwok's: a kubelet and containerd (runc, the CNI plugins on a bridge, kube-proxy)
that run the platform's pods as containers, registered with the session's API server.

The network (tests/cluster/netns.py): the session creates a network namespace for the node network
(``<prefix>-net``: a bridge ``br0`` with the gateway ``NODE_GATEWAY``, nothing else) and one per
node (``<prefix>-<n>``: ``eth0`` on that bridge at ``10.250.0.<10+n>``, the node's pod bridge
``cni0`` for its pod range ``10.246.<n>.0/24``). None of them has a link to this machine's own
network namespace or a default route out: a packet of a node or a pod reaches the bridge and the
other nodes, nothing else. The nodes reach the API server at ``NODE_GATEWAY:<its port>`` (a listener
of this process inside the node network, joined to 127.0.0.1). Pods reach it as on EKS: the
``kubernetes`` Service's one endpoint is ``API_ENDPOINT:443``, an address inside the default
configuration's VPC standing for the EKS control plane's network interfaces in the cluster's
subnets (another listener joined to the API server; the API server keeps no endpoints of its own,
``--endpoint-reconciler-type=none``), so a NetworkPolicy judged after kube-proxy's translation, as
kube-router judges it, sees what it would see on EKS. The API server reaches kubelets and pods
through its egress proxy, which connects inside the node network from ``API_ENDPOINT`` too
(tests/cluster/egress.py). The bridge also holds the stand-ins of the addresses the platform's
policies name outside the cluster: ``METADATA_ADDRESS`` (the instance metadata service's own
address; the node network is this session's, so the real address serves) and ``OUTSIDE_ADDRESS``
(a public address, for "the internet"), and ``FILE_SYSTEM_ADDRESS`` (the file system's interface in
the VPC, for the node check's Lustre port); a test listens there with ``RealNodes.listen``.

Each node: containerd (its own root, state and socket under the session's directory; the
``overlayfs`` snapshotter; runc with the ``cgroupfs`` driver, cgroup v1 as this machine has), the
kubelet (a client certificate ``system:node:<name>`` so the Node authorizer and NodeRestriction
judge it as on EKS, its serving certificate from the session's CA, its cgroups under
``/<prefix>-<node>``, ``failCgroupV1: false``: this machine mounts cgroup v1), kube-proxy
(``nftables`` mode, in the node's namespace only), and kube-router's network policy controller alone
(``--run-firewall``; no router, no service proxy: tools/cluster-binaries/kube-router/go.mod says
why, and the two advisories of v2.1.0 are in the controllers not started) as the NetworkPolicy
enforcer. kube-router writes iptables rules through Debian's ``iptables`` (1.8.9, the ``nf_tables``
backend: its rules land in the node namespace's ``ip filter`` table) and ipsets (Debian's ipset);
kube-proxy writes its own ``ip kube-proxy`` nftables table through Debian's ``nft`` (1.0.6). All
three are unpacked by ``make debian-tools`` (tools/debian_tools.py, sets "netfilter" and "ipset"),
not the machine's: a fresh machine has none, and kube-proxy and kube-router run with a PATH that
holds no sbin directory (``debian_tools.environment``), so a copy this machine has is never used. Both
tables hook the same netfilter points of the node's namespace and coexist: kube-proxy translates a
Service address at prerouting, kube-router's FORWARD and OUTPUT chains judge the translated packet.
Every process runs through ``nsenter --net`` in
the node's namespace (its mounts and cgroups stay the machine's: the kubelet needs them), is
started by ``Processes`` and stopped by its PID; the containers' shims are stopped by the PIDs
containerd recorded; every mount under the node's directory is unmounted and its cgroups removed.

Devices (``add_node(devices=...)``, tests/cluster/test_devices.py): the fake device plugin
(tools/cluster-binaries/fake-device-plugin, a stand-in for the Neuron and EFA device plugins: its
main.go says what it leaves out) registers each resource with the node's kubelet over the kubelet's
device plugin socket, and answers Allocate with character device nodes it made in the node's
directory (major ``DEVICE_MAJOR``, which no driver holds). The kubelet listens for plugins at a path
it does not take from ``--root-dir`` (``/var/lib/kubelet/device-plugins/kubelet.sock``, k8s.io/kubelet
``pluginapi.KubeletSocket``), one for the whole machine; so such a node's kubelet runs in a mount
namespace of its own where that directory is the node's ``device-plugins`` (bound there, seen by
no other process), and its root directory is a shared bind mount made first, so the volumes it
mounts there still reach containerd, which stays in the machine's mount namespace.

kwok and the real kubelet keep apart: kwok manages only nodes annotated ``kwok.x-k8s.io/node=fake``
(``--manage-nodes-with-annotation-selector``), which a real node is not; a kubelet touches only its
own Node and the pods bound to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster_facts.autoscaling import scale_from_zero_resources
from cluster_facts.instance_catalog import TrainiumInstanceType
from cluster_facts.kubernetes_names import EFA_RESOURCE, NEURON_CORE_RESOURCE, NEURON_RESOURCE
from tests.cluster.images import image_archive
from tests.cluster.netns import Forwarder, Listener, NetworkNamespace, connect_in
from tests.cluster.processes import Process, wait_until
from tests.cluster.standin_images import SANDBOX_IMAGE, pause_image
from tools import debian_tools
from tools.cluster_binaries import binary_path

__all__ = [
    "API_ENDPOINT",
    "CLUSTER_DNS",
    "DEVICE_MAJOR",
    "FILE_SYSTEM_ADDRESS",
    "METADATA_ADDRESS",
    "NODE_GATEWAY",
    "NODE_NETWORK",
    "OUTSIDE_ADDRESS",
    "POD_NETWORK",
    "DeviceResource",
    "NodeBinaries",
    "RealNode",
    "RealNodes",
    "find_node_binaries",
    "trainium_devices",
]

NODE_NETWORK = "10.250.0.0/24"
NODE_GATEWAY = "10.250.0.1"
"""Where the nodes and pods reach the API server, inside the session's node network only."""
API_ENDPOINT = "10.0.255.10"
"""The ``kubernetes`` Service's endpoint for pods (port 443): inside config/default.yaml's VPC
(10.0.0.0/16), where EKS puts the control plane's interfaces; the source of the API server's
connections to kubelets and pods (its egress proxy), as those interfaces are on EKS."""
FILE_SYSTEM_ADDRESS = "10.0.255.20"
"""The file system's address for the node check's connection to the Lustre port (a listener of the
test, ``RealNodes.listen``): inside the default configuration's VPC, as FSx for Lustre's network
interface is in the cluster's subnet, so the node check's NetworkPolicy (the VPC's range on 988)
admits it as on EKS."""
METADATA_ADDRESS = "169.254.169.254"
"""The instance metadata service's address, on the node network's bridge (no instance here)."""
OUTSIDE_ADDRESS = "203.0.113.10"
"""An address outside the cluster and every private range (TEST-NET-3): "the internet" of a run's
HTTPS, on the node network's bridge; nothing is sent beyond it."""
CLUSTER_DNS = "10.100.0.10"
"""The kube-dns Service's ClusterIP, the kubelets' ``clusterDNS``: the tenth address of the service
range (control_plane.SERVICE_CIDR), where EKS puts it. CoreDNS answers there once a test starts it
(tests/cluster/cluster_dns.py); until then a pod's lookups find no server, as on a cluster whose
CoreDNS is down."""
POD_NETWORK = "10.246.0.0/16"
"""The real nodes' pods (node n: 10.246.n.0/24); kwok's simulated pods use 10.244.0.0/16."""
KUBE_ROUTER_USER = "tests:kube-router"
"""kube-router's identity (its client certificate's common name), bound to read-only access."""
DEVICE_MAJOR = 240
"""The major number of the device nodes standing for Neuron and EFA devices: in Linux's range for
local use (Documentation/admin-guide/devices.txt, 240-254), and held by no driver of this machine
(``add_node`` checks /proc/devices), so opening one fails (ENXIO) and reaches nothing."""
_KUBELET_DEVICE_PLUGINS = Path("/var/lib/kubelet/device-plugins")
"""Where every kubelet listens for device plugins, whatever its --root-dir (the module's docstring)."""
_CGROUP_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer", "systemd")


@dataclass(frozen=True)
class NodeBinaries:
    kubelet: Path
    kube_proxy: Path
    containerd: Path
    shim: Path
    ctr: Path
    runc: Path
    cni: Path
    """The directory of the CNI plugins (bridge, host-local, loopback, portmap)."""
    kube_router: Path
    device_plugin: Path
    """The fake device plugin (tools/cluster-binaries/fake-device-plugin)."""
    dra_plugin: Path
    """The DRA drivers' kubelet plugin stand-in (tools/cluster-binaries/dra-kubelet-plugin)."""
    ipset: Path
    """Where Debian's ipset is unpacked (``usr/sbin/ipset``, its library under ``usr/lib``)."""
    netfilter: Path
    """Where Debian's iptables and nft are unpacked (``usr/sbin/iptables`` -> ``xtables-nft-multi``,
    ``usr/sbin/nft``, their libraries and iptables' extensions under ``usr/lib``)."""

    @property
    def path(self) -> str:
        """PATH for containerd and the kubelet, after Debian's iptables (``debian_tools.environment``:
        the kubelet's KUBE-IPTABLES-HINT chain, the CNI portmap plugin's rules): the shim and runc
        first, then the machine's (their mount helpers)."""
        directories = dict.fromkeys(str(p.parent) for p in (self.shim, self.runc))
        return ":".join([*directories, os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")])


# The sets kube-proxy and kube-router run commands of: iptables, nft, ipset (no sbin directory on
# their PATH: the machine's copies, if it has any, are never run).
_NETFILTER = ("netfilter", "ipset")


def find_node_binaries() -> NodeBinaries:
    paths = NodeBinaries(
        kubelet=binary_path("kubelet", "kubelet"),
        kube_proxy=binary_path("kubelet", "kube-proxy"),
        containerd=binary_path("containerd", "containerd"),
        shim=binary_path("containerd", "containerd-shim-runc-v2"),
        ctr=binary_path("containerd", "ctr"),
        runc=binary_path("runc", "runc"),
        cni=binary_path("cni-plugins", "bridge").parent,
        kube_router=binary_path("kube-router", "kube-router"),
        device_plugin=binary_path("fake-device-plugin", "fake-device-plugin"),
        dra_plugin=binary_path("dra-kubelet-plugin", "dra-kubelet-plugin"),
        ipset=debian_tools.root("ipset"),
        netfilter=debian_tools.root("netfilter"),
    )
    missing = [
        str(p)
        for p in (
            paths.kubelet,
            paths.kube_proxy,
            paths.containerd,
            paths.shim,
            paths.ctr,
            paths.runc,
            paths.kube_router,
            paths.device_plugin,
            paths.dra_plugin,
        )
        if not p.is_file()
    ] + [
        str(paths.cni / name)
        for name in ("bridge", "host-local", "loopback", "portmap")
        if not (paths.cni / name).is_file()
    ]
    if missing:
        raise AssertionError(
            f"the real nodes' binaries are missing: {', '.join(missing)}; run `make cluster-binaries`"
        )
    if not debian_tools.installed("ipset"):
        raise AssertionError(f"{paths.ipset} is missing: run `make debian-tools` (Debian's ipset)")
    if not debian_tools.installed("netfilter"):
        raise AssertionError(
            f"{paths.netfilter} is missing: run `make debian-tools` (Debian's iptables and nft)"
        )
    return paths


@dataclass(frozen=True)
class DeviceResource:
    """One extended resource the fake device plugin registers: ``count`` IDs, ``per_device`` of them
    to a device node at ``path % (id // per_device)``, their IDs in the variable ``variable``."""

    name: str
    count: int
    path: str
    per_device: int = 1
    variable: str = ""

    def argument(self) -> str:
        shared = f"/{self.per_device}" if self.per_device != 1 else ""
        variable = f":{self.variable}" if self.variable else ""
        return f"--resource={self.name}={self.count}{shared}:{self.path}{variable}"


def trainium_devices(instance: TrainiumInstanceType) -> tuple[DeviceResource, ...]:
    """What the Neuron and EFA device plugins advertise on a node of ``instance``: the counts the
    node template gives the autoscaler (cluster_facts.autoscaling, from the catalog); the device
    nodes and variables as the plugins hand them to a container: ``/dev/neuron<N>`` with
    ``AWS_NEURON_VISIBLE_DEVICES`` for whole devices, the NeuronCores of a device on its node with
    ``NEURON_RT_VISIBLE_CORES``, ``/dev/infiniband/uverbs<N>`` per EFA interface."""
    counts = scale_from_zero_resources(instance)
    chips, cores = counts[NEURON_RESOURCE], counts[NEURON_CORE_RESOURCE]
    return (
        DeviceResource(NEURON_RESOURCE, chips, "/dev/neuron%d", variable="AWS_NEURON_VISIBLE_DEVICES"),
        DeviceResource(
            NEURON_CORE_RESOURCE,
            cores,
            "/dev/neuron%d",
            per_device=cores // chips,
            variable="NEURON_RT_VISIBLE_CORES",
        ),
        DeviceResource(EFA_RESOURCE, counts[EFA_RESOURCE], "/dev/infiniband/uverbs%d"),
    )


@dataclass
class RealNode:
    name: str
    index: int
    directory: Path
    namespace: NetworkNamespace
    cgroup: str
    processes: list[Process] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"10.250.0.{10 + self.index}"

    @property
    def pod_cidr(self) -> str:
        return f"10.246.{self.index}.0/24"

    @property
    def socket(self) -> Path:
        return self.directory / "run" / "containerd.sock"

    @property
    def device_plugins(self) -> Path:
        """The kubelet's device plugin directory, as the node's kubelet sees it at
        ``/var/lib/kubelet/device-plugins`` (the module's docstring)."""
        return self.directory / "device-plugins"

    @property
    def cdi_specs(self) -> Path:
        """The node's containerd's one CDI spec directory (``cdi_spec_dirs``), where the DRA plugin
        stand-in writes a prepared claim's devices (in place of the machine-wide /etc/cdi and
        /var/run/cdi, which every node's containerd would share)."""
        return self.directory / "cdi"

    @property
    def device_nodes(self) -> Path:
        """Where the fake device plugin makes the device nodes (``<here>/dev/neuron0`` ...)."""
        return self.directory / "devices"

    def ctr(self, binaries: NodeBinaries, *args: str, timeout: float = 300) -> str:
        result = subprocess.run(
            [str(binaries.ctr), "--address", str(self.socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise AssertionError(f"ctr {' '.join(args)} on {self.name}: {result.stderr.strip()}")
        return result.stdout


@dataclass
class RealNodes:
    """The real nodes of one control plane (``ControlPlane.real_nodes``)."""

    plane: Any
    """The ControlPlane (typed loosely: control_plane imports this module)."""
    binaries: NodeBinaries
    prefix: str = field(default_factory=lambda: f"tcl{os.getpid()}")
    nodes: dict[str, RealNode] = field(default_factory=dict)
    network: NetworkNamespace = field(init=False)
    _forwarder: Forwarder | None = None
    _listeners: list[Forwarder | Listener] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.network = NetworkNamespace(f"{self.prefix}-net")

    # ----- the network ----------------------------------------------------------------------------

    def start_network(self) -> None:
        self.network.create()
        self.network.ip("link", "add", "br0", "type", "bridge")
        self.network.ip("addr", "add", f"{NODE_GATEWAY}/24", "dev", "br0")
        self.network.ip("link", "set", "dev", "br0", "up")
        for address in (API_ENDPOINT, FILE_SYSTEM_ADDRESS, METADATA_ADDRESS, OUTSIDE_ADDRESS):
            self.network.ip("addr", "add", f"{address}/32", "dev", "br0")
        self._forwarder = Forwarder(self.network.path, NODE_GATEWAY, self.plane.api_port, self.plane.api_port)
        self._forwarder.start()
        pods_way_in = Forwarder(self.network.path, API_ENDPOINT, 443, self.plane.api_port)
        pods_way_in.start()
        self._listeners.append(pods_way_in)
        self._api_endpoint()
        self._kube_router_access()
        for cidr in (NODE_NETWORK, POD_NETWORK):
            self.plane.egress.add_network(
                cidr, lambda host, port: connect_in(self.network.path, host, port, source=API_ENDPOINT)
            )

    def _api_endpoint(self) -> None:
        """The ``kubernetes`` Service's endpoint, written here: ``API_ENDPOINT:443`` (the module's
        docstring). The API server writes none (``--endpoint-reconciler-type=none``)."""
        labels = {
            "kubernetes.io/service-name": "kubernetes",
            "endpointslice.kubernetes.io/managed-by": "tests",
        }
        objects = [
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": "kubernetes", "namespace": "default", "labels": labels},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [API_ENDPOINT], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "port": 443, "protocol": "TCP"}],
            },
        ]
        self.plane.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        )

    def _kube_router_access(self) -> None:
        """kube-router's identity (``system:kube-router``, a client certificate per node) may read
        what its informers list and watch, nothing more: it starts informers on Services, Endpoints,
        EndpointSlices, Pods, Nodes, Namespaces and NetworkPolicies whatever controllers run
        (v2.1.0 pkg/cmd/kube-router.go, ``Run``), and the policy controller writes nothing."""
        read = ["get", "list", "watch"]
        name = "tests:kube-router-firewall"
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods", "namespaces", "nodes", "services", "endpoints"],
                    "verbs": read,
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
                {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": read},
            ],
        }
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBE_ROUTER_USER}],
        }
        self.plane.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [role, binding]}),
        )

    def listen(self, address: str, port: int) -> None:
        """A TCP listener at ``address:port`` of the node network (one of the bridge's addresses)
        that accepts each connection and closes it, until the nodes stop."""
        if self._forwarder is None:
            self.start_network()
        listener = Listener(self.network.path, address, port)
        listener.start()
        self._listeners.append(listener)

    # ----- a node ---------------------------------------------------------------------------------

    def add_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str],
        taints: Sequence[Mapping[str, str]] = (),
        provider_id: str | None = None,
        images: Iterable[Any] = (),
        devices: Sequence[DeviceResource] = (),
    ) -> RealNode:
        """A node registered by its kubelet with ``labels`` and ``taints``, Ready, with ``images``
        (tests/cluster/standin_images.py) imported into its containerd; with ``devices``, the fake
        device plugin registers them and the kubelet reports them allocatable before this returns."""
        if self._forwarder is None:
            self.start_network()
        index = len(self.nodes) + 1
        node = RealNode(
            name=name,
            index=index,
            directory=self.plane.work_dir / "nodes" / name,
            namespace=NetworkNamespace(f"{self.prefix}-{index}"),
            cgroup=f"/{self.prefix}-{name}",
        )
        self.nodes[name] = node
        self.plane.egress.add_name(name, node.address)
        self._node_network(node)
        self._cgroups(node)
        node.processes.append(self._start_containerd(node))
        self.import_images(node, images)
        node.processes.append(
            self._start_kubelet(node, labels, taints, provider_id, own_devices=bool(devices))
        )
        node.processes.append(self._start_kube_proxy(node))
        self.plane.wait_for(
            lambda: _ready(self.plane.kubectl.json("get", "node", name)),
            timeout=120,
            what=f"the real node {name} Ready",
        )
        if devices:
            node.processes.append(self._start_device_plugin(node, devices))
        # After the Node exists: kube-router reads its address from it at start.
        node.processes.append(self._start_kube_router(node))
        return node

    def _node_network(self, node: RealNode) -> None:
        ns = node.namespace
        ns.create()
        ns.ip(
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            f"v{node.index}",
            "netns",
            self.network.name,
        )
        self.network.ip("link", "set", "dev", f"v{node.index}", "master", "br0", "up")
        ns.ip("addr", "add", f"{node.address}/24", "dev", "eth0")
        ns.ip("link", "set", "dev", "eth0", "up")
        ns.ip("route", "add", "default", "via", NODE_GATEWAY)
        ns.sysctl("net.ipv4.ip_forward", "1")
        ns.sysctl("net.bridge.bridge-nf-call-iptables", "1")
        # The gateway's namespace and every other node route this node's pods to it.
        self.network.ip("route", "add", node.pod_cidr, "via", node.address)
        for other in self.nodes.values():
            if other is not node:
                other.namespace.ip("route", "add", node.pod_cidr, "via", node.address)
                ns.ip("route", "add", other.pod_cidr, "via", other.address)
        cni = node.directory / "cni"
        cni.mkdir(parents=True, exist_ok=True)
        (cni / "10-pods.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "pods",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": "cni0",
                            "isGateway": True,
                            "ipMasq": False,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": node.pod_cidr}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(node.directory / "cni-ipam"),
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                }
            )
        )

    def _cgroups(self, node: RealNode) -> None:
        """The node's cgroup root in every v1 hierarchy (the kubelet requires it to exist)."""
        for controller in _CGROUP_CONTROLLERS:
            path = Path("/sys/fs/cgroup") / controller / node.cgroup.lstrip("/")
            path.mkdir(exist_ok=True)
            if controller == "cpuset":
                for key in ("cpuset.cpus", "cpuset.mems"):
                    (path / key).write_text((path.parent / key).read_text())

    def _start_containerd(self, node: RealNode) -> Process:
        root = node.directory
        config = root / "containerd.toml"
        config.write_text(_containerd_config(node, self.binaries))
        node.cdi_specs.mkdir(parents=True, exist_ok=True)
        process = self.plane.processes.start(
            f"containerd-{node.name}",
            node.namespace.prefix([str(self.binaries.containerd), "--config", str(config)]),
            env=debian_tools.environment(["netfilter"], after=self.binaries.path),
        )
        wait_until(
            lambda: node.socket.exists() and node.ctr(self.binaries, "version", timeout=10),
            timeout=60,
            what=f"containerd of {node.name}",
            processes=self.plane.processes,
            watch=[process],
        )
        return process

    def import_images(self, node: RealNode, images: Iterable[Any]) -> None:
        for image in [pause_image(), *images]:
            archive = image_archive(image)
            node.ctr(self.binaries, "images", "import", "--snapshotter", "overlayfs", str(archive))

    def _start_kubelet(
        self,
        node: RealNode,
        labels: Mapping[str, str],
        taints: Sequence[Mapping[str, str]],
        provider_id: str | None,
        *,
        own_devices: bool = False,
    ) -> Process:
        ca = self.plane.ca
        client = ca.issue(
            f"kubelet-{node.name}", common_name=f"system:node:{node.name}", organizations=["system:nodes"]
        )
        serving = ca.issue(
            f"kubelet-serving-{node.name}", common_name=node.name, dns=[node.name], ips=[node.address]
        )
        kubeconfig = self.plane.node_kubeconfig(f"kubelet-{node.name}", client, NODE_GATEWAY)
        resolv = node.directory / "resolv.conf"
        resolv.write_text("# no name server: the node network has no way out\n")
        config: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": node.address,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(ca.cert)},
            },
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(serving.cert),
            "tlsPrivateKeyFile": str(serving.key),
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": node.cgroup,
            # This machine mounts cgroup v1 (a hybrid hierarchy); 1.36's kubelet refuses it unless told.
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{node.socket}",
            "registerWithTaints": [dict(t) for t in taints],
            "resolvConf": str(resolv),
            # A log directory per node: every kubelet removes the /var/log/pods directories of pods
            # it does not know (its container GC), so on the shared default a node deleted the other
            # node's pod logs and `kubectl logs` of an ended container found nothing.
            "podLogsDir": str(node.directory / "pod-logs"),
            "clusterDomain": "cluster.local",
            # Pods (dnsPolicy ClusterFirst) ask the kube-dns Service, as on EKS.
            "clusterDNS": [CLUSTER_DNS],
            # The disk is shared with everything else on the machine: no eviction or image GC on it.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "syncFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s",
            "rotateCertificates": False,
            "serverTLSBootstrap": False,
            "enableDebuggingHandlers": True,
            **({"providerID": provider_id} if provider_id else {}),
        }
        config_path = node.directory / "kubelet.json"
        config_path.write_text(json.dumps(config))
        args = [
            str(self.binaries.kubelet),
            f"--config={config_path}",
            f"--kubeconfig={kubeconfig}",
            f"--hostname-override={node.name}",
            f"--node-ip={node.address}",
            f"--root-dir={node.directory / 'kubelet'}",
            f"--node-labels={','.join(f'{k}={v}' for k, v in labels.items())}",
            "--v=2",
        ]
        if own_devices:
            args = self._own_device_plugins(node, args)
        return self.plane.processes.start(
            f"kubelet-{node.name}",
            node.namespace.prefix(args),
            env=debian_tools.environment(["netfilter"], after=self.binaries.path),
        )

    def _own_device_plugins(self, node: RealNode, kubelet: list[str]) -> list[str]:
        """``kubelet`` run in a mount namespace of its own, where ``/var/lib/kubelet/device-plugins``
        is the node's ``device_plugins`` (the module's docstring). Its root directory is made a
        shared mount first: the volumes it mounts there (service account tokens, ConfigMaps) reach
        the machine's mount namespace, where containerd and runc read them. ``exec``: the kubelet
        keeps the PID started, by which it is stopped."""
        root = node.directory / "kubelet"
        root.mkdir(parents=True, exist_ok=True)
        node.device_plugins.mkdir(parents=True, exist_ok=True)
        _KUBELET_DEVICE_PLUGINS.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", str(root), str(root)], check=True)
        subprocess.run(["mount", "--make-shared", str(root)], check=True)
        script = 'mount --make-slave / && mount --bind "$1" "$2" && shift 2 && exec "$@"'
        return [
            "unshare",
            "--mount",
            "--propagation",
            "unchanged",
            "--",
            "sh",
            "-c",
            script,
            "sh",
            str(node.device_plugins),
            str(_KUBELET_DEVICE_PLUGINS),
            *kubelet,
        ]

    def _start_device_plugin(self, node: RealNode, devices: Sequence[DeviceResource]) -> Process:
        _check_device_major_free()
        # In the kubelet's mount namespace, where its plugin directory is where every kubelet's is (as
        # the real plugins' DaemonSets mount the host's): the same files as ``node.device_plugins``,
        # by a path short enough for a Unix socket's (108 bytes), which the session's is not.
        (kubelet,) = [p for p in node.processes if p.name == f"kubelet-{node.name}"]
        args = [
            "nsenter",
            f"--mount=/proc/{kubelet.pid}/ns/mnt",
            "--",
            str(self.binaries.device_plugin),
            f"--plugin-dir={_KUBELET_DEVICE_PLUGINS}",
            f"--dir={node.device_nodes}",
            f"--major={DEVICE_MAJOR}",
            *(device.argument() for device in devices),
        ]
        process = self.plane.processes.start(f"device-plugin-{node.name}", args)
        expected = {device.name: str(device.count) for device in devices}

        def advertised() -> bool:
            allocatable = self.plane.kubectl.json("get", "node", node.name)["status"].get("allocatable", {})
            return all(allocatable.get(name) == count for name, count in expected.items())

        wait_until(
            advertised,
            timeout=60,
            what=f"{', '.join(f'{n}={c}' for n, c in expected.items())} allocatable on {node.name}",
            processes=self.plane.processes,
            watch=[process],
        )
        return process

    def start_dra_plugin(self, node: RealNode, driver: str, short: str, config: Mapping[str, Any]) -> Process:
        """The DRA kubelet plugin stand-in of ``driver`` on ``node`` (tools/cluster-binaries/
        dra-kubelet-plugin: ``config`` is its --config, the slice and device nodes), registered with
        the node's kubelet through ``<kubelet root>/plugins_registry`` (the kubelet takes that
        directory from its --root-dir, so no mount namespace is needed, unlike the device plugin's),
        its slice published; returns once the slice is in the API server. ``short`` names its
        sockets (a Unix socket's path holds 108 bytes; the session's directory is long)."""
        _check_device_major_free()
        registry = node.directory / "kubelet" / "plugins_registry"
        registry.mkdir(parents=True, exist_ok=True)
        for socket in (registry / f"{short}.sock", node.directory / f"dra-{short}" / "dra.sock"):
            if len(str(socket).encode()) >= 108:
                raise AssertionError(f"{socket}: longer than a Unix socket's path may be (107 bytes)")
        config_path = node.directory / f"dra-{short}.json"
        config_path.write_text(json.dumps(config))
        args = [
            str(self.binaries.dra_plugin),
            f"--driver={driver}",
            f"--node={node.name}",
            f"--kubeconfig={self.plane.kubeconfig}",
            f"--registry-dir={registry}",
            f"--registry-socket={short}.sock",
            f"--plugin-dir={node.directory / f'dra-{short}'}",
            f"--cdi-dir={node.cdi_specs}",
            f"--dir={node.device_nodes}",
            f"--major={DEVICE_MAJOR}",
            f"--config={config_path}",
            "--v=2",
        ]
        process = self.plane.processes.start(f"dra-plugin-{short}-{node.name}", args)
        node.processes.append(process)

        def published() -> bool:
            slices = self.plane.kubectl.json(
                "get", "resourceslices", f"--field-selector=spec.nodeName={node.name}"
            )
            return any(s["spec"]["driver"] == driver for s in slices["items"])

        wait_until(
            published,
            timeout=60,
            what=f"the {driver} ResourceSlice of {node.name}",
            processes=self.plane.processes,
            watch=[process],
        )
        return process

    def _start_node_agent(
        self, node: RealNode, component: str, user: str, binary: Path, flags: Sequence[str]
    ) -> Process:
        """``binary`` in the node's network namespace, as ``user`` (a client certificate of the
        plane's CA, in a kubeconfig of its own that reaches the API server as the node's kubelet
        does), with Debian's iptables, nft and ipset on its PATH: kube-proxy and kube-router."""
        name = f"{component}-{node.name}"
        client = self.plane.ca.issue(name, common_name=user)
        kubeconfig = self.plane.node_kubeconfig(name, client, NODE_GATEWAY)
        args = [str(binary), f"--kubeconfig={kubeconfig}", f"--hostname-override={node.name}", *flags]
        return self.plane.processes.start(
            name, node.namespace.prefix(args), env=debian_tools.environment(_NETFILTER)
        )

    def _start_kube_proxy(self, node: RealNode) -> Process:
        flags = [
            "--proxy-mode=nftables",
            f"--cluster-cidr={POD_NETWORK}",
            # Leave the machine-wide conntrack settings alone.
            "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0",
            "--metrics-bind-address=127.0.0.1:10249",
            "--healthz-bind-address=127.0.0.1:10256",
        ]
        return self._start_node_agent(
            node, "kube-proxy", "system:kube-proxy", self.binaries.kube_proxy, flags
        )

    def _start_kube_router(self, node: RealNode) -> Process:
        from tests.cluster.control_plane import SERVICE_CIDR  # noqa: PLC0415 (control_plane imports this module)

        flags = [
            "--run-firewall=true",
            "--run-router=false",
            "--run-service-proxy=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--health-port=0",
            "--metrics-port=0",
            "--v=1",
        ]
        process = self._start_node_agent(
            node, "kube-router", KUBE_ROUTER_USER, self.binaries.kube_router, flags
        )
        wait_until(
            lambda: "-j KUBE-ROUTER-FORWARD" in self.filter_rules(node),
            timeout=60,
            what=f"kube-router's chains on {node.name}",
            processes=self.plane.processes,
            watch=[process],
        )
        return process

    def filter_rules(self, node: RealNode) -> str:
        """``iptables-save -t filter`` of the node's namespace (kube-router's rules), Debian's."""
        env = debian_tools.environment(_NETFILTER)
        variables = [f"{key}={env[key]}" for key in ("PATH", "LD_LIBRARY_PATH", "XTABLES_LIBDIR")]
        return node.namespace.run(["env", *variables, "iptables-save", "-t", "filter"])

    def enforcing(self, node: RealNode, namespace: str, pod: str) -> bool:
        """kube-router on ``node`` has a firewall chain for the pod (its first sync after the pod
        started is done: rules only add from then on)."""
        return f"POD name:{pod} namespace: {namespace} to chain" in self.filter_rules(node)

    # ----- stop -----------------------------------------------------------------------------------

    def stop(self) -> None:
        for node in reversed(list(self.nodes.values())):
            with contextlib.suppress(Exception):
                self._stop_node(node)
        self.nodes.clear()
        for listener in self._listeners:
            listener.stop()
        self._listeners.clear()
        if self._forwarder is not None:
            self._forwarder.stop()
            self._forwarder = None
        self.network.delete()

    def _stop_node(self, node: RealNode) -> None:
        for process in reversed(node.processes):
            process.stop()
            with contextlib.suppress(ValueError):
                self.plane.processes.started.remove(process)
        # The containers outlive containerd (their shims are processes of their own): each shim by
        # the PID containerd recorded, then every process left in the node's cgroups by its PID.
        for pid_file in (node.directory / "state").rglob("shim.pid"):
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
        # A shim whose bundle containerd already removed has no shim.pid left (one outlived every
        # run before this): found by the node's containerd address on its command line.
        for pid in _shims_of(node.socket):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for _ in range(20):
            left = _cgroup_pids(node.cgroup)
            if not left:
                break
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.25)
        _unmount_under(node.directory)
        _remove_cgroups(node.cgroup)
        node.namespace.delete()


def _character_majors() -> set[int]:
    """The major numbers of this machine's character device drivers (/proc/devices)."""
    text = Path("/proc/devices").read_text().split("Block devices:")[0]
    return {int(line.split()[0]) for line in text.splitlines() if line.strip()[:1].isdigit()}


def _check_device_major_free() -> None:
    """No driver of this machine holds ``DEVICE_MAJOR``, the major number of the stand-in plugins'
    device nodes (else a container could open a real device through one)."""
    held = _character_majors()
    if DEVICE_MAJOR in held:
        raise AssertionError(f"a driver of this machine holds the major number {DEVICE_MAJOR}: {held}")


def _shims_of(socket: Path) -> list[int]:
    """The PIDs of the containerd shims serving the containerd at ``socket`` (``-address <socket>``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in argv:
            found.append(int(entry.name))
    return found


def _ready(node: Mapping[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])
    )


def _containerd_config(node: RealNode, binaries: NodeBinaries) -> str:
    root = node.directory
    return "\n".join(
        [
            "version = 3",
            f'root = "{root / "root"}"',
            f'state = "{root / "state"}"',
            "[grpc]",
            f'  address = "{node.socket}"',
            "[ttrpc]",
            f'  address = "{root / "run" / "containerd.sock.ttrpc"}"',
            "[debug]",
            '  level = "info"',
            "[metrics]",
            '  address = ""',
            "[plugins]",
            "  [plugins.'io.containerd.cri.v1.images']",
            "    snapshotter = 'overlayfs'",
            "    [plugins.'io.containerd.cri.v1.images'.pinned_images]",
            f"      sandbox = '{SANDBOX_IMAGE}'",
            "  [plugins.'io.containerd.cri.v1.runtime']",
            "    netns_mounts_under_state_dir = true",
            # This machine's root lacks CAP_SYS_RESOURCE (CapEff 000001fffeffffff): runc's
            # "failed to update /proc/self/oom_score_adj: Permission denied" for the sandbox's -998.
            # containerd then keeps every score at or above its own (0), as for a rootless node.
            "    restrict_oom_score_adj = true",
            "    enable_unprivileged_ports = false",
            # CDI (containerd 2.x's default, stated): the devices a DRA plugin prepares for a claim
            # reach the container as CDI device IDs the kubelet passes on (tests/cluster/test_dra_pods.py).
            "    enable_cdi = true",
            f"    cdi_spec_dirs = ['{node.cdi_specs}']",
            "    [plugins.'io.containerd.cri.v1.runtime'.cni]",
            f"      bin_dirs = ['{binaries.cni}']",
            f"      conf_dir = '{root / 'cni'}'",
            "    [plugins.'io.containerd.cri.v1.runtime'.containerd]",
            "      default_runtime_name = 'runc'",
            "      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]",
            "        runtime_type = 'io.containerd.runc.v2'",
            "        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]",
            f"          BinaryName = '{binaries.runc}'",
            "          SystemdCgroup = false",
            "  [plugins.'io.containerd.internal.v1.opt']",
            f"    path = '{root / 'opt'}'",
            "",
        ]
    )


def _cgroup_pids(cgroup: str) -> list[int]:
    base = Path("/sys/fs/cgroup/pids") / cgroup.lstrip("/")
    pids: set[int] = set()
    if base.is_dir():
        for procs in base.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(line) for line in procs.read_text().split())
    return sorted(pids)


def _unmount_under(directory: Path) -> None:
    prefix = str(directory) + "/"
    for _ in range(5):
        mounts = [
            line.split()[4]
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(prefix)
        ]
        if not mounts:
            return
        for mount in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)


def _remove_cgroups(cgroup: str) -> None:
    for controller in _CGROUP_CONTROLLERS:
        base = Path("/sys/fs/cgroup") / controller / cgroup.lstrip("/")
        if not base.is_dir():
            continue
        for path in sorted(
            (p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                path.rmdir()
        with contextlib.suppress(OSError):
            base.rmdir()
