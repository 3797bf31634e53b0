"""A JSON HTTP server on loopback that stands in for the Kubernetes API in tests of pod programs.

The test decides every answer: ``answer(method, path, headers, body)`` returns a status and a JSON
document (a ``str`` is served as plain text, as the API serves a pod's log). The server runs in a thread,
on an ephemeral port, and is stopped when the block ends.

A stand-in, kept for unit tests of a program's decisions (each answer chosen by the test, in the
fast tier). The gang watchdog also runs against the real API server and Volcano
(tests/cluster/test_watchdog.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Answer", "json_api"]

Answer = Callable[[str, str, Mapping[str, str], Any], tuple[int, Any]]
"""(method, path, headers, body or None) -> (status, JSON answer)."""


@contextmanager
def json_api(answer: Answer) -> Iterator[str]:
    """Serve ``answer`` for GET, PATCH, POST, PUT and DELETE on 127.0.0.1; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            status, document = answer(self.command, self.path, dict(self.headers), body)
            text = isinstance(document, str)
            data = document.encode() if text else json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if text else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _serve

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # A short poll: shutdown() waits for the next one (the default 0.5 s cost that much per test).
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
