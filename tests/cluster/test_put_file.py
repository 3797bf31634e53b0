"""`make put` (torchx_trn/put_file.py) as a team member, against the real control plane with the
example configuration (two teams) deployed.

- The command itself, with a member's kubectl (impersonated: the group the member's access entry
  maps to): it reads the team's settings, creates its Volcano Job, which the real API server admits
  (RBAC, Volcano's webhooks, Pod Security ``restricted``, the team policies); Volcano's controller
  makes the pod (admitted by the team pod policy), which waits for a node of the team's group; with
  one added it runs as the team's uid with the team's claim; its exit completes the Job, and the
  command reports and deletes it.
- The size bound it computes is the server's: its Job with the file's text at exactly the budget
  the command counts is admitted, one character more is refused with the policy's size message.
- Another team's directory is out of reach: a member's Job in the other team's namespace (RBAC),
  one aimed at the other team's node group, and one that mounts the data sets' claim writable are
  refused; the command with the other team's name stops at its settings (RBAC).

What the pod's script does on the file system is tested by running it (tests/torchx_trn/test_put_file_script.py):
kwok runs no container.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import NODE_GROUP_LABEL, team_rbac_group
from config import StackConfig
from k8s_charts.teams.tenant_admission import JOBS_POLICY, Message
from tests.cluster.control_plane import ControlPlane, Kubectl
from tests.cluster.nodes import group_nodes
from tests.cluster.plans import deployed_plan
from tests.cluster.runs import end_runs
from tests.tenant_cases import MEMBER
from torchx_trn.put_file import PUT_LABEL, PutError, Request, payload_budget, put, put_job, run_kubectl
from torchx_trn.team_settings import resolve_team

TEAM = "research"
OTHER = "training"
_SELECTOR = ",".join(f"{k}={v}" for k, v in PUT_LABEL.items())


@pytest.fixture(scope="module")
def example(control_plane: ControlPlane, example_config: StackConfig) -> Iterator[ControlPlane]:
    control_plane.apply_plan(deployed_plan(example_config))
    end_runs(control_plane, [team.name for team in example_config.teams])
    yield control_plane


def _member(plane: ControlPlane, team: str = TEAM) -> Kubectl:
    return plane.impersonate(MEMBER, [team_rbac_group(team)])


def _settings(plane: ControlPlane, team: str) -> dict[str, str]:
    return dict(plane.kubectl.json("get", "configmap", "trainium-team", "-n", team)["data"])


def _job(plane: ControlPlane, *, data: str = "", name: str = "put-tier-0000") -> dict[str, Any]:
    return put_job(
        name=name,
        namespace=TEAM,
        team=resolve_team(TEAM, _settings(plane, TEAM)),
        to="code/train.py",
        sha256="0" * 64,
        data=data,
        image=Request(team=TEAM, file=Path("x"), to="x").image,
    )


def _dry_run(who: Kubectl, job: dict[str, Any]) -> tuple[int, str]:
    result = who("create", "--dry-run=server", "-f", "-", input=json.dumps(job), check=False)
    return result.returncode, result.stderr


def _put_pods(plane: ControlPlane) -> list[dict[str, Any]]:
    items = plane.kubectl.json("get", "pods", "-n", TEAM, "-l", _SELECTOR)["items"]
    return [pod for pod in items if "deletionTimestamp" not in pod["metadata"]]


def test_a_member_puts_a_file_through_the_real_admission_and_volcano(
    example: ControlPlane, example_config: StackConfig, tmp_path: Path
) -> None:
    source = tmp_path / "train.py"
    source.write_text("print('hello from the team directory')\n")
    request = Request(team=TEAM, file=source, to="code/train.py")
    settings = _settings(example, TEAM)
    group = resolve_team(TEAM, settings).node_group
    node = f"{group}-put-0"
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        done = pool.submit(put, request, run=run_kubectl(_member(example).args()), timeout=150, poll=1.0)
        try:
            [pod] = example.wait_for(
                lambda: found if len(found := _put_pods(example)) == 1 else None,
                timeout=60,
                what="Volcano's controller making the put pod (admitted by the team pod policy)",
            )
            assert not pod["spec"].get("nodeName"), "bound before a node of the team's group existed"
            spec = pod["spec"]
            assert spec["nodeSelector"] == {NODE_GROUP_LABEL: group}
            assert spec["securityContext"]["runAsUser"] == int(settings["uid"])
            assert spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == settings["claim"]
            example.add_nodes(group_nodes(example_config, group, [node]))

            def running() -> dict[str, Any] | None:
                pods = _put_pods(example)
                return pods[0] if pods and pods[0]["status"].get("phase") == "Running" else None

            placed = example.wait_for(running, timeout=90, what="the put pod placed on the team's new node")
            assert placed["spec"]["nodeName"] == node
            example.kubectl(
                "annotate",
                "pod",
                placed["metadata"]["name"],
                "-n",
                TEAM,
                "cluster-test/exit-code=0",
                "--overwrite",
            )
            line = done.result(timeout=120)
        finally:
            if not done.done():
                done.cancel()
    assert line.startswith(f"put {source} -> team {TEAM} (/data/code/train.py in its pods): "), line
    # The command deleted its Job; Volcano's garbage goes with it.
    example.wait_for(
        lambda: (
            not example.kubectl.json("get", "jobs.batch.volcano.sh", "-n", TEAM, "-l", _SELECTOR)["items"]
        ),
        timeout=30,
        what="the put Job deleted by the command",
    )
    example.wait_for(lambda: not _put_pods(example), timeout=60, what="the put pod gone")
    example.remove_nodes([node])


def test_the_size_the_command_counts_is_the_bound_the_real_server_holds(example: ControlPlane) -> None:
    member = _member(example)
    budget = payload_budget(_job(example))
    status, error = _dry_run(member, _job(example, data="A" * budget))
    assert status == 0, error
    status, error = _dry_run(member, _job(example, data="A" * (budget + 1)))
    assert status != 0
    assert f"ValidatingAdmissionPolicy '{JOBS_POLICY}' with binding '{JOBS_POLICY}' denied" in error, error
    assert Message.SIZE in error, error


def test_another_teams_directory_is_out_of_reach(example: ControlPlane, tmp_path: Path) -> None:
    member = _member(example)
    # In the other team's namespace: RBAC, before any policy.
    theirs = _job(example)
    theirs["metadata"]["namespace"] = OTHER
    status, error = _dry_run(member, theirs)
    assert status != 0 and "forbidden" in error, error
    # On the other team's node group.
    their_group = resolve_team(OTHER, _settings(example, OTHER)).node_group
    aimed = _job(example)
    aimed["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"] = {NODE_GROUP_LABEL: their_group}
    status, error = _dry_run(member, aimed)
    assert status != 0 and Message.NODE_GROUP in error, error
    # The data sets' claim (every team's, read-only) mounted writable.
    writable = _job(example)
    pod = writable["spec"]["tasks"][0]["template"]["spec"]
    pod["volumes"][0]["persistentVolumeClaim"]["claimName"] = _settings(example, TEAM)["datasets_claim"]
    status, error = _dry_run(member, writable)
    assert status != 0 and Message.READ_ONLY in error, error
    # The command with the other team's name stops at its settings, which the member may not read.
    source = tmp_path / "train.py"
    source.write_text("x = 1\n")
    with pytest.raises(PutError, match=f"team '{OTHER}': your kubeconfig's user is not a member of it"):
        put(Request(team=OTHER, file=source, to="code/train.py"), run=run_kubectl(member.args()))
    assert not example.kubectl.json("get", "jobs.batch.volcano.sh", "-n", OTHER, "-l", _SELECTOR)["items"]
