"""Put a local file into the team's directory on the file system, with nothing but a team member's
kubectl access: ``make put TEAM=<team> FILE=<local path> [TO=<path in the team directory>]``, or
``python -m torchx_trn.put_file --team <team> --file <path> [--to <path>]``.

What a team member may do decides how (k8s_charts/teams/namespaces.py, k8s_charts/teams/tenant_admission.py):
create Volcano Jobs in the team's namespace, read its pods and its settings ConfigMap; no ConfigMap,
no batch/v1 Job, no exec. So the file travels inside a Volcano Job: gzip-compressed and base64-
encoded in its pod's environment, with its SHA-256. The pod runs torchx_trn/scripts/put_file.sh as
the team's uid (root is squashed on the file system: only that uid writes the team's directory),
with the team's claim at /data as a run's pods have it, on one of the team's node groups (the only
nodes a team's pod may run on), in the team's queue, at the team's priority class. It writes the
file beside its target, checks the checksum and renames it into place. The command waits for the
Job, prints one line (the pod's termination message), and deletes the Job.

Limits, each refused in one line before anything is created:

- the size: the team policy bounds a Job's free text (``JOB_TEXT_LIMIT``, 65,536 characters,
  cluster_facts/job_text.py); what the Job carries besides the file is counted the way the policy
  counts it, and the rest is what the encoded file may take: about 47 KiB of incompressible bytes,
  several times that of source code. A larger file belongs in S3, read by a run as an ``s3://``
  source (docs/runs.md). (A ConfigMap's 1 MiB, ``core.MaxSecretSize`` in kubernetes'
  ``ValidateConfigMap``, is not open to a member: the Role creates none.)
- the path: relative, inside the team's directory, no ``.``/``..``/empty component (the pod's
  script refuses a symbolic link that leads out as well).

The pod needs a node of the team's group: on a group at zero nodes the autoscaler adds one (minutes,
billed while it runs; it removes an idle node after its scale-down delay). The wait is bounded
(``--timeout``, default ``DEFAULT_TIMEOUT_SECONDS``); the Job is deleted when the command ends,
whatever the outcome, so nothing keeps a node up for it.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import json
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster_facts.job_text import JOB_TEXT_LIMIT, job_text_size
from cluster_facts.kubernetes_names import (
    DATA_MOUNT,
    NEURON_TAINT_KEY,
    NODE_GROUP_LABEL,
    TEAM_SETTINGS_CONFIGMAP,
    TRAINING_PRIORITY_CLASS,
    VOLCANO_SCHEDULER,
)
from cluster_facts.neuron_stack import TRAINING_IMAGE
from cluster_facts.script_files import script_body
from torchx_trn.team_settings import ResolvedTeam, resolve_team

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "PUT_LABEL",
    "PutError",
    "Request",
    "default_target",
    "encode",
    "main",
    "payload_budget",
    "put",
    "put_job",
    "target_problem",
]

PUT_SCRIPT = script_body("torchx_trn", "put_file.sh")
PUT_LABEL = {"app.kubernetes.io/name": "trainium-put"}
DEFAULT_TIMEOUT_SECONDS = 1200
"""How long the command waits for its Job: a node added from zero (the autoscaler, the instance's
boot, the node check) takes minutes; after this the Job is deleted and the command says where the
pod was."""
POLL_SECONDS = 2.0
POD_DEADLINE_SECONDS = 300
"""The pod's own bound once it runs (``activeDeadlineSeconds``): a write of at most 64 KiB."""
FINISHED = ("Completed", "Failed", "Terminated", "Aborted")
# The image a team's Trainium nodes already pull for every run (TorchX's default): it has sh,
# coreutils and gzip, and is usually on the node already.
DEFAULT_IMAGE = TRAINING_IMAGE
_TEAM = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class PutError(Exception):
    """One line that says what is wrong; nothing was created, or what was created is deleted."""


@dataclass(frozen=True)
class Request:
    team: str
    file: Path
    to: str
    node_group: str | None = None
    image: str = DEFAULT_IMAGE


def default_target(file: Path) -> str:
    """Where a file goes when TO is not given: ``code/<its name>`` (the TorchX example's /data/code/)."""
    return f"code/{file.name}"


def target_problem(to: str) -> str | None:
    """Why ``to`` is not a path inside the team directory, or None (the pod's script checks again)."""
    if not to:
        return "TO is empty: give the file's path in the team directory, e.g. code/train.py"
    if to.startswith("/"):
        return f"TO={to} is absolute: give a path relative to the team directory (/data in a run's pods), e.g. code/train.py"
    if to.endswith("/"):
        return f"TO={to} ends with '/': give the file's path, e.g. {to}{'train.py'}"
    bad = [part for part in to.split("/") if part in ("", ".", "..")]
    if bad:
        return f"TO={to} has a {bad[0]!r} component: give a plain path inside the team directory"
    if "\x00" in to or len(to) > 1024:
        return f"TO={to[:40]}... is not a usable path (at most 1024 characters, no NUL)"
    return None


