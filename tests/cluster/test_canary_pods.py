"""`make canary` against the real Trainium node (issue 35 item 6): the canary's own entry point
(``python -m operator_tools.canary --config ...``, what ``make canary`` runs, with ``CANARY_ARGS``)
as a process of its own, through the admin kubeconfig, creating its run (cluster_plan/canary_run.py,
the chart every run uses), which Volcano places on the real Trainium node of ``trn1-32xl`` with the
fake device plugin (test_devices.py's node), where runc runs its containers: run_worker.sh, torchrun
and the canary's program (cluster_programs/canary_worker.py).

What runs for real and decides a printed stage: Volcano admits the Job, makes the pod and binds it
(``pods_pending``, ``pods_bound``); the kubelet reports the device plugin's Neuron devices and EFA
interfaces allocatable (``device_plugins``: the stand-in plugin registered over the kubelet's own
socket) and the node check's DaemonSet pod has lifted the startup taint (``node_check``);
containerd starts the container from the training image's stand-in (``image_pull``); the program
finds ``/data`` writable as the team's uid and the data sets read-only as the kubelet mounted them
(``mounts``), torchrun's agent rendezvouses through the team's real etcd at ``etcd-server:2379``
(found through CoreDNS, reached through kube-proxy and kube-router's policies) and the program's
process group forms over it (``rendezvous``: gloo on the CPU), the program writes its TensorBoard
event file into the run's output directory on the team's volume (``output_write``), Volcano
reports the Job ``Completed`` (``run_end``), and the platform's real TensorBoard lists the run
(``tensorboard``): the canary reads TensorBoard's run list through the API server's service proxy of
the TensorBoard Service, which dials the pod on the real system node through its NetworkPolicy
(enforced by kube-router), and TensorBoard found the run's event file at its next reload of the
file system's stand-in (below). The canary reads each stage from the API server, the pod's log
through the kubelet, and prints it with its real line.

What this cluster cannot measure, named with ``--not-measurable`` (docs/health.md, "The canary"),
each printed ``SKIP ... (not measured here: <what it needs> (--not-measurable))``, never a pass:
``neuron_devices`` and ``efa_devices`` (the pod gets the plugin's device nodes, with no driver
behind them: test_devices.py shows the program's count of them passing), ``compile`` and
``collective`` (no Neuron device to run an all-reduce on, no EFA between nodes) and
``scale_down`` (the real node belongs to no Auto Scaling group and no autoscaler runs here). The
node was up before the canary began, so ``scale_up``, ``instance_launch`` and ``node_join`` print
SKIP "the nodes were already up", as on a cluster with a warm node; ``first_step`` is SKIP, as
always.

What is cut from the canary's run, and why (as test_run_pods.py cuts the rendered run): the canary
creates its Job itself, so the cuts are made at admission by a MutatingAdmissionPolicy of this
module (``CUT_POLICY``), matched to the canary's Job by its name, with each original value checked
here against the run the canary renders:

- **Resources.** The Trainium shape (112 CPU and 448 GiB of trn1.32xlarge) does not fit this 2-core
  machine: the trainer requests 100m CPU and 256 MiB. Its 16 Neuron devices and 8 EFA interfaces
  stay: the device plugin's allocation is real.
- **Workers.** ``--nproc_per_node`` 32 (the NeuronCores of a node) is 1.
- **Placement.** The node's hostname is added to the node selector: other Trainium nodes of the
  group may be up (test_network_policy.py's, with no device plugin).
- **Volumes.** The team's and the data sets' claims are FSx volumes through the FSx CSI driver,
  which does not run here: as in test_run_pods.py, each PersistentVolume the stack renders for the
  team becomes a ``hostPath`` one at its ``mountname`` directory of a directory of this module
  standing for the file system's root, bound to claims beside the stack's (``<claim>-canary``),
  which the Job names instead.

TensorBoard: its Deployment's pod template as rendered (its command and arguments, the logdir
``/data/teams``, its probes, security context and the teams' supplemental group), from its image's
stand-in (standin_images.tensorboard_image: the real TensorBoard as requirements-tensorboard.lock
pins it), as test_network_policy.py runs it, with its changes: a Pod of its own on the real system
node, the Deployment at 0 meanwhile (the Service's one endpoint is this pod), and its claim of the
whole file system bound to a hostPath PersistentVolume at the same stand-in of the file system's
root as the team's (``<claim>-canary``), so it reads, read-only through its supplemental group, the
team's directory the run writes into.

The canary's configuration is config/default.yaml with the group's ``max_size`` 1 (and the BERT
run's nodes 1, which must fit it): one real Trainium node, so the canary's gang is one node
(``canary_size``); the cluster runs the default plan, which differs only in the Auto Scaling group's
maximum. The image is the training image's stand-in (standin_images.training_image: torch and
TensorBoard's package from .venv-torch, bind-mounted read-only into the data sets' directory).

The failure paths: the team's etcd unreachable (its Service selects no member: no endpoint, so
kube-proxy refuses the connection): torchrun's agent fails before the program starts, and the
canary exits 1 with ``CANARY FAIL at rendezvous`` and the agent's etcd error as its last line; and
TensorBoard Ready over another directory (a run of its own, not the canary's): the canary waits its
bound for TensorBoard's reload and exits 1 with ``CANARY FAIL at tensorboard: TensorBoard lists 1
runs, none of them <run id> ...``.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_facts.kubernetes_names import (
    ETCD_LABELS,
    ETCD_SERVICE_NAME,
    KUBE_DNS_LABELS,
    PLATFORM_NAMESPACE,
    TRAINING_NAMESPACE,
)
from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from cluster_facts.node_check import NODE_CHECK_CONDITION, NODE_CHECK_TAINT_KEY
from cluster_plan.canary_run import canary_manifests, canary_run, canary_tensorboard_minutes
from config import StackConfig
from config.loader import load_config
from k8s_charts.checks import gang_watchdog
from k8s_charts.runs.tensorboard import TENSORBOARD_NAME
from operator_tools.canary_report import NOT_MEASURABLE, stage_ids
from tests.cluster.cluster_dns import NAMESPACE as DNS_NAMESPACE
from tests.cluster.cluster_dns import start_cluster_dns
from tests.cluster.control_plane import ControlPlane
from tests.cluster.nodes import system_nodes
from tests.cluster.real_nodes import RealNode
from tests.cluster.standin_images import etcd_image, python_image, tensorboard_image, training_image
from tests.cluster.test_canary import assert_nothing_remains, stage_status, start_canary
from tests.cluster.test_devices import NODE, start_device_node
from tests.cluster.test_file_server import _LABEL, _host_path_volumes
from tests.cluster.test_network_policy import (
    TENSORBOARD_POD,
    _run_list,
    _scale,
    _tensorboard_pod,
    _wait_tensorboard_ready,
)
from tests.cluster.test_network_policy import _file_system as _another_file_system
from tests.cluster.test_real_nodes import REAL_NODE, _host_path_claim, _image, _rendered
from tests.cluster.test_run_pods import (
    TORCH_VENV,
    VENV_IN_DATASETS,
    VENV_PATH,
    _etcd_members_on,
    _labels,
    _member_images,
)
from tests.conftest import DEFAULT_CONFIG

TEAM = TRAINING_NAMESPACE
SUFFIX = "canary"
CUT_POLICY = "cluster-test-canary-on-the-real-node"
UNMEASURABLE = tuple(stage for stage in NOT_MEASURABLE if stage != "tensorboard")
"""Every stage ``--not-measurable`` may name but ``tensorboard``: this cluster has the means for
none of the others (the module's docstring)."""
TIMEOUT_MINUTES = 4.0
"""The canary's --timeout-minutes: the pod's start, two imports of torch and the run take about a
minute here; the product's default is max_node_provision_minutes + 30."""
FAIL_TIMEOUT_MINUTES = 3.0
MARGIN_SECONDS = 60 + canary_tensorboard_minutes() * 60
"""Beyond the canary's own bound before the test kills it: its start-up, a last poll, the clean-up,
and its wait for TensorBoard's listing after the run."""
ELSEWHERE_CLAIM = "tensorboard-elsewhere"
"""The failure path's claim of TensorBoard: another file system's stand-in, without the canary's run."""
MEASURED = (
    "pods_pending",
    "device_plugins",
    "node_check",
    "pods_bound",
    "image_pull",
    "mounts",
    "data_ready",
    "rendezvous",
    "output_write",
    "run_end",
    "tensorboard",
)
WARM = ("scale_up", "instance_launch", "node_join")
_UNREACHABLE = "cluster-test/etcd-unreachable"
"""A selector key no pod has: the etcd Service with it selects no member."""


@dataclass
class CanaryCluster:
    plane: ControlPlane
    node: RealNode
    config: Path
    """The canary's configuration (the module's docstring)."""
    run_id: str
    team_dir: Path
    directory: Path
    plan: KubernetesLayerPlan
    tensorboard_claim: str
    """TensorBoard's claim bound to the file system's stand-in (its own claim's name, ``-canary``)."""


def _canary_config(directory: Path) -> Path:
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    (group,) = [g for g in data["trainium"]["node_groups"] if g["name"] == "trn1-32xl"]
    group["max_size"] = 1
    for run in data.get("runs") or []:
        run["nodes"] = 1
    path = directory / "canary.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _cut_policy(job: dict[str, Any], claims: dict[str, str]) -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy and its binding that cut the canary's Job (the module's
    docstring), its JSON patch built from the Job the canary renders, each original checked."""
    spec = "/spec/tasks/0/template/spec"
    (task,) = job["spec"]["tasks"]
    pod = task["template"]["spec"]
    (trainer,) = pod["containers"]
    assert trainer["name"] == "trainer", trainer["name"]
    args = trainer["args"]
    at = args.index("--nproc_per_node") + 1
    assert args[at] == "32", args
    patches = [
        ("replace", f"{spec}/containers/0/resources/requests/cpu", "100m"),
        ("replace", f"{spec}/containers/0/resources/requests/memory", "256Mi"),
        ("replace", f"{spec}/containers/0/args/{at}", "1"),
        ("add", f"{spec}/nodeSelector/kubernetes.io~1hostname", NODE),
    ]
    for index, volume in enumerate(pod["volumes"]):
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            patches.append(
                ("replace", f"{spec}/volumes/{index}/persistentVolumeClaim/claimName", claims[claim])
            )
    expression = ", ".join(
        f"JSONPatch{{op: {json.dumps(op)}, path: {json.dumps(path)}, value: {json.dumps(value)}}}"
        for op, path, value in patches
    )
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": CUT_POLICY},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["batch.volcano.sh"],
                            "apiVersions": ["v1alpha1"],
                            "operations": ["CREATE"],
                            "resources": ["jobs"],
                        }
                    ]
                },
                "matchConditions": [
                    {
                        "name": "the-canary",
                        "expression": f"object.metadata.name == {json.dumps(job['metadata']['name'])}",
                    }
                ],
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": f"[{expression}]"}}],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": CUT_POLICY},
            "spec": {
                "policyName": CUT_POLICY,
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": TEAM}}
                },
            },
        },
    ]


def _cut_in_force(plane: ControlPlane, job: dict[str, Any]) -> bool:
    """The policy is enforced (a moment after it is stored): a dry run of the Job comes back cut."""
    result = plane.kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(job), check=False
    )
    if result.returncode != 0:
        return False
    stored = json.loads(result.stdout)
    requests = stored["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
    return bool(requests.get("cpu") == "100m")


def _system_node(plane: ControlPlane, config: StackConfig, plan: KubernetesLayerPlan) -> RealNode:
    """The real system node (test_run_pods.py's, or started here) with the etcd members' images and
    TensorBoard's (its stand-in under the training image's name: no training pod runs there)."""
    etcd, member = _member_images(plan)
    watchdog = _rendered(plan, "Deployment", gang_watchdog.NAME)["spec"]["template"]["spec"]["containers"][0]
    images = [
        etcd_image(etcd),
        *(python_image(name) for name in sorted({member, watchdog["image"]})),
        tensorboard_image(_image(_rendered(plan, "Deployment", TENSORBOARD_NAME))),
    ]
    nodes = plane.real_nodes
    system = nodes.nodes.get(REAL_NODE)
    if system is None:
        return nodes.add_node(REAL_NODE, labels=_labels(system_nodes(config)[0]), images=images)
    nodes.import_images(system, images)
    return system


def _no_dns_left(plane: ControlPlane) -> bool:
    """No CoreDNS pod of an earlier module's (stopped, its pods going) is left."""
    selector = ",".join(f"{k}={v}" for k, v in KUBE_DNS_LABELS.items())
    return not plane.kubectl.json("get", "pods", "-n", DNS_NAMESPACE, "-l", selector)["items"]


