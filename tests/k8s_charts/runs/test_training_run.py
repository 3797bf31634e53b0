"""TrainingRunChart: one Volcano Job per run, derived from the catalog, with the run lifecycle.

The worker script is run under bash the way the pod runs it: the container's environment and
command expanded as the kubelet expands them, with stand-ins for python3 and
neuron_parallel_compile, and /data moved under a temporary directory.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.failure_recovery import LUSTRE_DEAD_CLIENT_EVICTION_SECONDS, NODE_LOST_TOLERATION_SECONDS
from cluster_facts.images import is_pinned_image
from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import (
    CANNOT_PROCEED_EXIT_CODE,
    NEURON_TAINT_KEY,
    NODE_GROUP_LABEL,
    SAFE_TO_EVICT_ANNOTATION,
    STUCK_MINUTES_ANNOTATION,
    TRAINING_POD_LABELS,
)
from k8s_charts.runs.dataset_staging import STAGING_ATTEMPTS, Dataset, RemoteFile
from k8s_charts.runs.training_run import (
    TrainingRun,
    TrainingRunChart,
    compile_key,
    launcher_arguments,
    run_id,
)
from k8s_charts.runs.worker_script import (
    WORKER_SCRIPT,
    WORKER_SCRIPT_CONFIGMAP,
    WORKER_SCRIPT_DIR,
    WORKER_SCRIPT_FILE,
    WorkerScriptChart,
)
from tests.k8s_charts.expansion import container_environment, expanded_command
from tests.k8s_charts.manifests import Manifest, only, synth
from tests.k8s_validation import assert_valid
from tests.volcano_retries_model import admitted_max_retry, restarts_before_failure

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/trainium/training:bert-sdk2.27.1-1"
SCRIPT_SHA = "a" * 64
DATASET = Dataset(
    name="corpus",
    archive_url="https://example.com/corpus.tar",
    archive_sha256=None,
    files=(RemoteFile(url="https://example.com/train.py", sha256=SCRIPT_SHA, name="train.py"),),
)
RUN = TrainingRun(
    name="llm",
    instance=CATALOG["trn1.32xlarge"],
    node_group="trn1-32xl",
    nodes=2,
    image=IMAGE,
    namespace="training",
    queue="test",
    claim_name="fsx-abc123",
    datasets_claim_name="fsx-abc123-datasets",
    script="$(DATASET_CORPUS)/train.py",
    script_args=("--epochs", "3", "--output_dir", "$(OUTPUT_DIR)"),
    environment={"MY_SETTING": "on"},
    datasets=(DATASET,),
    python_requirements=("transformers==4.44.0 --hash=sha256:" + "b" * 64,),
    precompile_args=("--steps_this_run", "10"),
    resume_glob="ckpt_*.pt",
    resume_args=("--resume_ckpt",),
    cacheset="llm",
    retries=3,
    rendezvous_endpoint="etcd-server:2379",
    pod_labels=TRAINING_POD_LABELS,
    run_as=123456,
)
# What Volcano writes on the pods of attempt 2 of job llm-<hash> with uid 1234...
GROUP_ANNOTATION = "metadata.annotations['scheduling.k8s.io/group-name']"
VERSION_ANNOTATION = "metadata.annotations['volcano.sh/job-version']"
ANNOTATIONS = {
    GROUP_ANNOTATION: "llm-job-uid-1234",
    VERSION_ANNOTATION: "2",
    "spec.nodeName": "ip-10-0-3-17.us-west-2.compute.internal",
}


def job(run: TrainingRun = RUN, **changes: Any) -> Manifest:
    run = dataclasses.replace(run, **changes)
    manifests = synth(lambda app: TrainingRunChart(app, "run", run=run))
    assert_valid(manifests)
    return only(manifests, "Job")


def task(manifest: Manifest) -> dict[str, Any]:
    [only_task] = manifest["spec"]["tasks"]
    return only_task


def pod(manifest: Manifest) -> dict[str, Any]:
    return task(manifest)["template"]["spec"]


def container(manifest: Manifest) -> dict[str, Any]:
    [only_container] = pod(manifest)["containers"]
    return only_container


def environment(manifest: Manifest) -> dict[str, str]:
    return container_environment(container(manifest), downward=ANNOTATIONS)


# --- The Volcano Job ------------------------------------------------------------------------------


def test_the_job_is_named_after_the_run_and_its_hash() -> None:
    manifest = job()
    assert (manifest["apiVersion"], manifest["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    assert re.fullmatch(r"llm-[0-9a-f]{8}", manifest["metadata"]["name"])
    assert manifest["metadata"]["name"] == run_id(RUN)
    assert manifest["metadata"]["namespace"] == "training"


@pytest.mark.parametrize(
    "change",
    [
        {"image": IMAGE.replace("-1", "-2")},
        {"nodes": 3},
        {"script_args": ("--epochs", "4")},
        {"environment": {"MY_SETTING": "off"}},
        {"claim_name": "fsx-def456"},
        {"precompile_args": None},
        {"retries": 1},
        {"node_group": "trn1-32xl-b"},
    ],
)
def test_every_change_of_the_run_is_a_new_job(change: dict[str, Any]) -> None:
    assert run_id(dataclasses.replace(RUN, **change)) != run_id(RUN)


def test_the_same_run_keeps_its_name() -> None:
    assert run_id(dataclasses.replace(RUN)) == run_id(RUN)


def test_a_runs_stuck_limit_is_an_annotation_that_does_not_change_its_identity() -> None:
    """Volcano admits annotation changes on a live Job: a new limit applies in place, no restart."""
    limited = dataclasses.replace(RUN, stuck_minutes=45)
    assert run_id(limited) == run_id(RUN)
    annotations = job(limited)["metadata"]["annotations"]
    assert annotations[STUCK_MINUTES_ANNOTATION] == "45"
    assert STUCK_MINUTES_ANNOTATION not in job(RUN)["metadata"]["annotations"]


def test_a_run_whose_identity_holds_a_deploy_time_token_is_refused() -> None:
    with pytest.raises(ValueError, match="deploy-time token"):
        run_id(dataclasses.replace(RUN, claim_name="${Token[TOKEN.12]}"))


def test_the_job_is_the_torchx_shape_gang_scheduled_on_the_queue() -> None:
    spec = job(nodes=3, queue="research")["spec"]
    assert spec["schedulerName"] == "volcano"
    assert spec["queue"] == "research"
    assert spec["minAvailable"] == 3
    assert spec["maxRetry"] == 4  # retries: 3
    assert spec["plugins"] == {"svc": ["--publish-not-ready-addresses"], "env": []}
    assert task(job(nodes=3))["replicas"] == 3


@pytest.mark.parametrize("retries", [0, 1, 2, 3, 10])
def test_retries_n_restarts_the_gang_exactly_n_times(retries: int) -> None:
    """Volcano fails a Job once its retry count reaches maxRetry, and turns 0 into 3
    (tests/volcano_retries_model.py, from v1.15.1's source): retries: N renders N + 1."""
    manifest = job(retries=retries)
    assert admitted_max_retry(manifest) == manifest["spec"]["maxRetry"], "never the webhook's default"
    assert restarts_before_failure(manifest) == retries


def test_a_pod_that_cannot_proceed_ends_the_job_and_any_other_failure_restarts_it() -> None:
    # Volcano takes the first matching policy, and an exit code matches before the PodFailed event.
    assert task(job())["policies"] == [
        {"exitCode": CANNOT_PROCEED_EXIT_CODE, "action": "TerminateJob"},
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "RestartJob"},
    ]


