"""Who asks the API server what: its audit log, counted per client (`make bench-scale`).

The API server's own metrics (apiserver_request_total) count requests by verb, resource and code,
not by client; its audit log names each request's user and user agent. The bench starts the API
server with POLICY (Metadata level, one event per request: the RequestReceived and ResponseStarted
stages left out, so a watch is one event, at its end) and a JSON log in the run's directory
(kube-apiserver ``--audit-policy-file``, ``--audit-log-path``; audit.k8s.io/v1 Event: ``stage``,
``user.username``, ``userAgent``, ``requestReceivedTimestamp``, as the Kubernetes documentation's
"Auditing" page describes them).

A client is its user and the product of its user agent (``kube-controller-manager``, ``kubectl``,
``kwok``, ``python-urllib``): the controller manager's controllers each have a service account, and
the bench's own kubectl and kwok share the admin's certificate. The platform's controllers are the
service accounts of the platform namespace (the gang watchdog with its stuck-run guard, the node
check).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from cluster_facts.kubernetes_names import PLATFORM_NAMESPACE

__all__ = ["POLICY", "ClientLoad", "client_load"]

POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "Metadata"}],
}

PLATFORM_USERS = f"system:serviceaccount:{PLATFORM_NAMESPACE}:"


def client(event: dict[str, object]) -> str:
    """``<user> (<agent product>)``; the controller manager's controllers as one client."""
    user = str((event.get("user") or {}).get("username", "?"))  # type: ignore[union-attr]
    agent = str(event.get("userAgent") or "?").split("/", 1)[0].split(" ", 1)[0]
    if agent == "kube-controller-manager":
        return "kube-controller-manager (its controllers' service accounts)"
    return f"{user} ({agent})"


@dataclass(frozen=True)
class ClientLoad:
    requests: Counter[str]
    """Requests per client in the window."""
    platform: int
    """Of them, the platform's controllers' (service accounts of the platform namespace)."""

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    @property
    def platform_share(self) -> float:
        return self.platform / self.total if self.total else 0.0


def client_load(lines: Iterable[str], since: datetime, until: datetime) -> ClientLoad:
    """The requests received between ``since`` and ``until`` (aware datetimes), per client. Lines
    that are not a complete JSON event (the last one of a log still being written) are skipped."""
    requests: Counter[str] = Counter()
    platform = 0
    for line in lines:
        try:
            event = json.loads(line)
            received = datetime.fromisoformat(event["requestReceivedTimestamp"])
        except (ValueError, KeyError, TypeError):
            continue
        if event.get("stage") != "ResponseComplete" and event.get("stage") != "Panic":
            continue
        if not since <= received < until:
            continue
        requests[client(event)] += 1
        if str((event.get("user") or {}).get("username", "")).startswith(PLATFORM_USERS):
            platform += 1
    return ClientLoad(requests=requests, platform=platform)