def _checked(plane: ControlPlane) -> dict[str, Any] | None:
    node: dict[str, Any] = plane.kubectl.json("get", "node", NODE)
    taints = [t["key"] for t in node["spec"].get("taints", [])]
    conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
    return (
        node
        if conditions.get(NODE_CHECK_CONDITION) == "True" and NODE_CHECK_TAINT_KEY not in taints
        else None
    )


def _file_system(directory: Path, uid: int, mounted: list[Path]) -> tuple[Path, Path]:
    """The file system's root stand-in and the team's directory in it, as the layout Job leaves it;
    the data sets' directory with .venv-torch bound read-only into it (added to ``mounted``)."""
    fs = directory / "fs"
    team_dir = fs / "teams" / TEAM
    team_dir.mkdir(parents=True)
    os.chown(team_dir, uid, uid)
    team_dir.chmod(0o2750)
    venv = fs / "datasets" / VENV_IN_DATASETS
    venv.mkdir(parents=True)
    subprocess.run(["mount", "--bind", "-o", "ro", str(TORCH_VENV), str(venv)], check=True)
    mounted.append(venv)
    return fs, team_dir


def _start_tensorboard(plane: ControlPlane, plan: KubernetesLayerPlan, claim: str) -> None:
    """TensorBoard's pod as its Deployment renders it (test_network_policy.py ``_tensorboard_pod``:
    a Pod of its own on the real system node, the Deployment at 0), its ``data`` claim ``claim``;
    once it is Ready by its own probes."""
    plane.create([_tensorboard_pod(plan, claim)])
    _wait_tensorboard_ready(plane, 0, f"TensorBoard Ready over {claim}")


