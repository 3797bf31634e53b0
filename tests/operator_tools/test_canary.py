"""The canary (issue 21, item 3): its stages, the line that explains each class of failure, the
rendered canary run, and the whole program against a loopback stand-in of the API server.

The pure core (operator_tools/canary_report.py) is driven with recorded pods, events, nodes and log lines;
the program (``python -m operator_tools.canary``) with the official Kubernetes client against
tests/stand_in_api.py, which plays a scale-from-zero run second by second. Neither a real API
server, Volcano nor the autoscaler decides anything here: the stand-in's answers are written by
hand in the shapes the API returns.
"""

from __future__ import annotations

import argparse
import ast
import copy
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from cluster_facts import run_stages
from cluster_facts.kubernetes_names import EFA_RESOURCE, NEURON_RESOURCE, NODE_GROUP_LABEL, PLATFORM_NAMESPACE
from cluster_facts.run_stages import RUN_STAGES
from cluster_plan.canary_run import canary_manifests, canary_run
from config.loader import load_config, parse_config
from operator_tools.canary import TENSORBOARD_PROXY, canary_for
from operator_tools.canary import main as canary_main
from operator_tools.canary_report import (
    CONTAINER_STAGES,
    NOT_MEASURABLE,
    POD_PREFIX,
    POD_STAGES,
    Report,
    device_problem,
    explain_log,
    explain_pod,
    explain_unplaced,
    parse_stage_lines,
    run_events,
    stage_ids,
)
from tests.conftest import DEFAULT_CONFIG, REPO_ROOT
from tests.k8s_validation import assert_valid
from tests.pod_security import violations
from tests.stand_in_api import json_api

CONFIG = load_config(DEFAULT_CONFIG)
TENSORBOARD_SERVICE = f"/api/v1/namespaces/{PLATFORM_NAMESPACE}/services/{TENSORBOARD_PROXY}"
RUN = canary_run(CONFIG)
RUN_ID, OBJECTS = canary_manifests(RUN)


def stage_line(stage: str, ok: bool, detail: str, seconds: float = 0.5) -> str:
    return f'[0]:{POD_PREFIX}{{"stage": "{stage}", "ok": {str(ok).lower()}, "seconds": {seconds}, "detail": "{detail}"}}'


# --- The stages ---------------------------------------------------------------------------------------------------


def printed_stages(stdout: str) -> list[tuple[str, str]]:
    """(stage id, status) of every stage line the canary printed, in the order printed."""
    return [
        (line.split()[2], line.split()[0])
        for line in stdout.splitlines()
        if line.split()[:1] in (["PASS"], ["SKIP"], ["FAIL"])
    ]


def assert_the_run_stages_order(stdout: str) -> list[tuple[str, str]]:
    """The canary printed every stage once, in CANARY_STAGES order, and among them every stage of
    the time-to-first-step model, in cluster_facts/run_stages.py's order (issue 25: side by side)."""
    printed = printed_stages(stdout)
    ids = [stage for stage, _ in printed]
    assert ids == list(stage_ids()), stdout
    assert [i for i in ids if i in run_stages.stage_ids()] == list(run_stages.stage_ids()), stdout
    return printed


def test_the_canary_measures_every_shared_run_stage_in_its_order() -> None:
    ids = stage_ids()
    shared = [stage.id for stage in RUN_STAGES]
    assert [i for i in ids if i in shared] == shared
    assert len(set(ids)) == len(ids)
    # Its own proofs where they happen: the container's creation (mounts, devices), the process
    # group (the collective), after the run (output, TensorBoard, the nodes' removal).
    after = {extra: ids[ids.index(extra) - 1] for extra in ("mounts", "collective", "output_write")}
    assert after == {"mounts": "image_pull", "collective": "rendezvous", "output_write": "first_step"}
    assert ids[ids.index("mounts") : ids.index("mounts") + 3] == ("mounts", "neuron_devices", "efa_devices")
    assert ids[-4:] == ("output_write", "run_end", "tensorboard", "scale_down")


def test_stages_print_in_order_and_a_stage_waits_for_those_before_it() -> None:
    report = Report()
    report.passed("scale_up", 5.0, "TriggeredScaleUp")
    assert report.stage_lines() == []  # pods_pending has no outcome yet
    report.passed("pods_pending", 6.0, "2 pods")
    assert [stage for stage, _ in report.stage_lines()] == ["pods_pending", "scale_up"]
    report.failed("instance_launch", 9.0, "FailedScaleUp: no capacity")
    report.close()
    lines = report.lines()
    assert [line.split()[2] for line in lines[:-1]] == list(stage_ids())
    assert lines[-1] == "CANARY FAIL at instance_launch: FailedScaleUp: no capacity"
    skipped = [line for line in lines if line.startswith("SKIP")]
    assert len(skipped) == len(stage_ids()) - 3
    assert all(line.endswith("(not reached: the canary failed at instance_launch)") for line in skipped)


