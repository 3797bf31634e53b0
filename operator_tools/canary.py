"""``make canary CONFIG=...``: run the canary through every stage a real run meets, and say which
stage failed and why (docs/health.md, "The canary").

The thin shell around operator_tools/canary_report.py: it creates the canary run (cluster_plan/canary_run.py: the
chart every run uses) with the official Kubernetes client and the kubeconfig that ``aws eks
update-kubeconfig`` wrote, watches the Job, its pods, their events and logs and the Trainium nodes,
feeds what it reads to the pure core, prints each stage as it ends, and removes the run at the end.
Exit 0 when every stage passed, 1 when one failed (its line is the last printed), 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config  # type: ignore[import-untyped]
from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

from cluster_facts.kubernetes_names import EFA_RESOURCE, NEURON_RESOURCE, NODE_GROUP_LABEL, PLATFORM_NAMESPACE
from cluster_plan.canary_run import (
    canary_manifests,
    canary_run,
    canary_scale_down_minutes,
    canary_tensorboard_minutes,
    canary_timeout_minutes,
)
from config.loader import ConfigError, load_config
from config.model import StackConfig
from k8s_charts.runs.tensorboard import PORT as TENSORBOARD_PORT
from k8s_charts.runs.tensorboard import SERVICE_PROXY_NAME, TENSORBOARD_NAME
from k8s_charts.runs.training_run import TrainingRun
from operator_tools.canary_report import (
    CONTAINER_STAGES,
    NOT_MEASURABLE,
    NOT_MEASURED,
    TOGETHER,
    Report,
    device_problem,
    explain_log,
    explain_pod,
    explain_unplaced,
    parse_stage_lines,
    ready,
    run_events,
    trainium_nodes,
)

__all__ = ["TENSORBOARD_PROXY", "Canary", "TensorBoardUnreachable", "main"]

Obj = Mapping[str, Any]
_VOLCANO = ("batch.volcano.sh", "v1alpha1", "jobs")
_ENDED = ("Completed", "Failed", "Terminated", "Aborted")
_STARTUP_TAINT = "startup-taint.cluster-autoscaler.kubernetes.io/"
# TensorBoard's run list through the API server's service proxy:
# GET /api/v1/namespaces/<platform>/services/<name>:<port>/proxy/data/runs. The service's name and
# port are what RBAC names (services/proxy, resourceNames), so the check's Role reads the same value.
TENSORBOARD_PROXY = SERVICE_PROXY_NAME
_RUNS_PATH = "data/runs"


class TensorBoardUnreachable(Exception):
    """TensorBoard did not answer with its run list (the line says what answered instead)."""


@dataclass
class Canary:
    """One canary run against one cluster. ``core``, ``custom``: the kubernetes client's CoreV1Api
    and CustomObjectsApi (or anything with the same methods)."""

    core: Any
    custom: Any
    run: TrainingRun
    timeout_seconds: float
    scale_down_seconds: float
    poll_seconds: float = 10.0
    tensorboard_runs: Callable[[], Sequence[str]] | None = None
    tensorboard_seconds: float = canary_tensorboard_minutes() * 60
    """How long after the run's end TensorBoard may take to list it (its next reload)."""
    control_plane_only: bool = False
    """``--control-plane-only``: the stages of CONTAINER_STAGES print as not measured, and no pod's
    log is read (a cluster whose nodes run no containers: the test tier's kwok nodes)."""
    not_measurable: tuple[str, ...] = ()
    """``--not-measurable``: stages of NOT_MEASURABLE this cluster has no means to measure, each
    printed as not measured with what it needs (the run's program runs no check of them:
    cluster_plan/canary_run.py); the scale-down is not waited for when named."""
    out: Callable[[str], object] = print
    clock: Callable[[], float] = time.monotonic
    report: Report = field(default_factory=Report)
    printed: set[str] = field(default_factory=set)

    def _say(self) -> None:
        """Print the stages that have an outcome, in their order (a stage waits for those before it)."""
        for stage, line in self.report.stage_lines():
            if stage not in self.printed:
                self.printed.add(stage)
                self.out(line)

    def _pods(self, run_id: str) -> list[Obj]:
        listed = self.core.list_namespaced_pod(
            self.run.namespace, label_selector=f"app.kubernetes.io/instance={run_id}"
        )
        return [self.core.api_client.sanitize_for_serialization(p) for p in listed.items]

    def _nodes(self) -> list[Obj]:
        listed = self.core.list_node(label_selector=f"{NODE_GROUP_LABEL}={self.run.node_group}")
        nodes = [self.core.api_client.sanitize_for_serialization(n) for n in listed.items]
        return trainium_nodes(nodes, label=NODE_GROUP_LABEL, group=self.run.node_group)

    def _events(self, job: Obj, pods: Sequence[Obj]) -> list[Obj]:
        listed = self.core.list_namespaced_event(self.run.namespace)
        events = [self.core.api_client.sanitize_for_serialization(e) for e in listed.items]
        return run_events(events, job=job, pods=pods)

    def _log(self, pod: Obj) -> str:
        if self.control_plane_only:
            return ""
        # The raw answer: the client's own decoding of a text body returns the repr of its bytes.
        try:
            answer = self.core.read_namespaced_pod_log(
                pod["metadata"]["name"], self.run.namespace, container="trainer", _preload_content=False
            )
        except Exception:  # noqa: BLE001 (no log yet: the container has not started)
            return ""
        text: str = answer.data.decode("utf-8", "replace")
        return text

    def _delete(self, obj: Obj) -> str | None:
        """Delete ``obj`` if it is there (a canary left by an interrupted run, or this one's); the
        API server's refusal, or None when it is gone (a 404 included)."""
        name, namespace = obj["metadata"]["name"], self.run.namespace
        try:
            if obj["kind"] == "ConfigMap":
                self.core.delete_namespaced_config_map(name, namespace)
            else:
                self.custom.delete_namespaced_custom_object(*_VOLCANO[:2], namespace, _VOLCANO[2], name)
        except ApiException as error:
            if error.status != 404:
                return f"{error.status} {error.reason}: {_status_message(error.body)}"
        except Exception as error:  # noqa: BLE001 (said in the clean-up line, never raised over the verdict)
            return str(error)[:200]
        return None

    def _create(self, objects: Sequence[Obj]) -> None:
        for obj in objects:
            self._delete(obj)
            if obj["kind"] == "ConfigMap":
                self.core.create_namespaced_config_map(self.run.namespace, obj)
            else:
                self.custom.create_namespaced_custom_object(
                    *_VOLCANO[:2], self.run.namespace, _VOLCANO[2], obj
                )

    def _cleanup(self, run_id: str, objects: Sequence[Obj]) -> None:
        """Delete the run's objects (the Job's pods and PodGroup go with it, by their owner) and say so."""
        said = []
        for obj in reversed(objects):
            refused = self._delete(obj)
            what = f"{obj['kind']} {obj['metadata']['name']}"
            said.append(what if refused is None else f"{what} NOT deleted ({refused})")
        self.out(f"canary {run_id}: removed {', '.join(said)}")

    def execute(self) -> int:
        run_id, objects = canary_manifests(self.run)
        self.out(
            f"canary {run_id}: {self.run.nodes} x {self.run.instance.name} of {self.run.node_group} in {self.run.namespace}"
        )
        begun = self.clock()
        for stage, why in NOT_MEASURED.items():
            self.report.skipped(stage, why)
        if self.control_plane_only:
            for stage, why in CONTAINER_STAGES.items():
                self.report.not_measured(stage, f"{why} (--control-plane-only)")
        for stage in self.not_measurable:
            self.report.not_measured(stage, f"{NOT_MEASURABLE[stage]} (--not-measurable)")
        warm = {n["metadata"]["name"] for n in self._nodes()}
        try:
            self._create(objects)
            used = self._watch(run_id, begun, warm)
        finally:
            self._cleanup(run_id, objects)
        if used is not None:
            # The nodes bill whatever the run's outcome: their removal is watched after any end.
            if self.report.failure is None:
                self._tensorboard(run_id, begun)
            self._scale_down(used, begun)
        if self.report.failure is None:
            missing = self.report.next_pending
            if missing is not None:
                self.report.failed(
                    missing, self.clock() - begun, "the run ended without this stage being seen"
                )
        self.report.close()
        self._say()
        self.out(self.report.verdict())
        return 0 if self.report.failure is None else 1

    def _watch(self, run_id: str, begun: float, warm: set[str]) -> set[str] | None:
        """Until the Job ends or a stage fails; the nodes a completed run used, or None after a failure before its end."""
        report = self.report
        while True:
            now = self.clock() - begun
            job = self.custom.get_namespaced_custom_object(
                *_VOLCANO[:2], self.run.namespace, _VOLCANO[2], run_id
            )
            phase = ((job.get("status") or {}).get("state") or {}).get("phase", "")
            pods, nodes = self._pods(run_id), self._nodes()
            events = self._events(job, pods)
            bound = {p["spec"]["nodeName"] for p in pods if (p.get("spec") or {}).get("nodeName")}
            problems = self._nodes_seen(now, pods=pods, nodes=nodes, events=events, warm=warm, bound=bound)
            self._pods_seen(now, pods, bound)
            if phase in _ENDED and phase != "Completed" and report.failure is None:
                self._ended_badly(now, job, phase, pods)
            if report.failure is None and now > self.timeout_seconds:
                if problems:
                    report.failed("device_plugins", now, problems[0])
                elif not bound:
                    report.failed(report.next_pending or "scale_up", now, explain_unplaced(pods, events))
                else:
                    report.failed(
                        report.next_pending or "collective",
                        now,
                        f"not done after {self.timeout_seconds:.0f}s",
                    )
            self._say()
            if report.failure is not None:
                return None
            if phase == "Completed":
                # Every stage before the run's end has an outcome by now: the first without one is
                # the failure (a program that wrote none of its lines), ahead of TensorBoard's.
                missing = report.next_pending
                if missing not in (None, "run_end"):
                    report.failed(missing, now, "the run ended without this stage being seen")
                report.passed("run_end", now, "the Job Completed")
                self._say()
                return bound
            time.sleep(self.poll_seconds)

    def _nodes_seen(
        self,
        now: float,
        *,
        pods: Sequence[Obj],
        nodes: Sequence[Obj],
        events: Sequence[Obj],
        warm: set[str],
        bound: set[str],
    ) -> list[str]:
        """Scale-up to the device plugins; the nodes' device problems."""
        report, run = self.report, self.run
        if pods:
            report.passed("pods_pending", now, f"{len(pods)} pods")
        if any(e.get("reason") == "TriggeredScaleUp" for e in events):
            report.passed("scale_up", now, "TriggeredScaleUp")
        new = [n for n in nodes if n["metadata"]["name"] not in warm]
        if new:
            report.passed("scale_up", now, "the group grew")
            report.passed("instance_launch", now, f"{len(new)} nodes registered")
        if len(new) >= run.nodes and all(ready(n) for n in new):
            report.passed("node_join", now, f"{len(new)} Ready")
        if pods and len(bound) == run.nodes and bound <= warm:
            for stage in ("scale_up", "instance_launch", "node_join"):
                report.skipped(stage, "the nodes were already up")
        ours = [n for n in nodes if n["metadata"]["name"] in bound] or [n for n in new if ready(n)]
        problems = [
            problem
            for n in ours
            if (
                problem := device_problem(
                    n,
                    neuron=NEURON_RESOURCE,
                    efa=EFA_RESOURCE,
                    want_neuron=run.instance.chips,
                    want_efa=run.instance.efa_interfaces,
                )
            )
        ]
        if ours and not problems:
            report.passed(
                "device_plugins",
                now,
                f"{run.instance.chips} Neuron, {run.instance.efa_interfaces} EFA per node",
            )
        tainted = any(
            t.get("key", "").startswith(_STARTUP_TAINT)
            for n in ours
            for t in (n.get("spec") or {}).get("taints") or []
        )
        if ours and not tainted and report.status("device_plugins") == "pass":
            report.passed("node_check", now, "no startup taint left on the nodes")
        return problems

    def _pods_seen(self, now: float, pods: Sequence[Obj], bound: set[str]) -> None:
        """Binding, the image, and what the pods report or show."""
        report, run = self.report, self.run
        if pods and len(bound) == run.nodes and all((p.get("spec") or {}).get("nodeName") for p in pods):
            report.passed("pods_bound", now, ", ".join(sorted(bound)))
            for stage in ("device_plugins", "node_check"):
                report.skipped(stage, "the scheduler placed the gang")
        if len(pods) == run.nodes and all(self._started(p) for p in pods):
            report.passed("image_pull", now, "every container started")
        for pod in pods:
            report.take_pod_lines(parse_stage_lines(self._log(pod)), at=now)
            explained = explain_pod(pod) if report.failure is None else None
            if explained is not None:
                stage, line = explained
                if not stage:
                    # A container that exited before any stage line of its own said why: its log
                    # names where it stopped (torchrun's agent at the rendezvous, say), as at the
                    # Job's end; else the first stage without an outcome.
                    found = explain_log(self._log(pod))
                    if found is not None and found[0]:
                        stage, line = found[0], f"pod {pod['metadata']['name']}: {found[1]}"
                if stage == "mounts":
                    # The runtime creates the container's mounts once its image is on the node.
                    report.passed("image_pull", now, "pulled; the container's creation failed")
                report.failed(stage or report.next_pending or "rendezvous", now, line)

    def _ended_badly(self, now: float, job: Obj, phase: str, pods: Sequence[Obj]) -> None:
        for pod in pods:
            found = explain_log(self._log(pod))
            if found is not None:
                stage, line = found
                self.report.failed(
                    stage or self.report.next_pending or "rendezvous",
                    now,
                    f"pod {pod['metadata']['name']}: {line}",
                )
                return
        message = ((job.get("status") or {}).get("state") or {}).get("message") or "no pod explains it"
        self.report.failed(self.report.next_pending or "rendezvous", now, f"the Job ended {phase}: {message}")

    @staticmethod
    def _started(pod: Obj) -> bool:
        return any(
            "running" in (s.get("state") or {}) or "terminated" in (s.get("state") or {})
            for s in (pod.get("status") or {}).get("containerStatuses") or []
        )

    def _tensorboard(self, run_id: str, begun: float) -> None:
        if self.report.status("tensorboard") != "pending":
            return
        if self.tensorboard_runs is None:
            self.report.skipped("tensorboard", "no TensorBoard address (--tensorboard-url)")
            return
        # TensorBoard lists a run from its first reload after the event file appeared (every
        # RELOAD_SECONDS, k8s_charts/runs/tensorboard.py): read until it does, within the bound.
        started = self.clock()
        while True:
            try:
                runs = list(self.tensorboard_runs())
            except TensorBoardUnreachable as error:
                self.report.failed(
                    "tensorboard", self.clock() - begun, f"TensorBoard did not answer: {error}"
                )
                break
            if any(run_id in name for name in runs):
                self.report.passed("tensorboard", self.clock() - begun, "lists the run")
                break
            if self.clock() - started > self.tensorboard_seconds:
                self.report.failed(
                    "tensorboard",
                    self.clock() - begun,
                    f"TensorBoard lists {len(runs)} runs, none of them {run_id}, within "
                    f"{self.tensorboard_seconds:.0f}s of the run's end (its logdir, or the claim it mounts)",
                )
                break
            time.sleep(self.poll_seconds)
        self._say()

    def _scale_down(self, used: set[str], begun: float) -> None:
        if self.report.status("scale_down") != "pending":
            return
        started = self.clock()
        while True:
            left = used & {n["metadata"]["name"] for n in self._nodes()}
            if not left:
                self.report.passed("scale_down", self.clock() - begun, f"{len(used)} nodes removed")
                break
            if self.clock() - started > self.scale_down_seconds:
                self.report.failed(
                    "scale_down",
                    self.clock() - begun,
                    f"nodes {', '.join(sorted(left))} still up {self.scale_down_seconds:.0f}s after the run ended "
                    "(kubectl -n kube-system get configmap cluster-autoscaler-status; a pod that pins them?)",
                )
                break
            time.sleep(self.poll_seconds)
        self._say()