def test_pods_select_their_node_group_and_tolerate_the_trainium_taint() -> None:
    spec = pod(job())
    assert spec["nodeSelector"] == {NODE_GROUP_LABEL: "trn1-32xl"}
    assert spec["tolerations"][0] == {"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


def test_a_pod_on_a_lost_node_is_evicted_after_a_minute_not_five() -> None:
    """Set here, DefaultTolerationSeconds adds nothing (it adds 300 s only when the pod has none)."""
    lost = [toleration for toleration in pod(job())["tolerations"] if toleration["effect"] == "NoExecute"]
    assert lost == [
        {
            "key": key,
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": NODE_LOST_TOLERATION_SECONDS,
        }
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ]
    assert NODE_LOST_TOLERATION_SECONDS < 300


def test_the_autoscaler_never_evicts_a_worker() -> None:
    assert task(job())["template"]["metadata"]["annotations"][SAFE_TO_EVICT_ANNOTATION] == "false"


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_each_pod_takes_every_neuron_chip_and_efa_interface_of_its_node(instance_type: str) -> None:
    entry = CATALOG[instance_type]
    resources = container(job(instance=entry))["resources"]
    assert resources["limits"] == {
        "aws.amazon.com/neuron": str(entry.chips),
        "vpc.amazonaws.com/efa": str(entry.efa_interfaces),
    }
    cpu, memory_gib = (
        int(resources["requests"]["cpu"]),
        int(resources["requests"]["memory"].removesuffix("Gi")),
    )
    assert entry.vcpus * 3 // 4 <= cpu <= entry.vcpus - 8
    assert entry.memory_gib * 3 // 4 <= memory_gib <= entry.memory_gib - 32


def test_the_job_uses_volcanos_svc_plugin_with_its_network_policy() -> None:
    """Volcano labels the pods (volcano.sh/job-name: what etcd admits) and, through the svc plugin,
    creates the policy by which the job's pods admit each other only: it must not be disabled."""
    plugins = job()["spec"]["plugins"]
    assert "svc" in plugins
    assert "--disable-network-policy" not in " ".join(plugins["svc"])
    # The template does not set Volcano's labels itself: the controller writes them.
    assert not {"volcano.sh/job-name", "volcano.sh/job-namespace"} & set(
        task(job())["template"]["metadata"]["labels"]
    )


def test_the_container_drops_every_capability() -> None:
    [container] = pod(job())["containers"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_pods_mount_the_claim_shared_memory_and_a_private_package_directory() -> None:
    spec = pod(job())
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "fsx-abc123"}} in spec["volumes"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in spec["volumes"]
    mounts = {mount["mountPath"]: mount["name"] for mount in container(job())["volumeMounts"]}
    assert mounts == {
        "/data": "data",
        # Beside /data, never inside it: root squash keeps the runtime from making a mount point
        # inside the team's directory (tests/k8s_charts/runs/test_mount_layout.py walks every pod).
        "/datasets": "datasets",
        "/dev/shm": "dshm",
        "/opt/run/python": "python",
        # run_worker.sh, from the team namespace's ConfigMap (k8s_charts/runs/worker_script.py).
        "/opt/trainium/run-worker": "run-worker",
        # The team uid's passwd and group entries (tests/cluster_facts/test_pod_user.py).
        "/etc/passwd": "pod-user",
        "/etc/group": "pod-user",
    }
    # The staged data sets are read-only twice over: the mount and the claim.
    [datasets_mount] = [mount for mount in container(job())["volumeMounts"] if mount["name"] == "datasets"]
    assert datasets_mount["readOnly"] is True
    assert {
        "name": "datasets",
        "persistentVolumeClaim": {"claimName": "fsx-abc123-datasets", "readOnly": True},
    } in spec["volumes"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"


def test_pods_run_as_the_teams_uid_with_no_capability() -> None:
    """Root squash makes root nobody on Trainium nodes; the team's uid owns its directory."""
    spec = pod(job())
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 123456,
        "runAsGroup": 123456,
        "fsGroup": 123456,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container(job())["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert environment(job())["HOME"] == "/tmp"


def test_a_root_run_is_refused() -> None:
    with pytest.raises(ValueError, match="non-root uid"):
        job(run_as=0)


def test_the_image_is_pinned() -> None:
    assert is_pinned_image(container(job())["image"])
    with pytest.raises(ValueError, match="not a pinned image"):
        dataclasses.replace(RUN, image="training:latest")


# --- Launcher and rendezvous ----------------------------------------------------------------------


def test_the_launcher_is_torchrun_with_one_worker_per_neuroncore() -> None:
    argv = launcher_arguments(dataclasses.replace(RUN, instance=CATALOG["trn2.48xlarge"], nodes=4))
    assert argv[:3] == ["python3", "-m", "torch.distributed.run"]
    assert argv[argv.index("--nnodes") + 1] == "4"
    assert argv[argv.index("--nproc_per_node") + 1] == str(CATALOG["trn2.48xlarge"].processes_per_node)
    assert argv[argv.index("--rdzv_backend") + 1] == "etcd"
    assert argv[argv.index("--rdzv_endpoint") + 1] == "etcd-server:2379"
    assert all(argument.strip() for argument in argv), (
        "an empty argument would not survive neuron_parallel_compile"
    )


def test_each_attempt_of_each_job_rendezvouses_under_its_own_id() -> None:
    manifest = job()
    env = environment(manifest)
    argv = expanded_command(container(manifest), env)
    # <job>-<uid> identifies the job instance (a rerun is a new uid), v<version> the Volcano attempt.
    assert argv[argv.index("--rdzv_id") + 1] == "llm-job-uid-1234-v2"
    next_attempt = container_environment(
        container(manifest),
        downward={**ANNOTATIONS, "metadata.annotations['volcano.sh/job-version']": "3"},
    )
    assert expanded_command(container(manifest), next_attempt) != argv


def test_the_run_writes_its_own_output_directory() -> None:
    env = environment(job())
    # /data is the team's own directory of the file system (/teams/training on FSx).
    assert env["OUTPUT_DIR"] == f"/data/runs/{run_id(RUN)}"
    argv = expanded_command(container(job()), env)
    assert argv[argv.index("--output_dir") + 1] == env["OUTPUT_DIR"]


def test_data_sets_are_found_through_their_variable() -> None:
    env = environment(job())
    assert env["DATASET_CORPUS"] == DATASET.directory
    assert expanded_command(container(job()), env)[-5] == f"{DATASET.directory}/train.py"


def test_plain_http_calls_fail_at_once_instead_of_waiting_for_the_instance_metadata_service() -> None:
    env = environment(job())
    assert env["http_proxy"] == env["HTTP_PROXY"] == "http://127.0.0.1:9"
    assert ".svc" in env["no_proxy"].split(",") and "169.254.169.254" not in env["no_proxy"]
    assert "https_proxy" not in env and "HTTPS_PROXY" not in env


def test_the_efa_and_neuron_runtime_environment_is_set() -> None:
    env = environment(job())
    assert {name: env[name] for name in ("CCOM_SOCKET_IFNAME", "FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA")} == {
        "CCOM_SOCKET_IFNAME": "eth0",
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
    }
    assert env["MY_SETTING"] == "on"


def test_the_pod_carries_no_script_text_only_the_team_namespaces_config_map() -> None:
    """run_worker.sh is read from the team namespace's ConfigMap, not written into every pod: each
    list or watch of pods would read it again (docs/performance.md, "Scale")."""
    manifest = job()
    spec = pod(manifest)
    assert container(manifest)["command"] == ["/bin/bash", f"{WORKER_SCRIPT_DIR}/{WORKER_SCRIPT_FILE}"]
    body = WORKER_SCRIPT.split("set -", 1)[1][:200]
    assert body not in json.dumps(manifest)
    assert all(len(part) < 1024 for c in spec["containers"] for part in [*c["command"], *c["args"]])
    [volume] = [v for v in spec["volumes"] if v["name"] == "run-worker"]
    assert volume == {
        "name": "run-worker",
        "configMap": {"name": WORKER_SCRIPT_CONFIGMAP, "defaultMode": 0o444},
    }
    [mount] = [m for m in container(manifest)["volumeMounts"] if m["name"] == "run-worker"]
    assert mount == {"name": "run-worker", "mountPath": WORKER_SCRIPT_DIR, "readOnly": True}


def test_the_worker_script_config_map_is_named_by_its_content_and_immutable() -> None:
    """A changed script is a new ConfigMap (and a new Job naming it): a Job keeps naming its version."""
    [config_map] = synth(lambda app: WorkerScriptChart(app, "w", namespace="training"))
    assert config_map["kind"] == "ConfigMap" and config_map["immutable"] is True
    assert config_map["metadata"]["namespace"] == "training"
    assert config_map["data"] == {WORKER_SCRIPT_FILE: WORKER_SCRIPT}
    assert WORKER_SCRIPT.startswith("#!/bin/bash\n")
    digest = hashlib.sha256(WORKER_SCRIPT.encode()).hexdigest()[:10]
    assert config_map["metadata"]["name"] == WORKER_SCRIPT_CONFIGMAP == f"trainium-run-worker-{digest}"


# --- The worker script, as the pod runs it --------------------------------------------------------

FAKE_PYTHON3 = """\
#!{python}
import json, os, sys
if os.environ.get("REAL_PIP") and sys.argv[1:3] == ["-m", "pip"]:
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
with open(os.environ["RECORD"], "a") as record:
    record.write(json.dumps({{"tool": "python3", "argv": sys.argv[1:], "stdin": "" if sys.stdin.isatty() else
                             (sys.stdin.read() if sys.argv[1:3] == ["-m", "pip"] else ""),
                             "NEURON_CC_FLAGS": os.environ.get("NEURON_CC_FLAGS"),
                             "PYTHONPATH": os.environ.get("PYTHONPATH")}}) + "\\n")
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""
FAKE_NEURON_PARALLEL_COMPILE = """\
#!/bin/bash
echo '{{"tool": "neuron_parallel_compile", "argv": '"$({python} -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@")"'}}' >> "$RECORD"
"""


class Pod:
    """One worker pod of a run, its /data under ``tmp``."""

    def __init__(self, tmp: Path, manifest: Manifest | None = None) -> None:
        self.tmp = tmp
        self.data = tmp / "data"
        self.bin = tmp / "bin"
        self.record = tmp / "record.jsonl"
        self.bin.mkdir(exist_ok=True)
        for name, text in (
            ("python3", FAKE_PYTHON3.format(python=sys.executable)),
            ("neuron_parallel_compile", FAKE_NEURON_PARALLEL_COMPILE.format(python=sys.executable)),
            ("sleep", "#!/bin/sh\nexit 0\n"),
        ):
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        self.manifest = manifest or job()
        self.attempts = 0
        # The team namespace's ConfigMap, as the kubelet mounts it (k8s_charts/runs/worker_script.py).
        self.scripts = tmp / "run-worker"
        self.scripts.mkdir(exist_ok=True)
        [config_map] = synth(lambda app: WorkerScriptChart(app, "w", namespace="training"))
        for name, text in config_map["data"].items():
            (self.scripts / name).write_text(text)

    def path(self, path: str) -> Path:
        return Path(path.replace("/data", str(self.data), 1))

    def stage(self, *, script: bytes = b"print('train')\n", dataset: Dataset = DATASET) -> None:
        """What the staging job leaves: the files, and the marker with the version's line."""
        self.path(dataset.directory).mkdir(parents=True, exist_ok=True)
        self.path(dataset.marker).write_text(f"{dataset.staged_version}\narchive-sha256-streamed=x\n")
        self.path(dataset.path("train.py")).write_bytes(script)

    def run(
        self, *, index: str = "0", **extra: str
    ) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
        self.record.unlink(missing_ok=True)
        # Each run is a new pod of a new attempt: a fresh emptyDir for the packages, unless the
        # test keeps one (PYTHON_TARGET given).
        self.attempts += 1
        python_target = str(self.tmp / f"python-{self.attempts}")
        # /data moves under tmp in the rendered values, before the kubelet expands them.
        rendered = json.dumps(container(self.manifest))
        moved = json.loads(rendered.replace('"/data', f'"{self.data}').replace(" /data", f" {self.data}"))
        env = container_environment(moved, downward=ANNOTATIONS)
        argv = expanded_command(moved, env)
        argv[0] = shutil.which("bash") or argv[0]
        argv[1] = argv[1].replace(WORKER_SCRIPT_DIR, str(self.scripts), 1)
        env |= {
            "VC_TASK_INDEX": index,
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "RECORD": str(self.record),
            # Never the host's /dev/termination-log.
            "TERMINATION_LOG": str(self.tmp / "termination-log"),
            "PYTHON_TARGET": python_target,
            # The container's own disk (the image's /tmp).
            "LOCAL_CODE_DIR": str(self.tmp / "local-code"),
            **extra,
        }
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
        calls = (
            [json.loads(line) for line in self.record.read_text().splitlines()]
            if self.record.exists()
            else []
        )
        return result, calls


needs_tools = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("bash", "flock", "sha256sum", "stat")),
    reason="needs bash, flock, sha256sum and stat",
)


