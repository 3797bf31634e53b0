"""The fence: one process for the whole cluster has the instance of a Trainium node whose kubelet has
been silent past ``FENCE_AFTER_SECONDS`` marked Unhealthy in its Auto Scaling group, which replaces
it (docs/health.md, "The node check"), within the group's replacement budget (node_check_budget.py).

Why one process (issue #36): when every node's check decided, each of them read a page of nodes every
pass to find whether it was the one to act: one request per node per minute, 17 requests a second at
1,024 nodes and growing with the nodes, for a decision one node made. This runs as a single replica
on the system nodes (k8s_charts/checks/node_check.py renders it) and reads the Trainium nodes once a
pass: its requests do not grow with the cluster (one list, a page of 500 nodes at a time).

A silent node is fenced only while another Trainium node answers and no more than a fifth of them are
silent at once: with none answering, or many, what failed is more likely the network or the control
plane than the nodes, and replacing them would not help (EKS node auto repair still acts after 30
minutes of Ready Unknown). Each instance is decided once per process; the group's record bounds the
replacements across restarts.

Run by the Deployment ``node-check-fence`` with the node check's service account: it patches no node
(the admission policy lets that account change only its own node), it records in the groups'
replacement records and calls ``aws autoscaling set-instance-health``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kube_api import Api, ApiError, in_cluster
from node_check import (
    COMPONENT,
    Repair,
    instance_id,
    node_condition,
    repair_from_env,
    replace_or_withhold,
    status_line,
    transition_time,
    withheld,
)


@dataclass(frozen=True, kw_only=True)
class FenceSettings:
    devices_label: str
    """The label only Trainium nodes carry (the system nodes carry the node-group label too)."""
    fence_after_seconds: float
    watch_seconds: float
    repair: Repair


def _ready(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return node_condition(node, "Ready") or {}


def _silent_since(node: Mapping[str, Any]) -> datetime | None:
    ready = _ready(node)
    return transition_time(ready) if ready.get("status") == "Unknown" else None


class Fence:
    """One ``run_pass`` per ``watch_seconds``: one list of the Trainium nodes, then a decision for each."""

    def __init__(
        self, api: Api, settings: FenceSettings, *, now: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.api = api
        self.settings = settings
        self.now = now
        self.decided: set[str] = set()
        """Instances fenced, or whose fence was withheld: each is decided once."""

    def run_pass(self) -> None:
        nodes = self.api.items("/api/v1/nodes", labelSelector=self.settings.devices_label)
        answering = [n for n in nodes if _ready(n).get("status") == "True"]
        silent = [n for n in nodes if _ready(n).get("status") == "Unknown"]
        allowed = max(1, len(nodes) // 5)
        if not silent or not answering:
            return
        if len(silent) > allowed:
            names = ", ".join(sorted(n["metadata"]["name"] for n in silent))
            print(
                f"not fencing: {len(silent)} of {len(nodes)} Trainium nodes unresponsive at once ({names}); "
                f"more than {allowed} is the network or the control plane, not the nodes",
                flush=True,
            )
            return
        for node in silent:
            self._decide(node)

    def _decide(self, node: Mapping[str, Any]) -> None:
        settings = self.settings
        since, instance = _silent_since(node), instance_id(node)
        if since is None or instance is None or instance in self.decided:
            return
        now = self.now()
        if now - since < timedelta(seconds=settings.fence_after_seconds):
            return
        self.decided.add(instance)
        minutes = (now - since).total_seconds() / 60
        outcome = replace_or_withhold(self.api, node, "NodeUnresponsive", settings.repair)
        if not outcome.replaced:
            kept = (
                f"kubelet silent for {minutes:.1f} min, not fenced: EKS node auto repair replaces it after "
                "30 minutes of Ready Unknown"
            )
            withheld(self.api, node, "NodeUnresponsive", settings.repair, outcome, kept=kept)
            return
        message = f"kubelet silent for {minutes:.1f} min (Ready Unknown): {outcome.action}"
        self.api.event(
            namespace=settings.repair.namespace,
            involved={**node, "kind": "Node", "apiVersion": "v1"},
            reason="NodeUnresponsive",
            message=message,
            component=COMPONENT,
        )
        print(status_line(node["metadata"]["name"], "fenced", "NodeUnresponsive", message), flush=True)


def settings_from_env(env: Mapping[str, str]) -> FenceSettings:
    step_timeout = float(env.get("STEP_TIMEOUT_SECONDS", "30"))
    return FenceSettings(
        devices_label=env["NEURON_DEVICES_LABEL"],
        fence_after_seconds=float(env["FENCE_AFTER_SECONDS"]),
        watch_seconds=float(env["WATCH_SECONDS"]),
        repair=repair_from_env(env, step_timeout),
    )


def main() -> int:
    try:
        api = in_cluster()
        settings = settings_from_env(os.environ)
    except (KeyError, RuntimeError, ValueError) as error:
        print(f"node fence could not start: {error}", file=sys.stderr)
        return 2
    fence = Fence(api, settings)
    while True:  # a Deployment's pod: it ends only when replaced
        try:
            fence.run_pass()
        except (ApiError, RuntimeError, KeyError, ValueError) as error:
            print(f"node fence pass failed (the next one reads again): {error}", file=sys.stderr, flush=True)
        time.sleep(settings.watch_seconds)


if __name__ == "__main__":
    sys.exit(main())