def _run_names(body: bytes, where: str) -> list[str]:
    try:
        runs = json.loads(body)
    except ValueError:
        raise TensorBoardUnreachable(f"{where} answered {body[:120]!r}, not TensorBoard's run list") from None
    if not isinstance(runs, list):
        raise TensorBoardUnreachable(f"{where} answered {type(runs).__name__}, not TensorBoard's run list")
    return [str(name) for name in runs]


def _tensorboard_reader(url: str) -> Callable[[], Sequence[str]]:
    """``--tensorboard-url``: TensorBoard at an address of the caller's (a port-forward, say)."""

    def read() -> Sequence[str]:
        where = f"{url.rstrip('/')}/{_RUNS_PATH}"
        try:
            with urllib.request.urlopen(where, timeout=30) as answer:
                return _run_names(answer.read(), where)
        except OSError as error:
            raise TensorBoardUnreachable(f"{where}: {error}") from None

    return read


def _status_message(body: object) -> str:
    """The message of the API server's Status answer, or the start of whatever it answered."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    try:
        status = json.loads(text)
    except ValueError:
        status = None
    if isinstance(status, dict) and status.get("message"):
        text = str(status["message"])
    return " ".join(text.split())[:200]


def _tensorboard_through_the_api_server(core: Any) -> Callable[[], Sequence[str]]:
    """TensorBoard's run list through the API server's service proxy: no port-forward, and no access
    but RBAC's get on ``services/proxy`` of that one Service (k8s_charts/checks/deployment_check_rbac.py for
    the pipeline's check). The API server dials the pod from the control plane's network interfaces
    in the VPC; TensorBoard's NetworkPolicy admits that (k8s_charts/runs/tensorboard.py)."""
    where = f"services/{TENSORBOARD_PROXY} in {PLATFORM_NAMESPACE}"

    def read() -> Sequence[str]:
        try:
            answer = core.connect_get_namespaced_service_proxy_with_path(
                TENSORBOARD_PROXY, PLATFORM_NAMESPACE, _RUNS_PATH, _preload_content=False
            )
        except ApiException as error:
            raise TensorBoardUnreachable(
                f"{where}: the API server answered {error.status} {error.reason}: {_status_message(error.body)}"
            ) from None
        except OSError as error:
            raise TensorBoardUnreachable(f"{where}: {error}") from None
        return _run_names(answer.data, where)

    return read


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="canary", description="Run the canary through every stage of a real run."
    )
    parser.add_argument("--config", required=True, help="the environment file the cluster was deployed with")
    parser.add_argument("--node-group", help="the Trainium node group (default: the first team's first)")
    parser.add_argument(
        "--timeout-minutes", type=float, help="how long the run may take (default: provision time + 30)"
    )
    parser.add_argument(
        "--scale-down-minutes",
        type=float,
        help="how long the nodes may stay after the run (default: the autoscaler's unneeded time + 5)",
    )
    parser.add_argument(
        "--tensorboard-minutes",
        type=float,
        help="how long TensorBoard may take to list the run after it ended (default: three of its reload "
        "intervals, whole minutes)",
    )
    parser.add_argument("--poll-seconds", type=float, default=10.0)
    parser.add_argument(
        "--tensorboard-url",
        help="read TensorBoard at this address instead of through the API server's service proxy, e.g. "
        f"after kubectl -n {PLATFORM_NAMESPACE} port-forward svc/{TENSORBOARD_NAME} {TENSORBOARD_PORT}",
    )
    parser.add_argument(
        "--control-plane-only",
        action="store_true",
        help="measure only what the API server shows (the Job admitted, the scale-up, the nodes, the gang "
        "bound and started, the run's end, the scale-down); print the stages the canary's program reports "
        "from its container on a Trainium node (mounts, devices, rendezvous, collective, output) and "
        "TensorBoard as not measured here: for a cluster whose nodes run no containers",
    )
    parser.add_argument(
        "--not-measurable",
        action="append",
        default=[],
        choices=sorted(NOT_MEASURABLE),
        metavar="STAGE",
        help="a stage this cluster has no means to measure (repeat for each): "
        f"{', '.join(NOT_MEASURABLE)}; it prints as not measured here with what it needs, and the "
        "canary's program does not run its check (compile and collective go together: the process "
        "group is then gloo's on the CPU, the rendezvous still measured): for a cluster whose nodes "
        "run containers but have no Neuron hardware, EFA, Auto Scaling group or TensorBoard",
    )
    parser.add_argument("--server", help="(tests) an API server URL to use instead of the kubeconfig")
    return parser