def verified_script() -> bytes:
    return b"print('train')\n"


@pytest.fixture
def matching_run() -> TrainingRun:
    """The run with its script's real checksum, so verification passes."""
    return with_verified_script()


def with_verified_script() -> TrainingRun:
    digest = hashlib.sha256(verified_script()).hexdigest()
    dataset = dataclasses.replace(
        DATASET, files=(RemoteFile(url="https://example.com/train.py", sha256=digest, name="train.py"),)
    )
    return dataclasses.replace(RUN, datasets=(dataset,))


def pod_for(run: TrainingRun, tmp_path: Path) -> Pod:
    pod = Pod(tmp_path, job(run))
    pod.stage(script=verified_script(), dataset=run.datasets[0])
    return pod


@pytest.mark.process
@needs_tools
def test_a_run_without_a_precompile_phase_goes_straight_to_training(
    matching_run: TrainingRun, tmp_path: Path
) -> None:
    """A plain torchrun script (precompile: none): packages, then the launcher, no neuron_parallel_compile."""
    pod = pod_for(dataclasses.replace(matching_run, precompile_args=None), tmp_path)
    result, calls = pod.run()
    assert result.returncode == 0, result.stderr
    assert [call["tool"] for call in calls] == ["python3", "python3"]
    pip, train = calls
    assert pip["argv"][:2] == ["-m", "pip"]
    assert train["argv"][:2] == ["-m", "torch.distributed.run"]
    assert train["argv"][train["argv"].index("--rdzv_id") + 1] == "llm-job-uid-1234-v2"


