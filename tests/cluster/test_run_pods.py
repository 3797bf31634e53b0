"""A team's etcd and a run's pods as containers on the real nodes (issue 35 item 6): cluster DNS,
the rendered etcd StatefulSet's three members, and the rendered run's Volcano Job running its whole
pod script (cluster_programs/run_worker.sh, then torchrun on CPU with gloo) through a retry. Last,
the upgrade of a cluster deployed before the etcd probes' fix: its never-Ready members rolled by
the StatefulSet to the current template.

What runs for real: CoreDNS (tests/cluster/cluster_dns.py, EKS's add-on objects) on the real system
node, answering at the kube-dns ClusterIP through kube-proxy, the kubelets' ``clusterDNS``; the
team's etcd as the plan renders it (StatefulSet, Services, NetworkPolicy, init container and
probes), its pods moved from kwok's system nodes (cordoned here) to the real one; the run's Volcano
Job as rendered, placed by Volcano on the real Trainium node of ``trn1-32xl``, its pods' init
container, ConfigMap script, security context, environment and policies as rendered: the workers'
torchrun agents find ``etcd-server:2379`` through CoreDNS and kube-proxy, pass kube-router's
policies (DNS, the team's etcd, the job's peers), rendezvous there and meet in gloo collectives.

What is cut from the rendered run, and why:

- **Resources.** The pod requests the Trainium shape (112 CPU, 448 GiB, 16 Neuron devices, 8 EFA
  interfaces: k8s_charts/runs/training_run.py from the catalog). No configuration makes it smaller:
  a run's ``runs:`` entry names a node group, and the group's instance type decides the requests
  (the smallest Trainium type still asks for more CPU than this 2-core machine has). Here the
  trainer requests 100m CPU and 256 MiB and no devices (no device plugin runs on the real node).
- **Workers.** ``--nproc_per_node`` 32 (the Neuron cores of a node) is lowered to 1; both replicas
  land on the one real Trainium node (the gang stays 2, ``--nnodes 2``).
- **Volumes.** The team's and the data sets' claims are FSx PersistentVolumes through the FSx CSI
  driver, which does not run here: as in test_file_server.py, each PersistentVolume the stack
  renders for the team becomes a ``hostPath`` PersistentVolume at its ``mountname`` directory of a
  directory of this session standing for the file system's root (``teams/training`` owned by the
  team's uid, mode 2750, as the layout Job leaves it; ``datasets`` with the data set's staged
  marker and, under the BERT script's rendered name, the runtime tests' stand-in
  tests/runtime/standin_worker.py), bound to claims beside the stack's (``<claim>-run-pods``), which
  the pods name instead. ``VERIFY_FILES`` names the stand-in's SHA-256 (the rendered list names the
  real script's files); ``PYTHON_REQUIREMENTS`` is empty (pip would need PyPI). (No hostPath volume
  in the pod: the team's admission and Pod Security refuse it, and the team's claim quota, 4, has
  room for these two only.)
- **The image.** The training image's stand-in (standin_images.training_image) carries this
  machine's Python and GNU tools; torch, python-etcd and urllib3 come from .venv-torch, bind-mounted
  read-only into the data sets' directory (``VENV_IN_DATASETS``) and first on the image's PATH.
  Packing it into a layer instead means hashing, writing and importing the CUDA build of torch
  (PyPI has no CPU-only wheel) on every node: ``TORCH_VENV_MEASURED``.
- **The failure.** The first attempt fails by the stand-in's switch (``STANDIN_FAIL_RANK=0`` with
  ``STANDIN_FAIL_ATTEMPT=0``: rank 0 raises after its first collective in the job's version 0),
  a worker exception as a bad step would raise; the run's own policy (``PodFailed`` -> ``RestartJob``)
  restarts the gang as Volcano version 1, which completes.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import (
    ETCD_CLIENT_PORT,
    ETCD_LABELS,
    ETCD_METRICS_PORT,
    ETCD_SERVICE_NAME,
    TRAINING_NAMESPACE,
)
from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet
from config import StackConfig
from k8s_charts.checks import gang_watchdog
from k8s_charts.teams.etcd import member_name
from tests.cluster.cluster_dns import CoreDNS, start_cluster_dns
from tests.cluster.control_plane import ControlPlane
from tests.cluster.netns import inside
from tests.cluster.nodes import group_nodes, system_nodes
from tests.cluster.real_nodes import CLUSTER_DNS, RealNode, RealNodes
from tests.cluster.standin_images import etcd_image, python_image, training_image
from tests.cluster.test_file_server import _LABEL, _host_path_volumes
from tests.cluster.test_real_nodes import REAL_NODE, _rendered, _rendered_in_step

REPO_ROOT = Path(__file__).resolve().parents[2]
TORCH_VENV = (REPO_ROOT / ".venv-torch").resolve()
STANDIN = REPO_ROOT / "tests" / "runtime" / "standin_worker.py"
GROUP = "trn1-32xl"
REAL_TRAINIUM = "real-trn1-32xl-0"
"""test_network_policy.py's real Trainium node (added here when this module runs without it)."""
NEURON_TAINT = "aws.amazon.com/neuron"
TEAM = TRAINING_NAMESPACE
SUFFIX = "run-pods"
VENV_IN_DATASETS = "standin-torch-venv"
"""Where .venv-torch is bind-mounted in the data sets' directory (not beside the run's script, whose
directory may hold no unchecked importable file)."""
VENV_PATH = f"/datasets/{VENV_IN_DATASETS}"
RUN_STEP = "run-bert-large"
_KUBELET_OWN = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch")
TORCH_VENV_MEASURED = (
    "7.2 GB (torch 1.7 GB, its CUDA libraries 4.3 GB, triton 0.6 GB); one read of it through tar"
    " and SHA-256 took 33 s here (2026-11-29, the machine shared). A layer of it costs about seven"
    " such passes on a cold cache (the layer's input hash, the layer tar, its digest, the OCI"
    " archive; then per node containerd's import: the content store and the overlayfs unpack),"
    " about 4 minutes, and 7 GB more on disk per node; the input hash alone on every session."
)
"""What packing .venv-torch into the training image's stand-in would cost (the module's docstring)."""