def test_the_pod_program_reports_only_stages_the_canary_knows() -> None:
    source = (REPO_ROOT / "cluster_programs" / "canary_worker.py").read_text()
    reported = {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in stage_ids()
    }
    assert reported == set(POD_STAGES)
    assert set(POD_STAGES) <= set(stage_ids())


# --- The rendered canary run --------------------------------------------------------------------------------------


def test_the_canary_is_a_run_of_the_real_chart_with_its_program_checked() -> None:
    configmap, job = OBJECTS
    assert_valid([configmap, job])
    assert (job["apiVersion"], job["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    assert job["metadata"]["name"] == RUN_ID and RUN_ID.startswith("canary-")
    [task] = job["spec"]["tasks"]
    spec = task["template"]["spec"]
    # A team's namespace enforces restricted (k8s_charts/addons/pod_security.py).
    assert violations(spec, "restricted") == []
    [container] = spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    # The catalog's counts for the group's instance type, and the run's whole node.
    assert env["CANARY_NEURON_DEVICES"] == str(RUN.instance.chips) == "16"
    assert env["CANARY_EFA_DEVICES"] == str(RUN.instance.efa_interfaces) == "8"
    assert container["resources"]["limits"] == {NEURON_RESOURCE: "16", EFA_RESOURCE: "8"}
    # The program comes from the ConfigMap, read-only, and is checked by its hash before it runs.
    program = configmap["data"]["canary_worker.py"]
    assert program == (REPO_ROOT / "cluster_programs" / "canary_worker.py").read_text()
    assert {"name": "program", "mountPath": "/opt/run/program", "readOnly": True} in container["volumeMounts"]
    assert "/opt/run/program/canary_worker.py" in env["VERIFY_FILES"]
    assert container["args"][-1] == "/opt/run/program/canary_worker.py"
    assert job["spec"]["minAvailable"] == RUN.nodes == 2
    assert task["template"]["spec"]["securityContext"]["runAsUser"] == RUN.run_as
    # retries 0: no restart, a failure ends the canary (maxRetry is retries + 1: Volcano fails a Job
    # when its retry count reaches maxRetry; cluster_facts/volcano_retries.py).
    assert job["spec"]["maxRetry"] == 1


def test_without_a_kubeconfig_the_canary_says_how_to_write_one(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """make canary before aws eks update-kubeconfig: one line and exit 2, never a traceback (issue 33)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    assert canary_main(["--config", str(DEFAULT_CONFIG)]) == 2
    out = capsys.readouterr().out
    assert out.splitlines() == [
        (
            "canary: no usable kubeconfig (Invalid kube-config file. No configuration found.); write one with "
            "the stack's UpdateKubeconfigCommand output: aws eks update-kubeconfig --region us-west-2 --name trainium"
        )
    ]


def test_a_group_the_team_may_not_use_is_refused_with_one_line() -> None:
    with pytest.raises(
        ValueError, match=r"node group 'nope' is not one team training may use; allowed: trn1-32xl"
    ):
        canary_run(CONFIG, node_group="nope")


def test_on_a_native_group_the_canary_runs_the_native_collective_in_the_groups_image() -> None:
    """The same stages on both Neuron stacks: on the native one, TorchNeuron's neuron process group
    (cluster_programs/canary_worker.py ``NativeCollective``) in the image of the group's run."""
    native = load_config(REPO_ROOT / "config" / "native.example.yaml")
    xla, trn2 = canary_run(native, node_group="trn1-xla"), canary_run(native, node_group="trn2-native")
    assert (xla.environment["CANARY_NEURON_STACK"], trn2.environment["CANARY_NEURON_STACK"]) == (
        "xla",
        "native",
    )
    [llama] = [run for run in native.runs if run.name == "llama-fsdp2"]
    assert trn2.image.endswith(llama.image.split("/", 1)[1])
    assert RUN.environment["CANARY_NEURON_STACK"] == "xla"
    source = (REPO_ROOT / "cluster_programs" / "canary_worker.py").read_text()
    assert 'init_process_group("neuron")' in source and "import torch_neuronx" in source


def test_a_native_group_without_a_run_has_no_image_for_the_canary() -> None:
    data = yaml.safe_load((REPO_ROOT / "config" / "native.example.yaml").read_text())
    native = parse_config({**data, "runs": [data["runs"][0]]})
    with pytest.raises(ValueError, match=r"node group 'trn2-native' serves the native stack, for which"):
        canary_run(native, node_group="trn2-native")


# --- Explaining each class of failure (recorded objects) -----------------------------------------------------------


def pod(
    name: str = "canary-x-worker-0",
    *,
    waiting: tuple[str, str] | None = None,
    terminated: dict[str, Any] | None = None,
) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {"startedAt": "2026-11-25T10:00:00Z"}}
    if waiting is not None:
        state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
    if terminated is not None:
        state = {"terminated": terminated}
    return {
        "metadata": {"name": name, "namespace": "training", "labels": {"app.kubernetes.io/instance": RUN_ID}},
        "spec": {"nodeName": "trn-a", "containers": [{"name": "trainer", "image": "x"}]},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "state": state,
                    "ready": False,
                    "restartCount": 0,
                    "image": "x",
                    "imageID": "",
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("recorded", "stage", "line"),
    [
        pytest.param(
            pod(
                waiting=(
                    "ImagePullBackOff",
                    'Back-off pulling image "123.dkr.ecr.us-west-2.amazonaws.com/x:1"',
                )
            ),
            "image_pull",
            'pod canary-x-worker-0: container trainer ImagePullBackOff: Back-off pulling image "123.dkr.ecr.us-west-2.amazonaws.com/x:1"',
            id="ImagePullBackOff",
        ),
        pytest.param(
            pod(
                waiting=(
                    "CreateContainerError",
                    'failed to mkdir "/data/datasets": mkdir /data/datasets: permission denied',
                )
            ),
            "mounts",
            'pod canary-x-worker-0: container trainer CreateContainerError: failed to mkdir "/data/datasets": mkdir /data/datasets: permission denied',
            id="CreateContainerError-from-a-mount",
        ),
        pytest.param(
            pod(waiting=("CrashLoopBackOff", "back-off 5m0s restarting failed container")),
            "rendezvous",
            "pod canary-x-worker-0: container trainer CrashLoopBackOff: back-off 5m0s restarting failed container",
            id="CrashLoopBackOff",
        ),
    ],
)
def test_a_pod_that_cannot_go_on_is_explained_in_one_line(
    recorded: dict[str, Any], stage: str, line: str
) -> None:
    assert explain_pod(recorded) == (stage, line)


def test_a_pod_on_its_way_is_not_a_failure() -> None:
    assert explain_pod(pod()) is None
    assert explain_pod(pod(waiting=("ContainerCreating", ""))) is None


def test_no_scale_up_is_explained_by_the_autoscalers_event() -> None:
    unplaced = {
        "metadata": {"name": "canary-x-worker-0"},
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available",
                }
            ]
        },
    }
    events = [
        {
            "reason": "FailedScheduling",
            "message": "0/3 nodes are available",
            "lastTimestamp": "2026-11-25T10:00:00Z",
        },
        {
            "reason": "NotTriggerScaleUp",
            "message": "pod didn't trigger scale-up: 1 max node group size reached",
            "lastTimestamp": "2026-11-25T10:01:00Z",
        },
    ]
    assert (
        explain_unplaced([unplaced], events)
        == "NotTriggerScaleUp: pod didn't trigger scale-up: 1 max node group size reached"
    )
    assert explain_unplaced([unplaced], []) == "pod canary-x-worker-0: Unschedulable: 0/3 nodes are available"
    assert "no pod was created" in explain_unplaced([], [])