@pytest.mark.process
@needs_tools
def test_a_first_attempt_installs_precompiles_then_trains(matching_run: TrainingRun, tmp_path: Path) -> None:
    pod = pod_for(matching_run, tmp_path)
    result, calls = pod.run()
    assert result.returncode == 0, result.stderr
    pip, precompile, train = calls
    assert pip["argv"][:2] == ["-m", "pip"] and "--require-hashes" in pip["argv"]
    assert "transformers==4.44.0 --hash=sha256:" in pip["stdin"]
    # Precompile: the launcher under neuron_parallel_compile, its own rendezvous id, the step limit.
    assert precompile["tool"] == "neuron_parallel_compile"
    assert precompile["argv"][precompile["argv"].index("--rdzv_id") + 1] == "llm-job-uid-1234-v2-precompile"
    assert precompile["argv"][-2:] == ["--steps_this_run", "10"]
    # Training: the same launcher, this attempt's id, the replica's cache, the run's packages first.
    assert train["argv"][:2] == ["-m", "torch.distributed.run"]
    assert train["argv"][train["argv"].index("--rdzv_id") + 1] == "llm-job-uid-1234-v2"
    assert "--steps_this_run" not in train["argv"] and "--resume_ckpt" not in train["argv"]
    output = pod.path(environment(pod.manifest)["OUTPUT_DIR"])
    assert train["NEURON_CC_FLAGS"] == f"--cache_dir={pod.data}/neuron_cache/llm_0"
    assert train["PYTHONPATH"].split(":")[0].startswith(f"{tmp_path}/python-1/")
    assert not (output / "precompiled").exists()
    # The marker sits beside the replica's cache: any later run of the same graphs finds it.
    assert (pod.data / "neuron_cache" / "llm_0.precompiled" / compile_key(matching_run)).exists()