def encode(content: bytes) -> str:
    """What the Job carries: base64 of the gzip of ``content`` (no timestamp, so the same bytes
    always encode the same)."""
    return base64.b64encode(gzip.compress(content, compresslevel=9, mtime=0)).decode("ascii")


def put_job(
    *, name: str, namespace: str, team: ResolvedTeam, to: str, sha256: str, data: str, image: str
) -> dict[str, Any]:
    """The Volcano Job that writes the file: one pod, as the team's pods must be (the team policies)."""
    security = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }
    container = {
        "name": "put",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", PUT_SCRIPT, "put-file"],
        "env": [
            {"name": "PUT_ROOT", "value": DATA_MOUNT},
            {"name": "PUT_TO", "value": to},
            {"name": "PUT_SHA256", "value": sha256},
            {"name": "PUT_DATA", "value": data},
        ],
        "resources": {
            "requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "1", "memory": "256Mi"},
        },
        "securityContext": security,
        "volumeMounts": [{"name": "data", "mountPath": DATA_MOUNT}],
    }
    pod = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": POD_DEADLINE_SECONDS,
        "schedulerName": VOLCANO_SCHEDULER,
        "priorityClassName": TRAINING_PRIORITY_CLASS,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "nodeSelector": {NODE_GROUP_LABEL: team.node_group},
        # No Neuron device asked for, so ExtendedResourceToleration adds nothing: the Trainium taint
        # is tolerated here (the one taint a team's pod may tolerate).
        "tolerations": [{"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "securityContext": {
            "runAsUser": team.uid,
            "runAsGroup": team.uid,
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": team.claim}}],
    }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(PUT_LABEL)},
        "spec": {
            "schedulerName": VOLCANO_SCHEDULER,
            "queue": team.queue,
            "priorityClassName": TRAINING_PRIORITY_CLASS,
            "minAvailable": 1,
            # A failed pod ends the Job (TerminateJob below): a write that failed would fail again, and
            # its line says why. (Volcano's webhook makes a maxRetry of 0 its default, 3.)
            "maxRetry": 1,
            "policies": [{"event": "PodFailed", "action": "TerminateJob"}],
            # Volcano deletes the finished Job itself if this command could not (it was killed).
            "ttlSecondsAfterFinished": 600,
            "tasks": [
                {
                    "name": "put",
                    "replicas": 1,
                    "template": {"metadata": {"labels": dict(PUT_LABEL)}, "spec": pod},
                }
            ],
        },
    }


def payload_budget(job: Mapping[str, Any]) -> int:
    """The characters the encoded file may take in ``job`` (built with an empty PUT_DATA)."""
    return JOB_TEXT_LIMIT - job_text_size(job)


Runner = Callable[[Sequence[str], str | None], "subprocess.CompletedProcess[str]"]


def run_kubectl(kubectl: Sequence[str]) -> Runner:
    def run(args: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [*kubectl, *args], input=stdin, capture_output=True, text=True, check=False, timeout=120
            )
        except FileNotFoundError:
            raise PutError(f"{kubectl[0]} not found: install kubectl and point it at the cluster") from None
        except subprocess.TimeoutExpired:
            raise PutError(f"kubectl {' '.join(args[:3])} did not answer in 120 s") from None

    return run


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _settings(run: Runner, team: str) -> dict[str, str]:
    result = run(["get", "configmap", TEAM_SETTINGS_CONFIGMAP, "-n", team, "-o", "json"], None)
    if result.returncode != 0:
        error = _one_line(result.stderr)
        if "NotFound" in error or "not found" in error:
            raise PutError(
                f"team {team!r}: no ConfigMap {team}/{TEAM_SETTINGS_CONFIGMAP}: not a team of this cluster "
                f"(TEAM is a team's name, its namespace) [{error}]"
            )
        if "Forbidden" in error or "forbidden" in error:
            raise PutError(f"team {team!r}: your kubeconfig's user is not a member of it [{error}]")
        raise PutError(f"team {team!r}: cannot read its settings: {error}")
    return dict(json.loads(result.stdout).get("data", {}))


def _read_file(request: Request) -> bytes:
    if not request.file.exists():
        raise PutError(f"FILE={request.file}: no such file")
    if not request.file.is_file():
        raise PutError(f"FILE={request.file}: not a regular file (put one file at a time)")
    return request.file.read_bytes()


def _checked(request: Request) -> tuple[bytes, str]:
    """The file's bytes and the Job's name, or the one line that refuses the request."""
    if not _TEAM.match(request.team):
        raise PutError(
            f"TEAM={request.team!r} is not a team's name (a namespace: lowercase letters, digits, '-')"
        )
    problem = target_problem(request.to)
    if problem is not None:
        raise PutError(problem)
    content = _read_file(request)
    name = f"put-{hashlib.sha256(content).hexdigest()[:10]}-{secrets.token_hex(3)}"
    return content, name


