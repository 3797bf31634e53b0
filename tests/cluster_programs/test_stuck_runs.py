"""A run that holds Trainium nodes without progressing is ended, with its reason; one that waits
legitimately is left alone (issue 21, item 4).

The gang watchdog's program (cluster_programs/gang_watchdog.py, which imports stuck_runs.py) runs
as a process with the rendered Deployment's arguments and ``--once`` against a loopback stand-in of
the API server (tests/stand_in_api.py) that serves recorded Volcano Jobs, pods, Trainium nodes and
pod logs, records the Volcano Commands, Job status patches and Events the program sends, and judges
each Volcano write with the rendered admission policy ``gang-watchdog-runs`` (tests/admission.py)
as the watchdog's service account. What Volcano then does with the Command is read from its source
(v1.15.1), not run here: see stuck_runs.py's docstring.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import STUCK_MINUTES_ANNOTATION
from config.loader import load_config
from config.workloads import STUCK_MINUTES_RANGE
from k8s_charts.checks.gang_watchdog import (
    NAME,
    RUN_POLICY_NAME,
    GangWatchdogAdmissionChart,
    GangWatchdogChart,
)
from k8s_charts.runs.training_run import CACHE_LOCK_TIMEOUT_SECONDS
from tests.admission import Decision, admission_request, admit
from tests.cluster_programs.test_gang_watchdog import (
    GROUPS,
    PLATFORM,
    PROGRAM,
    TOKEN,
    VALUES,
    WATCHDOG,
    list_answer,
    merge_patch,
    node,
    pod_list_namespace,
    unfinished,
)
from tests.conftest import DEFAULT_CONFIG
from tests.k8s_charts.manifests import Manifest, only, pod_spec, synth
from tests.k8s_validation import assert_valid
from tests.pod_programs import program
from tests.stand_in_api import json_api

LIMIT_MINUTES = 10  # the rendered default (autoscaler.stuck_run_minutes)
CEILING_MINUTES = 60  # a configuration's autoscaler.stuck_run_max_minutes: the longest a run's own limit
JOB_UID = "0f3c2a9e-1111-4222-8333-444455556666"


def ago(minutes: float) -> str:
    return (datetime.now(UTC) - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def log_time(minutes: float) -> str:
    """A log line's timestamp as the kubelet writes it (nanoseconds)."""
    return (datetime.now(UTC) - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"


@cache
def run_policy() -> list[Manifest]:
    manifests = synth(
        lambda app: GangWatchdogAdmissionChart(app, "admission", namespace=PLATFORM, node_groups=GROUPS)
    )
    assert_valid(manifests)
    return [m for m in manifests if m["metadata"]["name"] == RUN_POLICY_NAME]


def command_request(namespace: str) -> dict[str, Any]:
    return admission_request(
        user=WATCHDOG, operation="CREATE", resource="commands", name="", namespace=namespace,
        kind="Command", group="bus.volcano.sh", version="v1alpha1",
    )  # fmt: skip


def job_request(operation: str, name: str, namespace: str, *, sub_resource: str = "") -> dict[str, Any]:
    return admission_request(
        user=WATCHDOG, operation=operation, resource="jobs", name=name, namespace=namespace,
        sub_resource=sub_resource, kind="Job", group="batch.volcano.sh", version="v1alpha1",
    )  # fmt: skip


# --- Recorded objects ----------------------------------------------------------------------------------------


def volcano_job(
    name: str = "bert-1a2b3c4d",
    *,
    phase: str = "Running",
    reason: str | None = None,
    limit: str | None = None,
    created_minutes: float = 90,
) -> dict[str, Any]:
    """A Volcano Job as the API returns it; ``phase=""``: one Volcano's controller never synced (no status)."""
    annotations = {STUCK_MINUTES_ANNOTATION: limit} if limit is not None else {}
    state: dict[str, Any] = {"phase": phase, "lastTransitionTime": ago(60)} if phase else {}
    if reason is not None:
        state["reason"] = reason
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "training",
            "uid": JOB_UID,
            "resourceVersion": "500",
            "creationTimestamp": ago(created_minutes),
            "annotations": annotations,
        },
        "spec": {
            "minAvailable": 2,
            "queue": "test",
            "schedulerName": "volcano",
            "tasks": [{"name": "worker"}],
        },
    }
    if state:
        job["status"] = {"state": state, "minAvailable": 2, "running": 2 if phase else 0, "version": 0}
    return job


def waiting(
    reason: str, message: str = "", *, restarts: int = 0, last_run: tuple[float, float] | None = None
) -> dict[str, Any]:
    """A container status waiting with ``reason``; ``last_run`` (started, finished) minutes ago."""
    status: dict[str, Any] = {
        "name": "trainer",
        "state": {"waiting": {"reason": reason, **({"message": message} if message else {})}},
        "restartCount": restarts,
        "ready": False,
    }
    if last_run is not None:
        status["lastState"] = {
            "terminated": {"exitCode": 1, "startedAt": ago(last_run[0]), "finishedAt": ago(last_run[1])}
        }
    return status


def running(minutes: float) -> dict[str, Any]:
    return {
        "name": "trainer",
        "state": {"running": {"startedAt": ago(minutes)}},
        "restartCount": 0,
        "ready": True,
    }


