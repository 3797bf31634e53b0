"""The API server's way to the cluster's Services: an HTTP CONNECT proxy on loopback.

In a cluster the API server calls an admission webhook at its Service (``volcano-admission-service``
in ``volcano-system``, port 443) through the Service's ClusterIP. Here the webhook is a local
process and no ClusterIP routes anywhere, so the API server runs with an egress selector
(``--egress-selector-config-file``: the ``cluster`` network goes through HTTPConnect to this proxy,
on a Unix socket: the API server's TCP transport to a proxy takes only mutual TLS),
and the proxy connects each registered ``<ClusterIP>:<port>`` to the local port serving it. Nothing
else is connected: an unregistered destination gets ``403``, so no traffic leaves 127.0.0.1.

With real nodes (tests/cluster/real_nodes.py), their network is registered too (``add_network``): a
destination in it (a kubelet's port for logs and exec, a pod's for the service proxy) is connected
from inside the session's own node-network namespace, which has no way out of this machine.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import select
import socket
import socketserver
import threading
from collections.abc import Callable

__all__ = ["EgressProxy", "pipe"]

Connector = Callable[[str, int], socket.socket]


class EgressProxy:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._routes: dict[tuple[str, int], int] = {}
        self._networks: list[tuple[ipaddress.IPv4Network, Connector]] = []
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()
        self.refused: list[str] = []
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                request = self.rfile.readline(8192).decode("latin-1").strip()
                while self.rfile.readline(8192).strip():  # the request's headers
                    pass
                parts = request.split()
                if len(parts) != 3 or parts[0] != "CONNECT":
                    self.wfile.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                    return
                host, _, port = parts[1].rpartition(":")
                host = proxy.address_of(host.strip("[]"))
                local = proxy.route(host, int(port))
                connector = proxy.network(host.strip("[]")) if local is None else None
                if local is None and connector is None:
                    proxy.refused.append(parts[1])
                    self.wfile.write(b"HTTP/1.1 403 Forbidden\r\n\r\n")
                    return
                try:
                    if connector is not None:
                        upstream = connector(host.strip("[]"), int(port))
                    else:
                        upstream = socket.create_connection(("127.0.0.1", local), timeout=10)
                except OSError:
                    self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
                    return
                self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self.wfile.flush()
                pipe(self.connection, upstream)

        class Server(socketserver.ThreadingUnixStreamServer):
            daemon_threads = True

        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
        self._server = Server(socket_path, Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="egress-proxy", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add_route(self, host: str, port: int, local_port: int) -> None:
        with self._lock:
            self._routes[(host, port)] = local_port

    def route(self, host: str, port: int) -> int | None:
        with self._lock:
            return self._routes.get((host, port))

    def add_network(self, cidr: str, connector: Connector) -> None:
        """Destinations in ``cidr`` are connected by ``connector`` (inside a network namespace)."""
        with self._lock:
            self._networks.append((ipaddress.IPv4Network(cidr), connector))

    def add_name(self, name: str, address: str) -> None:
        """A real node's name (the API server dials a kubelet by its Hostname address first)."""
        with self._lock:
            self._names[name] = address

    def address_of(self, host: str) -> str:
        with self._lock:
            return self._names.get(host, host)

    def network(self, host: str) -> Connector | None:
        try:
            address = ipaddress.IPv4Address(host)
        except ValueError:
            return None
        with self._lock:
            return next((connector for network, connector in self._networks if address in network), None)


def pipe(a: socket.socket, b: socket.socket) -> None:
    """Bytes both ways until either side closes; both are closed after."""
    sockets = [a, b]
    try:
        while True:
            readable, _, broken = select.select(sockets, [], sockets, 300)
            if broken or not readable:
                return
            for source in readable:
                try:
                    data = source.recv(65536)
                    if data:
                        (b if source is a else a).sendall(data)
                except OSError:  # a reset by either end ends the connection
                    return
                if not data:
                    return
    finally:
        for end in (a, b):
            with contextlib.suppress(OSError):
                end.close()
