"""The one Kubernetes API client of the platform's in-cluster programs (standard library only).

The gang watchdog, the fabric check's taint step and the other programs the platform runs in pods
talk to the API server through this module. It ships beside each program (in the program's
ConfigMap, or written next to it by the pod's script) and is imported as ``kube_api``.

Why not the official Kubernetes client library: these programs run on the stock Python image
(``python:3.12-slim``, through the account's pull-through cache) or on the training image, and the
pods have no egress to PyPI, so nothing can be installed at start; a wheel in a ConfigMap would
pass the 1 MiB limit. Programs that run on an operator's machine (``make canary``) use the official
client (``kubernetes`` on PyPI) instead.

In a pod the address comes from ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the credentials from the
mounted service-account token and CA. ``KUBE_API_URL``, ``KUBE_API_TOKEN_FILE`` and
``KUBE_API_CA_FILE`` override them (tests point them at a loopback server). The token file is read
again for every request: the kubelet rotates the projected token.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

__all__ = ["Api", "ApiError", "Reads", "in_cluster"]

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TIMEOUT_SECONDS = 30
PAGE = 500
"""Items per list request (``limit``)."""
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""A watch's events with each object's ``metadata`` alone (what kube_mirror.py asks for a metadata list)."""


class ApiError(Exception):
    """A request to the API server failed: ``status`` is the HTTP status, or None when no answer came."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Reads(Protocol):
    """Where a program's lists come from: an ``Api`` (a list each time) or kube_mirror.Mirrors."""

    def items(self, path: str, *, metadata_only: bool = False, **query: str) -> list[dict[str, Any]]: ...