def test_the_autoscalers_word_explains_no_scale_up_before_the_schedulers_newer_one() -> None:
    """The tier's refused scale-up: Volcano's Unschedulable on the PodGroup, newer than the
    autoscaler's NotTriggerScaleUp, only says the gang does not fit the nodes there are."""
    events = [
        {"reason": "NotTriggerScaleUp", "message": "pod didn't trigger scale-up: 1 max node group size reached",
         "lastTimestamp": "2026-11-25T10:00:00Z"},
        {"reason": "Unschedulable", "message": "2/2 tasks in gang unschedulable", "lastTimestamp": "2026-11-25T10:01:00Z"},
    ]  # fmt: skip
    assert explain_unplaced([], events).startswith("NotTriggerScaleUp: ")
    assert explain_unplaced([], events[1:]) == "Unschedulable: 2/2 tasks in gang unschedulable"


def test_only_this_runs_events_count_not_an_earlier_runs_of_the_same_names() -> None:
    """The run id is the same on every run of one configuration: an earlier canary's pods had the
    same names, and their events (kept an hour) would pass this run's scale-up before it happened."""
    job = {"metadata": {"name": RUN_ID, "uid": "job-2"}}
    worker = pod(f"{RUN_ID}-worker-0")
    worker["metadata"].update(uid="pod-2", annotations={"scheduling.k8s.io/group-name": f"{RUN_ID}-job-2"})

    def event(kind: str, name: str, uid: str) -> dict[str, Any]:
        return {"reason": "TriggeredScaleUp", "involvedObject": {"kind": kind, "name": name, "uid": uid}}

    earlier = [event("Pod", f"{RUN_ID}-worker-0", "pod-1"), event("PodGroup", f"{RUN_ID}-job-1", "pg-1")]
    this = [event("Pod", f"{RUN_ID}-worker-0", "pod-2"), event("PodGroup", f"{RUN_ID}-job-2", "pg-2"),
            event("Job", RUN_ID, "job-2")]  # fmt: skip
    assert run_events([*earlier, *this], job=job, pods=[worker]) == this
    assert run_events(earlier, job=job, pods=[]) == []


def test_a_rendezvous_timeout_is_read_from_the_log() -> None:
    log = "[0]: waiting for peers\ntorch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: The node did not join the rendezvous in time\n[W] some warning"
    stage, line = explain_log(log) or ("", "")
    assert stage == "rendezvous" and line.startswith(
        "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"
    )


