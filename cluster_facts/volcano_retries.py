"""How many whole-gang restarts a Volcano Job's ``maxRetry`` allows, and the value that gives N.

Read in Volcano v1.15.1's source (the version the vendored chart installs), not yet run:

- ``pkg/controllers/job/state/running.go`` (``runningState.Execute``): the RestartJob action kills
  every pod and sets the phase ``Restarting`` with ``status.RetryCount++``;
- ``pkg/controllers/job/state/restarting.go`` (``restartingUpdateStatus``): in ``Restarting``, the
  Job fails when ``status.RetryCount >= job.Spec.MaxRetry``, before any pod is recreated; otherwise
  it goes back to ``Pending`` and its pods are recreated (one restart);
- ``pkg/webhooks/admission/jobs/mutate/mutate_job.go`` (``patchDefaultMaxRetry``): a Job created
  with ``maxRetry: 0`` (or none) is admitted with ``maxRetry: 3`` (``DefaultMaxRetry``); a task's
  ``maxRetry`` of 0 also becomes 3 (``defaultMaxRetry``);
- ``pkg/controllers/cache/cache.go`` (``TaskFailed``): a task's ``maxRetry`` counts container
  restarts of running or pending pods, which ``restartPolicy: Never`` pods never have.

So the n-th restart request leaves ``RetryCount == n``; it is carried out only while
``n < maxRetry``: ``maxRetry: M`` allows ``M - 1`` restarts, and 0 (which the webhook makes 3)
allows 2. ``retries: N`` therefore renders ``maxRetry: N + 1``, never 0.
"""

from __future__ import annotations

__all__ = ["MAX_RESTARTS", "MAX_RETRY", "VOLCANO_DEFAULT_MAX_RETRY", "volcano_max_retry"]

VOLCANO_DEFAULT_MAX_RETRY = 3
"""What the job webhook writes for ``maxRetry: 0`` (mutate_job.go ``DefaultMaxRetry``)."""


MAX_RESTARTS = 10
"""The most whole-gang restarts a run may have (``runs[].retries``): each one spends Trainium time,
so the team admission policy also holds a Job's own ``maxRetry`` to ``MAX_RETRY``."""


def volcano_max_retry(restarts: int) -> int:
    """The ``maxRetry`` under which Volcano restarts the whole gang exactly ``restarts`` times."""
    if restarts < 0:
        raise ValueError(f"restarts must be at least 0, got {restarts}")
    return restarts + 1


MAX_RETRY = volcano_max_retry(MAX_RESTARTS)
"""The largest ``maxRetry`` a team's Volcano Job (or one of its tasks) may carry."""
