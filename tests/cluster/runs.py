"""A training run in the real cluster: its Volcano Job from the plan, its pods, and the environment the
kubelet would give them (the downward API read from the real pods' annotations, then ``$(VAR)``
references expanded as Kubernetes expands them)."""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet
from tests.cluster.control_plane import ControlPlane

__all__ = ["RunHandle", "container_environment", "end_runs", "run_handle"]

RERUN_MINIMUM_WAIT_SECONDS = 2.0
"""After a deleted Job's pods are gone, the least a rerun waits before applying it again (docs/runs.md)."""
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")
_ANNOTATION_PATH = re.compile(r"^metadata\.annotations\['([^']+)'\]$")


def container_environment(container: Mapping[str, Any], pod: Mapping[str, Any]) -> dict[str, str]:
    """What the container's environment resolves to in ``pod``: ``fieldRef`` on annotations, labels,
    name and namespace from the pod, and ``$(NAME)`` of an earlier variable expanded (an unknown
    reference stays as written, ``$$`` is a literal ``$``: Kubernetes' rules)."""
    resolved: dict[str, str] = {}
    metadata = pod["metadata"]
    for entry in container.get("env", []):
        if "value" in entry:
            resolved[entry["name"]] = _REFERENCE.sub(
                lambda m: "$" if m.group(0) == "$$" else resolved.get(m.group(1), m.group(0)), entry["value"]
            )
            continue
        path = entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
        annotation = _ANNOTATION_PATH.match(path)
        if annotation:
            resolved[entry["name"]] = metadata.get("annotations", {}).get(annotation.group(1), "")
        elif path == "metadata.name":
            resolved[entry["name"]] = metadata["name"]
        elif path == "metadata.namespace":
            resolved[entry["name"]] = metadata["namespace"]
    return resolved


class RunHandle:
    """One run's step of the plan, applied outside the plan (``kubectl apply`` of its review file) or
    by it, and read back from the cluster."""

    def __init__(self, plane: ControlPlane, step: ManifestSet) -> None:
        self.plane = plane
        self.step = step
        (self.job,) = [m for m in step.manifests if m["kind"] == "Job"]
        self.name = str(self.job["metadata"]["name"])
        self.namespace = str(self.job["metadata"]["namespace"])

    @classmethod
    def of_job(cls, plane: ControlPlane, job: Mapping[str, Any]) -> RunHandle:
        """A Job the plan does not hold (a TorchX submission, a probe), read back the same way."""
        return cls(plane, ManifestSet(name=str(job["metadata"]["name"]), manifests=(dict(job),)))

    def copy_as(
        self,
        name: str,
        *,
        annotations: Mapping[str, str] | None = None,
        pod_annotations: Mapping[str, str] | None = None,
    ) -> RunHandle:
        """This run's Job under ``name`` in its namespace, its labels kept, with ``annotations`` on the
        Job and ``pod_annotations`` on each task's pod template; not applied."""
        job = copy.deepcopy(dict(self.job))
        job["metadata"] = {
            "name": name,
            "namespace": self.namespace,
            "labels": dict(job["metadata"].get("labels", {})),
            **({"annotations": dict(annotations)} if annotations else {}),
        }
        for task in job["spec"]["tasks"] if pod_annotations else ():
            task["template"]["metadata"].setdefault("annotations", {}).update(pod_annotations)
        return RunHandle.of_job(self.plane, job)

    def apply(self) -> None:
        self.plane.kubectl("apply", "-f", "-", input="".join(json.dumps(m) for m in self.step.manifests))

    def delete(self) -> None:
        """The Job deleted as docs/runs.md's rerun says: then its pods gone, then as long again.
        Volcano's controller drops a deleted Job from its cache by namespace and name, on a
        rate-limited retry (doubling from 5 ms) that repeats until the Job's pods are gone; the last
        retry comes about as long after the pods went as they took to go. A Job applied again under
        the same name before it is dropped from the cache with it and never gets a pod
        (v1.15.1 pkg/controllers/cache/cache.go processCleanupJob; volcano#3968, #5973). Seen here:
        a rerun applied 60 ms after the old Job's pods went stayed without pods."""
        started = time.monotonic()
        self.plane.kubectl("delete", "job.batch.volcano.sh", self.name, "-n", self.namespace, "--wait=true")
        _forgotten(
            self.plane,
            started,
            ["-n", self.namespace, "-l", f"volcano.sh/job-name={self.name}"],
            timeout=120,
            what=f"the pods of {self.name} gone",
        )
        _claims_gone(self.plane, [self.namespace], job=self.name)

    def job_status(self) -> dict[str, Any]:
        found = self.plane.kubectl.json("get", "job.batch.volcano.sh", self.name, "-n", self.namespace)
        return dict(found.get("status", {}))

    def uid(self) -> str:
        return str(
            self.plane.kubectl.json("get", "job.batch.volcano.sh", self.name, "-n", self.namespace)[
                "metadata"
            ]["uid"]
        )

    def pods(self) -> list[dict[str, Any]]:
        found = self.plane.kubectl.json(
            "get", "pods", "-n", self.namespace, "-l", f"volcano.sh/job-name={self.name}"
        )
        return [pod for pod in found["items"] if "deletionTimestamp" not in pod["metadata"]]

    def scheduling_reasons(self) -> list[str]:
        """Each live pod's ``PodScheduled`` reason while it is False (``bound`` once it is placed):
        ``Unschedulable`` is what the autoscaler acts on, ``Schedulable`` volcano-sh/volcano#3976."""
        reasons = []
        for pod in self.pods():
            conditions = pod["status"].get("conditions", [])
            condition: dict[str, Any] = next((c for c in conditions if c["type"] == "PodScheduled"), {})
            reasons.append(
                str(condition.get("reason", "")) if condition.get("status") == "False" else "bound"
            )
        return reasons

    def replicas(self) -> int:
        return sum(int(task["replicas"]) for task in self.job["spec"]["tasks"])

    def running(self) -> list[dict[str, Any]] | None:
        """Every pod of the run, once there are ``replicas`` of them and each is Running; else None."""
        pods = self.pods()
        done = len(pods) == self.replicas() and all(p["status"].get("phase") == "Running" for p in pods)
        return pods if done else None

    def rendezvous_ids(self) -> set[str]:
        """``RDZV_ID`` as each live pod's container would see it."""
        ids = set()
        for pod in self.pods():
            container = pod["spec"]["containers"][0]
            ids.add(container_environment(container, pod)["RDZV_ID"])
        return ids

    def finish(self, exit_code: int = 0) -> None:
        """Every pod's container exits with ``exit_code`` (kwok's ``pod-exit`` stage)."""
        for pod in self.pods():
            self.plane.kubectl(
                "annotate", "pod", pod["metadata"]["name"], "-n", self.namespace,
                f"cluster-test/exit-code={exit_code}", "--overwrite",
            )  # fmt: skip


