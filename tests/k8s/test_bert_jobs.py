"""BertJobChart: the BERT-large precompile and training Volcano Jobs, as TorchX would submit them."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.images import is_pinned_image
from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import NEURON_TAINT_KEY, TRAINING_POD_LABELS
from config.model import DEFAULT_TRAINING_IMAGE
from k8s_charts.bert_jobs import (
    PYTHON_REQUIREMENTS,
    BertJobChart,
    BertTrainingParameters,
    torchrun_arguments,
)
from k8s_charts.data_staging import (
    DATASET_MARKER,
    OPTIMIZER_MODULE_PATH,
    OPTIMIZER_MODULE_SHA256,
    OPTIMIZER_MODULE_URL,
    SCRIPT_PATH,
    SCRIPT_SHA256,
    SCRIPT_URL,
)
from k8s_charts.etcd import EtcdChart
from k8s_charts.volcano_queue import queue_capability
from tests.k8s.manifests import Manifest, only, synth
from tests.k8s_validation import assert_valid

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/trainium/training:bert-sdk2.27.1-1"
DOCKERFILE = Path(__file__).resolve().parents[2] / "docker" / "Dockerfile"

# The tutorial's launcher (2 x trn1.32xlarge, batch 16, 32 micro-steps), word for word but for
# --role '' written as one word, --role=, which survives neuron_parallel_compile joining its argv.
TUTORIAL_TRAINING_COMMAND = (
    "python3 -m torch.distributed.run --rdzv_backend etcd --rdzv_endpoint etcd-server:2379 "
    "--rdzv_id bert-train --nnodes 2 --nproc_per_node 32 --tee 3 --role= "
    "/data/dp_bert_large_hf_pretrain_hdf5.py --batch_size 16 --grad_accum_usteps 32 "
    "--data_dir /data/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128 --output_dir /data/output"
)
# The tutorial's recipe; the chart takes every value (the configuration owns the defaults).
TUTORIAL = {
    "instance": CATALOG["trn1.32xlarge"],
    "nodes": 2,
    "image": IMAGE,
    "queue": "test",
    "batch_size": 16,
    "grad_accum_usteps": 32,
    "bf16": True,
    "stochastic_rounding": True,
    "cacheset": "bert-large",
    "precompile_steps": 10,
    "namespace": "training",
    "claim_name": "fsx-claim",
    "rendezvous_endpoint": "etcd-server:2379",
    "pod_labels": TRAINING_POD_LABELS,
}


def parameters(**overrides: Any) -> BertTrainingParameters:
    if "instance_type" in overrides:
        overrides["instance"] = CATALOG[overrides.pop("instance_type")]
    return BertTrainingParameters(**{**TUTORIAL, **overrides})


def job(phase: str = "train", **overrides: Any) -> Manifest:
    manifests = synth(
        lambda app: BertJobChart(app, f"bert-{phase}", parameters=parameters(**overrides), phase=phase)
    )
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


def command(manifest: Manifest) -> list[str]:
    """What the container runs: bash -c <bert_worker.sh> bert-worker <launcher argv...>."""
    return [*container(manifest)["command"], *container(manifest)["args"]]


def launcher(manifest: Manifest) -> list[str]:
    """The torchrun argv: the container's args, which the script receives as "$@"."""
    argv = command(manifest)
    assert argv[:2] == ["/bin/bash", "-c"] and argv[3] == "bert-worker"
    return argv[4:]


def environment(manifest: Manifest) -> dict[str, str]:
    return {variable["name"]: variable["value"] for variable in container(manifest)["env"]}


# --- Volcano Job shape (TorchX's app_to_resource) -----------------------------------------------


