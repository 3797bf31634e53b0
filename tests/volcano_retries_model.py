"""A MODEL, written here, of Volcano v1.15.1's whole-gang restart accounting, for the fast tier:
what ``maxRetry`` a rendered Job (a run's, or the TorchX component's for ``--max_retries``) means.
Volcano's real webhook and controller decide the same question in tests/cluster/test_recovery.py
(``retries`` 0, 1 and 2: N whole-gang restarts with a new job version each, then ``Failed``); where
the two disagree, the real one is right.

Each step is a line of Volcano's source at tag v1.15.1:

- admission, ``pkg/webhooks/admission/jobs/mutate/mutate_job.go`` ``patchDefaultMaxRetry``: a Job
  whose ``maxRetry`` is 0 is stored with ``DefaultMaxRetry`` (3);
- a pod fails or is evicted and the task's policy says RestartJob: ``pkg/controllers/job/state/running.go``
  kills every pod and sets ``Restarting`` with ``RetryCount++``;
- ``pkg/controllers/job/state/restarting.go`` ``restartingUpdateStatus``: ``RetryCount >= maxRetry``
  fails the Job; otherwise the phase goes back to ``Pending`` and the pods are recreated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["admitted_max_retry", "restarts_before_failure"]

DEFAULT_MAX_RETRY = 3  # mutate_job.go DefaultMaxRetry


def admitted_max_retry(job: Mapping[str, Any]) -> int:
    """``spec.maxRetry`` as Volcano's webhook stores it."""
    return int(job["spec"].get("maxRetry", 0)) or DEFAULT_MAX_RETRY


def restarts_before_failure(job: Mapping[str, Any]) -> int:
    """How many times the gang is recreated when every attempt fails, before the Job is ``Failed``.

    A task without a RestartJob policy never restarts (its failed pod is only synced)."""
    if not all(
        any(policy.get("action") == "RestartJob" for policy in task.get("policies", []))
        for task in job["spec"]["tasks"]
    ):
        return 0
    max_retry = admitted_max_retry(job)
    retry_count = 0
    restarts = 0
    while True:
        # running.go: RestartJob -> Restarting, RetryCount++
        retry_count += 1
        # restarting.go: fail before recreating the pods once RetryCount reaches maxRetry
        if retry_count >= max_retry:
            return restarts
        restarts += 1