@pytest.mark.process
@needs_tools
def test_precompile_is_skipped_only_when_every_replicas_cache_holds_the_graph_key(
    matching_run: TrainingRun, tmp_path: Path
) -> None:
    pod = pod_for(matching_run, tmp_path)
    key = compile_key(matching_run)
    for replica in ("0", "1"):
        (pod.data / "neuron_cache" / f"llm_{replica}.precompiled").mkdir(parents=True)
    (pod.data / "neuron_cache" / "llm_0.precompiled" / key).touch()
    _, calls = pod.run(index="1")
    assert [call["tool"] for call in calls] == ["python3", "neuron_parallel_compile", "python3"]
    # Replica 1's own precompile has now written its marker: the next attempt trains at once.
    _, calls = pod.run(index="1")
    assert [call["tool"] for call in calls] == ["python3", "python3"]


@pytest.mark.process
@needs_tools
def test_a_new_run_of_the_same_graphs_skips_the_precompile_another_graph_does_not(
    matching_run: TrainingRun, tmp_path: Path
) -> None:
    """A second Job (another name, more retries) on the same cacheset reuses the first one's
    compiled graphs; changed arguments are other graphs, so they precompile again."""
    first = pod_for(matching_run, tmp_path)
    for replica in ("0", "1"):
        _, calls = first.run(index=replica)
        assert "neuron_parallel_compile" in [call["tool"] for call in calls]
    renamed = dataclasses.replace(matching_run, name="llm-again", retries=5)
    assert run_id(renamed) != run_id(matching_run) and compile_key(renamed) == compile_key(matching_run)
    result, calls = Pod(tmp_path, job(renamed)).run(index="0")
    assert "neuron_parallel_compile" not in [call["tool"] for call in calls], result.stdout
    assert calls[-1]["argv"][:2] == ["-m", "torch.distributed.run"]
    assert f"graph key {compile_key(matching_run)}: skipping" in result.stdout
    reshaped = dataclasses.replace(matching_run, script_args=("--epochs", "3", "--batch_size", "32"))
    _, calls = Pod(tmp_path, job(reshaped)).run(index="0")
    assert [call["tool"] for call in calls][-2:] == ["neuron_parallel_compile", "python3"]


@pytest.mark.parametrize(
    ("change", "same"),
    [
        ({"name": "other", "retries": 7, "queue": "other", "namespace": "team-b", "run_as": 20001}, True),
        ({"resume_glob": "ckpt_*.pt", "resume_args": ("--resume_ckpt",)}, True),
        ({"image": IMAGE.replace("sdk2.27.1-1", "sdk2.27.1-2")}, False),
        ({"nodes": 4}, False),
        ({"instance": CATALOG["trn1n.32xlarge"]}, False),
        ({"script_args": ("--epochs", "4")}, False),
        ({"environment": {"MY_SETTING": "off"}}, False),
        ({"python_requirements": ()}, False),
        ({"precompile_args": ("--steps_this_run", "20")}, False),
        ({"verify_files": {"/data/extra.py": "b" * 64}}, False),
    ],
)
def test_the_compile_key_follows_what_shapes_the_graphs_and_nothing_else(
    change: dict[str, Any], same: bool
) -> None:
    assert (compile_key(dataclasses.replace(RUN, **change)) == compile_key(RUN)) is same
    assert re.fullmatch(r"[0-9a-f]{16}", compile_key(RUN))


@pytest.mark.process
@needs_tools
def test_a_retry_resumes_from_the_runs_newest_checkpoint(matching_run: TrainingRun, tmp_path: Path) -> None:
    pod = pod_for(matching_run, tmp_path)
    output = pod.path(environment(pod.manifest)["OUTPUT_DIR"])
    output.mkdir(parents=True)
    (output / "ckpt_120.pt").touch()
    result, calls = pod.run()
    assert result.returncode == 0, result.stderr
    assert calls[-1]["argv"][-1] == "--resume_ckpt"
    assert f"resuming {run_id(matching_run)}" in result.stdout


