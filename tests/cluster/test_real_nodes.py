"""Real pods: the platform's own Deployments run as containers on a real node (a kubelet, containerd
and runc: tests/cluster/real_nodes.py) beside kwok's, with the security contexts they render.

The real node is a system node (the labels ``nodes.system_nodes`` gives kwok's); kwok's system nodes
are cordoned for the module, so what the scheduler places on a system node lands on it. Its
images are the stand-ins of tests/cluster/standin_images.py, imported under the names the rendered
manifests pull (the account's pull-through cache), so ``IfNotPresent`` finds them.
"""

from __future__ import annotations

import copy
import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet
from config import StackConfig
from k8s_charts.checks import gang_watchdog
from tests.cluster.control_plane import ControlPlane
from tests.cluster.nodes import system_nodes
from tests.cluster.real_nodes import POD_NETWORK, RealNode
from tests.cluster.standin_images import busybox_image, python_image

REAL_NODE = "real-system-0"
# Labels the kubelet sets itself (and may not be given with --node-labels).
_KUBELET_OWN = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch")


def _rendered(plan: KubernetesLayerPlan, kind: str, name: str) -> dict[str, Any]:
    for step in plan.applied():
        if isinstance(step, ManifestSet):
            for manifest in step.manifests:
                if manifest["kind"] == kind and manifest["metadata"]["name"] == name:
                    return dict(manifest)
    raise AssertionError(f"the plan renders no {kind} {name}")


def _rendered_in_step(plan: KubernetesLayerPlan, step_name: str, kind: str) -> dict[str, Any]:
    """The one ``kind`` of the plan's step ``step_name`` (a Job's name carries a hash of its spec)."""
    for step in plan.applied():
        if isinstance(step, ManifestSet) and step.name == step_name:
            (found,) = (m for m in step.manifests if m["kind"] == kind)
            return copy.deepcopy(dict(found))
    raise AssertionError(f"the plan has no step {step_name}")


def _image(manifest: dict[str, Any]) -> str:
    return str(manifest["spec"]["template"]["spec"]["containers"][0]["image"])


@pytest.fixture(scope="module")
def real_node(
    control_plane: ControlPlane, default_config: StackConfig, default_plan: KubernetesLayerPlan
) -> Iterator[RealNode]:
    control_plane.apply_plan(default_plan)
    template = system_nodes(default_config)[0]["metadata"]["labels"]
    labels = {k: v for k, v in template.items() if k not in _KUBELET_OWN}
    watchdog = _rendered(default_plan, "Deployment", gang_watchdog.NAME)
    layout = _rendered_in_step(default_plan, "fsx-layout", "Job")
    node = control_plane.real_nodes.add_node(
        REAL_NODE, labels=labels, images=[python_image(_image(watchdog)), busybox_image(_image(layout))]
    )
    kwok_system = [n["metadata"]["name"] for n in system_nodes(default_config)]
    for name in kwok_system:
        control_plane.kubectl("cordon", name)
    # The watchdog's pod is now a container: the local process that stood for it stops.
    control_plane.processes.stop("gang-watchdog")
    try:
        yield node
    finally:
        for name in kwok_system:
            control_plane.kubectl("uncordon", name, check=False)
        control_plane.start_watchdog()


def _pod_on_real_node(control_plane: ControlPlane, namespace: str, selector: str) -> dict[str, Any]:
    """The Deployment's pod, moved to the real node: the old one deleted, the new one Ready there."""
    control_plane.kubectl("delete", "pods", "-n", namespace, "-l", selector, "--wait=false")

    def ready() -> dict[str, Any] | None:
        for pod in control_plane.kubectl.json("get", "pods", "-n", namespace, "-l", selector)["items"]:
            if pod["spec"].get("nodeName") != REAL_NODE or "deletionTimestamp" in pod["metadata"]:
                continue
            conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
            if conditions.get("Ready") == "True":
                return dict(pod)
        return None

    found: dict[str, Any] = control_plane.wait_for(
        ready, timeout=180, what=f"a Ready pod of {selector} in {namespace} on {REAL_NODE}"
    )
    return found


def _selector(manifest: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in manifest["spec"]["selector"]["matchLabels"].items())


def _exec(control_plane: ControlPlane, pod: dict[str, Any], script: str) -> str:
    result = control_plane.kubectl(
        "exec", "-n", pod["metadata"]["namespace"], pod["metadata"]["name"], "--", "sh", "-c", script
    )
    return result.stdout


def test_the_real_node_registers_as_a_system_node_beside_kwoks(
    control_plane: ControlPlane, real_node: RealNode
) -> None:
    node = control_plane.kubectl.json("get", "node", REAL_NODE)
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})
    assert (
        node["status"]["nodeInfo"]["kubeletVersion"]
        == control_plane.kubectl.json("version")["serverVersion"]["gitVersion"]
    )
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2.2.")
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == real_node.address