@pytest.mark.parametrize(
    ("stage", "detail"),
    [
        pytest.param(
            "neuron_devices",
            "RuntimeError: 12 Neuron devices in the pod, the instance type has 16",
            id="device-count-mismatch",
        ),
        pytest.param(
            "efa_devices",
            "RuntimeError: 0 EFA devices (/dev/infiniband/uverbs*) in the pod, the instance type has 8",
            id="EFA-missing",
        ),
        pytest.param(
            "collective",
            "RuntimeError: bus bandwidth 12.0 Gbps below 200.0 Gbps over 2 nodes",
            id="collective-below-threshold",
        ),
        pytest.param(
            "output_write",
            "PermissionError: [Errno 13] Permission denied: '/data/runs/canary-x'",
            id="output-not-writable",
        ),
    ],
)
def test_a_failed_stage_line_from_the_pod_is_the_failure(stage: str, detail: str) -> None:
    log = "\n".join(
        [
            stage_line("mounts", True, "ok"),
            stage_line(stage, False, detail),
            "Traceback (most recent call last):",
        ]
    )
    assert explain_log(log) == (stage, detail)
    report = Report()
    report.take_pod_lines(parse_stage_lines(log), at=42.0)
    failure = report.failure
    assert failure is not None and (failure.stage.id, failure.detail, failure.seconds) == (
        stage,
        detail,
        42.0,
    )
    assert report.lines()[-1] == f"CANARY FAIL at {stage}: {detail}"


def test_a_node_without_its_devices_is_explained() -> None:
    node = {
        "metadata": {"name": "trn-a"},
        "status": {"allocatable": {NEURON_RESOURCE: "16", EFA_RESOURCE: "0"}},
    }
    assert device_problem(node, neuron=NEURON_RESOURCE, efa=EFA_RESOURCE, want_neuron=16, want_efa=8) == (
        f"node trn-a advertises 16 {NEURON_RESOURCE} and 0 {EFA_RESOURCE}, the instance type has 16 and 8"
    )


# --- The program against a stand-in API server ---------------------------------------------------------------------


