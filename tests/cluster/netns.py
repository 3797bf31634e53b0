"""Network namespaces of one test session, and sockets opened inside them from this process.

The real nodes (tests/cluster/real_nodes.py) live in network namespaces the session creates: one for
the node network (a bridge and nothing else: no link to this machine's own network namespace, no
default route, so no packet of a node or a pod can leave it) and one per node. The only ways in or
out are sockets this process opens inside a namespace (``setns`` on the calling thread, the socket
stays in the namespace it was made in) and joins to a socket on 127.0.0.1:

- ``Forwarder``: a listener inside a namespace whose connections go to a port on 127.0.0.1 (how the
  nodes, their kubelets and their pods reach the API server);
- ``connect_in``: a connection made inside a namespace (how the API server's egress proxy reaches a
  kubelet or a pod: logs, exec, the service proxy);
- ``Listener``: a listener inside a namespace that accepts each connection and closes it (a stand-in
  for an address the platform's NetworkPolicies name: the instance metadata service, the internet).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.cluster.egress import pipe

__all__ = ["Forwarder", "Listener", "NetworkNamespace", "connect_in", "inside"]

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def inside(namespace: Path) -> Iterator[None]:
    """The calling thread in ``namespace`` for the block (other threads stay where they are)."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(namespace, os.O_RDONLY)
    try:
        if _libc.setns(target, _CLONE_NEWNET) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"setns({namespace}): {os.strerror(error)}")
        try:
            yield
        finally:
            if _libc.setns(own, _CLONE_NEWNET) != 0:  # pragma: no cover (the thread would be lost)
                error = ctypes.get_errno()
                raise OSError(error, f"setns back: {os.strerror(error)}")
    finally:
        os.close(own)
        os.close(target)


def connect_in(
    namespace: Path, host: str, port: int, timeout: float = 10, source: str | None = None
) -> socket.socket:
    """A connection to ``host:port`` made inside ``namespace``, from ``source`` (one of its
    addresses) when given."""
    with inside(namespace):
        return socket.create_connection(
            (host, port), timeout=timeout, source_address=(source, 0) if source else None
        )


class NetworkNamespace:
    """A named network namespace (``ip netns add``), deleted by ``delete``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.path = Path("/run/netns") / name

    def create(self) -> None:
        _run(["ip", "netns", "add", self.name])
        self.ip("link", "set", "lo", "up")

    def delete(self) -> None:
        if self.path.exists():
            subprocess.run(["ip", "netns", "delete", self.name], check=False, capture_output=True)

    def ip(self, *args: str) -> str:
        return _run(["ip", "-n", self.name, *args])

    def run(self, args: Sequence[str]) -> str:
        """A command in this namespace only (``nsenter --net``: unlike ``ip netns exec``, the mounts,
        /sys and the cgroups stay this machine's, which the kubelet and containerd need)."""
        return _run(self.prefix(args))

    def prefix(self, args: Sequence[str]) -> list[str]:
        return ["nsenter", f"--net={self.path}", "--", *args]

    def sysctl(self, key: str, value: str) -> None:
        self.run(["sysctl", "-q", "-w", f"{key}={value}"])


def _run(args: Sequence[str]) -> str:
    result = subprocess.run(list(args), capture_output=True, text=True, check=False, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


class Forwarder:
    """Connections to ``address:port`` inside ``namespace`` joined to 127.0.0.1:``target_port``."""

    def __init__(self, namespace: Path, address: str, port: int, target_port: int) -> None:
        with inside(namespace):
            self._listener = socket.create_server((address, port), backlog=128)
        self._target_port = target_port
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"forward-{address}:{port}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _serve(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target_port), timeout=10)
            except OSError:
                client.close()
                continue
            threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()


class Listener:
    """A listener at ``address:port`` inside ``namespace`` that accepts and closes each connection."""

    def __init__(self, namespace: Path, address: str, port: int) -> None:
        with inside(namespace):
            self._listener = socket.create_server((address, port), backlog=128)
        self._thread = threading.Thread(target=self._serve, name=f"listen-{address}:{port}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            client.close()