@pytest.mark.parametrize("phase, name", [("precompile", "bert-precompile"), ("train", "bert-train")])
def test_each_phase_is_one_valid_volcano_job_with_a_fixed_name(phase: str, name: str) -> None:
    manifest = job(phase)
    assert (manifest["apiVersion"], manifest["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    assert manifest["metadata"]["name"] == name
    assert manifest["metadata"]["namespace"] == "training"


def test_job_spec_is_the_torchx_shape_gang_scheduled_on_the_queue() -> None:
    spec = job(nodes=3, queue="research")["spec"]
    assert spec["schedulerName"] == "volcano"
    assert spec["queue"] == "research"
    assert spec["minAvailable"] == 3
    assert spec["maxRetry"] == 3
    assert spec["plugins"] == {"svc": ["--publish-not-ready-addresses"], "env": []}


def test_one_task_with_a_replica_per_node_restarts_the_job_when_a_pod_fails() -> None:
    only_task = task(job(nodes=4))
    assert only_task["replicas"] == 4
    assert only_task["maxRetry"] == 3
    assert only_task["policies"] == [
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "RestartJob"},
    ]


def test_namespace_and_claim_are_configurable() -> None:
    manifest = job(namespace="ml", claim_name="lustre")
    assert manifest["metadata"]["namespace"] == "ml"
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "lustre"}} in pod(manifest)["volumes"]


# --- Pods ------------------------------------------------------------------------------------


def test_pods_never_restart_in_place() -> None:
    assert pod(job())["restartPolicy"] == "Never"


