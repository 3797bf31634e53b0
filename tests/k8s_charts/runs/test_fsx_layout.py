"""FsxLayoutChart: the directories of the file system, each team's owned by the team.

The Job's script runs under a shell the way its pod runs it, on a temporary directory standing in
for the whole file system; ownership is real (the handover needs root, as in the pod).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import PLATFORM_UID
from k8s_charts.runs.fsx_layout import FsxLayoutChart
from tests.k8s_charts.expansion import container_environment, expanded_command
from tests.k8s_charts.manifests import Manifest, only, pod_spec, synth
from tests.k8s_validation import assert_valid
from tools import debian_tools

TEAMS = {"training": 100001, "research": 100002}
ROOT_ZONES = ("us-west-2a",)


def layout_job(teams: dict[str, int] = TEAMS) -> Manifest:
    manifests = synth(
        lambda app: FsxLayoutChart(
            app,
            "fsx-layout",
            namespace="trainium-system",
            claim_name="fsx-abc",
            teams=teams,
            root_zones=ROOT_ZONES,
        )
    )
    assert_valid(manifests)
    return only(manifests, "Job")


def test_the_job_keeps_only_chown_and_runs_where_root_is_not_squashed() -> None:
    job = layout_job()
    [container] = pod_spec(job)["containers"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert container["args"] == ["training:100001", "research:100002"]
    [term] = pod_spec(job)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a"]}
    ]


def test_a_new_team_or_a_new_uid_is_a_new_job() -> None:
    names = {
        layout_job(teams)["metadata"]["name"]
        for teams in (TEAMS, {**TEAMS, "vision": 100003}, {**TEAMS, "research": 100004})
    }
    assert len(names) == 3


def _shell() -> list[str]:
    busybox = debian_tools.busybox()
    return [busybox, "sh"] if busybox else [shutil.which("bash") or "bash"]


def run_layout(data: Path, teams: dict[str, int] = TEAMS) -> subprocess.CompletedProcess[str]:
    [container] = pod_spec(layout_job(teams))["containers"]
    moved: dict[str, Any] = {
        **container,
        "env": [
            {**variable, "value": str(data) if variable["name"] == "DATA_MOUNT" else variable["value"]}
            for variable in container["env"]
        ],
    }
    env = container_environment(moved) | {"PATH": os.environ["PATH"]}
    command = [*_shell(), *expanded_command(moved, env)[1:]]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing a directory to another uid needs root")


@pytest.mark.process
@needs_root
def test_each_team_directory_belongs_to_the_team(tmp_path: Path) -> None:
    result = run_layout(tmp_path)
    assert result.returncode == 0, result.stderr
    for team, uid in TEAMS.items():
        directory = tmp_path / "teams" / team
        info = directory.stat()
        assert (info.st_uid, info.st_gid) == (uid, uid)
        # The team writes, its group (TensorBoard's supplemental group) reads, others nothing;
        # setgid: what the team creates keeps the team's group.
        assert stat.S_IMODE(info.st_mode) == 0o2750
    # The data sets belong to the platform's uid, which the staging Jobs run as (never root).
    datasets = (tmp_path / "datasets").stat()
    assert (datasets.st_uid, datasets.st_gid, stat.S_IMODE(datasets.st_mode)) == (
        PLATFORM_UID,
        PLATFORM_UID,
        0o755,
    )


@pytest.mark.process
@needs_root
def test_data_sets_root_staged_before_are_handed_to_the_platforms_uid_once(tmp_path: Path) -> None:
    old = tmp_path / "datasets" / "wikitext" / "0123abcd"
    old.mkdir(parents=True)
    (old / "train.py").write_bytes(b"x")
    result = run_layout(tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"handed from 0:0 to {PLATFORM_UID}:{PLATFORM_UID}" in result.stdout
    for path in (old, old / "train.py"):
        assert (path.stat().st_uid, path.stat().st_gid) == (PLATFORM_UID, PLATFORM_UID)
    again = run_layout(tmp_path)
    assert again.returncode == 0 and "handed from" not in again.stdout


@pytest.mark.process
@needs_root
def test_a_directory_root_filled_before_is_handed_over_whole_once(tmp_path: Path) -> None:
    old = tmp_path / "teams" / "training" / "runs" / "bert-1234"
    old.mkdir(parents=True)
    (old / "ckpt_10.pt").write_bytes(b"x")
    result = run_layout(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "handed from 0:0 to 100001:100001" in result.stdout
    for path in (old, old / "ckpt_10.pt"):
        assert (path.stat().st_uid, path.stat().st_gid) == (100001, 100001)
    again = run_layout(tmp_path)
    assert again.returncode == 0 and "handed from" not in again.stdout


@pytest.mark.process
@needs_root
def test_the_data_sets_directory_is_readable_by_every_team_whoever_made_it(tmp_path: Path) -> None:
    """A staging pod's sub-path mount may have made /datasets first (the kubelet, as root): the
    layout opens it to every team's uid anyway, and to root alone for writing."""
    (tmp_path / "datasets").mkdir(mode=0o700)
    result = run_layout(tmp_path)
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE((tmp_path / "datasets").stat().st_mode) == 0o755