def _client(server: str | None, stack: StackConfig) -> tuple[Any, Any]:
    if server:
        configuration = client.Configuration()
        configuration.host = server
        api_client = client.ApiClient(configuration)
    else:
        try:
            api_client = config.new_client_from_config()
        except config.ConfigException as error:
            # No kubeconfig, or one without a current context: one line that says what makes one.
            raise ValueError(
                f"no usable kubeconfig ({error}); write one with the stack's UpdateKubeconfigCommand output: "
                f"aws eks update-kubeconfig --region {stack.region} --name {stack.name}"
            ) from None
    return client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)


def canary_for(config: StackConfig, arguments: argparse.Namespace, core: Any, custom: Any) -> Canary:
    not_measurable = tuple(dict.fromkeys(getattr(arguments, "not_measurable", None) or ()))
    named = [stage for stage in TOGETHER if stage in not_measurable]
    if named and len(named) != len(TOGETHER):
        raise ValueError(
            f"--not-measurable {named[0]} needs --not-measurable {' and '.join(s for s in TOGETHER if s not in named)} too: "
            "the canary's program measures both with one Neuron all-reduce"
        )
    run = canary_run(config, node_group=arguments.node_group, not_measurable=not_measurable)
    timeout = arguments.timeout_minutes or canary_timeout_minutes(config)
    return Canary(
        core=core,
        custom=custom,
        run=run,
        timeout_seconds=timeout * 60,
        scale_down_seconds=(arguments.scale_down_minutes or canary_scale_down_minutes(config)) * 60,
        poll_seconds=arguments.poll_seconds,
        tensorboard_seconds=(arguments.tensorboard_minutes or canary_tensorboard_minutes()) * 60,
        control_plane_only=arguments.control_plane_only,
        not_measurable=not_measurable,
        tensorboard_runs=_tensorboard_reader(arguments.tensorboard_url)
        if arguments.tensorboard_url
        else _tensorboard_through_the_api_server(core),
        out=lambda line: print(line, flush=True),
    )


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    try:
        config = load_config(arguments.config)
    except ConfigError as error:
        for line in error.lines():
            print(line)
        return 2
    try:
        core, custom = _client(arguments.server, config)
        canary = canary_for(config, arguments, core, custom)
    except ValueError as error:
        print(f"canary: {error}")
        return 2
    return canary.execute()


if __name__ == "__main__":
    sys.exit(main())