@dataclass
class RunCluster:
    plane: ControlPlane
    nodes: RealNodes
    system: RealNode
    trainium: RealNode
    dns: CoreDNS
    fs: Path
    """The file system's root stand-in (the module's docstring: Volumes)."""


def _run_job(plan: KubernetesLayerPlan) -> dict[str, Any]:
    step = plan.step(RUN_STEP)
    assert isinstance(step, ManifestSet)
    (job,) = [copy.deepcopy(dict(m)) for m in step.manifests if m["kind"] == "Job"]
    return job


def _member_images(plan: KubernetesLayerPlan) -> tuple[str, str]:
    """The etcd StatefulSet's images: (etcd's, its init container's)."""
    spec = _rendered_in_step(plan, "etcd", "StatefulSet")["spec"]["template"]["spec"]
    return spec["containers"][0]["image"], spec["initContainers"][0]["image"]


def _labels(node: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in node["metadata"]["labels"].items() if k not in _KUBELET_OWN}


def _real_nodes(
    plane: ControlPlane, config: StackConfig, plan: KubernetesLayerPlan
) -> tuple[RealNode, RealNode]:
    """The real system node and the real Trainium node (the earlier modules', or started here),
    with the images the etcd members and the run pull."""
    nodes = plane.real_nodes
    etcd, member = _member_images(plan)
    watchdog = _rendered(plan, "Deployment", gang_watchdog.NAME)["spec"]["template"]["spec"]["containers"][0]
    system_images = [etcd_image(etcd), *(python_image(name) for name in sorted({member, watchdog["image"]}))]
    system = nodes.nodes.get(REAL_NODE)
    if system is None:
        system = nodes.add_node(REAL_NODE, labels=_labels(system_nodes(config)[0]), images=system_images)
    else:
        nodes.import_images(system, system_images)
    image = _run_job(plan)["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"]
    run_images = [training_image(image, TORCH_VENV, VENV_PATH)]
    trainium = nodes.nodes.get(REAL_TRAINIUM)
    if trainium is None:
        template = group_nodes(config, GROUP, [REAL_TRAINIUM])[0]
        trainium = nodes.add_node(
            REAL_TRAINIUM,
            labels=_labels(template),
            taints=[t for t in template["spec"]["taints"] if t["key"] == NEURON_TAINT],
            images=run_images,
        )
    else:
        nodes.import_images(trainium, run_images)
    return system, trainium


