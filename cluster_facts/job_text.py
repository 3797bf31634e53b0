"""How much free text a team's Volcano Job may carry, and how much a Job carries.

``JOB_TEXT_LIMIT`` is the bound of the team admission policy ``trainium-team-volcano-jobs``
(k8s_charts/teams/tenant_job_rules.py, which renders it as CEL over the Job as the API server sees it):
thirty Jobs of 1 MiB each grew etcd by 36 MiB (issue 34). ``job_text_size`` counts what that rule
counts, for a client that must fit a Job under it before sending it (``make put``,
torchx_trn/put_file.py); the real API server decides (tests/cluster/test_put_file.py sends a Job at
the bound and one character over it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["JOB_TEXT_LIMIT", "job_text_size"]

JOB_TEXT_LIMIT = 64 * 1024
"""Characters of free text a team's Volcano Job may carry: its own and its pod templates' annotations
and labels, its containers' images, working directories, commands, arguments and environment. The
stack's largest run carries a small part of it (tests/k8s_charts/teams/test_tenant_admission.py)."""


def _metadata(meta: Mapping[str, Any]) -> int:
    return sum(
        len(k) + len(str(v)) for field in ("annotations", "labels") for k, v in meta.get(field, {}).items()
    )


def _container(container: Mapping[str, Any]) -> int:
    size = len(container.get("image", "")) + len(container.get("workingDir", ""))
    size += sum(len(str(part)) for field in ("command", "args") for part in container.get(field, []))
    return size + sum(len(e["name"]) + len(e.get("value", "")) for e in container.get("env", []))


def job_text_size(job: Mapping[str, Any]) -> int:
    """The characters of ``job`` that the policy's text rule counts (CEL ``size()``: code points)."""
    size = _metadata(job.get("metadata", {}))
    for task in job.get("spec", {}).get("tasks", []):
        template = task.get("template", {})
        size += _metadata(template.get("metadata", {}))
        spec = template.get("spec", {})
        size += sum(_container(c) for c in [*spec.get("containers", []), *spec.get("initContainers", [])])
    return size
