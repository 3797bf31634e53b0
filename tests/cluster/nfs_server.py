"""A root-squashing file server for the real nodes (tests/cluster/real_nodes.py): nfs-ganesha 4.3
(Debian's, unpacked by `make debian-tools`; this kernel has no nfsd) exporting a directory of the
session over NFSv3, and the nodes' client, nfs-fuse-relay (tools/cluster-binaries/nfs-fuse-relay:
this kernel has FUSE but no NFS client), mounting it at a path of this machine where a
PersistentVolume gives it to pods.

Root squash as the stack sets it on Lustre (constructs_trn/lustre_storage.RootSquash): root on
every client is ``ROOT_SQUASH_ID`` on the file system, but on the clients of the root zones'
subnets (Lustre's NoSquashNids), which stay root. Here the node network (``NODE_NETWORK``) is split
the same way: ``ROOT_ZONE_CLIENTS`` (the real nodes' addresses, 10.250.0.11 and up: system nodes in
a root zone) keep root, every other address is squashed; ``SQUASHED_CLIENT`` is a client address
in the other half, a network namespace of its own standing for a node of the Trainium subnet. The
server decides by the address a request comes from, as Lustre decides by the client's NID.

The relay forwards each call with the calling process's uid and gid (AUTH_SYS) and mounts without
``default_permissions``: the kernel checks no permission on it, the server checks every one. So
whatever runs on a node (runc making a mount point, the kubelet's subPath, a pod's uid) is judged
by the server as that identity.

Processes (each started by ``Processes`` and stopped by its PID; nothing listens outside the
session's node network): rpcbind (ganesha registers NFSv3 with it and refuses to start without one)
and ganesha in a network namespace of their own on the node network's bridge at ``SERVER_ADDRESS``
and a private mount namespace (a tmpfs at /run for rpcbind's socket and lock, an /etc/passwd with
the ``_rpc`` user rpcbind drops to); one relay per client mount, in the network namespace of the
client it stands for, its FUSE mount in this machine's mount namespace (where the kubelet looks).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from cluster_facts.kubernetes_names import ROOT_SQUASH_ID
from tests.cluster.netns import NetworkNamespace, connect_in
from tests.cluster.processes import Process, wait_until
from tests.cluster.real_nodes import NODE_GATEWAY, RealNode, RealNodes
from tools import debian_tools
from tools.cluster_binaries import binary_path

__all__ = [
    "MOUNT_PORT",
    "NFS_PORT",
    "ROOT_ZONE_CLIENTS",
    "SERVER_ADDRESS",
    "SQUASHED_CLIENT",
    "FileServer",
]

SERVER_ADDRESS = "10.250.0.2"
NFS_PORT = 2049
MOUNT_PORT = 20048
ROOT_ZONE_CLIENTS = "10.250.0.0/25"
"""The clients that keep root: the root zones' subnets of the stack (the real nodes are .11 up)."""
SQUASHED_CLIENT = "10.250.0.200"
"""A client of the other half: a node of the Trainium subnet, where root is squashed."""
_GANESHA = "nfs-ganesha"


def _ganesha_config(root: Path, export: Path, recovery: Path) -> str:
    """NFSv3 over TCP only (no NLM, RQUOTA, UDP); MOUNT at a fixed port the relay dials."""
    return f"""
NFS_CORE_PARAM {{
  Protocols = 3;
  Enable_UDP = false;
  Enable_NLM = false;
  Enable_RQUOTA = false;
  NFS_Port = {NFS_PORT};
  MNT_Port = {MOUNT_PORT};
  Plugins_Dir = "{root}/usr/lib/x86_64-linux-gnu/ganesha";
}}
# NFSv4 is off; these keep its start-up from the machine's paths: no grace period, no recovery
# directory under /var/lib/nfs, owners by getpwnam rather than libnfsidmap (whose plugins it looks
# for at a fixed path of the machine).
NFSv4 {{ Graceless = true; RecoveryRoot = "{recovery}"; UseGetpwnam = true; }}
EXPORT {{
  Export_Id = 1;
  Path = "{export}";
  Pseudo = "/fsx";
  Access_Type = RW;
  Protocols = 3;
  Transports = TCP;
  SecType = sys;
  Squash = root_squash;
  Anonymous_Uid = {ROOT_SQUASH_ID};
  Anonymous_Gid = {ROOT_SQUASH_ID};
  FSAL {{ Name = VFS; }}
  CLIENT {{ Clients = {ROOT_ZONE_CLIENTS}; Squash = no_root_squash; Protocols = 3; }}
}}
LOG {{ Default_Log_Level = EVENT; }}
"""