def _etcd_members_on(plane: ControlPlane, node: str) -> list[dict[str, Any]] | None:
    selector = ",".join(f"{k}={v}" for k, v in ETCD_LABELS.items())
    pods = plane.kubectl.json("get", "pods", "-n", TEAM, "-l", selector)["items"]
    ready = [
        p
        for p in pods
        if p["spec"].get("nodeName") == node
        and "deletionTimestamp" not in p["metadata"]
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    ]
    return ready if len(ready) == 3 else None


@pytest.fixture(scope="module")
def cluster(
    control_plane: ControlPlane,
    default_config: StackConfig,
    default_plan: KubernetesLayerPlan,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RunCluster]:
    plane = control_plane
    plane.apply_plan(default_plan)
    system, trainium = _real_nodes(plane, default_config, default_plan)
    dns = start_cluster_dns(plane.real_nodes, system)
    kwok_system = [n["metadata"]["name"] for n in system_nodes(default_config)]
    for name in kwok_system:
        plane.kubectl("cordon", name)
    job = _run_job(default_plan)
    mounted: list[Path] = []
    try:
        # The members kwok "ran" go; the StatefulSet makes them again, on the real node.
        selector = ",".join(f"{k}={v}" for k, v in ETCD_LABELS.items())
        plane.kubectl("delete", "pods", "-n", TEAM, "-l", selector, "--wait=false")
        plane.wait_for(
            functools.partial(_etcd_members_on, plane, REAL_NODE),
            timeout=240,
            what=f"the three etcd members Ready on {REAL_NODE}",
        )
        fs = tmp_path_factory.mktemp("run-pods") / "fs"
        venv = fs / "datasets" / VENV_IN_DATASETS
        venv.mkdir(parents=True)
        subprocess.run(["mount", "--bind", "-o", "ro", str(TORCH_VENV), str(venv)], check=True)
        mounted.append(venv)
        yield RunCluster(plane, plane.real_nodes, system, trainium, dns, fs)
    finally:
        for name in ("dns-probe", job["metadata"]["name"]):
            plane.kubectl(
                "delete", "jobs.batch.volcano.sh", "-n", TEAM, name, "--wait=true", check=False, timeout=120
            )
        plane.kubectl("delete", "pvc", "-n", TEAM, "-l", _LABEL, "--wait=true", check=False, timeout=120)
        plane.kubectl("delete", "pv", "-l", _LABEL, check=False)
        for path in mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)
        for name in kwok_system:
            plane.kubectl("uncordon", name, check=False)
        dns.stop()


def _volcano_job_ended(plane: ControlPlane, name: str) -> dict[str, Any] | None:
    found = plane.kubectl.json("get", "jobs.batch.volcano.sh", "-n", TEAM, name)
    status: dict[str, Any] = found.get("status", {})
    if status.get("state", {}).get("phase") in ("Completed", "Failed", "Terminated", "Aborted"):
        return status
    return None