class Api:
    def __init__(self, *, server: str, token_file: str, ca_file: str | None) -> None:
        self.server = server.rstrip("/")
        self.token_file = token_file
        self.ca_file = ca_file
        self._context: ssl.SSLContext | None = None
        self.last_list_version = ""
        """The resourceVersion of the last page ``pages`` read (a paged list's pages share their
        snapshot's): where a watch of the same collection starts (kube_mirror.py)."""

    def _ssl_context(self) -> ssl.SSLContext | None:
        if not self.server.startswith("https:"):
            return None
        if self._context is None:
            self._context = ssl.create_default_context(cafile=self.ca_file)
        return self._context

    def _token(self) -> str:
        try:
            with open(self.token_file, encoding="utf-8") as handle:
                return handle.read().strip()
        except OSError as error:
            raise ApiError(f"no service-account token ({error})") from None

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        """One request; the decoded JSON answer. Any failure is an ``ApiError``."""
        try:
            return json.loads(self._request(method, path, body, content_type, "application/json"))
        except ValueError as error:
            raise ApiError(f"{method} {path}: {error}") from None

    def text(self, path: str) -> str:
        """A GET whose answer is plain text (a pod's log). JSON is accepted too: a failure's answer
        is a Status, which the API server cannot write as text/plain; asked for that alone, it
        answers 406 in place of the failure and its reason (kube-apiserver 1.36.3, in the tier)."""
        return self._request("GET", path, None, "", "text/plain, application/json").decode("utf-8", "replace")

    def stream(
        self, path: str, *, accept: str, read_timeout: float, on_open: Callable[[], object] = lambda: None
    ) -> Iterator[dict[str, Any]]:
        """A GET whose answer is one JSON object a line as the server writes them (a watch's events),
        until the server ends it; ``read_timeout``: the longest silence before an ``ApiError``;
        ``on_open``: called once the server has answered 200, before the first line."""
        request = urllib.request.Request(self.server + path, method="GET")
        request.add_header("Authorization", f"Bearer {self._token()}")
        request.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(
                request, timeout=read_timeout, context=self._ssl_context()
            ) as response:
                on_open()
                for line in response:
                    if line.strip():
                        yield json.loads(line)
        except urllib.error.HTTPError as error:
            detail = error.read(300).decode("utf-8", "replace").strip()
            raise ApiError(f"GET {path}: HTTP {error.code} {detail}", error.code) from None
        except (OSError, ValueError, ssl.SSLError) as error:
            raise ApiError(f"GET {path}: {error}") from None

    def _request(self, method: str, path: str, body: Any, content_type: str, accept: str) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self._token()}")
        request.add_header("Accept", accept)
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(
                request, timeout=TIMEOUT_SECONDS, context=self._ssl_context()
            ) as response:
                answer: bytes = response.read()
                return answer
        except urllib.error.HTTPError as error:
            detail = error.read(300).decode("utf-8", "replace").strip()
            raise ApiError(f"{method} {path}: HTTP {error.code} {detail}", error.code) from None
        except (OSError, ValueError, ssl.SSLError) as error:
            raise ApiError(f"{method} {path}: {error}") from None

    def get(self, path: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.call("GET", path)
        return answer

    def items(self, path: str, *, metadata_only: bool = False, **query: str) -> list[dict[str, Any]]:
        """Every item of a list, following ``continue`` tokens."""
        return [item for page in self.pages(path, metadata_only=metadata_only, **query) for item in page]

    def pages(
        self, path: str, *, metadata_only: bool = False, **query: str
    ) -> Iterator[list[dict[str, Any]]]:
        """A list one page (``PAGE`` items at most) at a time, following ``continue`` tokens: a caller
        that keeps only what it needs of each page holds one page in memory, not the whole list.

        ``metadata_only``: each item's ``metadata`` alone (a PartialObjectMetadataList, what the API
        server answers to that ``Accept``: apimachinery's meta.k8s.io/v1, served for every resource
        since Kubernetes 1.15); a node's is about a quarter of its JSON.

        No ``resourceVersion``: each list is a consistent read. Since Kubernetes 1.34 (the stack runs
        1.36) the API server serves it from its watch cache, not etcd, once the cache has caught up
        with etcd's current revision (ConsistentListFromCache, GA in 1.34), and the ``continue``
        pages from the cache's snapshot too (ListFromCacheSnapshot, beta and on since 1.34;
        k8s.io/apiserver storage/cacher/delegator ``ShouldDelegateList``, cacher
        ``ShouldDelegateContinue``). ``resourceVersion=0`` would save only that wait, a progress
        request to etcd, and take whatever age of answer the cache holds: the gang watchdog could
        cordon for a stall already over (its node writes carry the node's resourceVersion, but
        nothing guards a stale pod list), the stuck-run guard end a run on a container status it
        has since left, a mirror start from an old copy. Nothing the programs could spare is saved."""
        token = ""
        accept = METADATA_LIST if metadata_only else "application/json"
        while True:
            parameters = {**query, "limit": str(PAGE), **({"continue": token} if token else {})}
            path_query = f"{path}?{urllib.parse.urlencode(parameters)}"
            try:
                answer = json.loads(self._request("GET", path_query, None, "", accept))
            except ValueError as error:
                raise ApiError(f"GET {path_query}: {error}") from None
            self.last_list_version = str((answer.get("metadata") or {}).get("resourceVersion") or "")
            yield answer.get("items") or []
            token = (answer.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> Any:
        """A JSON merge patch. Put ``metadata.resourceVersion`` in it to make it conditional (409 when stale)."""
        return self.call("PATCH", path, patch, content_type="application/merge-patch+json")

    def json_patch(self, path: str, operations: Sequence[Mapping[str, Any]]) -> Any:
        """A JSON patch (RFC 6902); a ``test`` operation first makes it conditional (422 when it fails)."""
        return self.call("PATCH", path, operations, content_type="application/json-patch+json")

    def event(
        self,
        *,
        namespace: str,
        involved: Mapping[str, Any],
        reason: str,
        message: str,
        component: str,
        event_type: str = "Warning",
    ) -> Any:
        """Record a core/v1 Event on ``involved`` (an object as the API returned it), as ``kubectl
        describe`` shows it."""
        metadata = involved.get("metadata") or {}
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{metadata.get('name', component)}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", "v1"),
                "kind": involved.get("kind", ""),
                "name": metadata.get("name", ""),
                "namespace": metadata.get("namespace", namespace),
                "uid": metadata.get("uid", ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        return self.call("POST", f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/events", body)


def _in_cluster_server() -> str:
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        return "https://kubernetes.default.svc"
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def in_cluster() -> Api:
    """The API server of the pod this runs in, with its service account (or the ``KUBE_API_*`` overrides)."""
    return Api(
        server=os.environ.get("KUBE_API_URL") or _in_cluster_server(),
        token_file=os.environ.get("KUBE_API_TOKEN_FILE", f"{SERVICE_ACCOUNT_DIR}/token"),
        ca_file=os.environ.get("KUBE_API_CA_FILE", f"{SERVICE_ACCOUNT_DIR}/ca.crt"),
    )