@dataclass
class FileServer:
    """The server of one real-node session; ``start`` after the first real node, ``stop`` by PID."""

    nodes: RealNodes
    directory: Path
    processes: list[Process] = field(default_factory=list)
    mounts: dict[str, Path] = field(default_factory=dict)
    namespace: NetworkNamespace = field(init=False)
    client_namespace: NetworkNamespace = field(init=False)

    def __post_init__(self) -> None:
        self.namespace = NetworkNamespace(f"{self.nodes.prefix}-nfs")
        self.client_namespace = NetworkNamespace(f"{self.nodes.prefix}-trn")

    @property
    def export(self) -> Path:
        """The exported directory: the file system's root, root-owned 0755 as a new Lustre's."""
        return self.directory / "export"

    @property
    def relay(self) -> Path:
        return binary_path("nfs-fuse-relay", "nfs-fuse-relay")

    def start(self) -> None:
        root = debian_tools.root(_GANESHA)
        if not debian_tools.installed(_GANESHA):
            raise AssertionError(f"{root} is missing: run `make debian-tools` (Debian's nfs-ganesha)")
        if not self.relay.is_file():
            raise AssertionError(f"{self.relay} is missing: run `make cluster-binaries`")
        self.directory.mkdir(parents=True)
        self.export.mkdir(mode=0o755)
        os.chmod(self.export, 0o755)
        self._attach(self.namespace, SERVER_ADDRESS, "vnfs")
        self._attach(self.client_namespace, SQUASHED_CLIENT, "vtrn")
        libraries = f"{root}/usr/lib/ganesha:{root}/usr/lib/x86_64-linux-gnu"
        env = {**os.environ, "LD_LIBRARY_PATH": libraries}
        rpcbind = self._start_rpcbind(root, env)
        config = self.directory / "ganesha.conf"
        (self.directory / "recovery").mkdir()
        config.write_text(_ganesha_config(root, self.export, self.directory / "recovery"))
        ganesha: Process = self.nodes.plane.processes.start(
            "nfs-ganesha",
            [
                # The server's network namespace, and rpcbind's mount namespace (its /run).
                "nsenter",
                f"--net={self.namespace.path}",
                f"--mount=/proc/{rpcbind.pid}/ns/mnt",
                "--",
                f"{root}/usr/bin/ganesha.nfsd",
                "-F",
                "-f",
                str(config),
                "-L",
                "STDOUT",
                "-p",
                str(self.directory / "ganesha.pid"),
                "-N",
                "NIV_EVENT",
            ],
            env=env,
        )
        self.processes.append(ganesha)
        for port in (NFS_PORT, MOUNT_PORT):
            self._wait_port(ganesha, SERVER_ADDRESS, port, "nfs-ganesha")

    def _attach(self, namespace: NetworkNamespace, address: str, peer: str) -> None:
        """A namespace with ``eth0`` at ``address`` on the node network's bridge (no route out)."""
        namespace.create()
        network = self.nodes.network
        namespace.ip("link", "add", "eth0", "type", "veth", "peer", "name", peer, "netns", network.name)
        network.ip("link", "set", "dev", peer, "master", "br0", "up")
        namespace.ip("addr", "add", f"{address}/24", "dev", "eth0")
        namespace.ip("link", "set", "dev", "eth0", "up")
        namespace.ip("route", "add", "default", "via", NODE_GATEWAY)

    def _start_rpcbind(self, root: Path, env: dict[str, str]) -> Process:
        passwd = self.directory / "passwd"
        passwd.write_text(f"_rpc:x:102:{ROOT_SQUASH_ID}::/run/rpcbind:/usr/sbin/nologin\n")
        script = 'mount -t tmpfs -o mode=0755 tmpfs /run && mount --bind "$1" /etc/passwd && exec "$2" -f'
        # nsenter and unshare exec (no fork), and so does the shell at its end: the PID is rpcbind's.
        process: Process = self.nodes.plane.processes.start(
            "rpcbind",
            self.namespace.prefix(
                [
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    "sh",
                    "-c",
                    script,
                    "sh",
                    str(passwd),
                    f"{root}/sbin/rpcbind",
                ]
            ),
            env=env,
        )
        self.processes.append(process)
        self._wait_port(process, "127.0.0.1", 111, "rpcbind")
        return process

    def _wait_port(self, process: Process, host: str, port: int, what: str) -> None:
        def listening() -> bool:
            connect_in(self.namespace.path, host, port, timeout=2).close()
            return True

        wait_until(
            listening,
            timeout=30,
            what=f"{what} at {host}:{port}",
            processes=self.nodes.plane.processes,
            watch=[process],
        )

    def mount(self, name: str, client: RealNode | None = None) -> Path:
        """The export mounted at a path of this machine by a relay from ``client``'s network
        namespace (a real node: a root zone's client), or from ``SQUASHED_CLIENT``'s."""
        namespace = client.namespace if client is not None else self.client_namespace
        mountpoint = self.directory / "mounts" / name
        mountpoint.mkdir(parents=True)
        process: Process = self.nodes.plane.processes.start(
            f"nfs-relay-{name}",
            namespace.prefix(
                [
                    str(self.relay),
                    f"-server={SERVER_ADDRESS}",
                    f"-nfs-port={NFS_PORT}",
                    f"-mount-port={MOUNT_PORT}",
                    f"-export={self.export}",
                    f"-mountpoint={mountpoint}",
                ]
            ),
        )
        self.processes.append(process)
        wait_until(
            lambda: os.path.ismount(mountpoint),
            timeout=30,
            what=f"the relay's mount at {mountpoint}",
            processes=self.nodes.plane.processes,
            watch=[process],
        )
        self.mounts[name] = mountpoint
        return mountpoint

    def stop(self) -> None:
        """The relays (each unmounts on SIGTERM), then ganesha and rpcbind, each by its PID; what a
        killed relay left mounted is unmounted lazily; the namespaces deleted."""
        for process in reversed(self.processes):
            with contextlib.suppress(Exception):
                process.stop()
            with contextlib.suppress(ValueError):
                self.nodes.plane.processes.started.remove(process)
        self.processes.clear()
        for mountpoint in self.mounts.values():
            if os.path.ismount(mountpoint):
                subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, check=False)
        self.mounts.clear()
        self.client_namespace.delete()
        self.namespace.delete()