def _tensorboard_over(plane: ControlPlane, plan: KubernetesLayerPlan, fs: Path) -> str:
    """TensorBoard over ``fs``: its claim of the whole file system (``-canary``) bound to the same
    stand-in of the root as the team's volumes, so it reads the team's directory the run writes
    into, as on FSx; the Deployment at 0 (the Service's one endpoint is this pod: kwok's pod answers
    no connection). The claim's name."""
    (claim,) = _host_path_volumes(
        plane, plan, namespace=PLATFORM_NAMESPACE, mount=fs, into=PLATFORM_NAMESPACE, suffix=SUFFIX
    )
    _scale(plane, _rendered(plan, "Deployment", TENSORBOARD_NAME), 0)
    _start_tensorboard(plane, plan, claim)
    return claim


def _replace_tensorboard(plane: ControlPlane, plan: KubernetesLayerPlan, claim: str) -> None:
    plane.kubectl("delete", "pod", "-n", PLATFORM_NAMESPACE, TENSORBOARD_POD, "--wait=true", timeout=120)
    _start_tensorboard(plane, plan, claim)


@pytest.fixture(scope="module")
def cluster(
    control_plane: ControlPlane,
    default_config: StackConfig,
    default_plan: KubernetesLayerPlan,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[CanaryCluster]:
    plane = control_plane
    plane.apply_plan(default_plan)
    directory = tmp_path_factory.mktemp("canary-pods")
    config_path = _canary_config(directory)
    run = canary_run(load_config(config_path), not_measurable=UNMEASURABLE)
    assert run.nodes == 1, run.nodes
    run_id, objects = canary_manifests(run)
    (job,) = [dict(o) for o in objects if o["kind"] == "Job"]
    image = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"]
    run_image = training_image(image, TORCH_VENV, VENV_PATH)
    kwok_system = [n["metadata"]["name"] for n in system_nodes(default_config)]
    for name in kwok_system:
        plane.kubectl("cordon", name)
    restore_node_check = None
    mounted: list[Path] = []
    dns = None
    try:
        system = _system_node(plane, default_config, default_plan)
        # CoreDNS first: the etcd members find their peers by name (test_run_pods.py stopped its own).
        plane.wait_for(functools.partial(_no_dns_left, plane), timeout=120, what="no CoreDNS pod left")
        dns = start_cluster_dns(plane.real_nodes, system)
        node = plane.real_nodes.nodes.get(NODE)
        if node is None:
            node, restore_node_check = start_device_node(plane, default_config, default_plan)
        plane.wait_for(
            functools.partial(_checked, plane), timeout=240, what=f"the node check's pass on {NODE}"
        )
        # The node check's DaemonSet runs the training image too: its stand-in (with the check's
        # tools) holds that name until the check has passed; the run's replaces it then. A check pod
        # started later on the node leaves a node without the startup taint alone.
        plane.real_nodes.import_images(node, [run_image])
        # The team's etcd members on the real system node (test_run_pods.py moved them; alone, here).
        if _etcd_members_on(plane, REAL_NODE) is None:
            selector = ",".join(f"{k}={v}" for k, v in ETCD_LABELS.items())
            plane.kubectl("delete", "pods", "-n", TEAM, "-l", selector, "--wait=false")
            plane.wait_for(
                functools.partial(_etcd_members_on, plane, REAL_NODE),
                timeout=240,
                what=f"the three etcd members Ready on {REAL_NODE}",
            )
        fs, team_dir = _file_system(directory, run.run_as, mounted)
        claims = _host_path_volumes(plane, default_plan, namespace=TEAM, mount=fs, into=TEAM, suffix=SUFFIX)
        renamed = {claim.removesuffix(f"-{SUFFIX}"): claim for claim in claims}
        board_claim = _tensorboard_over(plane, default_plan, fs)
        plane.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": _cut_policy(job, renamed)}),
        )
        plane.wait_for(
            functools.partial(_cut_in_force, plane, job), timeout=60, what="the cut policy in force"
        )
        yield CanaryCluster(plane, node, config_path, run_id, team_dir, directory, default_plan, board_claim)
    finally:
        plane.kubectl(
            "delete", "jobs.batch.volcano.sh", "-n", TEAM, run_id, "--wait=true", check=False, timeout=120
        )
        for kind in ("mutatingadmissionpolicybinding", "mutatingadmissionpolicy"):
            plane.kubectl("delete", kind, CUT_POLICY, check=False)
        plane.kubectl(
            "delete",
            "pod",
            "-n",
            PLATFORM_NAMESPACE,
            TENSORBOARD_POD,
            "--wait=true",
            check=False,
            timeout=120,
        )
        plane.kubectl("delete", "pvc", "-A", "-l", _LABEL, "--wait=true", check=False, timeout=120)
        plane.kubectl("delete", "pv", "-l", _LABEL, check=False)
        # The Deployment at its rendered count again (kwok's system nodes take its pod).
        deployment = _rendered(default_plan, "Deployment", TENSORBOARD_NAME)
        _scale(plane, deployment, deployment["spec"].get("replicas", 1))
        for path in mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)
        if restore_node_check is not None:
            restore_node_check()
        for name in kwok_system:
            plane.kubectl("uncordon", name, check=False)
        if dns is not None:
            dns.stop()