def test_the_gang_watchdog_runs_as_its_container_with_its_security_context(
    control_plane: ControlPlane, real_node: RealNode, default_plan: KubernetesLayerPlan
) -> None:
    """Read-only root, uid 65532, no capabilities, no privilege escalation: as runc applies them;
    and the program reaches the API server through the ``kubernetes`` Service (kube-proxy)."""
    deployment = _rendered(default_plan, "Deployment", gang_watchdog.NAME)
    namespace = deployment["metadata"]["namespace"]
    pod = _pod_on_real_node(control_plane, namespace, _selector(deployment))
    assert pod["status"]["podIP"].startswith(POD_NETWORK.split(".0.0/")[0].rsplit(".", 1)[0])
    seen = _exec(
        control_plane,
        pod,
        "id -u; id -g; grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/1/status;"
        " touch /probe 2>&1 || true; touch /tmp/probe 2>&1 || true",
    )
    lines = seen.splitlines()
    assert lines[0] == "65532" and lines[1] == "65532", seen
    status = dict(line.split(":\t", 1) for line in lines[2:6])
    assert status["CapEff"].strip("0") == "" and status["CapPrm"].strip("0") == "", seen
    assert status["NoNewPrivs"] == "1", seen
    assert status["Seccomp"] == "2", seen  # SECCOMP_MODE_FILTER: RuntimeDefault applied
    assert "Read-only file system" in seen, seen

    # Its log: the watchdog read the cluster (an API error would say "error:" and retry).
    def passed() -> str | None:
        log = control_plane.kubectl("logs", "-n", namespace, pod["metadata"]["name"], check=False).stdout
        return log if log and "error" not in log.lower() else None

    control_plane.wait_for(passed, timeout=90, what="the watchdog's first pass in its log")


def _host_path_claim(control_plane: ControlPlane, namespace: str, name: str, path: Path) -> str:
    """A claim bound to a hostPath PersistentVolume at ``path``, in the shape of the stack's static
    FSx volume (a pre-bound PV, no storage class). A pod's own hostPath volume is refused in the
    platform's namespace (PodSecurity baseline, as the stack labels it), a PV is not."""
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-{name}"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(path), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": name},
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": f"{namespace}-{name}",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    control_plane.kubectl(
        "create", "-f", "-", input=json.dumps({"kind": "List", "apiVersion": "v1", "items": [volume, claim]})
    )
    control_plane.wait_for(
        lambda: (
            control_plane.kubectl.json("get", "pvc", "-n", namespace, name)["status"].get("phase") == "Bound"
        ),
        timeout=60,
        what=f"the claim {name} Bound",
    )
    return name


def _run_job(control_plane: ControlPlane, job: dict[str, Any], timeout: float = 180) -> str:
    """Create ``job``, wait for it to succeed (or fail: its log in the message); its pod's log."""
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    control_plane.kubectl("create", "-f", "-", input=json.dumps(job))

    def ended() -> dict[str, Any] | None:
        status = control_plane.kubectl.json("get", "job", "-n", namespace, name).get("status", {})
        return dict(status) if status.get("succeeded") or status.get("failed") else None

    status = control_plane.wait_for(ended, timeout=timeout, what=f"the Job {name} ended")
    log = control_plane.kubectl("logs", "-n", namespace, f"job/{name}", check=False)
    assert status.get("succeeded") == 1, f"{name}: {status}\n{log.stdout}{log.stderr}"
    pods = control_plane.kubectl.json("get", "pods", "-n", namespace, "-l", f"job-name={name}")["items"]
    assert {p["spec"]["nodeName"] for p in pods} == {REAL_NODE}
    return log.stdout


def test_the_fsx_layout_job_hands_the_team_directories_over_as_its_container(
    control_plane: ControlPlane, real_node: RealNode, default_plan: KubernetesLayerPlan
) -> None:
    """The rendered fsx-layout Job (its script, image name, CHOWN as its one capability, read-only
    root, RuntimeDefault seccomp) run by runc on a root-owned directory standing for a new Lustre
    file system's root (a hostPath in place of the FSx claim: the one change). The kernel decides
    what its capabilities allow: the mode set while root owns a directory, then the chown; without
    FOWNER a chmod after the chown would be refused. Run twice: the second run changes nothing."""
    job = _rendered_in_step(default_plan, "fsx-layout", "Job")
    root = real_node.directory / "fsx-root"
    root.mkdir(mode=0o755)
    namespace = job["metadata"]["namespace"]
    claim = _host_path_claim(control_plane, namespace, "fsx-real", root)
    job["metadata"]["name"] = "fsx-layout-real"
    spec = job["spec"]["template"]["spec"]
    (volume,) = (v for v in spec["volumes"] if v["name"] == "data")
    volume["persistentVolumeClaim"]["claimName"] = claim
    container = spec["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    teams = dict(entry.split(":") for entry in container["args"])
    assert teams, "the rendered Job lays out no team"

    log = _run_job(control_plane, job)
    datasets = root / env["DATASETS_DIR"]
    owner = int(env["DATASETS_OWNER"])
    found = datasets.stat()
    assert (found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)) == (owner, owner, 0o755), log
    for team, uid in teams.items():
        directory = Path(root / env["TEAMS_DIR"] / team)
        found = directory.stat()
        assert (found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)) == (int(uid), int(uid), 0o2750), log
        assert f"handed from 0:0 to {uid}:{uid}" in log, log

    job["metadata"]["name"] = "fsx-layout-real-again"
    again = _run_job(control_plane, job)
    assert "handed" not in again and again.count("ready, owned by") == 1 + len(teams), again
