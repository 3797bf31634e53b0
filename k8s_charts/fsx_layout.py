"""The directories of the file system that the teams' volumes mount (k8s_charts/fsx_storage.py).

Lustre mounts a sub-directory only when it exists: a platform Job creates ``/datasets`` and
``/teams/<team>`` for every team before any team pod can start. The Job is named after a hash of
what it holds (a new team is a new Job: a Job's pod template is immutable).
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
from constructs import Construct

from cluster_facts.kubernetes_names import DATA_MOUNT, DATASETS_DIR, TEAMS_DIR
from cluster_facts.script_files import script_body
from k8s_charts.identity import spec_hash
from k8s_charts.platform_jobs import DEFAULT_IMAGE, platform_job

__all__ = ["LAYOUT_SCRIPT", "FsxLayoutChart", "layout_job_name"]

LAYOUT_SCRIPT = script_body("k8s_charts", "fsx_layout.sh")


def _layout(
    scope: Construct, *, name: str, namespace: str, claim_name: str, teams: Sequence[str], image: str
) -> None:
    platform_job(
        scope,
        name=name,
        namespace=namespace,
        claim_name=claim_name,
        labels={"app.kubernetes.io/name": "fsx-layout", "app.kubernetes.io/instance": name},
        script=LAYOUT_SCRIPT,
        script_name="fsx-layout",
        arguments=list(teams),
        environment={"DATA_MOUNT": DATA_MOUNT, "TEAMS_DIR": TEAMS_DIR, "DATASETS_DIR": DATASETS_DIR},
        backoff_limit=6,
        deadline_seconds=1800,
        image=image,
    )


def layout_job_name(
    *, namespace: str, claim_name: str, teams: Sequence[str], image: str = DEFAULT_IMAGE
) -> str:
    return "fsx-layout-" + spec_hash(
        lambda scope, name: _layout(
            scope, name=name, namespace=namespace, claim_name=claim_name, teams=teams, image=image
        ),
        kind="Job",
    )


class FsxLayoutChart(cdk8s.Chart):
    """The Job ``fsx-layout-<hash>`` that creates ``/datasets`` and each team's directory."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        namespace: str,
        claim_name: str,
        teams: Sequence[str],
        image: str = DEFAULT_IMAGE,
    ) -> None:
        super().__init__(scope, id)
        self.job_name = layout_job_name(namespace=namespace, claim_name=claim_name, teams=teams, image=image)
        _layout(
            self, name=self.job_name, namespace=namespace, claim_name=claim_name, teams=teams, image=image
        )