@dataclass
class Cluster:
    """A scale-from-zero canary, played by the clock from the Job's creation."""

    fail: str = ""
    """'' for a good run; 'mount' (CreateContainerError), 'tensorboard' (the run not listed),
    'tensorboard-down' (no endpoint behind the Service), 'tensorboard-late' (the run listed from the
    third read on: TensorBoard's next reload), 'scale-down'; 'silent': the run completes
    and no container writes a line (kwok's nodes in the test tier); 'no-hardware': the program writes
    no device, compile or collective line, the nodes stay and TensorBoard has no endpoint (the test
    tier's real Trainium node, with ``--not-measurable``); 'etcd-down': worker 0 exits 1 with
    torchrun's etcd error before its program wrote a line."""
    created: float | None = None
    job: dict[str, Any] | None = None
    deleted: list[str] = field(default_factory=list)
    tensorboard_reads: list[str] = field(default_factory=list)
    log_reads: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def elapsed(self) -> float:
        return -1.0 if self.created is None else time.monotonic() - self.created

    def nodes(self) -> list[dict[str, Any]]:
        t = self.elapsed()
        if t < 0.3 or (t > 2.0 and self.fail not in ("scale-down", "no-hardware")):
            return []
        return [
            {
                "metadata": {"name": name, "labels": {NODE_GROUP_LABEL: RUN.node_group}},
                "spec": {"taints": [{"key": NEURON_RESOURCE, "value": "present", "effect": "NoSchedule"}]},
                "status": {
                    "allocatable": {NEURON_RESOURCE: "16", EFA_RESOURCE: "8"},
                    "conditions": [{"type": "Ready", "status": "True" if t > 0.5 else "False"}],
                },
            }
            for name in ("trn-a", "trn-b")
        ]

    def pods(self) -> list[dict[str, Any]]:
        t = self.elapsed()
        if t < 0:
            return []
        found = []
        for index, node in enumerate(("trn-a", "trn-b")):
            recorded = pod(f"{RUN_ID}-worker-{index}")
            recorded["metadata"]["uid"] = f"uid-{RUN_ID}-worker-{index}"
            if t < 0.7:
                recorded["spec"].pop("nodeName")
                recorded["status"] = {
                    "phase": "Pending",
                    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                }
            elif self.fail == "mount" and index == 1:
                recorded["spec"]["nodeName"] = node
                recorded["status"]["containerStatuses"][0]["state"] = {
                    "waiting": {
                        "reason": "CreateContainerError",
                        "message": 'failed to mkdir "/data/datasets": permission denied',
                    }
                }
            elif self.fail == "etcd-down" and index == 0 and t > 0.9:
                recorded["spec"]["nodeName"] = node
                recorded["status"]["phase"] = "Failed"
                recorded["status"]["containerStatuses"][0]["state"] = {
                    "terminated": {"exitCode": 1, "reason": "Error"}
                }
            else:
                recorded["spec"]["nodeName"] = node
                recorded["status"]["phase"] = "Running"
            found.append(recorded)
        return found

    def log(self) -> str:
        self.log_reads += 1
        if self.elapsed() < 0.9 or self.fail == "silent":
            return ""
        if self.fail == "etcd-down":
            return _ETCD_DOWN
        unmeasured = (
            ("neuron_devices", "efa_devices", "compile", "collective") if self.fail == "no-hardware" else ()
        )
        return "\n".join(
            stage_line(stage, True, f"{stage} ok")
            for stage in (
                "mounts",
                "data_ready",
                "neuron_devices",
                "efa_devices",
                "rendezvous",
                "compile",
                "collective",
                "output_write",
            )
            if stage not in unmeasured
        )

    def phase(self) -> str:
        if self.fail == "mount":
            return "Pending"
        if self.fail == "etcd-down":
            return "Running" if self.elapsed() < 1.5 else "Failed"
        return "Completed" if self.elapsed() > 1.2 else "Running"

    def answer(self, method: str, url: str, body: Any) -> tuple[int, Any]:  # noqa: PLR0911 (one per route)
        with self.lock:
            # As the API server routes: on the decoded path (the client escapes ':' and '/' in
            # path parameters, such as the service proxy's name:port and path).
            path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
            parts = path.strip("/").split("/")
            if method == "DELETE":
                self.deleted.append(parts[-1])
                return 200, {"kind": "Status", "status": "Success"}
            if method == "POST" and parts[-1] == "jobs":
                # RUN_ID, or the id of the run ``--not-measurable`` changed (its program's variable).
                assert body["metadata"]["name"].startswith("canary-")
                self.created, self.job = time.monotonic(), body
                return 201, body
            if method == "POST" and parts[-1] == "configmaps":
                return 201, body
            if method == "GET" and parts[-2] == "jobs":
                return 200, {**OBJECTS[1], "status": {"state": {"phase": self.phase()}}}
            if method == "GET" and path == "/api/v1/nodes":
                return 200, {"kind": "NodeList", "metadata": {}, "items": copy.deepcopy(self.nodes())}
            if method == "GET" and parts[-1] == "pods":
                return 200, {"kind": "PodList", "metadata": {}, "items": self.pods()}
            if method == "GET" and parts[-1] == "events":
                events = [
                    {
                        "metadata": {"name": "e1"},
                        "involvedObject": {"name": f"{RUN_ID}-worker-0", "uid": f"uid-{RUN_ID}-worker-0"},
                        "reason": "TriggeredScaleUp",
                        "message": "pod triggered scale-up",
                    }
                ]
                return 200, {
                    "kind": "EventList",
                    "metadata": {},
                    "items": events if self.elapsed() > 0.1 else [],
                }
            if method == "GET" and parts[-1] == "log":
                return 200, self.log()
            if method == "GET" and path in (f"{TENSORBOARD_SERVICE}/proxy/data/runs", "/data/runs"):
                self.tensorboard_reads.append(path)
                if self.fail in ("tensorboard-down", "no-hardware"):
                    return 503, {
                        "kind": "Status",
                        "status": "Failure",
                        "message": f'no endpoints available for service "{TENSORBOARD_PROXY}"',
                        "reason": "ServiceUnavailable",
                        "code": 503,
                    }
                late = self.fail == "tensorboard-late" and len(self.tensorboard_reads) < 3
                runs = [] if self.fail in ("tensorboard", "silent") or late else [f"training/runs/{RUN_ID}"]
                return 200, runs
            return 404, {"kind": "Status", "code": 404}


_ETCD_DOWN = """urllib3.exceptions.MaxRetryError: HTTPConnectionPool(host='etcd-server', port=2379): Max retries exceeded with url: /v2/machines (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f525de2ae50>: Failed to establish a new connection: [Errno 111] Connection refused'))
"""
"""torchrun's agent when its etcd rendezvous finds no etcd: its last line, as tests/cluster/test_canary_pods.py
read it on a real node (the etcd Service with no endpoint)."""


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[tuple[Cluster, str]]:
    state = Cluster(fail=getattr(request, "param", ""))

    def answer(method: str, path: str, headers: Mapping[str, str], body: Any) -> tuple[int, Any]:
        return state.answer(method, path, body)

    with json_api(answer) as url:
        yield state, url


def canary(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "operator_tools.canary", "--config", str(DEFAULT_CONFIG), "--server", url,
            "--poll-seconds", "0.05", *extra,
        ],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.process
