"""The directories of the file system that the teams' volumes mount (k8s_charts/addons/fsx_storage.py).

Lustre mounts a sub-directory only when it exists: a platform Job creates ``/datasets`` and
``/teams/<team>`` for every team before any team pod can start. The Job is named after a hash of
what it holds (a new team is a new Job: a Job's pod template is immutable).

``/datasets`` belongs to the platform's uid (``PLATFORM_UID``, mode 755), which the staging Jobs
run as. Each team's directory belongs to the team's own uid and gid (mode 2750: the team writes, its
group reads, new files keep the group): the training pods run as that uid, and under root squash a
pod running as root is nobody and writes nothing. The Job runs where root is not squashed and keeps
one capability, CHOWN, to hand each directory to its owner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import cdk8s
from constructs import Construct

from cluster_facts.kubernetes_names import DATA_MOUNT, DATASETS_DIR, PLATFORM_UID, TEAMS_DIR
from cluster_facts.script_files import program_body
from k8s_charts.shared.identity import spec_hash
from k8s_charts.shared.platform_jobs import DEFAULT_IMAGE, platform_job

__all__ = ["LAYOUT_SCRIPT", "FsxLayoutChart", "layout_job_name"]

LAYOUT_SCRIPT = program_body("fsx_layout.sh")


def _layout(
    scope: Construct,
    *,
    name: str,
    namespace: str,
    claim_name: str,
    teams: Mapping[str, int],
    root_zones: Sequence[str],
    image: str,
) -> None:
    platform_job(
        scope,
        name=name,
        namespace=namespace,
        claim_name=claim_name,
        labels={"app.kubernetes.io/name": "fsx-layout", "app.kubernetes.io/instance": name},
        script=LAYOUT_SCRIPT,
        script_name="fsx-layout",
        # <team>:<uid>; the team's gid is its uid.
        arguments=[f"{team}:{uid}" for team, uid in teams.items()],
        environment={
            "DATA_MOUNT": DATA_MOUNT,
            "TEAMS_DIR": TEAMS_DIR,
            "DATASETS_DIR": DATASETS_DIR,
            "DATASETS_OWNER": str(PLATFORM_UID),
        },
        backoff_limit=6,
        deadline_seconds=1800,
        root_zones=root_zones,
        add_capabilities={
            "CHOWN": "hands each team's directory to the team's uid and gid under root squash; no DAC "
            "override or FOWNER: it changes only what root owns"
        },
        image=image,
    )


def layout_job_name(
    *,
    namespace: str,
    claim_name: str,
    teams: Mapping[str, int],
    root_zones: Sequence[str],
    image: str = DEFAULT_IMAGE,
) -> str:
    return "fsx-layout-" + spec_hash(
        lambda scope, name: _layout(
            scope,
            name=name,
            namespace=namespace,
            claim_name=claim_name,
            teams=teams,
            root_zones=root_zones,
            image=image,
        ),
        kind="Job",
    )


class FsxLayoutChart(cdk8s.Chart):
    """The Job ``fsx-layout-<hash>`` that creates ``/datasets`` and each team's directory, owned by the team."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        namespace: str,
        claim_name: str,
        teams: Mapping[str, int],
        root_zones: Sequence[str],
        image: str = DEFAULT_IMAGE,
    ) -> None:
        super().__init__(scope, id)
        self.job_name = layout_job_name(
            namespace=namespace, claim_name=claim_name, teams=teams, root_zones=root_zones, image=image
        )
        _layout(
            self,
            name=self.job_name,
            namespace=namespace,
            claim_name=claim_name,
            teams=teams,
            root_zones=root_zones,
            image=image,
        )