def run_pod(
    index: int,
    *,
    job: str = "bert-1a2b3c4d",
    node_name: str | None = "trn-a",
    on_node_minutes: float = 30,
    container: dict[str, Any] | None = None,
    init: list[dict[str, Any]] | None = None,
    phase: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase or "Pending", "conditions": []}
    if node_name is not None:
        status["startTime"] = ago(on_node_minutes)
        status["conditions"].append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": ago(on_node_minutes)}
        )
        if container is not None:
            status["containerStatuses"] = [container]
            if "running" in container["state"] and phase is None:
                status["phase"] = "Running"
        if init is not None:
            status["initContainerStatuses"] = init
    else:
        status["conditions"].append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": ago(60),
            }
        )
    return {
        "metadata": {
            "name": f"{job}-worker-{index}",
            "namespace": "training",
            "annotations": {"scheduling.k8s.io/group-name": f"{job}-{JOB_UID}"},
            "ownerReferences": [
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "name": job,
                    "uid": JOB_UID,
                    "controller": True,
                }
            ],
        },
        "spec": {
            **({"nodeName": node_name} if node_name else {}),
            "containers": [{"name": "trainer"}],
            **({"initContainers": [{"name": "setup"}]} if init is not None else {}),
        },
        "status": status,
    }


def both_pods(container: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
    """The gang of two, one per node: worker 0 as given, worker 1 running and printing."""
    return [
        run_pod(0, node_name="trn-a", container=container, **extra),
        run_pod(1, node_name="trn-b", container=running(20)),
    ]


# --- The API server stand-in ---------------------------------------------------------------------------------


@dataclass
class RunsApi:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    podgroups: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)
    """pod name -> what ``tailLines=1&timestamps=true`` answers."""
    commands: list[dict[str, Any]] = field(default_factory=list)
    status_patches: list[tuple[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    log_reads: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(  # noqa: PLR0911 (one per route)
        self, method: str, url: str, body: Any, accept: str = "application/json"
    ) -> tuple[int, Any]:
        with self.lock:
            parsed = urllib.parse.urlsplit(url)
            query = dict(urllib.parse.parse_qsl(parsed.query))
            parts = parsed.path.strip("/").split("/")
            if method == "GET" and parsed.path == "/api/v1/nodes":
                return list_answer("NodeList", self.nodes, accept)
            namespace = pod_list_namespace(parsed.path, query) if method == "GET" else None
            if namespace is not None:
                return list_answer("PodList", unfinished(self.pods, namespace), accept)
            if method == "GET" and parts[-1] == "podgroups":
                items = [g for g in self.podgroups if g["metadata"]["namespace"] == parts[4]]
                return 200, {"kind": "PodGroupList", "metadata": {}, "items": copy.deepcopy(items)}
            if (
                method == "GET"
                and parts[:3] == ["apis", "batch.volcano.sh", "v1alpha1"]
                and parts[-1] == "jobs"
            ):
                items = [j for j in self.jobs if j["metadata"]["namespace"] == parts[4]]
                return 200, {"kind": "JobList", "metadata": {}, "items": copy.deepcopy(items)}
            if method == "GET" and parts[:2] == ["api", "v1"] and parts[-1] == "log":
                assert query == {
                    "container": "trainer",
                    "tailLines": "1",
                    "timestamps": "true",
                    "limitBytes": "4096",
                }
                self.log_reads.append(parts[5])
                return 200, self.logs.get(parts[5], "")
            if (
                method == "POST"
                and parts[:3] == ["apis", "bus.volcano.sh", "v1alpha1"]
                and parts[-1] == "commands"
            ):
                return self._create_command(parts[4], body)
            if (
                method == "PATCH"
                and parts[:3] == ["apis", "batch.volcano.sh", "v1alpha1"]
                and parts[-1] == "status"
            ):
                return self._patch_status(parts[4], parts[6], body)
            if method == "POST" and parts[:2] == ["api", "v1"] and parts[-1] == "events":
                self.events.append(body)
                return 201, body
            return 404, {"kind": "Status", "code": 404}

    def _create_command(self, namespace: str, body: Any) -> tuple[int, Any]:
        created = {
            **copy.deepcopy(body),
            "metadata": {**body["metadata"], "name": body["metadata"]["generateName"] + "x7k2p"},
        }
        decision = admit(
            run_policy(),
            command_request(namespace),
            obj=created,
            old=None,
        )
        self.decisions.append(decision)
        if not decision.allowed:
            return 403, {"kind": "Status", "code": 403, "message": "; ".join(decision.messages)}
        self.commands.append(created)
        return 201, created

    def _patch_status(self, namespace: str, name: str, body: Any) -> tuple[int, Any]:
        self.status_patches.append((name, body))
        [job] = [
            j for j in self.jobs if j["metadata"]["name"] == name and j["metadata"]["namespace"] == namespace
        ]
        updated = merge_patch(copy.deepcopy(job), body)
        updated["metadata"]["resourceVersion"] = str(int(job["metadata"]["resourceVersion"]) + 1)
        decision = admit(
            run_policy(),
            job_request("UPDATE", name, namespace, sub_resource="status"),
            obj=updated,
            old=job,
        )
        self.decisions.append(decision)
        if not decision.allowed:
            return 403, {"kind": "Status", "code": 403, "message": "; ".join(decision.messages)}
        self.jobs[self.jobs.index(job)] = updated
        return 200, updated


@pytest.fixture
def api() -> Iterator[tuple[RunsApi, str]]:
    state = RunsApi(nodes=[node("trn-a"), node("trn-b")])

    def answer(method: str, path: str, headers: Mapping[str, str], body: Any) -> tuple[int, Any]:
        if headers["Authorization"] != f"Bearer {TOKEN}":
            return 401, {"kind": "Status", "code": 401}
        return state.handle(method, path, body, headers.get("Accept", ""))

    with json_api(answer) as url:
        yield state, url


def run_once(state_url: tuple[RunsApi, str], tmp_path: Path) -> tuple[int, str]:
    token = tmp_path / "token"
    token.write_text(f"{TOKEN}\n")
    done = subprocess.run(
        [sys.executable, str(PROGRAM), *rendered_arguments_with_guard(), "--once"],
        env={
            "PATH": os.environ.get("PATH", ""),
            "KUBE_API_URL": state_url[1],
            "KUBE_API_TOKEN_FILE": str(token),
            "KUBE_API_CA_FILE": str(tmp_path / "no-ca.crt"),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stderr == "", done.stderr
    return done.returncode, done.stdout


@cache
def rendered_arguments_with_guard() -> list[str]:
    """The watchdog Deployment's arguments, rendered with the guard at the shipped default."""
    manifests = synth(
        lambda app: GangWatchdogChart(
            app,
            "watchdog",
            values=replace(VALUES, stuck_run_minutes=LIMIT_MINUTES, stuck_run_max_minutes=CEILING_MINUTES),
            namespace=PLATFORM,
            vpc_cidr="10.0.0.0/16",
        )
    )
    [container] = pod_spec(only(manifests, "Deployment"))["containers"]
    arguments = list(container["args"])
    assert f"--stuck-minutes={LIMIT_MINUTES}" in arguments, arguments
    assert f"--stuck-max-minutes={CEILING_MINUTES}" in arguments, arguments
    return arguments


def ended(state: RunsApi) -> tuple[str, str] | None:
    """(reason, message) the run was ended with, after checking that all three writes were made and admitted."""
    if not state.commands:
        assert not state.status_patches and not state.events
        return None
    [command] = state.commands
    assert command["action"] == "TerminateJob"
    assert command["target"] == {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "name": "bert-1a2b3c4d",
        "uid": JOB_UID,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert command["metadata"]["ownerReferences"] == [command["target"]]
    assert all(decision.allowed for decision in state.decisions)
    [job] = state.jobs
    reason, message = job["status"]["state"]["reason"], job["status"]["state"]["message"]
    assert job["status"]["state"]["phase"] == "Running"  # Volcano, not the watchdog, moves the phase
    [event] = state.events
    assert event["involvedObject"]["kind"] == "Job" and event["involvedObject"]["uid"] == JOB_UID
    assert (event["reason"], event["message"], event["type"]) == (reason, message, "Warning")
    assert event["source"] == {"component": NAME}
    return reason, message


# --- Stuck: a container that does not start -------------------------------------------------------------------


@pytest.mark.process
@pytest.mark.parametrize(
    ("container", "says"),
    [
        pytest.param(
            waiting(
                "CreateContainerError",
                'failed to generate container "abc" spec: failed to mkdir "/data/datasets": permission denied',
            ),
            'container trainer CreateContainerError: failed to generate container "abc" spec: failed to mkdir',
            id="CreateContainerError-from-a-mount",
        ),
        pytest.param(
            waiting("ImagePullBackOff", 'Back-off pulling image "123.dkr.ecr.us-west-2.amazonaws.com/x:1"'),
            "container trainer ImagePullBackOff: Back-off pulling image",
            id="ImagePullBackOff",
        ),
        pytest.param(
            waiting("ErrImagePull", "rpc error: code = NotFound desc = failed to pull and unpack image"),
            "container trainer ErrImagePull: rpc error",
            id="ErrImagePull",
        ),
        pytest.param(
            waiting("CreateContainerConfigError", 'configmap "settings" not found'),
            'container trainer CreateContainerConfigError: configmap "settings" not found',
            id="CreateContainerConfigError",
        ),
        pytest.param(
            waiting("ContainerCreating"),
            "container trainer ContainerCreating for 12m",
            id="ContainerCreating-too-long",
        ),
        pytest.param(
            waiting(
                "CrashLoopBackOff", "back-off 5m0s restarting failed container", restarts=6, last_run=(2, 1.9)
            ),
            "container trainer CrashLoopBackOff after 6 restarts: back-off 5m0s",
            id="CrashLoopBackOff",
        ),
    ],
)
def test_a_run_whose_pod_waits_on_its_node_past_the_limit_is_ended(
    api: tuple[RunsApi, str], tmp_path: Path, container: dict[str, Any], says: str
) -> None:
    state = api[0]
    state.jobs = [volcano_job()]
    state.pods = both_pods(container, on_node_minutes=12)
    code, out = run_once(api, tmp_path)
    assert code == 0, out
    result = ended(state)
    assert result is not None, out
    reason, message = result
    assert reason == "StuckRun"
    assert message.startswith("pod bert-1a2b3c4d-worker-0: " + says), message
    assert "(limit 10m); ended to free its Trainium nodes" in message
    assert f"run training/bert-1a2b3c4d: ended (StuckRun): {message}" in out


@pytest.mark.process
@pytest.mark.parametrize(
    "init",
    [
        pytest.param(
            [waiting("ImagePullBackOff", "Back-off pulling image") | {"name": "setup"}], id="init-waiting"
        ),
        pytest.param([running(12) | {"name": "setup", "ready": False}], id="init-running"),
    ],
)
def test_a_run_whose_init_container_is_stuck_is_ended(
    api: tuple[RunsApi, str], tmp_path: Path, init: list[dict[str, Any]]
) -> None:
    state = api[0]
    state.jobs = [volcano_job()]
    state.pods = both_pods(waiting("PodInitializing"), on_node_minutes=12, init=init)
    run_once(api, tmp_path)
    result = ended(state)
    assert result is not None and result[1].startswith("pod bert-1a2b3c4d-worker-0: init container setup")


# --- Silent: no log output ---------------------------------------------------------------------------------------


@pytest.mark.process
def test_a_run_whose_pods_have_all_been_silent_past_the_limit_is_ended(
    api: tuple[RunsApi, str], tmp_path: Path
) -> None:
    state = api[0]
    state.jobs = [volcano_job()]
    state.pods = [
        run_pod(0, node_name="trn-a", container=running(60)),
        run_pod(1, node_name="trn-b", container=running(60)),
    ]
    state.logs = {
        "bert-1a2b3c4d-worker-0": f"{log_time(14)} [0]: step 1200 loss 2.31\n",
        "bert-1a2b3c4d-worker-1": f"{log_time(40)} [32]: ready\n",
    }
    run_once(api, tmp_path)
    result = ended(state)
    assert result is not None
    assert result[0] == "NoProgress"
    assert result[1] == (
        "no log output from any of its 2 pods for 14m (limit 10m); last line (bert-1a2b3c4d-worker-0): "
        "[0]: step 1200 loss 2.31; ended to free its Trainium nodes"
    )


@pytest.mark.process
def test_a_run_whose_pods_never_wrote_a_line_is_silent_since_they_started(
    api: tuple[RunsApi, str], tmp_path: Path
) -> None:
    state = api[0]
    state.jobs = [volcano_job()]
    state.pods = [
        run_pod(0, node_name="trn-a", container=running(11)),
        run_pod(1, node_name="trn-b", container=running(11)),
    ]
    run_once(api, tmp_path)
    result = ended(state)
    assert result is not None and "no line written since the pods started" in result[1]


@pytest.mark.process
@pytest.mark.parametrize(
    ("printing", "reads"),
    [
        # Rank 0 prints the steps: its line settles it, the other pod's log is not read.
        pytest.param(0, ["bert-1a2b3c4d-worker-0"], id="rank-0"),
        # Rank 0 is quiet: the others are read, in rank order, until one line is recent.
        pytest.param(1, ["bert-1a2b3c4d-worker-0", "bert-1a2b3c4d-worker-1"], id="another-rank"),
    ],
)
def test_one_pod_printing_is_progress_for_the_run(
    api: tuple[RunsApi, str], tmp_path: Path, printing: int, reads: list[str]
) -> None:
    """Only the first node's ranks log training steps: the others are quiet while the run
    progresses. One recent line is enough, so the logs are read from rank 0 until one is found."""
    state = api[0]
    state.jobs = [volcano_job()]
    state.pods = [
        run_pod(1, node_name="trn-b", container=running(60)),
        run_pod(0, node_name="trn-a", container=running(60)),
    ]
    state.logs = {f"bert-1a2b3c4d-worker-{printing}": f"{log_time(0.5)} [0]: step 1300 loss 2.29\n"}
    code, out = run_once(api, tmp_path)
    assert code == 0 and ended(state) is None, out
    assert state.log_reads == reads


# --- Legitimate waits ---------------------------------------------------------------------------------------------


@pytest.mark.process
@pytest.mark.parametrize(
    "line",
    [
        # run_worker.sh's data-staging wait prints every 15 s.
        pytest.param("waiting for /data/datasets/bert/.staged", id="data-staging"),
        # run_worker.sh's heartbeat while the Neuron compiler works during precompile.
        pytest.param("precompile: 4 Neuron compiler processes at work", id="precompile"),
    ],
)
def test_a_run_that_waits_and_says_so_is_not_ended(
    api: tuple[RunsApi, str], tmp_path: Path, line: str
) -> None:
    state = api[0]
    state.jobs = [volcano_job()]
    state.pods = [
        run_pod(0, node_name="trn-a", container=running(90)),
        run_pod(1, node_name="trn-b", container=running(90)),
    ]
    state.logs = {f"bert-1a2b3c4d-worker-{i}": f"{log_time(0.25)} {line}\n" for i in (0, 1)}
    code, out = run_once(api, tmp_path)
    assert code == 0 and ended(state) is None, out


@pytest.mark.process
def test_the_compile_cache_lock_wait_ends_within_the_shortest_limit(
    api: tuple[RunsApi, str], tmp_path: Path
) -> None:
    """run_worker.sh prints once, then waits at most CACHE_LOCK_TIMEOUT_SECONDS, quietly: the shortest
    limit the configuration allows is longer, so the wait never looks silent."""
    assert CACHE_LOCK_TIMEOUT_SECONDS / 60 < STUCK_MINUTES_RANGE[0] <= LIMIT_MINUTES
    state = api[0]
    state.jobs = [volcano_job()]
    state.pods = [
        run_pod(0, node_name="trn-a", container=running(30)),
        run_pod(1, node_name="trn-b", container=running(30)),
    ]
    wait = CACHE_LOCK_TIMEOUT_SECONDS / 60 - 0.1
    state.logs = {
        f"bert-1a2b3c4d-worker-{i}": f"{log_time(wait)} waiting up to 300s for another run to release the compile cache /data/neuron_cache/bert_{i}\n"
        for i in (0, 1)
    }
    code, out = run_once(api, tmp_path)
    assert code == 0 and ended(state) is None, out


@pytest.mark.process
def test_a_gang_not_yet_placed_is_left_to_the_autoscaler_and_the_gang_watchdog(
    api: tuple[RunsApi, str], tmp_path: Path
) -> None:
    state = api[0]
    state.jobs = [volcano_job(phase="Pending")]
    state.pods = [run_pod(0, node_name=None), run_pod(1, node_name=None)]
    code, out = run_once(api, tmp_path)
    assert code == 0 and ended(state) is None, out


@pytest.mark.process
def test_an_image_still_pulling_within_the_limit_is_left_alone(
    api: tuple[RunsApi, str], tmp_path: Path
) -> None:
    state = api[0]
    state.jobs = [volcano_job(phase="Pending")]
    state.pods = both_pods(waiting("ContainerCreating"), on_node_minutes=8)
    code, out = run_once(api, tmp_path)
    assert code == 0 and ended(state) is None, out
    assert state.log_reads == []  # not every pod runs: no log is read


@pytest.mark.process
def test_a_pod_on_a_node_outside_the_trainium_groups_is_not_judged(
    api: tuple[RunsApi, str], tmp_path: Path
) -> None:
    state = api[0]
    state.jobs = [volcano_job()]
    state.pods = [
        run_pod(0, node_name="ip-10-0-1-5", container=waiting("ImagePullBackOff"), on_node_minutes=60)
    ]
    code, out = run_once(api, tmp_path)
    assert code == 0 and ended(state) is None, out


@pytest.mark.process
def test_a_container_that_worked_for_long_is_judged_from_its_last_run(
    api: tuple[RunsApi, str], tmp_path: Path
) -> None:
    state = api[0]
    state.jobs = [volcano_job()]
    crashed = waiting("CrashLoopBackOff", "back-off 10s", restarts=1, last_run=(120, 3))
    state.pods = both_pods(crashed, on_node_minutes=125)
    code, out = run_once(api, tmp_path)
    assert code == 0 and ended(state) is None, out


@pytest.mark.process
def test_a_runs_own_limit_overrides_the_clusters(api: tuple[RunsApi, str], tmp_path: Path) -> None:
    state = api[0]
    state.jobs = [volcano_job(limit="30")]
    state.pods = both_pods(waiting("ContainerCreating"), on_node_minutes=25)
    run_once(api, tmp_path)
    assert ended(state) is None
    state.pods = both_pods(waiting("ContainerCreating"), on_node_minutes=31)
    run_once(api, tmp_path)
    result = ended(state)
    assert result is not None and "(limit 30m)" in result[1]


@pytest.mark.process
@pytest.mark.parametrize("limit", ["1e9", "1000000", str(CEILING_MINUTES + 1)])
def test_a_runs_own_limit_never_goes_past_the_ceiling(
    api: tuple[RunsApi, str], tmp_path: Path, limit: str
) -> None:
    """A team member writes the annotation (issue 34: ``1e9`` kept a blocking Job away from the guard
    for good): the guard clamps it to ``--stuck-max-minutes`` and says so in its log (the team
    admission policy also refuses such a Job: tests/cluster/test_tenants_apart.py)."""
    state = api[0]
    state.jobs = [volcano_job(limit=limit)]
    state.pods = both_pods(waiting("ContainerCreating"), on_node_minutes=CEILING_MINUTES + 1)
    _, log = run_once(api, tmp_path)
    result = ended(state)
    assert result is not None and f"(limit {CEILING_MINUTES}m)" in result[1], result
    assert f"is above the ceiling of {CEILING_MINUTES}m; using the ceiling" in log, log


@pytest.mark.process
@pytest.mark.parametrize(
    "job",
    [
        pytest.param(volcano_job(phase="Terminating"), id="already-terminating"),
        pytest.param(volcano_job(phase="Completed"), id="completed"),
        pytest.param(volcano_job(reason="StuckRun"), id="ended-by-the-watchdog-before"),
    ],
)
def test_a_run_already_ending_is_not_ended_again(
    api: tuple[RunsApi, str], tmp_path: Path, job: dict[str, Any]
) -> None:
    state = api[0]
    state.jobs = [job]
    state.pods = both_pods(waiting("ImagePullBackOff"), on_node_minutes=30)
    code, out = run_once(api, tmp_path)
    assert code == 0 and ended(state) is None, out


@pytest.mark.process
def test_the_second_pass_does_not_end_the_run_twice(api: tuple[RunsApi, str], tmp_path: Path) -> None:
    state = api[0]
    state.jobs = [volcano_job()]
    state.pods = both_pods(waiting("ImagePullBackOff"), on_node_minutes=30)
    run_once(api, tmp_path)
    run_once(api, tmp_path)
    assert ended(state) is not None  # one command, one patch, one event


# --- Not picked up: a Job Volcano's controller never synced (volcano#3968) ----------------------------------------


def reported(state: RunsApi) -> tuple[str, str]:
    """(reason, message) the Job was reported with: a status patch and an Event, both admitted, no Command."""
    assert not state.commands
    assert state.decisions and all(decision.allowed for decision in state.decisions)
    [job] = state.jobs
    [patch] = state.status_patches
    assert patch[1] == {
        "status": {"state": {"reason": "NotPickedUp", "message": job["status"]["state"]["message"]}}
    }
    assert set(job["status"]["state"]) - {"phase", "lastTransitionTime"} == {"reason", "message"}
    [event] = state.events
    assert event["involvedObject"]["kind"] == "Job" and event["involvedObject"]["uid"] == JOB_UID
    reason, message = job["status"]["state"]["reason"], job["status"]["state"]["message"]
    assert (event["reason"], event["message"], event["type"]) == (reason, message, "Warning")
    return reason, message


def podgroup_of(job: dict[str, Any], phase: str = "Inqueue") -> dict[str, Any]:
    """The PodGroup Volcano's job controller creates for a Job on its first sync (named <job>-<uid>);
    the scheduler moves it from Pending to Inqueue, then the controller creates the pods."""
    metadata = job["metadata"]
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": metadata["name"]}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": f"{metadata['name']}-{metadata['uid']}",
            "namespace": metadata["namespace"],
            "ownerReferences": [{**owner, "uid": metadata["uid"], "controller": True}],
        },
        "spec": {"minMember": 2, "queue": "test"},
        "status": {"phase": phase},
    }


@pytest.mark.process
@pytest.mark.parametrize(
    ("phase", "podgroup", "says"),
    [
        pytest.param(
            "",
            None,
            "Volcano's job controller has not picked this Job up in 12m (limit 10m): phase none, no PodGroup, no pod.",
            id="never-synced",
        ),
        pytest.param(
            "Pending",
            None,
            "Volcano's job controller has not picked this Job up in 12m (limit 10m): phase Pending, no PodGroup, no pod.",
            id="dropped-during-its-first-sync",
        ),
        pytest.param(
            "Pending",
            "Pending",
            "Volcano's scheduler has not taken this Job's PodGroup up in 12m (limit 10m): phase Pending, PodGroup Pending, no pod",
            id="the-scheduler-never-took-the-podgroup",
        ),
        pytest.param(
            "Pending",
            "Inqueue",
            "Volcano's job controller has created no pod of this Job in 12m (limit 10m): phase Pending, PodGroup Inqueue.",
            id="no-pod-made-for-the-queued-podgroup",
        ),
    ],
)
def test_a_job_volcano_has_not_picked_up_is_reported_once_and_not_ended(
    api: tuple[RunsApi, str], tmp_path: Path, phase: str, podgroup: str | None, says: str
) -> None:
    state = api[0]
    job = volcano_job(phase=phase, created_minutes=12)
    state.jobs = [job]
    state.podgroups = [podgroup_of(job, podgroup)] if podgroup is not None else []
    code, out = run_once(api, tmp_path)
    assert code == 0, out
    reason, message = reported(state)
    assert reason == "NotPickedUp"
    assert message.startswith(says), message
    assert "kubectl -n volcano-system get pods" in message
    assert "run training/bert-1a2b3c4d: reported (NotPickedUp)" in out
    run_once(api, tmp_path)
    assert len(state.status_patches) == len(state.events) == 1  # said once


def unplaced_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The gang's pods, made and waiting for nodes (``Unschedulable``: the autoscaler's business)."""
    return [run_pod(index, node_name=None, job=job["metadata"]["name"]) for index in (0, 1)]


@pytest.mark.process
@pytest.mark.parametrize(
    ("job_shape", "pods"),
    [
        # The Job is built when the test runs, not at collection: "8 minutes ago" must stay 8 minutes
        # however long the other tests of the session took (a slow run once made it 13, past the limit).
        pytest.param({"phase": "", "created_minutes": 8}, False, id="within-the-limit"),
        pytest.param({"phase": "Pending", "created_minutes": 60}, True, id="gang-waiting-for-nodes"),
        pytest.param({"phase": "Running", "created_minutes": 60}, False, id="running"),
    ],
)
def test_a_job_is_not_reported_within_its_limit_or_once_it_has_pods(
    api: tuple[RunsApi, str], tmp_path: Path, job_shape: dict[str, Any], pods: bool
) -> None:
    job = volcano_job(**job_shape)
    state = api[0]
    state.jobs = [job]
    state.podgroups = [podgroup_of(job)]
    state.pods = unplaced_pods(job) if pods else []
    code, out = run_once(api, tmp_path)
    assert code == 0, out
    assert not state.status_patches and not state.events and not state.commands, out


@pytest.mark.process
def test_a_runs_own_limit_applies_to_the_report(api: tuple[RunsApi, str], tmp_path: Path) -> None:
    state = api[0]
    state.jobs = [volcano_job(phase="", created_minutes=8, limit="5")]
    code, out = run_once(api, tmp_path)
    assert code == 0, out
    assert reported(state)[1].startswith(
        "Volcano's job controller has not picked this Job up in 8m (limit 5m)"
    )


@pytest.mark.process
def test_the_report_is_cleared_when_volcano_picks_the_job_up_after_all(
    api: tuple[RunsApi, str], tmp_path: Path
) -> None:
    """The component came back: the Job's pods exist (its phase set and our reason kept by the
    controller's status writes)."""
    state = api[0]
    job = volcano_job(phase="Pending", created_minutes=30)
    job["status"]["state"] |= {"reason": "NotPickedUp", "message": "Volcano's job controller has not ..."}
    state.jobs = [job]
    state.podgroups = [podgroup_of(job)]
    state.pods = unplaced_pods(job)
    code, out = run_once(api, tmp_path)
    assert code == 0, out
    assert state.status_patches == [
        ("bert-1a2b3c4d", {"status": {"state": {"reason": None, "message": None}}})
    ]
    assert all(decision.allowed for decision in state.decisions)
    assert state.jobs[0]["status"]["state"] == {
        "phase": "Pending",
        "lastTransitionTime": job["status"]["state"]["lastTransitionTime"],
    }
    assert not state.events and not state.commands
    assert "run training/bert-1a2b3c4d: picked up by Volcano after all; report cleared" in out


# --- The admission policy ---------------------------------------------------------------------------------------


def _command_decision(action: str, kind: str = "Job") -> Decision:
    request = command_request("training")
    command = {
        "apiVersion": "bus.volcano.sh/v1alpha1",
        "kind": "Command",
        "metadata": {"name": "x", "namespace": "training"},
        "action": action,
        "target": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": kind, "name": "bert", "uid": JOB_UID},
    }
    return admit(run_policy(), request, obj=command, old=None)


def test_the_policy_admits_only_terminatejob_commands_aimed_at_a_job() -> None:
    assert _command_decision("TerminateJob").allowed
    for action in ("AbortJob", "RestartJob", "ResumeJob", "CompleteJob"):
        assert not _command_decision(action).allowed, action
    assert not _command_decision("TerminateJob", kind="Queue").allowed


def _status_decision(change: dict[str, Any]) -> Decision:
    job = volcano_job()
    updated = merge_patch(copy.deepcopy(job), change)
    request = job_request("UPDATE", "bert-1a2b3c4d", "training", sub_resource="status")
    return admit(run_policy(), request, obj=updated, old=job)


def test_the_policy_lets_it_change_only_the_jobs_state_reason_and_message() -> None:
    assert _status_decision({"status": {"state": {"reason": "StuckRun", "message": "m"}}}).allowed
    for change in (
        {"status": {"state": {"phase": "Completed"}}},
        {"status": {"retryCount": 9}},
        {"spec": {"minAvailable": 1}},
        {"metadata": {"labels": {"x": "y"}}},
    ):
        assert not _status_decision(change).allowed, change
    # The Job itself (not its status), or deleting it: never.
    request = job_request("DELETE", "bert-1a2b3c4d", "training")
    assert not admit(run_policy(), request, obj=None, old=volcano_job()).allowed


# --- The pure core and the bound ------------------------------------------------------------------------------------


def test_log_times_are_read_with_nanoseconds() -> None:
    core = program("stuck_runs")
    assert core.parse_log_time("2026-11-25T10:00:01.123456789Z hello") == datetime(
        2026, 11, 25, 10, 0, 1, 123456, tzinfo=UTC
    )
    assert core.parse_log_time("no time here") is None


def test_the_documented_bound_holds_for_the_shipped_defaults() -> None:
    """docs/capacity.md: a stuck run holds its nodes at most the limit, one pass, and the autoscaler's
    unneeded time (its delay after a scale-up runs meanwhile): 16 minutes with the defaults, under 20."""
    config = load_config(DEFAULT_CONFIG)
    limit = config.autoscaler.stuck_run_minutes
    assert limit is not None
    assert config.autoscaler.scale_down_delay_after_add_minutes <= limit
    bound = limit + 1 + config.autoscaler.scale_down_unneeded_minutes
    assert bound == 16
    assert bound <= 20


# --- Not ended: a run the guard ended that Volcano has not ended ---------------------------------------------------


def test_a_run_ended_but_still_on_its_nodes_a_limit_later_is_not_ended() -> None:
    core = program("stuck_runs")
    now = datetime.now(UTC)
    job = volcano_job(reason="StuckRun")
    pods = both_pods(waiting("ImagePullBackOff"), on_node_minutes=30)

    def said(*, job: dict[str, Any] = job, pods: list[dict[str, Any]] = pods, minutes: float = 11) -> Any:
        return core.not_ended(
            job,
            pods,
            trainium_nodes=["trn-a", "trn-b"],
            ended_at=now - timedelta(minutes=minutes),
            now=now,
            threshold=LIMIT_MINUTES * 60,
        )

    message = said()
    assert message.startswith(
        "Volcano has not carried out the TerminateJob sent 11m ago (limit 10m): phase Running, and its pods "
        "still hold Trainium nodes trn-a, trn-b."
    ), message
    assert message.endswith("kubectl -n training delete vcjob bert-1a2b3c4d")
    assert said(minutes=9) is None  # within the limit
    assert said(job=volcano_job(phase="Terminating", reason="StuckRun")) is None  # Volcano is ending it
    assert said(job=volcano_job()) is None  # not ended by the guard
    assert said(pods=[]) is None  # its pods are gone
    assert said(pods=[run_pod(0, node_name=None)]) is None  # holds no node


def test_the_guard_remembers_when_it_ended_a_run_and_says_not_ended_once() -> None:
    """guard_pass in this process, its Endings kept between passes as the watchdog's loop keeps them:
    the pass that ends the run, a pass within the limit, one past it (NotEnded), one more (silent)."""
    core = program("stuck_runs")
    job = volcano_job()
    pods = both_pods(waiting("ImagePullBackOff"), on_node_minutes=30)
    written: list[tuple[str, Any]] = []

    class Recorder:
        def items(self, path: str, **_: str) -> list[dict[str, Any]]:
            return [job]

        def call(self, method: str, path: str, body: Any) -> Any:
            written.append(("command", body["action"]))
            return body

        def merge_patch(self, path: str, body: Any) -> Any:
            job["status"]["state"].update(body["status"]["state"])
            written.append(("status", body["status"]["state"]["reason"]))
            return job

        def event(self, *, reason: str, **_: Any) -> Any:
            written.append(("event", reason))

    endings = core.Endings()
    settings = core.GuardSettings(
        namespaces=("training",), threshold_seconds=LIMIT_MINUTES * 60, annotation="x", component=NAME
    )
    start = datetime.now(UTC)
    for minutes in (0, 5, 11, 20):
        assert core.guard_pass(
            Recorder(),
            settings,
            pods=pods,
            trainium_nodes=["trn-a", "trn-b"],
            podgroup_phases={JOB_UID: "Running"},
            now=start + timedelta(minutes=minutes),
            log=lambda line: None,
            endings=endings,
        )
    assert written == [
        ("command", "TerminateJob"),
        ("status", "StuckRun"),
        ("event", "StuckRun"),
        ("event", "NotEnded"),
    ]
    assert set(endings.ended_at) == endings.reported == {JOB_UID}
    # The Job deleted: the next pass forgets it.
    job["metadata"]["uid"] = "another-job"
    assert core.guard_pass(
        Recorder(),
        settings,
        pods=[],
        trainium_nodes=["trn-a", "trn-b"],
        podgroup_phases={},
        now=start + timedelta(minutes=21),
        log=lambda line: None,
        endings=endings,
    )
    assert JOB_UID not in endings.ended_at and JOB_UID not in endings.reported


# --- How often a progressing run's logs are read ----------------------------------------------------------------


def _passes(minutes: range, *, printing: bool, remember: bool) -> tuple[list[tuple[int, str]], list[int]]:
    """guard_pass each minute of ``minutes`` on a running gang of two, worker 0 printing each minute
    (``printing``) or silent since a minute before the first pass; its Endings kept between passes
    (``remember``, as the watchdog's loop keeps them) or new each pass. The log reads (minute, pod)
    and the minutes at which the run was ended."""
    core = program("stuck_runs")
    start = datetime.now(UTC)
    reads: list[tuple[int, str]] = []
    ends: list[int] = []
    clock = {"minute": 0}
    job = volcano_job()

    class Reader:
        def items(self, path: str, **_: str) -> list[dict[str, Any]]:
            return [job]

        def text(self, path: str) -> str:
            reads.append((clock["minute"], path.split("/")[6]))
            spoke = start + timedelta(minutes=clock["minute"] - 0.5 if printing else -1)
            if path.split("/")[6].endswith("-worker-0"):
                return spoke.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z [0]: step 1300\n"
            return ""

        def call(self, method: str, path: str, body: Any) -> Any:
            ends.append(clock["minute"])
            return body

        def merge_patch(self, path: str, body: Any) -> Any:
            job["status"]["state"].update(body["status"]["state"])
            return job

        def event(self, **_: Any) -> Any:
            return None

    pods = [
        run_pod(0, node_name="trn-a", container=running(60)),
        run_pod(1, node_name="trn-b", container=running(60)),
    ]
    settings = core.GuardSettings(
        namespaces=("training",), threshold_seconds=LIMIT_MINUTES * 60, annotation="x", component=NAME
    )
    endings = core.Endings()
    for minute in minutes:
        clock["minute"] = minute
        assert core.guard_pass(
            Reader(),
            settings,
            pods=pods,
            trainium_nodes=["trn-a", "trn-b"],
            podgroup_phases={JOB_UID: "Running"},
            now=start + timedelta(minutes=minute),
            log=lambda line: None,
            endings=endings if remember else core.Endings(),
        )
    return reads, ends


def test_a_progressing_runs_logs_are_read_once_a_limit_not_each_pass() -> None:
    """Rank 0's line read at one pass proves progress until a limit after it: 21 passes a minute
    apart read its log 3 times (minutes 0, 10 and 20 with the 10-minute limit), not 21 times."""
    reads, ends = _passes(range(21), printing=True, remember=True)
    assert ends == []
    assert reads == [
        (0, "bert-1a2b3c4d-worker-0"),
        (10, "bert-1a2b3c4d-worker-0"),
        (20, "bert-1a2b3c4d-worker-0"),
    ]
    reads, _ = _passes(range(21), printing=True, remember=False)
    assert len(reads) == 21  # a watchdog restarted each pass reads it each pass


def test_remembering_the_last_line_does_not_delay_ending_a_silent_run() -> None:
    """Silent since a minute before the first pass: ended at minute 10 (11 minutes past its last
    line, the limit 10), as a watchdog that remembers nothing ends it; every pod's log read then."""
    reads, ends = _passes(range(15), printing=False, remember=True)
    _, forgetting = _passes(range(15), printing=False, remember=False)
    assert ends == forgetting == [10]
    assert [pod for minute, pod in reads if minute == 10] == [
        "bert-1a2b3c4d-worker-0",
        "bert-1a2b3c4d-worker-1",
    ]