def test_pods_land_on_the_instance_type_and_tolerate_the_trainium_taint() -> None:
    spec = pod(job(instance_type="trn1n.32xlarge"))
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "trn1n.32xlarge"}
    assert spec["tolerations"] == [{"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]


def test_the_fsx_claim_is_mounted_at_data() -> None:
    manifest = job()
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in pod(manifest)["volumes"]
    assert {"name": "data", "mountPath": "/data"} in container(manifest)["volumeMounts"]


def test_dev_shm_is_in_memory() -> None:
    manifest = job()
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod(manifest)["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container(manifest)["volumeMounts"]


def test_pods_carry_the_labels_the_etcd_network_policy_admits() -> None:
    [policy] = [
        m
        for m in synth(lambda app: EtcdChart(app, "etcd", namespace="training"))
        if m["kind"] == "NetworkPolicy"
    ]
    selectors = [
        peer["podSelector"]["matchLabels"] for rule in policy["spec"]["ingress"] for peer in rule["from"]
    ]
    for phase in ("precompile", "train"):
        labels = task(job(phase))["template"]["metadata"]["labels"]
        # Admitted when the pod matches one whole selector.
        assert any(selector.items() <= labels.items() for selector in selectors)
        assert TRAINING_POD_LABELS.items() <= labels.items()


@pytest.mark.parametrize("instance_type, chips, efa", [("trn1.32xlarge", 16, 8), ("trn1n.32xlarge", 16, 16)])
def test_each_pod_takes_every_neuron_chip_and_efa_interface_of_its_node(
    instance_type: str, chips: int, efa: int
) -> None:
    limits = container(job(instance_type=instance_type))["resources"]["limits"]
    assert limits == {"aws.amazon.com/neuron": str(chips), "vpc.amazonaws.com/efa": str(efa)}


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_device_limits_follow_the_catalog(instance_type: str) -> None:
    entry = CATALOG[instance_type]
    limits = container(job(instance_type=instance_type))["resources"]["limits"]
    assert limits["aws.amazon.com/neuron"] == str(entry.chips)
    assert limits["vpc.amazonaws.com/efa"] == str(entry.efa_interfaces)


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_cpu_and_memory_requests_leave_headroom_and_the_job_fits_its_queue(instance_type: str) -> None:
    entry, nodes = CATALOG[instance_type], 2
    requests = container(job(instance_type=instance_type, nodes=nodes))["resources"]["requests"]
    cpu, memory_gib = int(requests["cpu"]), int(requests["memory"].removesuffix("Gi"))
    assert entry.vcpus * 3 // 4 <= cpu <= entry.vcpus - 8
    assert entry.memory_gib * 3 // 4 <= memory_gib <= entry.memory_gib - 32
    capability = queue_capability(entry, nodes)
    assert cpu * nodes <= int(capability["cpu"])
    assert memory_gib * nodes <= int(capability["memory"].removesuffix("Gi"))


# --- Environment ------------------------------------------------------------------------------

EFA_AND_RUNTIME_ENVIRONMENT = {
    "CCOM_SOCKET_IFNAME": "eth0",
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_EFA_FORK_SAFE": "1",
    "NEURON_RT_RESET_CORES": "1",
    "XLA_TRANSFER_SEED_ASYNC": "1",
}


# What k8s_charts/scripts/bert_worker.sh reads, besides PHASE and CACHESET.
SCRIPT_INPUTS = {
    "REQUIRED_FILES": f"{DATASET_MARKER} {SCRIPT_PATH} {OPTIMIZER_MODULE_PATH}",
    "NEURON_CACHE_ROOT": "/data/neuron_cache",
    "PYTHON_PACKAGES_DIR": "/data/python/bert-transformers-4.44.0",
    "PYTHON_REQUIREMENTS": "transformers==4.44.0 tokenizers==0.19.1 huggingface-hub==0.24.5",
    "WAIT_TIMEOUT_SECONDS": "21600",
}


@pytest.mark.parametrize("phase", ["precompile", "train"])
def test_environment_is_exact(phase: str) -> None:
    assert environment(job(phase)) == {
        **EFA_AND_RUNTIME_ENVIRONMENT,
        "NEURON_RT_STOCHASTIC_ROUNDING_EN": "1",
        **SCRIPT_INPUTS,
        "PHASE": phase,
        "CACHESET": "bert-large",
    }


def test_stochastic_rounding_off_is_explicit_because_the_script_defaults_it_on() -> None:
    assert environment(job(stochastic_rounding=False))["NEURON_RT_STOCHASTIC_ROUNDING_EN"] == "0"


@pytest.mark.parametrize("bf16", [True, False])
def test_precision_is_chosen_by_script_argument_never_by_xla_downcast_bf16(bf16: bool) -> None:
    # XLA_DOWNCAST_BF16 ended with Neuron 2.24; with it set, the pinned script skips its own BF16 cast.
    manifest = job(bf16=bf16)
    assert "XLA_DOWNCAST_BF16" not in environment(manifest)
    assert "XLA_USE_BF16" not in environment(manifest)
    assert ("--enable_fp32" in launcher(manifest)) is not bf16


# --- Launcher ---------------------------------------------------------------------------------


def test_training_runs_the_tutorial_launcher() -> None:
    assert launcher(job("train")) == shlex.split(TUTORIAL_TRAINING_COMMAND)


def test_no_launcher_argument_is_empty_so_any_joining_keeps_it() -> None:
    for phase in ("precompile", "train"):
        assert all(argument.strip() for argument in launcher(job(phase)))


def test_nproc_per_node_is_one_worker_per_neuroncore_from_the_catalog() -> None:
    argv = launcher(job())
    assert (
        argv[argv.index("--nproc_per_node") + 1] == "32" == str(CATALOG["trn1.32xlarge"].processes_per_node)
    )
    argv = launcher(job(instance_type="trn2.48xlarge"))
    assert argv[argv.index("--nproc_per_node") + 1] == str(CATALOG["trn2.48xlarge"].processes_per_node)


def test_nnodes_batch_and_accumulation_come_from_the_parameters() -> None:
    argv = launcher(job(nodes=4, batch_size=8, grad_accum_usteps=16, rendezvous_endpoint="etcd.ml:2379"))
    assert argv[argv.index("--nnodes") + 1] == "4"
    assert argv[argv.index("--batch_size") + 1] == "8"
    assert argv[argv.index("--grad_accum_usteps") + 1] == "16"
    assert argv[argv.index("--rdzv_endpoint") + 1] == "etcd.ml:2379"


def test_precompile_is_the_training_command_under_neuron_parallel_compile_with_few_steps() -> None:
    precompile, train = job("precompile", precompile_steps=12), job("train", precompile_steps=12)
    precompile_argv, train_argv = launcher(precompile), launcher(train)
    assert precompile_argv[-2:] == ["--steps_this_run", "12"]
    assert "--steps_this_run" not in train_argv
    # Only the step limit and the rendezvous id may differ, or the cached graphs would not match.
    rdzv = train_argv.index("--rdzv_id") + 1
    assert precompile_argv[rdzv] == "bert-precompile" and train_argv[rdzv] == "bert-train"
    assert (
        precompile_argv[:rdzv] + precompile_argv[rdzv + 1 : -2] == train_argv[:rdzv] + train_argv[rdzv + 1 :]
    )


def test_torchrun_arguments_is_what_the_pods_run() -> None:
    for phase in ("precompile", "train"):
        assert launcher(job(phase, nodes=4)) == torchrun_arguments(parameters(nodes=4), phase)


# --- The pod's script, run as the pod runs it -----------------------------------------------

FAKE_PYTHON3 = """\
#!{python}
import json, os, sys
with open(os.environ["RECORD"], "a") as record:
    record.write(json.dumps({{"argv": sys.argv[1:], "NEURON_CC_FLAGS": os.environ.get("NEURON_CC_FLAGS"),
                             "PYTHONPATH": os.environ.get("PYTHONPATH")}}) + "\\n")
if sys.argv[1:3] == ["-m", "pip"]:
    target = sys.argv[sys.argv.index("--target") + 1]
    os.makedirs(target, exist_ok=True)
"""
# Stands in for the real tool as its documentation shows it: the command arrives as arguments.
FAKE_NEURON_PARALLEL_COMPILE = '#!/bin/bash\nexec "$@"\n'


def run_pod(
    manifest: Manifest,
    tmp_path: Path,
    *,
    staged: bool = True,
    precompiled: bool = True,
    environ: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run the container's command with its rendered environment, /data moved under tmp_path and
    stand-ins for python3 and neuron_parallel_compile; no waiting."""
    data = tmp_path / "data"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (
        ("python3", FAKE_PYTHON3.format(python=sys.executable)),
        ("neuron_parallel_compile", FAKE_NEURON_PARALLEL_COMPILE),
        ("sleep", "#!/bin/sh\nexit 0\n"),
    ):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (data / "neuron_cache").mkdir(parents=True, exist_ok=True)
    if staged:
        for path in (DATASET_MARKER, SCRIPT_PATH, OPTIMIZER_MODULE_PATH):
            Path(path.replace("/data", str(data), 1)).touch()
    if precompiled:
        (data / "neuron_cache" / "bert-large_1.precompiled").touch()
    record = tmp_path / "record.jsonl"
    env = {
        **{name: value.replace("/data", str(data)) for name, value in environment(manifest).items()},
        "WAIT_TIMEOUT_SECONDS": "0",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "RECORD": str(record),
        "VC_TASK_INDEX": "1",
        **(environ or {}),
    }
    # The script itself names no path: only its environment and the launcher's arguments move.
    bash, flag, script, name, *launcher_argv = command(manifest)
    argv = [shutil.which("bash") or bash, flag, script, name]
    argv += [argument.replace("/data", str(data)) for argument in launcher_argv]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    calls = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return result, calls


needs_bash_and_flock = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("flock") is None, reason="needs bash and flock"
)


@needs_bash_and_flock
@pytest.mark.parametrize("phase", ["precompile", "train"])
def test_the_pod_runs_the_launcher_with_this_replicas_cache(phase: str, tmp_path: Path) -> None:
    result, calls = run_pod(job(phase, nodes=4), tmp_path)
    assert result.returncode == 0, result.stderr
    pip, ran = calls
    assert pip["argv"][:3] == ["-m", "pip", "install"] and "transformers==4.44.0" in pip["argv"]
    data = str(tmp_path / "data")
    expected = [
        argument.replace("/data", data) for argument in torchrun_arguments(parameters(nodes=4), phase)[1:]
    ]
    assert ran["argv"] == expected
    assert ran["NEURON_CC_FLAGS"] == f"--cache_dir={data}/neuron_cache/bert-large_1"
    assert ran["PYTHONPATH"] == f"{data}/python/bert-transformers-4.44.0"
    precompiled = tmp_path / "data" / "neuron_cache" / "bert-large_1.precompiled"
    assert precompiled.exists()


def test_precompile_and_training_share_one_cache_directory_per_replica() -> None:
    precompile, train = environment(job("precompile")), environment(job("train"))
    for name in ("NEURON_CACHE_ROOT", "CACHESET"):
        assert precompile[name] == train[name]


@needs_bash_and_flock
def test_runs_with_different_cachesets_use_different_cache_directories(tmp_path: Path) -> None:
    result, calls = run_pod(job("precompile", cacheset="run-b"), tmp_path)
    assert result.returncode == 0, result.stderr
    assert calls[-1]["NEURON_CC_FLAGS"].endswith("/neuron_cache/run-b_1")


@needs_bash_and_flock
def test_packages_are_installed_once(tmp_path: Path) -> None:
    run_pod(job("train"), tmp_path)
    _, calls = run_pod(job("train"), tmp_path)
    assert [call["argv"][:2] for call in calls].count(["-m", "pip"]) == 1


@needs_bash_and_flock
@pytest.mark.parametrize("phase", ["precompile", "train"])
def test_jobs_wait_for_the_staged_data(phase: str, tmp_path: Path) -> None:
    result, calls = run_pod(job(phase), tmp_path, staged=False)
    assert result.returncode != 0 and calls == []
    assert "gave up waiting for the data staging job" in result.stderr


@needs_bash_and_flock
def test_training_waits_for_its_replicas_precompile(tmp_path: Path) -> None:
    result, calls = run_pod(job("train"), tmp_path, precompiled=False)
    assert result.returncode != 0 and calls == []
    assert "gave up waiting for the precompile job (replica 1)" in result.stderr


@needs_bash_and_flock
def test_the_pod_refuses_to_run_without_the_replica_index(tmp_path: Path) -> None:
    result, calls = run_pod(job(), tmp_path, environ={"VC_TASK_INDEX": ""})
    assert result.returncode != 0 and calls == []
    assert "VC_TASK_INDEX" in result.stderr


def test_the_rendered_command_survives_kubernetes_variable_expansion() -> None:
    # Kubernetes rewrites $(NAME) and $$ in command and args; the script must contain neither.
    for phase in ("precompile", "train"):
        for argument in command(job(phase)):
            assert "$$" not in argument
            assert not re.search(r"\$\([A-Za-z_][A-Za-z0-9_]*\)", argument), argument


# --- Parameter checks -------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["nodes", "batch_size", "grad_accum_usteps", "precompile_steps"])
def test_counts_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field} must be at least 1"):
        parameters(**{field: 0})


@pytest.mark.parametrize("cacheset", ["", "bert large", "../x", "a/b", "x$y"])
def test_cacheset_is_a_plain_name(cacheset: str) -> None:
    with pytest.raises(ValueError, match="cacheset"):
        parameters(cacheset=cacheset)


@pytest.mark.parametrize(
    "image",
    ["training", "repo/training:1", "registry.local/training:latest", "registry:5000/training", "a.io/x:"],
)
def test_unpinned_images_are_refused(image: str) -> None:
    with pytest.raises(ValueError, match="not a pinned image"):
        parameters(image=image)


def test_a_digest_pins_an_image() -> None:
    assert parameters(image=f"registry.local/training@sha256:{'a' * 64}").image.endswith("a" * 64)


def test_unknown_phase_is_refused() -> None:
    with pytest.raises(ValueError, match="precompile, train"):
        synth(lambda app: BertJobChart(app, "x", parameters=parameters(), phase="compile"))


# --- The training image ---------------------------------------------------------------------


def test_the_dockerfile_builds_on_the_default_training_image() -> None:
    [base] = re.findall(r"^FROM\s+(\S+)", DOCKERFILE.read_text(), flags=re.MULTILINE)
    assert base == DEFAULT_TRAINING_IMAGE
    assert is_pinned_image(base) and re.search(r"-sdk2\.\d+\.\d+-", base)


def test_the_dockerfile_installs_the_packages_the_pods_install() -> None:
    [install] = re.findall(
        r"RUN pip3 install --no-cache-dir((?:\s*\\\n\s*\"[^\"]+\")+)", DOCKERFILE.read_text()
    )
    assert tuple(re.findall(r'"([^"]+)"', install)) == PYTHON_REQUIREMENTS


def test_the_dockerfile_adds_the_staged_script_files_by_commit_and_checksum() -> None:
    text = DOCKERFILE.read_text()
    for url, sha256 in ((SCRIPT_URL, SCRIPT_SHA256), (OPTIMIZER_MODULE_URL, OPTIMIZER_MODULE_SHA256)):
        assert re.search(rf"--checksum=sha256:{sha256}\s*\\\s*{re.escape(url)}", text), url
        assert re.search(r"/aws-neuron-samples/[0-9a-f]{40}/", url)