def _canary(cluster: CanaryCluster, timeout_minutes: float, *extra: str) -> tuple[int, list[str], float]:
    """``make canary``'s command with CANARY_ARGS naming what this cluster cannot measure."""
    running = start_canary(
        cluster.plane,
        *(argument for stage in UNMEASURABLE for argument in ("--not-measurable", stage)),
        "--timeout-minutes", str(timeout_minutes),
        "--poll-seconds", "1",
        *extra,
        config=cluster.config,
    )  # fmt: skip
    return running.wait(timeout_minutes * 60 + MARGIN_SECONDS)


def test_the_canary_runs_its_containers_on_the_real_node_and_names_what_it_cannot_measure(
    cluster: CanaryCluster,
) -> None:
    code, lines, took = _canary(cluster, TIMEOUT_MINUTES)
    print(f"the canary took {took:.1f} s")
    output = "\n".join(lines)
    assert code == 0, output
    assert lines[0].startswith(f"canary {cluster.run_id}: 1 x trn1.32xlarge of trn1-32xl in {TEAM}"), output
    status = stage_status(lines)
    assert list(status) == list(stage_ids()), output
    for stage in MEASURED:
        assert status[stage][0] == "PASS", f"{stage}: {status[stage][1]}\n{output}"
    for stage in WARM:
        assert status[stage][0] == "SKIP" and status[stage][1].endswith("(the nodes were already up)"), output
    for stage in UNMEASURABLE:
        said, line = status[stage]
        needs = NOT_MEASURABLE[stage]
        assert said == "SKIP" and line.endswith(f"(not measured here: {needs} (--not-measurable))"), line
    # The real lines: the kubelet's allocatable, the program's own measures in the pod.
    assert "(16 Neuron, 8 EFA per node)" in status["device_plugins"][1], output
    assert status["pods_bound"][1].endswith(f"the gang is bound to the nodes ({NODE})"), output
    uid = os.stat(cluster.team_dir).st_uid
    assert f"/data writable as uid {uid}, /datasets read-only" in status["mounts"][1], output
    assert (
        "process group of 1 ranks (gloo on the CPU: one all-reduce over every rank)"
        in status["rendezvous"][1]
    )
    assert f"in /data/runs/{cluster.run_id}; " in status["output_write"][1], output
    # TensorBoard's run list, read through the API server's service proxy, named the run.
    assert status["tensorboard"][1].endswith("TensorBoard lists the run (lists the run)"), output
    assert lines[-1] == (
        f"CANARY PASS: every stage it measured passed; not measured here: {', '.join(UNMEASURABLE)}"
    ), output
    assert (
        f"canary {cluster.run_id}: removed Job {cluster.run_id}, ConfigMap {cluster.run_id}-program" in lines
    )
    # The event file on the team's volume, written as the team's uid.
    written = list((cluster.team_dir / "runs" / cluster.run_id).glob("events.out.tfevents.*"))
    assert len(written) == 1 and written[0].stat().st_uid == uid, written
    # What TensorBoard listed: the run's directory under the team's, as it read it from /data/teams.
    assert f"{TEAM}/runs/{cluster.run_id}" in _run_list(cluster.plane)
    gone = assert_nothing_remains(cluster.plane, cluster.run_id, TEAM)
    print(f"nothing of the run left {gone:.1f} s after the canary ended")