def _build(request: Request, team: ResolvedTeam, content: bytes, name: str) -> dict[str, Any]:
    digest = hashlib.sha256(content).hexdigest()

    def job(data: str) -> dict[str, Any]:
        return put_job(
            name=name,
            namespace=request.team,
            team=team,
            to=request.to,
            sha256=digest,
            data=data,
            image=request.image,
        )

    budget = payload_budget(job(""))
    data = encode(content)
    if len(data) > budget:
        raise PutError(
            f"FILE={request.file} is too big to put: {len(content)} bytes encode (gzip, base64) to "
            f"{len(data)} characters, and a team's Volcano Job may carry {JOB_TEXT_LIMIT} characters "
            f"of text, {budget} of them for the file; upload it to S3 and name it as an s3:// source "
            "(docs/runs.md)"
        )
    return job(data)


def _pod(run: Runner, namespace: str, name: str) -> dict[str, Any] | None:
    result = run(["get", "pods", "-n", namespace, "-l", f"volcano.sh/job-name={name}", "-o", "json"], None)
    items = json.loads(result.stdout).get("items", []) if result.returncode == 0 else []
    return dict(items[0]) if items else None


def _pod_outcome(pod: Mapping[str, Any] | None) -> tuple[int | None, str]:
    """The container's exit code and termination message, or where the pod waits."""
    if pod is None:
        return None, "no pod yet (Volcano's controller makes it)"
    for status in pod.get("status", {}).get("containerStatuses", []):
        terminated = status.get("state", {}).get("terminated")
        if terminated:
            return int(terminated.get("exitCode", -1)), _one_line(str(terminated.get("message", "")))
        waiting = status.get("state", {}).get("waiting")
        if waiting:
            return (
                None,
                f"container waiting: {waiting.get('reason', '')} {waiting.get('message', '')}".strip(),
            )
    conditions = pod.get("status", {}).get("conditions", [])
    unscheduled = next(
        (c for c in conditions if c.get("type") == "PodScheduled" and c.get("status") == "False"), None
    )
    if unscheduled:
        return None, _one_line(f"not placed: {unscheduled.get('message', unscheduled.get('reason', ''))}")
    return None, f"pod {pod.get('status', {}).get('phase', 'Pending')}"


def _wait(
    run: Runner,
    namespace: str,
    name: str,
    *,
    timeout: float,
    poll: float,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> tuple[str, dict[str, Any] | None]:
    """The Job's final phase and its pod, or PutError after ``timeout`` with where the pod was."""
    started = clock()
    while True:
        result = run(["get", "jobs.batch.volcano.sh", name, "-n", namespace, "-o", "json"], None)
        if result.returncode != 0:
            raise PutError(f"Job {namespace}/{name}: {_one_line(result.stderr)}")
        phase = str(json.loads(result.stdout).get("status", {}).get("state", {}).get("phase", ""))
        if phase in FINISHED:
            return phase, _pod(run, namespace, name)
        if clock() - started >= timeout:
            _, where = _pod_outcome(_pod(run, namespace, name))
            raise PutError(
                f"Job {namespace}/{name} not done after {timeout:.0f} s ({where}); deleted, nothing written. "
                "A group at zero nodes needs the autoscaler to add one: try again, or with --timeout longer"
            )
        sleep(poll)


def put(
    request: Request,
    *,
    run: Runner,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    poll: float = POLL_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Put the file; the one line that says what happened, or PutError with the line that says why not."""
    content, name = _checked(request)
    team = resolve_team(request.team, _settings(run, request.team), node_group=request.node_group)
    job = _build(request, team, content, name)
    created = run(["create", "-f", "-", "-o", "name"], json.dumps(job))
    if created.returncode != 0:
        raise PutError(f"Job {request.team}/{name} refused: {_one_line(created.stderr)}")
    try:
        phase, pod = _wait(run, request.team, name, timeout=timeout, poll=poll, sleep=sleep, clock=clock)
    finally:
        run(
            [
                "delete",
                "jobs.batch.volcano.sh",
                name,
                "-n",
                request.team,
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        )
    code, message = _pod_outcome(pod)
    where = f"team {request.team} ({DATA_MOUNT}/{request.to} in its pods)"
    if phase == "Completed" and code in (0, None):
        return f"put {request.file} -> {where}: {message or 'written'}"
    raise PutError(
        f"put {request.file} -> {where} failed (Job {phase}): {message or 'no message from the pod'}"
    )


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="make put", description="Put a local file into your team's directory on the file system."
    )
    parser.add_argument("--team", required=True, help="the team (its namespace)")
    parser.add_argument("--file", required=True, type=Path, help="the local file")
    parser.add_argument("--to", default="", help="its path in the team directory (default: code/<its name>)")
    parser.add_argument(
        "--node-group", default=None, help="one of the team's node groups (default: its first)"
    )
    parser.add_argument(
        "--image", default=DEFAULT_IMAGE, help="the pod's image (default: the training image)"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS, help="seconds to wait")
    parser.add_argument("--kubectl", default="kubectl", help="the kubectl to run (your kubeconfig's context)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    request = Request(
        team=args.team,
        file=args.file,
        to=args.to or default_target(args.file),
        node_group=args.node_group,
        image=args.image,
    )
    try:
        print(put(request, run=run_kubectl([args.kubectl]), timeout=args.timeout))
    except (PutError, ValueError) as error:
        print(f"make put: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
