"""Rendered objects as the API server stores them, so that applying them again changes nothing.

``kubectl apply`` patches every field the manifest names and the stored object lacks or holds
otherwise. The API server drops some empty values (Go ``omitempty`` fields) and fills in some defaults
inside lists, so an object rendered with them is reported ``configured``, and patched, on every
deployment although nothing changed (tests/cluster/test_deploy.py applies the plan twice to the real
API server and fails on any such object). cdk8s-plus renders some of them for every object of a
kind; ``as_stored`` removes or completes them once, for every chart (k8s_charts.plan.render):

- a Role's or ClusterRole's rule with ``resourceNames: []`` (cdk8s-plus ``Role.allow``): dropped;
- a ServiceAccount subject of a binding with ``apiGroup: ""``: dropped;
- a Service's ``externalIPs: []`` (cdk8s-plus ``Service``): dropped;
- a container's environment entry with ``value: ""``: the entry without ``value`` (same empty value);
- a PersistentVolume's ``storageClassName: ""`` (a plain string there; a claim's is a pointer, where
  ``""`` means "no class" and is kept);
- a PriorityClass's ``globalDefault: false`` (a plain bool, omitted when false).

The admission policies' resource rules carry the server's default ``scope: "*"``, written where every
policy is made (k8s_charts/shared/admission_policy.py ``admission_policy``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["as_stored"]

_POD_TEMPLATE_PATHS = (
    ("spec",),  # a Pod
    ("spec", "template", "spec"),  # Deployments, DaemonSets, batch Jobs
    ("spec", "jobTemplate", "spec", "template", "spec"),  # CronJobs
)


def as_stored(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``manifest`` with what the API server would drop or fill in made explicit as it stores it."""
    obj: dict[str, Any] = _copy(manifest)
    _by_kind(obj)
    for path in _POD_TEMPLATE_PATHS:
        pod = _at(obj, path)
        for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])] if pod else []:
            for entry in container.get("env") or []:
                _drop_if(entry, "value", "")
    return obj


def _by_kind(obj: dict[str, Any]) -> None:
    kind = obj.get("kind")
    spec = obj.get("spec")
    if kind in ("Role", "ClusterRole"):
        for rule in obj.get("rules") or []:
            _drop_if(rule, "resourceNames", [])
    if kind in ("RoleBinding", "ClusterRoleBinding"):
        for subject in obj.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount":
                _drop_if(subject, "apiGroup", "")
    if kind == "Service" and isinstance(spec, dict):
        _drop_if(spec, "externalIPs", [])
    if kind == "PersistentVolume" and isinstance(spec, dict):
        _drop_if(spec, "storageClassName", "")
    if kind == "PriorityClass":
        _drop_if(obj, "globalDefault", False)


def _drop_if(obj: dict[str, Any], key: str, empty: object) -> None:
    if key in obj and obj[key] == empty:
        del obj[key]


def _at(obj: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    current: Any = obj
    for key in path:
        if not isinstance(current, dict) or key not in current:
            return None
        current = current[key]
    return current if isinstance(current, dict) and "containers" in current else None


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(item) for item in value]
    return value