@pytest.mark.process
@needs_tools
def test_a_failed_data_set_ends_the_job_at_once_with_its_reason(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    failures = pod.path(DATASET.marker + ".failures")
    failures.parent.mkdir(parents=True)
    failures.write_text(
        "".join(
            f"2026-11-23T10:0{n}:00Z corpus: cannot download x (exit 1)\n" for n in range(STAGING_ATTEMPTS)
        )
    )
    result, calls = pod.run()
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE and calls == []
    assert (
        f"staging failed {STAGING_ATTEMPTS} times" in result.stderr and "cannot download x" in result.stderr
    )


@pytest.mark.process
@needs_tools
def test_a_staging_pod_that_died_silently_ends_the_job_within_minutes(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    marker = pod.path(DATASET.marker)
    marker.parent.mkdir(parents=True)
    Path(f"{marker}.failures").write_text("2026-11-23T10:00:00Z corpus: terminated (exit 143)\n")
    heartbeat = Path(f"{marker}.heartbeat")
    heartbeat.touch()
    stale = os.stat(heartbeat).st_mtime - 3600
    os.utime(heartbeat, (stale, stale))
    result, calls = pod.run()
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE and calls == []
    assert "staging stopped" in result.stderr


@pytest.mark.process
@needs_tools
def test_waiting_for_staging_is_bounded(tmp_path: Path) -> None:
    result, calls = Pod(tmp_path).run(WAIT_TIMEOUT_SECONDS="0")
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE and calls == []
    assert "gave up after 0s waiting for" in result.stderr


@pytest.mark.process
@needs_tools
def test_a_modified_script_is_never_run(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    pod.stage(script=b"import os; os.system('curl evil')\n")
    result, calls = pod.run()
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE and calls == []
    assert "checksum mismatch" in result.stderr and "train.py: FAILED" in result.stderr


@pytest.mark.process
@needs_tools
def test_packages_that_do_not_match_their_hashes_end_the_job(
    matching_run: TrainingRun, tmp_path: Path
) -> None:
    result, calls = pod_for(matching_run, tmp_path).run(FAKE_EXIT="1")
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE
    assert [call["tool"] for call in calls] == ["python3"]


def _hold_lock(lock: Path, holder_run: str) -> subprocess.Popen[bytes]:
    """A process holding ``lock`` with a real flock, recorded as ``holder_run``'s, as a pod of that
    run leaves it (the record beside the lock names the run, its attempt and its host)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()
    lock.with_suffix(".holder").write_text(f"{holder_run} {holder_run}-uid-v0 ip-10-0-0-1\n")
    # Its own process group: flock and the sleep it forks (which inherits the lock) die together.
    holder = subprocess.Popen(
        ["flock", str(lock), "sleep", "60"], env={"PATH": os.environ["PATH"]}, start_new_session=True
    )
    deadline = time.monotonic() + 10
    # Until the holder has the lock: a non-blocking attempt fails.
    while subprocess.run(["flock", "--nonblock", str(lock), "true"], check=False).returncode == 0:
        assert time.monotonic() < deadline, "the holder never took the lock"
        time.sleep(0.05)
    return holder


def _end(holder: subprocess.Popen[bytes]) -> None:
    """The holder dies with every process that has the lock open (a node lost, as Lustre sees it
    once it has evicted the client)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()


def _cache_flags(calls: list[dict[str, Any]]) -> str:
    [launch] = [
        call
        for call in calls
        if call["tool"] == "python3" and call["argv"][:2] == ["-m", "torch.distributed.run"]
    ]
    return str(launch["NEURON_CC_FLAGS"])


@pytest.mark.process
@needs_tools
def test_a_compile_cache_held_by_another_run_is_not_shared(matching_run: TrainingRun, tmp_path: Path) -> None:
    pod = pod_for(matching_run, tmp_path)
    holder = _hold_lock(pod.data / "neuron_cache" / "llm_0.lock", "other-run-0a1b2c3d")
    try:
        result, calls = pod.run(CACHE_LOCK_TIMEOUT_SECONDS="1")
    finally:
        _end(holder)
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE
    assert "another run (other-run-0a1b2c3d) holds the compile cache" in result.stderr
    assert [call["tool"] for call in calls] == ["python3"]
    # The wait is announced: the gang watchdog reads a silent log as a run that does not progress.
    assert "waiting up to 1s for another holder to release the compile cache" in result.stdout


@pytest.mark.process
@needs_tools
def test_precompile_says_so_while_the_neuron_compiler_works(
    matching_run: TrainingRun, tmp_path: Path
) -> None:
    """The heartbeat the gang watchdog's stuck-run guard reads as progress (cluster_programs/stuck_runs.py)."""
    pod = pod_for(matching_run, tmp_path)
    compiling = pod.bin / "neuron_parallel_compile"
    # A compiler process for a second (its argv[0] is what pgrep -f sees), then the recorded call.
    compiling.write_text(
        compiling.read_text().replace("#!/bin/bash\n", "#!/bin/bash\n(exec -a neuronx-cc /bin/sleep 1)\n", 1)
    )
    result, calls = pod.run(HEARTBEAT_SECONDS="0")
    assert result.returncode == 0, result.stderr
    assert "precompile: 1 Neuron compiler processes at work" in result.stdout
    assert [call["tool"] for call in calls] == ["python3", "neuron_parallel_compile", "python3"]


@pytest.mark.process
@needs_tools
def test_precompile_without_a_compiler_at_work_prints_no_heartbeat(
    matching_run: TrainingRun, tmp_path: Path
) -> None:
    """A hung trial run (no compiler process) stays silent, so the guard can end it."""
    pod = pod_for(matching_run, tmp_path)
    stalled = pod.bin / "neuron_parallel_compile"
    stalled.write_text(stalled.read_text().replace("#!/bin/bash\n", "#!/bin/bash\n/bin/sleep 1\n", 1))
    result, _ = pod.run(HEARTBEAT_SECONDS="0")
    assert result.returncode == 0, result.stderr
    assert "Neuron compiler processes at work" not in result.stdout


@pytest.mark.process
@needs_tools
def test_a_lock_left_by_this_runs_lost_node_never_ends_the_job(
    matching_run: TrainingRun, tmp_path: Path
) -> None:
    """The lock of a pod of this run whose node was lost (Lustre keeps it until it evicts that
    client): past the wait, this attempt trains with a cache of its own instead of failing the job."""
    pod = pod_for(matching_run, tmp_path)
    cache = pod.data / "neuron_cache" / "llm_0"
    holder = _hold_lock(cache.with_suffix(".lock"), run_id(matching_run))
    try:
        result, calls = pod.run(CACHE_LOCK_TIMEOUT_SECONDS="1")
    finally:
        _end(holder)
    assert result.returncode == 0, result.stderr
    assert "still locked by" in result.stderr
    attempt = f"{ANNOTATIONS[GROUP_ANNOTATION]}-v{ANNOTATIONS[VERSION_ANNOTATION]}"
    assert _cache_flags(calls) == f"--cache_dir={cache}.unshared/{attempt}"
    # The shared cache's record still names the lost holder: nothing was written under its lock.
    assert cache.with_suffix(".holder").read_text().startswith(run_id(matching_run))


@pytest.mark.process
@needs_tools
def test_a_lock_released_while_waiting_is_taken(matching_run: TrainingRun, tmp_path: Path) -> None:
    """When the holder goes (Lustre evicted the lost client), the waiting pod takes the shared cache."""
    pod = pod_for(matching_run, tmp_path)
    cache = pod.data / "neuron_cache" / "llm_0"
    holder = _hold_lock(cache.with_suffix(".lock"), run_id(matching_run))
    killer = threading.Timer(1.0, _end, args=(holder,))
    killer.start()
    started = time.monotonic()
    try:
        result, calls = pod.run(CACHE_LOCK_TIMEOUT_SECONDS="30")
    finally:
        killer.cancel()
        _end(holder)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 20
    assert _cache_flags(calls) == f"--cache_dir={cache}"
    assert cache.with_suffix(".holder").read_text().split()[0] == run_id(matching_run)


def test_the_cache_lock_wait_outlasts_lustres_eviction_of_a_dead_client() -> None:
    assert int(environment(job())["CACHE_LOCK_TIMEOUT_SECONDS"]) > LUSTRE_DEAD_CLIENT_EVICTION_SECONDS


@pytest.mark.process
@needs_tools
def test_the_pod_refuses_to_run_without_the_replica_index(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    result, calls = pod.run(index="")
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE and calls == []
    assert "VC_TASK_INDEX" in result.stderr
    assert "env plugin" in (tmp_path / "termination-log").read_text()


@pytest.mark.process
@needs_tools
@pytest.mark.parametrize("variable", ["VC_JOB_GROUP", "VC_JOB_VERSION"])
def test_the_pod_refuses_to_run_without_volcanos_annotations(tmp_path: Path, variable: str) -> None:
    result, calls = Pod(tmp_path).run(**{variable: ""})
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE and calls == []
    assert variable in (tmp_path / "termination-log").read_text()


# --- Code integrity: what runs was checked, on every attempt (docs/code-integrity.md) -------------


def _wheel(
    directory: Path, *, name: str = "tinypkg", version: str = "1.0", body: str = "VALUE = 1\n"
) -> Path:
    """A real pure-Python wheel (what pip installs), built by hand: no build backend needed."""
    files = {
        f"{name}/__init__.py": body.encode(),
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{name}-{version}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }

    def record_line(path: str, data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"{path},sha256={digest},{len(data)}"

    record = "".join(f"{record_line(path, data)}\n" for path, data in files.items())
    record += f"{name}-{version}.dist-info/RECORD,,\n"
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{name}-{version}.dist-info/RECORD", record)
    return wheel


def _requirement(wheel: Path, name: str = "tinypkg", version: str = "1.0") -> str:
    return f"{name}=={version} --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}"


class CheckedPod:
    """A pod of a run whose packages real pip installs from a local wheel directory (no index)."""

    def __init__(self, tmp: Path, run: TrainingRun, wheels: Path) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.pod = pod_for(run, tmp)
        self.python = tmp / "emptydir-python"  # kept across runs: a test decides what persists
        self.log = tmp / "termination-log"
        self.wheels = wheels

    def run(self, **extra: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
        self.log.unlink(missing_ok=True)
        return self.pod.run(
            REAL_PIP="1",
            PIP_NO_INDEX="1",
            PIP_FIND_LINKS=str(self.wheels),
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            PYTHON_TARGET=str(self.python),
            **extra,
        )

    def reason(self) -> str:
        """The pod's termination message: exactly one line."""
        [line] = self.log.read_text().splitlines()
        return line

    def site(self) -> Path:
        [tree] = self.python.glob("*/site")
        return tree


@pytest.fixture
def checked(matching_run: TrainingRun, tmp_path: Path) -> CheckedPod:
    wheels = tmp_path / "wheels"
    wheel = _wheel(wheels)
    run = dataclasses.replace(matching_run, python_requirements=(_requirement(wheel),))
    return CheckedPod(tmp_path / "pod", run, wheels)


@pytest.mark.process
@needs_tools
def test_checked_packages_install_by_hash_and_come_first_on_the_path(checked: CheckedPod) -> None:
    result, calls = checked.run()
    assert result.returncode == 0, result.stderr
    site = checked.site()
    assert (site / "tinypkg" / "__init__.py").read_text() == "VALUE = 1\n"
    manifest = (site.parent / "manifest.sha256").read_text()
    assert f"{hashlib.sha256(b'VALUE = 1' + bytes([10])).hexdigest()}  ./tinypkg/__init__.py" in manifest
    assert calls[-1]["PYTHONPATH"].split(":")[0] == str(site)


@pytest.mark.process
@needs_tools
def test_a_second_attempt_verifies_the_installed_tree_and_reuses_it(checked: CheckedPod) -> None:
    assert checked.run()[0].returncode == 0
    shutil.rmtree(checked.wheels)  # a second install would now fail: the tree must be reused
    result, calls = checked.run()
    assert result.returncode == 0, result.stderr
    assert calls[-1]["argv"][:2] == ["-m", "torch.distributed.run"]


@pytest.mark.process
@needs_tools
def test_a_tampered_installed_package_file_is_refused(checked: CheckedPod) -> None:
    assert checked.run()[0].returncode == 0
    module = checked.site() / "tinypkg" / "__init__.py"
    module.chmod(0o644)
    module.write_text("import os; os.system('curl evil')\n")
    result, calls = checked.run()
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE and calls == []
    assert checked.reason() == (
        f"installed Python package file {module} does not match the manifest written at install"
    )


@pytest.mark.process
@needs_tools
def test_a_file_added_to_the_installed_tree_is_refused(checked: CheckedPod) -> None:
    assert checked.run()[0].returncode == 0
    site = checked.site()
    site.chmod(0o755)
    (site / "evil.pth").write_text("import os; os.system('curl evil')\n")
    result, calls = checked.run()
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE and calls == []
    assert checked.reason().startswith(f"installed Python package file {site}/evil.pth ")


@pytest.mark.process
@needs_tools
def test_a_changed_package_list_installs_into_a_directory_of_its_own(
    checked: CheckedPod, matching_run: TrainingRun, tmp_path: Path
) -> None:
    assert checked.run()[0].returncode == 0
    first = checked.site()
    wheel = _wheel(checked.wheels, version="2.0", body="VALUE = 2\n")
    changed = dataclasses.replace(matching_run, python_requirements=(_requirement(wheel, version="2.0"),))
    later = CheckedPod(tmp_path / "pod", changed, checked.wheels)
    result, calls = later.run()
    assert result.returncode == 0, result.stderr
    trees = sorted(later.python.glob("*/site"))
    assert len(trees) == 2 and first in trees
    [second] = [tree for tree in trees if tree != first]
    assert calls[-1]["PYTHONPATH"].split(":")[0] == str(second)
    assert (second / "tinypkg" / "__init__.py").read_text() == "VALUE = 2\n"


@pytest.mark.process
@needs_tools
def test_a_wheel_that_does_not_have_its_hash_is_refused(checked: CheckedPod) -> None:
    _wheel(checked.wheels, body="import os; os.system('curl evil')\n")  # same name, other bytes
    result, calls = checked.run()
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE and calls == []
    assert checked.reason() == "the run's Python packages do not install with their hashes"
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.stderr


@pytest.mark.process
@needs_tools
def test_a_tampered_script_is_refused_with_its_reason(checked: CheckedPod, matching_run: TrainingRun) -> None:
    script = checked.pod.path(matching_run.datasets[0].path("train.py"))
    script.write_bytes(b"import os; os.system('curl evil')\n")
    result, calls = checked.run()
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE and calls == []
    assert checked.reason() == f"checksum mismatch: {script}: FAILED"


@pytest.mark.process
@needs_tools
def test_the_launcher_runs_a_checked_copy_of_the_script_on_the_pods_own_disk(
    checked: CheckedPod, matching_run: TrainingRun
) -> None:
    """Checked where it is used: the launcher gets the pod-local copy, not the shared file, so a
    change to the shared file after the check (the precompile phase takes minutes) runs nowhere."""
    shared = checked.pod.path(matching_run.datasets[0].path("train.py"))
    result, calls = checked.run()
    assert result.returncode == 0, result.stderr
    local = checked.pod.tmp / "local-code" / "train.py"
    for call in calls[1:]:  # precompile and training, after pip
        assert str(local) in call["argv"] and str(shared) not in call["argv"], call["argv"]
    assert local.read_bytes() == shared.read_bytes() == verified_script()
    assert f"running the checked copy {local} of {shared}" in result.stdout


@pytest.mark.process
@needs_tools
def test_a_script_that_changes_while_it_is_copied_is_refused(
    checked: CheckedPod, matching_run: TrainingRun
) -> None:
    """The copy is checked again: a swap between the first check and the copy is caught."""
    shared = checked.pod.path(matching_run.datasets[0].path("train.py"))
    # A cp that copies other bytes than those checked: what a swap at that moment would give.
    fake_cp = checked.pod.bin / "cp"
    fake_cp.write_text('#!/bin/sh\nfor last; do :; done\nprintf "evil" > "$last/train.py"\n')
    fake_cp.chmod(0o755)
    result, calls = checked.run()
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE and calls[1:] == []
    local = checked.pod.tmp / "local-code" / "train.py"
    assert checked.reason() == f"checksum mismatch of the local copy: {local}: FAILED"
    assert shared.read_bytes() == verified_script()


@pytest.mark.process
@needs_tools
def test_an_unchecked_module_beside_the_script_is_refused(
    checked: CheckedPod, matching_run: TrainingRun
) -> None:
    script = checked.pod.path(matching_run.datasets[0].path("train.py"))
    (script.parent / "torch.py").write_text("import os; os.system('curl evil')\n")
    result, calls = checked.run()
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE and calls == []
    assert checked.reason() == f"unchecked importable file {script.parent}/torch.py beside the script"


@pytest.mark.process
@needs_tools
def test_a_data_set_marker_of_another_version_is_refused(
    checked: CheckedPod, matching_run: TrainingRun
) -> None:
    dataset = matching_run.datasets[0]
    marker = checked.pod.path(dataset.marker)
    marker.write_text(f"{dataset.identity} archive-sha256={'c' * 64}\n")
    result, calls = checked.run()
    assert result.returncode == CANNOT_PROCEED_EXIT_CODE and calls == []
    assert checked.reason() == (
        f"data set marker {marker} records '{dataset.identity} archive-sha256={'c' * 64}', "
        f"the configuration expects '{dataset.staged_version}'"
    )