def test_a_good_canary_passes_every_stage_and_cleans_up(cluster: tuple[Cluster, str]) -> None:
    state, url = cluster
    done = canary(url, "--timeout-minutes", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "CANARY PASS: every stage passed"
    printed = assert_the_run_stages_order(done.stdout)
    assert {stage for stage, status in printed if status == "SKIP"} == {"first_step"}
    assert "(TriggeredScaleUp)" in next(line for line in lines if line.split()[2:3] == ["scale_up"])
    assert RUN_ID in state.deleted and f"{RUN_ID}-program" in state.deleted
    # TensorBoard was read through the API server's service proxy: no port-forward, no address given.
    assert state.tensorboard_reads == [f"{TENSORBOARD_SERVICE}/proxy/data/runs"]


@pytest.mark.process
@pytest.mark.parametrize("cluster", ["tensorboard-late"], indirect=True)
def test_the_canary_waits_for_tensorboards_next_reload_to_list_the_run(cluster: tuple[Cluster, str]) -> None:
    """TensorBoard lists a new run only from its next reload (every 30 s as rendered; a real
    TensorBoard listed the canary's run 24 s after its event file appeared): the canary reads again
    until it does, within ``--tensorboard-minutes``."""
    state, url = cluster
    done = canary(url, "--timeout-minutes", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.split()[2:3] == ["tensorboard"]]
    assert line.split()[0] == "PASS" and line.endswith("(lists the run)"), line
    assert state.tensorboard_reads == [f"{TENSORBOARD_SERVICE}/proxy/data/runs"] * 3


@pytest.mark.process
def test_tensorboard_url_overrides_the_service_proxy(cluster: tuple[Cluster, str]) -> None:
    state, url = cluster
    done = canary(url, "--timeout-minutes", "1", "--tensorboard-url", url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert state.tensorboard_reads == ["/data/runs"]


@pytest.mark.process
@pytest.mark.parametrize(
    ("cluster", "stage", "says"),
    [
        pytest.param(
            "mount",
            "mounts",
            f'pod {RUN_ID}-worker-1: container trainer CreateContainerError: failed to mkdir "/data/datasets": permission denied',
            id="mount",
        ),
        pytest.param(
            "tensorboard", "tensorboard", f"TensorBoard lists 0 runs, none of them {RUN_ID}", id="tensorboard"
        ),
        pytest.param(
            "tensorboard-down",
            "tensorboard",
            f"TensorBoard did not answer: services/{TENSORBOARD_PROXY} in {PLATFORM_NAMESPACE}: the API "
            f'server answered 503 Service Unavailable: no endpoints available for service "{TENSORBOARD_PROXY}"',
            id="tensorboard-not-running",
        ),
        pytest.param("scale-down", "scale_down", "nodes trn-a, trn-b still up", id="nodes-not-removed"),
    ],
    indirect=["cluster"],
)
def test_a_failing_canary_names_the_stage_and_the_line_that_explains_it(
    cluster: tuple[Cluster, str], stage: str, says: str
) -> None:
    state, url = cluster
    done = canary(
        url, "--timeout-minutes", "0.05", "--scale-down-minutes", "0.03", "--tensorboard-minutes", "0.01"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith(f"CANARY FAIL at {stage}: {says}"), done.stdout
    assert RUN_ID in state.deleted
    # Every stage is still printed, in order: those after the failure as not reached (the nodes'
    # removal is still watched after a TensorBoard failure: they bill either way).
    printed = assert_the_run_stages_order(done.stdout)
    after = [status for _, status in printed[[s for s, _ in printed].index(stage) + 1 :]]
    assert set(after) <= ({"SKIP", "PASS"} if stage == "tensorboard" else {"SKIP"}), done.stdout
    for line in done.stdout.splitlines():
        if line.split()[:1] == ["SKIP"] and "first_step" not in line:
            assert line.endswith(f"(not reached: the canary failed at {stage})"), line


@pytest.mark.process
@pytest.mark.parametrize("cluster", ["silent"], indirect=True)
def test_a_run_whose_containers_say_nothing_fails_unless_told_they_cannot(
    cluster: tuple[Cluster, str],
) -> None:
    """On a real cluster a run that completes without its program's lines is a failure (the first
    line it never wrote); ``--control-plane-only`` (a cluster whose nodes run no containers, as the
    test tier's) prints those stages and TensorBoard as not measured, reads no log, and its pass
    names them."""
    state, url = cluster
    done = canary(url, "--timeout-minutes", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        done.stdout.splitlines()[-1] == "CANARY FAIL at mounts: the run ended without this stage being seen"
    )

    state.created, state.log_reads, state.tensorboard_reads = None, 0, []
    done = canary(url, "--timeout-minutes", "1", "--control-plane-only")
    assert done.returncode == 0, done.stdout + done.stderr
    printed = assert_the_run_stages_order(done.stdout)
    status = dict(printed)
    assert {stage for stage, said in printed if said == "SKIP"} == {"first_step", *CONTAINER_STAGES}
    assert {stage for stage, said in printed if said == "PASS"} == set(stage_ids()) - {
        "first_step",
        *CONTAINER_STAGES,
    }
    assert status["run_end"] == "PASS"
    lines = done.stdout.splitlines()
    for stage in CONTAINER_STAGES:
        (line,) = [line for line in lines if line.split()[2:3] == [stage]]
        assert "(not measured here: " in line and line.endswith("(--control-plane-only))"), line
    assert (
        lines[-1]
        == f"CANARY PASS: every stage it measured passed; not measured here: {', '.join(CONTAINER_STAGES)}"
    )
    assert f"canary {RUN_ID}: removed Job {RUN_ID}, ConfigMap {RUN_ID}-program" in lines
    assert state.log_reads == 0 and state.tensorboard_reads == []


def _unmeasurable_args() -> list[str]:
    return [argument for stage in NOT_MEASURABLE for argument in ("--not-measurable", stage)]


@pytest.mark.process
@pytest.mark.parametrize("cluster", ["no-hardware"], indirect=True)
def test_stages_this_cluster_cannot_measure_print_as_not_measured_only_when_named(
    cluster: tuple[Cluster, str],
) -> None:
    """A cluster whose containers run but whose nodes have no Neuron hardware, EFA, Auto Scaling
    group or TensorBoard (the test tier's real Trainium node): unnamed, the canary fails at the
    first stage its program never reported; with ``--not-measurable`` for each, every named stage
    prints as not measured with what it needs, the rest pass, the scale-down is not waited for, the
    pass names them, and the run tells its program which checks not to run."""
    state, url = cluster
    done = canary(url, "--timeout-minutes", "1", "--scale-down-minutes", "0.03")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == (
        "CANARY FAIL at neuron_devices: the run ended without this stage being seen"
    ), done.stdout

    state.created, state.job, state.tensorboard_reads = None, None, []
    done = canary(url, "--timeout-minutes", "1", "--scale-down-minutes", "0.03", *_unmeasurable_args())
    assert done.returncode == 0, done.stdout + done.stderr
    printed = assert_the_run_stages_order(done.stdout)
    assert {stage for stage, said in printed if said == "SKIP"} == {"first_step", *NOT_MEASURABLE}
    lines = done.stdout.splitlines()
    for stage, needs in NOT_MEASURABLE.items():
        (line,) = [line for line in lines if line.split()[2:3] == [stage]]
        assert line.endswith(f"(not measured here: {needs} (--not-measurable))"), line
    assert lines[-1] == (
        f"CANARY PASS: every stage it measured passed; not measured here: {', '.join(NOT_MEASURABLE)}"
    )
    assert state.job is not None
    (trainer,) = state.job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    variables = {e["name"]: e.get("value") for e in trainer["env"]}
    assert variables["CANARY_NOT_MEASURABLE"] == "neuron_devices,efa_devices,compile,collective"
    # TensorBoard named: not read at all.
    assert state.tensorboard_reads == []


@pytest.mark.process
@pytest.mark.parametrize("alone", ["compile", "collective"])
def test_compile_and_collective_are_not_measurable_only_together(alone: str) -> None:
    """The program measures both with one Neuron all-reduce: one named alone is refused (exit 2)
    before the canary touches the cluster."""
    done = canary("http://127.0.0.1:9", "--not-measurable", alone)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith(f"canary: --not-measurable {alone} needs --not-measurable "), done.stdout


def test_a_stage_not_in_the_list_cannot_be_named_not_measurable() -> None:
    with pytest.raises(SystemExit) as exited:
        canary_main(["--config", str(DEFAULT_CONFIG), "--not-measurable", "mounts"])
    assert exited.value.code == 2


def test_without_the_option_the_run_is_unchanged() -> None:
    """No ``--not-measurable``: the program gets no CANARY_NOT_MEASURABLE and runs every check."""
    (trainer,) = OBJECTS[1]["spec"]["tasks"][0]["template"]["spec"]["containers"]
    assert "CANARY_NOT_MEASURABLE" not in {e["name"] for e in trainer["env"]}
    named = canary_run(CONFIG, not_measurable=("tensorboard", "scale_down"))
    assert "CANARY_NOT_MEASURABLE" not in named.environment


@pytest.mark.process
@pytest.mark.parametrize("cluster", ["etcd-down"], indirect=True)
def test_a_container_that_exits_before_its_first_line_fails_where_its_log_says(
    cluster: tuple[Cluster, str],
) -> None:
    """torchrun's agent finds no etcd and exits 1 before the program runs: the failure is the
    rendezvous, with the agent's line, not the first stage the program never reached."""
    _, url = cluster
    done = canary(url, "--timeout-minutes", "1", "--scale-down-minutes", "0.03")
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith(
        f"CANARY FAIL at rendezvous: pod {RUN_ID}-worker-0: urllib3.exceptions.MaxRetryError: "
    ), done.stdout


def test_the_scale_down_bound_is_the_autoscalers_unneeded_time_and_a_margin() -> None:
    arguments = argparse.Namespace(
        node_group=None,
        timeout_minutes=None,
        scale_down_minutes=None,
        tensorboard_minutes=None,
        poll_seconds=10.0,
        tensorboard_url=None,
        control_plane_only=False,
    )
    built = canary_for(CONFIG, arguments, core=None, custom=None)
    assert built.scale_down_seconds == (CONFIG.autoscaler.scale_down_unneeded_minutes + 5) * 60
    # Three of TensorBoard's 30 s reloads, in whole minutes.
    assert built.tensorboard_seconds == 2 * 60
    assert built.timeout_seconds == (CONFIG.autoscaler.max_node_provision_minutes + 30) * 60


# --- The canary against Pod Security and every admission policy of the plan ------------------------------------


def _policies(manifests: list[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each ValidatingAdmissionPolicy of ``manifests`` with its binding, by name."""
    found: dict[str, list[dict[str, Any]]] = {}
    for manifest in manifests:
        if manifest["kind"] == "ValidatingAdmissionPolicy":
            found.setdefault(manifest["metadata"]["name"], []).append(dict(manifest))
        elif manifest["kind"] == "ValidatingAdmissionPolicyBinding":
            found.setdefault(manifest["spec"]["policyName"], []).append(dict(manifest))
    return found


def test_the_canary_passes_restricted_and_every_admission_policy_it_meets() -> None:
    """Beyond baseline (the team namespace's level), as the stack's runs are held to: the canary's
    pods pass restricted; its Job and ConfigMap, created by a team member (make canary) or by the
    pipeline's check (with the check's fences), pass every policy of the plan; its pods, as
    Volcano's controller creates them, pass every policy too."""
    from cluster_facts.kubernetes_names import DEPLOYMENT_CHECK_GROUP, team_rbac_group  # noqa: PLC0415
    from k8s_charts.checks.deployment_check_rbac import DeploymentCheckRbacChart, canary_access  # noqa: PLC0415
    from k8s_charts.runs.tensorboard import SERVICE_PROXY_NAME  # noqa: PLC0415
    from k8s_charts.teams.job_pod_admission import POLICY_NAME as POD_POLICY  # noqa: PLC0415
    from k8s_charts.teams.job_pod_admission import volcano_controller  # noqa: PLC0415
    from k8s_charts.teams.tenant_admission import JOBS_POLICY as TEAM_JOBS_POLICY  # noqa: PLC0415
    from k8s_charts.teams.tenant_admission import PODS_POLICY as TEAM_PODS_POLICY  # noqa: PLC0415
    from tests.admission import admission_request, admit  # noqa: PLC0415
    from tests.k8s_charts.manifests import synth  # noqa: PLC0415
    from tests.plans import shared_review_plan  # noqa: PLC0415
    from tests.tenant_cases import volcano_pod  # noqa: PLC0415

    configmap, job = copy.deepcopy(OBJECTS[0]), copy.deepcopy(OBJECTS[1])
    [task] = job["spec"]["tasks"]
    assert violations(task["template"]["spec"], "restricted") == []

    plan = [dict(m) for step in shared_review_plan(CONFIG).manifest_sets() for m in step.manifests]
    fences = synth(
        lambda app: DeploymentCheckRbacChart(
            app,
            "rbac",
            group=DEPLOYMENT_CHECK_GROUP,
            canary=canary_access(
                OBJECTS, tensorboard_namespace=PLATFORM_NAMESPACE, tensorboard_proxy=SERVICE_PROXY_NAME
            ),
        )
    )
    policies = _policies([*plan, *fences])
    assert len(policies) >= 4, sorted(policies)
    labels = {
        m["metadata"]["name"]: dict(m["metadata"].get("labels") or {})
        for m in plan
        if m["kind"] == "Namespace"
    }
    namespace = RUN.namespace
    team = CONFIG.teams[0]
    callers = [
        ("arn:aws:sts::111122223333:assumed-role/MlTeam/alice", (team_rbac_group(team.name),)),
        ("arn:aws:sts::111122223333:assumed-role/check/codebuild", (DEPLOYMENT_CHECK_GROUP,)),
    ]
    judged: set[str] = set()

    def all_admit(obj: Mapping[str, Any], request: dict[str, Any]) -> None:
        for name, pair in policies.items():
            decision = admit(pair, request, obj=obj, old=None, namespace_labels=labels.get(namespace, {}))
            assert decision.allowed, (name, decision.messages)
            if decision.matched:
                judged.add(name)

    for obj, resource, group, version in (
        (job, "jobs", "batch.volcano.sh", "v1alpha1"),
        (configmap, "configmaps", "", "v1"),
    ):
        for user, groups in callers:
            request = admission_request(
                user=user,
                operation="CREATE",
                resource=resource,
                name=obj["metadata"]["name"],
                namespace=namespace,
                kind=obj["kind"],
                group=group,
                version=version,
                groups=groups,
            )
            all_admit(obj, request)
    # Its pods, as Volcano's job controller creates them from the template (createJobPod; the
    # model of tests/tenant_cases.py: the Job's queue, scheduler and priority class on each pod).
    pod = volcano_pod(job)
    assert pod["metadata"]["name"] == f"{RUN_ID}-worker-0"
    controller = volcano_controller(namespace="volcano-system", release="volcano")
    request = admission_request(
        user=controller,
        operation="CREATE",
        resource="pods",
        name=pod["metadata"]["name"],
        namespace=namespace,
    )
    all_admit(pod, request)
    # The check's two fences judged what the check creates; the plan's pod policy judged the pods;
    # the teams' policies (k8s_charts/teams/tenant_admission.py) judged the Job and its pods.
    expected = {
        "trainium-deployment-check-volcano-jobs",
        "trainium-deployment-check-config-maps",
        POD_POLICY,
        TEAM_JOBS_POLICY,
        TEAM_PODS_POLICY,
    }
    assert expected <= judged, judged