def _pods_of(plane: ControlPlane, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = plane.kubectl.json(
        "get", "pods", "-n", TEAM, "-l", f"volcano.sh/job-name={job}"
    )["items"]
    return items


def _logs(plane: ControlPlane, pods: list[dict[str, Any]]) -> str:
    out = []
    for pod in pods:
        result = plane.kubectl("logs", "-n", TEAM, pod["metadata"]["name"], "-c", "trainer", check=False)
        out.append(f"--- {pod['metadata']['name']}\n{result.stdout}{result.stderr}")
    return "\n".join(out)


def _on_real_trainium(job: dict[str, Any]) -> dict[str, Any]:
    """The rendered run's pod template, cut as the module's docstring says (resources, placement)."""
    spec = job["spec"]["tasks"][0]["template"]["spec"]
    spec["nodeSelector"] = {**spec["nodeSelector"], "kubernetes.io/hostname": REAL_TRAINIUM}
    trainer = spec["containers"][0]
    trainer["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}}
    return spec


def test_a_team_pod_finds_its_etcd_by_the_service_name_through_coredns(
    cluster: RunCluster, default_plan: KubernetesLayerPlan
) -> None:
    """A pod of the run's Volcano Job (its template as rendered, its program a lookup) in the team's
    namespace resolves ``etcd-server`` through its search path (``training.svc.cluster.local``)
    to the Service's ClusterIP, asked of CoreDNS at the kube-dns ClusterIP (its resolv.conf, from
    the kubelet's clusterDNS), and reaches the real etcd members there; a member's own name on the
    headless peers Service resolves to that member's pod. A name outside the cluster has no answer
    (no upstream here)."""
    plane = cluster.plane
    service_ip = plane.kubectl.json("get", "service", "-n", TEAM, ETCD_SERVICE_NAME)["spec"]["clusterIP"]
    members = {p["metadata"]["name"]: p["status"]["podIP"] for p in _etcd_members_on(plane, REAL_NODE) or []}
    job = _run_job(default_plan)
    job["metadata"] = {"name": "dns-probe", "namespace": TEAM}
    task = job["spec"]["tasks"][0]
    spec = _on_real_trainium(job)
    spec.pop("initContainers", None)
    spec["volumes"] = []
    trainer = spec["containers"][0]
    trainer.pop("volumeMounts", None)
    trainer.pop("args", None)
    member = min(members)
    program = (
        "import socket, urllib.request\n"
        "print('resolv.conf', open('/etc/resolv.conf').read().replace(chr(10), ' | '))\n"
        f"print('service', socket.gethostbyname('{ETCD_SERVICE_NAME}'))\n"
        f"print('member', socket.gethostbyname('{member}.{ETCD_SERVICE_NAME}-peers'))\n"
        f"print('version', urllib.request.urlopen('http://{ETCD_SERVICE_NAME}:{ETCD_CLIENT_PORT}/version',"
        " timeout=10).read().decode())\n"
        "try:\n"
        "    print('outside', socket.gethostbyname('example.com'))\n"
        "except OSError as error:\n"
        "    print('outside unresolved', error)\n"
    )
    trainer["command"] = ["python3", "-c", program]
    job["spec"]["tasks"] = [{**task, "replicas": 1, "minAvailable": 1, "policies": []}]
    job["spec"]["minAvailable"] = 1
    job["spec"]["maxRetry"] = 1
    plane.create([job])
    status = plane.wait_for(
        functools.partial(_volcano_job_ended, plane, "dns-probe"),
        timeout=180,
        what="the DNS probe's Job ended",
    )
    log = _logs(plane, _pods_of(plane, "dns-probe"))
    assert status["state"]["phase"] == "Completed", log
    assert f"nameserver {CLUSTER_DNS}" in log and f"search {TEAM}.svc.cluster.local" in log, log
    assert f"service {service_ip}\n" in log, log
    assert f"member {members[member]}\n" in log, log
    assert '"etcdserver":"3.5.' in log, log
    assert "outside unresolved" in log, log


def _cut_run(plane: ControlPlane, plan: KubernetesLayerPlan, job: dict[str, Any], fs: Path) -> dict[str, Any]:
    """The rendered run cut as the module's docstring says, its file system laid out under ``fs``
    and its claims bound there: the trainer's environment by name."""
    spec = _on_real_trainium(job)
    trainer = spec["containers"][0]
    env: dict[str, Any] = {e["name"]: e for e in trainer["env"]}
    uid = spec["securityContext"]["runAsUser"]

    team_dir = fs / "teams" / TEAM
    team_dir.mkdir(parents=True)
    os.chown(team_dir, uid, uid)
    team_dir.chmod(0o2750)
    datasets = fs / "datasets"
    script = env["RUN_SCRIPT"]["value"]
    dataset_var = script.split(")", 1)[0].removeprefix("$(")
    script_path = script.replace(f"$({dataset_var})", env[dataset_var]["value"])
    local_script = datasets / script_path.removeprefix("/datasets/")
    local_script.parent.mkdir(parents=True)
    local_script.write_bytes(STANDIN.read_bytes())
    local_script.chmod(0o644)
    for line in env["REQUIRED_MARKERS"]["value"].splitlines():
        marker, version = line.split(" ", 1)
        (datasets / marker.removeprefix("/datasets/")).write_text(f"{version}\n")
    env["VERIFY_FILES"]["value"] = f"{hashlib.sha256(STANDIN.read_bytes()).hexdigest()}  {script_path}"
    env["PYTHON_REQUIREMENTS"]["value"] = ""
    trainer["env"] = [
        *env.values(),
        {"name": "STANDIN_FAIL_RANK", "value": "0"},
        {"name": "STANDIN_FAIL_ATTEMPT", "value": "0"},
    ]
    args = trainer["args"]
    args[args.index("--nproc_per_node") + 1] = "1"
    claims = _host_path_volumes(plane, plan, namespace=TEAM, mount=fs, into=TEAM, suffix=SUFFIX)
    for volume in spec["volumes"]:
        if "persistentVolumeClaim" in volume:
            claim = f"{volume['persistentVolumeClaim']['claimName']}-{SUFFIX}"
            assert claim in claims, (claim, claims)
            volume["persistentVolumeClaim"]["claimName"] = claim
    return env


def test_the_runs_pod_script_fails_once_and_volcano_restarts_it_to_completion(
    cluster: RunCluster, default_plan: KubernetesLayerPlan
) -> None:
    """The rendered run (cut as the module's docstring says): attempt 0 runs run_worker.sh whole
    (data set marker, checksums, the checked local copy of the script, the compile cache's lock,
    the precompile once per run through torchrun, the attempt's record) and torchrun, whose agents
    rendezvous at etcd-server:2379 and whose rank 0 then fails; Volcano's RestartJob makes version 1,
    which skips the precompile (every replica's cache holds the key), rendezvouses under its new id
    and completes."""
    plane = cluster.plane
    job = _run_job(default_plan)
    name = job["metadata"]["name"]
    env = _cut_run(plane, default_plan, job, cluster.fs)
    data = cluster.fs / "teams" / TEAM
    plane.create([job])
    status = plane.wait_for(
        functools.partial(_volcano_job_ended, plane, name), timeout=600, what=f"the run {name} ended"
    )
    pods = _pods_of(plane, name)
    log = _logs(plane, pods)
    output = data / "runs" / name
    records = (
        sorted(p.name for p in (output / "attempts").iterdir()) if (output / "attempts").is_dir() else []
    )
    assert status["state"]["phase"] == "Completed", f"{status}\n{records}\n{log}"
    # One restart; the pods that completed are of job version 1 (Volcano's status.version moves on
    # again as the Job completes, so the pods' annotation is what names the attempt).
    assert status.get("retryCount") == 1, status
    versions = sorted(p["metadata"]["annotations"]["volcano.sh/job-version"] for p in pods)
    assert versions == ["1", "1"], versions
    # Both attempts ran the script to the launcher on both replicas.
    assert records == ["v0-replica-0", "v0-replica-1", "v1-replica-0", "v1-replica-1"], records
    key = env["COMPILE_KEY"]["value"]
    cacheset = env["CACHESET"]["value"]
    for replica in (0, 1):
        assert (data / "neuron_cache" / f"{cacheset}_{replica}.precompiled" / key).is_file()
    assert len(pods) == 2 and all(p["status"]["phase"] == "Succeeded" for p in pods), log
    assert log.count("skipping neuron_parallel_compile") == 2, log
    assert log.count(f"TRAINIUM_ATTEMPT run={name} attempt=1 ") == 2, log
    assert log.count("standin: phase=train done") == 2, log
    group = pods[0]["metadata"]["annotations"]["scheduling.k8s.io/group-name"]
    assert f"world=2 run_id={group}-v1 " in log, log


ETCD_STEP = "etcd"
ETCD_SELECTOR = ",".join(f"{k}={v}" for k, v in ETCD_LABELS.items())
ROLL_BOUND_SECONDS = 120
"""How long the StatefulSet may take from the deploy of the fixed template to three Ready members
(21 s measured here alone, docs/performance.md: room for the real-nodes pass's load, not for a
member whose init container retries its membership change for minutes)."""


def _with_old_probes(plan: KubernetesLayerPlan) -> KubernetesLayerPlan:
    """The plan with the team's etcd as commit f143d4b found it (``git log -p --
    k8s_charts/teams/etcd.py``): no metrics listener, the readiness and liveness probes on the
    client port, where etcd 3.5 with ``--enable-v2`` answers /readyz and /livez with 404."""
    step = plan.step(ETCD_STEP)
    assert isinstance(step, ManifestSet)
    manifests = [copy.deepcopy(dict(m)) for m in step.manifests]
    (statefulset,) = (m for m in manifests if m["kind"] == "StatefulSet")
    spec = statefulset["spec"]["template"]["spec"]
    (member,) = spec["initContainers"]
    metrics = f"--listen-metrics-urls=http://0.0.0.0:{ETCD_METRICS_PORT}"
    assert metrics in member["args"], member["args"]
    member["args"].remove(metrics)
    (etcd,) = spec["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert etcd[probe]["httpGet"]["port"] == ETCD_METRICS_PORT, etcd[probe]
        etcd[probe]["httpGet"]["port"] = ETCD_CLIENT_PORT
    old = dataclasses.replace(step, manifests=tuple(manifests))
    return KubernetesLayerPlan(tuple(old if s.name == ETCD_STEP else s for s in plan.steps))


def _members(plane: ControlPlane) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = plane.kubectl.json("get", "pods", "-n", TEAM, "-l", ETCD_SELECTOR)["items"]
    return [p for p in items if "deletionTimestamp" not in p["metadata"]]


def _is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def _etcd_running(pod: dict[str, Any]) -> bool:
    return any(
        s["name"] == "etcd" and "running" in s.get("state", {})
        for s in pod["status"].get("containerStatuses", [])
    )


def _etcd_restarts(pod: dict[str, Any]) -> int:
    return sum(s["restartCount"] for s in pod["status"].get("containerStatuses", []) if s["name"] == "etcd")


def _old_members_up(plane: ControlPlane, revision: str) -> list[dict[str, Any]] | None:
    """The three members of ``revision`` once each one's etcd has been restarted by its liveness
    probe and runs again (as every member of such a cluster was, every minute), none ever Ready."""
    pods = _members(plane)
    assert not any(_is_ready(p) for p in pods), [p["metadata"]["name"] for p in pods if _is_ready(p)]
    old = [p for p in pods if p["metadata"]["labels"].get("controller-revision-hash") == revision]
    if len(old) == 3 and len(pods) == 3 and all(_etcd_running(p) and _etcd_restarts(p) >= 1 for p in old):
        return old
    return None


def _probe_failures(plane: ControlPlane, pod: dict[str, Any]) -> str:
    """The kubelet's Unhealthy events of ``pod`` (each probe failure, with the HTTP status)."""
    uid = pod["metadata"]["uid"]
    events = plane.kubectl.json(
        "get", "events", "-n", TEAM, "--field-selector", f"involvedObject.uid={uid},reason=Unhealthy"
    )["items"]
    return "\n".join(str(e.get("message", "")) for e in events)


def _member_report(plane: ControlPlane) -> str:
    """Each member's revision, containers and logs' tails (a failed roll's message)."""
    lines = []
    for pod in _members(plane):
        name = pod["metadata"]["name"]
        revision = pod["metadata"]["labels"].get("controller-revision-hash")
        statuses = [
            (s["name"], s.get("ready"), s.get("restartCount"), list(s.get("state", {})))
            for s in pod["status"].get("initContainerStatuses", [])
            + pod["status"].get("containerStatuses", [])
        ]
        lines.append(f"--- {name} {revision} {pod['status'].get('phase')} {statuses}")
        for container in ("member", "etcd"):
            result = plane.kubectl("logs", "-n", TEAM, name, "-c", container, "--tail=15", check=False)
            lines.append(f"{container}: {result.stdout}{result.stderr}")
    statefulset = plane.kubectl.json("get", "statefulset", "-n", TEAM, ETCD_SERVICE_NAME)
    lines.append(f"status: {statefulset['status']}")
    return "\n".join(lines)


def _rolled(plane: ControlPlane) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The StatefulSet and its three members once every member is of the update revision and Ready."""
    statefulset = plane.kubectl.json("get", "statefulset", "-n", TEAM, ETCD_SERVICE_NAME)
    status = statefulset["status"]
    revision = status.get("updateRevision")
    pods = _members(plane)
    if (
        status.get("currentRevision") == revision
        and status.get("updatedReplicas") == 3
        and status.get("readyReplicas") == 3
        and len(pods) == 3
        and all(
            p["metadata"]["labels"].get("controller-revision-hash") == revision and _is_ready(p) for p in pods
        )
    ):
        return statefulset, pods
    return None


def _etcd_call(
    cluster: RunCluster,
    path: str,
    body: dict[str, Any] | None = None,
    method: str = "GET",
    host: str | None = None,
) -> Any:
    """One HTTP call to etcd's client port at ``host`` (by default the Service's ClusterIP, through
    kube-proxy's rules) from the real system node (kube-router admits a pod's own node)."""
    if host is None:
        host = cluster.plane.kubectl.json("get", "service", "-n", TEAM, ETCD_SERVICE_NAME)["spec"][
            "clusterIP"
        ]
    data = None
    headers = {}
    if body is not None:
        if path.startswith("/v3/"):
            data, headers = json.dumps(body).encode(), {"Content-Type": "application/json"}
        else:
            data = urllib.parse.urlencode(body).encode()
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
    request = urllib.request.Request(
        f"http://{host}:{ETCD_CLIENT_PORT}{path}", data=data, headers=headers, method=method
    )
    # No proxy from this process's environment: the address is the node network's.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with inside(cluster.system.namespace.path), opener.open(request, timeout=10) as response:
        return json.load(response)


def _written_to_old(cluster: RunCluster, members: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A key written through one of the old members (the Service has no ready member to send it
    to), once their cluster has a quorum; None while it has none (a member restarting)."""
    for pod in members:
        try:
            return dict(
                _etcd_call(
                    cluster,
                    "/v2/keys/before-the-roll",
                    {"value": "kept"},
                    method="PUT",
                    host=pod["status"]["podIP"],
                )
            )
        except OSError:
            continue
    return None


def test_a_cluster_deployed_before_the_probe_fix_rolls_to_ready_members_by_itself(
    cluster: RunCluster, default_plan: KubernetesLayerPlan
) -> None:
    """The team's etcd as a deploy before commit f143d4b left it (``_with_old_probes``: three members
    running, never Ready, their etcd restarted by the liveness probe), then the current plan deployed
    over it through the same apply as every deploy (an Update of the ``etcd`` step). With
    ``podManagementPolicy: Parallel`` the StatefulSet controller does not wait for the old members
    to be Ready before replacing one (Kubernetes 1.36 ``stateful_set_control.go``: the wait is for
    ``OrderedReady``, and the rolling update waits only on members already of the new revision): it
    replaces the highest ordinal, each new member rejoins the cluster the old ones still hold
    (cluster_programs/etcd_member.py), is Ready, and the next goes. No pod is deleted by hand."""
    plane = cluster.plane
    plane.apply_plan(_with_old_probes(default_plan))
    old_revision = plane.kubectl.json("get", "statefulset", "-n", TEAM, ETCD_SERVICE_NAME)["status"][
        "updateRevision"
    ]
    # Every member of the old template, from a first start, as such a cluster was deployed.
    plane.kubectl("delete", "pods", "-n", TEAM, "-l", ETCD_SELECTOR, "--wait=false")
    old = plane.wait_for(
        functools.partial(_old_members_up, plane, old_revision),
        timeout=180,
        what="three etcd members of the old probes restarted by their liveness probe, running, never Ready",
    )
    # Never Ready for the probe's 404, while etcd itself serves: the old members hold a cluster that
    # takes a write (which the new members must carry over: each joins it, none starts another).
    for pod in old:
        failures = _probe_failures(plane, pod)
        assert "Readiness probe failed: HTTP probe failed with statuscode: 404" in failures, failures
        assert "Liveness probe failed: HTTP probe failed with statuscode: 404" in failures, failures
    plane.wait_for(
        functools.partial(_written_to_old, cluster, old), timeout=60, what="a key written to the old members"
    )
    start = time.monotonic()
    plane.apply_plan(default_plan)
    try:
        statefulset, pods = plane.wait_for(
            functools.partial(_rolled, plane),
            timeout=ROLL_BOUND_SECONDS,
            what="every etcd member of the fixed template Ready",
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\n{_member_report(plane)}") from None
    elapsed = time.monotonic() - start
    print(f"etcd rolled from never-Ready members to Ready in {elapsed:.0f} s")
    assert statefulset["status"]["updateRevision"] != old_revision
    old_uids = {p["metadata"]["uid"] for p in old}
    assert not old_uids & {p["metadata"]["uid"] for p in pods}
    for pod in pods:
        (etcd,) = pod["spec"]["containers"]
        assert etcd["readinessProbe"]["httpGet"]["port"] == ETCD_METRICS_PORT, pod["metadata"]["name"]
    # The cluster the new members hold: three started members, one per pod, and a write read back
    # through the Service (the v2 API, as the runs' python-etcd speaks it).
    members = _etcd_call(cluster, "/v3/cluster/member/list", {}, method="POST")["members"]
    assert sorted(m.get("name", "") for m in members) == [member_name(i) for i in range(3)], members
    written = _etcd_call(cluster, "/v2/keys/roll-check", {"value": "after-the-roll"}, method="PUT")
    read = _etcd_call(cluster, "/v2/keys/roll-check")
    assert read["node"]["value"] == "after-the-roll", (written, read)
    kept = _etcd_call(cluster, "/v2/keys/before-the-roll")
    assert kept["node"]["value"] == "kept", kept
