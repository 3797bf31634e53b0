"""The training container's script, ``run_worker.sh``, kept once per team namespace instead of in
every pod: the one home of its ConfigMap's name, its mount and the command that runs it.

Why: written inline in the container's ``command`` it was 12.6 KiB of each training pod's 19 KiB
template, read again by every list and watch of pods (the gang watchdog's pass, Volcano, the
scheduler, the autoscaler): at 1,024 nodes the watchdog's pass took 3.1 s against issue 36's 2 s
goal (docs/performance.md, "Scale"). Now each team namespace holds the ConfigMap
``trainium-run-worker-<hash>`` (rendered by the platform in the teams step, k8s_charts/plan.py),
each run's pod mounts it read-only and runs ``bash <mount>/run_worker.sh <launcher...>``.

Lifecycle:

- **Named by its content.** The name carries the first 10 hex digits of the script's SHA-256, so a
  changed script is a new ConfigMap, the Job that names it a new Job (its id hashes the Job,
  k8s_charts/runs/training_run.py ``run_id``), and a Job keeps naming the version it was made with. The
  ConfigMap is immutable: nobody, the platform included, rewrites a version under a running Job, and
  the kubelet does not watch immutable ConfigMaps (Kubernetes documentation, "Immutable
  ConfigMaps": it closes those watches, less load on the API server).
- **Second deploy**, same script: the same object, nothing to change.
- **Upgrade that changes the script.** The deploy creates the new version, then prunes the old one
  (the teams step's apply; the namespace's ConfigMap quota has room for both, k8s_charts/teams/team_quota.py
  counts the platform's objects twice). An applied run is a new Job in the same deploy (its old Job
  deleted). A Job applied by hand from ``cdk.out/k8s/run-<name>.yaml`` before the upgrade keeps its
  running pods (their files are already mounted), but a pod Volcano makes for it after the old
  version is pruned waits in ``ContainerCreating`` (FailedMount, the ConfigMap not found): the
  stuck-run guard ends such a run once it waits past its limit (cluster_programs/stuck_runs.py), so
  no Trainium node is held unbounded, and applying the run's file again from the new synth restarts it
  on the new version. Only the current version is kept: keeping older ones would need a collector of
  versions no Job names (not written: docs/performance.md says so).
- **A team added or removed.** The ConfigMap comes and goes with the team's namespace (same step).
- **Least privilege.** A team member may read only the team settings' ConfigMap and write none
  (k8s_charts/teams/namespaces.py ``TEAM_MEMBER_RULES``); mounted ``readOnly`` with mode 0444 and run by
  ``bash <path>`` (no exec bit needed), which Pod Security's restricted level allows (a ConfigMap
  volume is one of its allowed volume types).
"""

from __future__ import annotations

import hashlib

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.script_files import program_text

__all__ = [
    "WORKER_SCRIPT",
    "WORKER_SCRIPT_CONFIGMAP",
    "WORKER_SCRIPT_DIR",
    "WORKER_SCRIPT_FILE",
    "WORKER_SCRIPT_MODE",
    "WORKER_SCRIPT_PATH",
    "WORKER_SCRIPT_VOLUME",
    "WorkerScriptChart",
    "worker_command",
]

WORKER_SCRIPT_FILE = "run_worker.sh"
# The whole file, header included: in the pod it is a file that a reader may open.
WORKER_SCRIPT = program_text(WORKER_SCRIPT_FILE)
WORKER_SCRIPT_CONFIGMAP = f"trainium-run-worker-{hashlib.sha256(WORKER_SCRIPT.encode()).hexdigest()[:10]}"
WORKER_SCRIPT_VOLUME = "run-worker"
WORKER_SCRIPT_DIR = "/opt/trainium/run-worker"
WORKER_SCRIPT_PATH = f"{WORKER_SCRIPT_DIR}/{WORKER_SCRIPT_FILE}"
# Read-only for everyone: bash reads the file, nothing executes or writes it.
WORKER_SCRIPT_MODE = 0o444


def worker_command() -> list[str]:
    """The training container's command; the launcher follows as its arguments (the script's "$@")."""
    return ["/bin/bash", WORKER_SCRIPT_PATH]


class WorkerScriptChart(cdk8s.Chart):
    """The ConfigMap ``WORKER_SCRIPT_CONFIGMAP`` in a team's namespace: the script every run's pod mounts."""

    def __init__(self, scope: Construct, id: str, *, namespace: str) -> None:
        super().__init__(scope, id)
        k8s.KubeConfigMap(
            self,
            "WorkerScript",
            metadata=k8s.ObjectMeta(
                name=WORKER_SCRIPT_CONFIGMAP,
                namespace=namespace,
                labels={"app.kubernetes.io/name": "run-worker", "app.kubernetes.io/part-of": "trainium"},
            ),
            data={WORKER_SCRIPT_FILE: WORKER_SCRIPT},
            immutable=True,
        )