def end_runs(plane: ControlPlane, namespaces: Iterable[str]) -> None:
    """Every Volcano Job in ``namespaces`` deleted, their pods gone, and the wait a rerun makes
    (``RunHandle.delete``): a later test may apply a Job of the same name. Done while the pods'
    nodes still answer (kwok confirms a deletion): a pod left on a removed node waits for the pod
    garbage collector's 40 s quarantine."""
    started = time.monotonic()
    for namespace in namespaces:
        plane.kubectl("delete", "jobs.batch.volcano.sh", "--all", "-n", namespace, "--ignore-not-found")
    _forgotten(plane, started, ["-A", "-l", "volcano.sh/job-name"], timeout=60, what="the runs' pods gone")
    _claims_gone(plane, namespaces)


def _claims_gone(plane: ControlPlane, namespaces: Iterable[str], job: str | None = None) -> None:
    """Until the ResourceClaims the resourceclaim controller made for the pods of ``job`` (of every
    run, without it) in ``namespaces`` are gone: it deletes them after their pods. One left holds its
    devices and counts against the team's quota, and a rerun's claim refused by that quota is
    retried on the controller's backoff, doubling from 5 ms to 1000 s (v1.36.3
    pkg/controller/resourceclaim/controller.go, DefaultTypedControllerRateLimiter)."""
    wanted = set(namespaces)

    def left() -> list[str]:
        claims = plane.kubectl.json("get", "resourceclaims", "-A")["items"]
        return [
            f"{c['metadata']['namespace']}/{c['metadata']['name']}"
            for c in claims
            if c["metadata"]["namespace"] in wanted
            and any(
                owner.get("kind") == "Pod"
                and (job is None or str(owner.get("name", "")).startswith(f"{job}-"))
                for owner in c["metadata"].get("ownerReferences", [])
            )
        ]

    plane.wait_for(lambda: not left(), timeout=60, what="the ended runs' ResourceClaims gone")


def _forgotten(plane: ControlPlane, started: float, pods: list[str], *, timeout: float, what: str) -> None:
    """Until no pod ``kubectl get pods <pods>`` lists is left (Terminating ones included), then as long
    again as the deletion took since ``started``, at least RERUN_MINIMUM_WAIT_SECONDS: by then
    Volcano's controller has dropped the deleted Jobs from its cache (``RunHandle.delete``)."""
    plane.wait_for(lambda: not plane.kubectl.json("get", "pods", *pods)["items"], timeout=timeout, what=what)
    time.sleep(max(time.monotonic() - started, RERUN_MINIMUM_WAIT_SECONDS))


def run_handle(plane: ControlPlane, plan: KubernetesLayerPlan, run: str) -> RunHandle:
    step = plan.step(f"run-{run}")
    assert isinstance(step, ManifestSet)
    return RunHandle(plane, step)