def _endpoints(plane: ControlPlane) -> list[str]:
    slices = plane.kubectl.json(
        "get", "endpointslices", "-n", TEAM, "-l", f"kubernetes.io/service-name={ETCD_SERVICE_NAME}"
    )["items"]
    return [a for s in slices for e in s.get("endpoints") or [] for a in e.get("addresses", [])]


def test_the_teams_etcd_unreachable_fails_the_canary_at_the_rendezvous(cluster: CanaryCluster) -> None:
    plane = cluster.plane
    patch = {"spec": {"selector": {_UNREACHABLE: "1"}}}
    plane.kubectl("patch", "service", ETCD_SERVICE_NAME, "-n", TEAM, "--type=merge", "-p", json.dumps(patch))
    try:
        plane.wait_for(
            lambda: not _endpoints(plane), timeout=60, what=f"{ETCD_SERVICE_NAME} without endpoints"
        )
        time.sleep(2)  # kube-proxy's rules on the node follow the slice
        code, lines, took = _canary(cluster, FAIL_TIMEOUT_MINUTES)
    finally:
        restore = {"spec": {"selector": {_UNREACHABLE: None}}}
        plane.kubectl(
            "patch", "service", ETCD_SERVICE_NAME, "-n", TEAM, "--type=merge", "-p", json.dumps(restore)
        )
    print(f"the canary took {took:.1f} s")
    output = "\n".join(lines)
    assert code == 1, output
    assert lines[-1].startswith(f"CANARY FAIL at rendezvous: pod {cluster.run_id}-"), output
    # torchrun's agent's own line: python-etcd's request to the Service, refused (no endpoint).
    assert "HTTPConnectionPool(host='etcd-server', port=2379)" in lines[-1], output
    assert lines[-1].endswith("Connection refused'))"), output
    status = stage_status(lines)
    assert list(status) == list(stage_ids()), output
    for stage in ("pods_pending", "device_plugins", "node_check", "pods_bound", "image_pull"):
        assert status[stage][0] == "PASS", f"{stage}: {status[stage][1]}\n{output}"
    assert status["rendezvous"][0] == "FAIL", output
    assert took < FAIL_TIMEOUT_MINUTES * 60, took
    assert (
        f"canary {cluster.run_id}: removed Job {cluster.run_id}, ConfigMap {cluster.run_id}-program" in lines
    )
    plane.wait_for(
        lambda: len(_endpoints(plane)) == 3, timeout=60, what=f"{ETCD_SERVICE_NAME}'s members back"
    )
    assert_nothing_remains(plane, cluster.run_id, TEAM)


