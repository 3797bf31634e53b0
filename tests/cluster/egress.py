"""The API server's way to the cluster's Services: an HTTP CONNECT proxy on loopback.

In a cluster the API server calls an admission webhook at its Service (``volcano-admission-service``
in ``volcano-system``, port 443) through the Service's ClusterIP. Here the webhook is a local
process and no ClusterIP routes anywhere, so the API server runs with an egress selector
(``--egress-selector-config-file``: the ``cluster`` network goes through HTTPConnect to this proxy,
on a Unix socket: the API server's TCP transport to a proxy takes only mutual TLS),
and the proxy connects each registered ``<ClusterIP>:<port>`` to the local port serving it. Nothing
else is connected: an unregistered destination gets ``403``, so no traffic leaves 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import socketserver
import threading

__all__ = ["EgressProxy"]


class EgressProxy:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._routes: dict[tuple[str, int], int] = {}
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
                local = proxy.route(host.strip("[]"), int(port))
                if local is None:
                    proxy.refused.append(parts[1])
                    self.wfile.write(b"HTTP/1.1 403 Forbidden\r\n\r\n")
                    return
                try:
                    upstream = socket.create_connection(("127.0.0.1", local), timeout=10)
                except OSError:
                    self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
                    return
                self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self.wfile.flush()
                _pipe(self.connection, upstream)

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


def _pipe(a: socket.socket, b: socket.socket) -> None:
    sockets = [a, b]
    try:
        while True:
            readable, _, broken = select.select(sockets, [], sockets, 300)
            if broken or not readable:
                return
            for source in readable:
                data = source.recv(65536)
                if not data:
                    return
                (b if source is a else a).sendall(data)
    finally:
        with contextlib.suppress(OSError):
            b.close()