def test_tensorboard_over_another_directory_fails_the_canary_at_tensorboard(cluster: CanaryCluster) -> None:
    """TensorBoard Ready, but over another file system's stand-in (a run of its own, not the
    canary's: a wrong claim or logdir): the run passes every stage up to its end, and the canary
    fails at ``tensorboard`` once its bound for TensorBoard's reload is over, naming what it listed."""
    plane = cluster.plane
    elsewhere = _another_file_system(cluster.directory / "elsewhere", cluster.plan)
    claim = _host_path_claim(plane, PLATFORM_NAMESPACE, ELSEWHERE_CLAIM, elsewhere)
    try:
        _replace_tensorboard(plane, cluster.plan, claim)
        code, lines, took = _canary(cluster, FAIL_TIMEOUT_MINUTES, "--tensorboard-minutes", "0.5")
    finally:
        _replace_tensorboard(plane, cluster.plan, cluster.tensorboard_claim)
        plane.kubectl(
            "delete", "pvc", "-n", PLATFORM_NAMESPACE, claim, "--wait=true", check=False, timeout=60
        )
        plane.kubectl("delete", "pv", f"{PLATFORM_NAMESPACE}-{claim}", check=False)
    print(f"the canary took {took:.1f} s")
    output = "\n".join(lines)
    assert code == 1, output
    assert lines[-1] == (
        f"CANARY FAIL at tensorboard: TensorBoard lists 1 runs, none of them {cluster.run_id}, within 30s of"
        " the run's end (its logdir, or the claim it mounts)"
    ), output
    status = stage_status(lines)
    assert list(status) == list(stage_ids()), output
    for stage in MEASURED[:-1]:
        assert status[stage][0] == "PASS", f"{stage}: {status[stage][1]}\n{output}"
    assert (
        f"canary {cluster.run_id}: removed Job {cluster.run_id}, ConfigMap {cluster.run_id}-program" in lines
    )
    assert_nothing_remains(plane, cluster.run_id, TEAM)
