"""The mount layout and the uid rules decided by a real root-squashing file server (issue 35 item 4):
nfs-ganesha with root squash (tests/cluster/nfs_server.py), mounted on the real node by the relay,
given to the platform's rendered pods through PersistentVolumes, the pods run by the real kubelet,
containerd and runc of tests/cluster/real_nodes.py.

What stands in for what: the stack gives pods the file system through the FSx CSI driver (a static
PersistentVolume per claim, ``volumeAttributes.mountname`` the directory); here each of the stack's
PersistentVolumes becomes a ``hostPath`` PersistentVolume at the same directory of the relay's
mount (``mountname`` below the file system's root), bound to a claim of the rendered name, so the
pods keep their volumes, mount paths, subPaths and security contexts as rendered. Which client the
node is (a root zone's, root kept; the Trainium subnet's, root squashed) is the mount the volume
comes from: the relay from the real node's own address (a root zone's) or from ``SQUASHED_CLIENT``.
Like the FSx CSI driver's ReadWriteMany volumes (its CSIDriver's ``fsGroupPolicy``), a hostPath
volume gets no fsGroup ownership change from the kubelet.
"""

from __future__ import annotations

import copy
import json
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import DATA_MOUNT, DATASETS_DIR
from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet
from config import StackConfig
from tests.cluster.control_plane import ControlPlane
from tests.cluster.nfs_server import FileServer
from tests.cluster.nodes import system_nodes
from tests.cluster.real_nodes import RealNode
from tests.cluster.standin_images import busybox_image

REAL_NODE = "real-system-0"
"""The real system node of test_real_nodes.py (added here when this module runs alone)."""
NAMESPACE = "file-server"
"""The team pods' namespace here: the team's own admits only pods for its Trainium groups, which
no real node is (k8s_charts/teams/tenant_admission.py); their spec is the rendered one."""
_KUBELET_OWN = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch")
_MOUNTNAME = "${FsxMountName}"
_LABEL_KEY = "cluster-test/file-server"
_LABEL = f"{_LABEL_KEY}=1"
_JOBS = ("fsx-layout-squashed", "fsx-layout-root-zone", "stage-on-file-server")


def _plan_manifests(plan: KubernetesLayerPlan, *, applied: bool = True) -> Iterator[dict[str, Any]]:
    """The plan's manifests; with ``applied=False`` also those of its steps a deploy does not apply
    (the runs, which `make train` submits)."""
    for step in plan.applied() if applied else plan:
        if isinstance(step, ManifestSet):
            for manifest in step.manifests:
                yield copy.deepcopy(dict(manifest))


def _layout_job(plan: KubernetesLayerPlan) -> dict[str, Any]:
    (job,) = (
        m
        for m in _plan_manifests(plan)
        if m["kind"] == "Job" and m["metadata"]["name"].startswith("fsx-layout-")
    )
    return job


def _run_task(plan: KubernetesLayerPlan) -> tuple[str, dict[str, Any]]:
    """The namespace and the pod template of the default configuration's run (its Volcano Job)."""
    runs = [
        m
        for m in _plan_manifests(plan, applied=False)
        if m["kind"] == "Job"
        and m["apiVersion"].startswith("batch.volcano.sh")
        and not m["metadata"]["name"].startswith("fabric-check")
    ]
    run = runs[0]
    return run["metadata"]["namespace"], run["spec"]["tasks"][0]["template"]


@pytest.fixture(scope="module")
def server(
    control_plane: ControlPlane, default_config: StackConfig, default_plan: KubernetesLayerPlan
) -> Iterator[tuple[FileServer, RealNode]]:
    control_plane.apply_plan(default_plan)
    image = busybox_image(_layout_job(default_plan)["spec"]["template"]["spec"]["containers"][0]["image"])
    nodes = control_plane.real_nodes
    node = nodes.nodes.get(REAL_NODE)
    if node is None:
        template = system_nodes(default_config)[0]["metadata"]["labels"]
        labels = {k: v for k, v in template.items() if k not in _KUBELET_OWN}
        node = nodes.add_node(REAL_NODE, labels=labels, images=[image])
    else:
        nodes.import_images(node, [image])
    file_server = FileServer(nodes, control_plane.work_dir / "file-server")
    control_plane.kubectl("create", "namespace", NAMESPACE)
    try:
        file_server.start()
        file_server.mount("trainium-subnet")
        file_server.mount("root-zone", node)
        yield file_server, node
    finally:
        # The pods first (nothing left on the mounts), then the volumes, then the server.
        for job in _JOBS:
            control_plane.kubectl(
                "delete",
                "job",
                "-n",
                _layout_job(default_plan)["metadata"]["namespace"],
                job,
                "--cascade=foreground",
                "--wait=true",
                check=False,
                timeout=120,
            )
        control_plane.kubectl("delete", "namespace", NAMESPACE, "--wait=true", check=False, timeout=180)
        control_plane.kubectl("delete", "pvc", "-A", "-l", _LABEL, "--wait=true", check=False)
        control_plane.kubectl("delete", "pv", "-l", _LABEL, check=False)
        file_server.stop()


@pytest.fixture(scope="module")
def team_volumes(
    control_plane: ControlPlane, server: tuple[FileServer, RealNode], default_plan: KubernetesLayerPlan
) -> str:
    """The file system laid out (by the layout Job through the root zone's client, unless the first
    test did) and the run's claims in NAMESPACE, from the squashed client's mount: the team's uid."""
    file_server, _ = server
    namespace, _ = _run_task(default_plan)
    if not (file_server.export / "teams" / namespace).is_dir():
        job, _, _ = _layout_on(control_plane, default_plan, file_server.mounts["root-zone"], _JOBS[1])
        succeeded, log = _run_job(control_plane, job)
        assert succeeded, log
    _host_path_volumes(
        control_plane,
        default_plan,
        namespace=namespace,
        mount=file_server.mounts["trainium-subnet"],
        into=NAMESPACE,
        suffix="squashed",
    )
    return namespace


def _host_path_volumes(
    control_plane: ControlPlane,
    plan: KubernetesLayerPlan,
    *,
    namespace: str,
    mount: Path,
    into: str,
    suffix: str,
) -> list[str]:
    """Each PersistentVolume the stack renders for ``namespace``'s claims, as a hostPath volume at
    its ``mountname`` directory of ``mount``, and the claim of the rendered name in ``into`` bound
    to it: the rendered access modes, read-only volumes mounted read-only by the pods as rendered.
    The claims' names."""
    volumes = [
        m
        for m in _plan_manifests(plan)
        if m["kind"] == "PersistentVolume" and m["spec"]["claimRef"]["namespace"] == namespace
    ]
    assert volumes, f"the plan renders no PersistentVolume for {namespace}"
    objects: list[dict[str, Any]] = []
    for volume in volumes:
        directory = volume["spec"]["csi"]["volumeAttributes"]["mountname"].removeprefix(_MOUNTNAME)
        name = f"{volume['metadata']['name']}-{suffix}"
        claim = volume["spec"]["claimRef"]["name"]
        # In the rendered claim's own namespace, a name beside the stack's claim (bound to the CSI volume).
        claim = f"{claim}-{suffix}" if into == namespace else claim
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": {_LABEL_KEY: "1"}},
                "spec": {
                    "capacity": volume["spec"]["capacity"],
                    "accessModes": volume["spec"]["accessModes"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "hostPath": {"path": str(mount) + directory, "type": "Directory"},
                    "claimRef": {"namespace": into, "name": claim},
                },
            }
        )
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": into, "labels": {_LABEL_KEY: "1"}},
                "spec": {
                    "accessModes": volume["spec"]["accessModes"],
                    "storageClassName": "",
                    "volumeName": name,
                    "resources": {"requests": volume["spec"]["capacity"]},
                },
            }
        )
    control_plane.kubectl(
        "create", "-f", "-", input=json.dumps({"kind": "List", "apiVersion": "v1", "items": objects})
    )
    claims = [o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"]

    def bound() -> bool:
        found = control_plane.kubectl.json("get", "pvc", "-n", into, *claims)
        items = found.get("items", [found])
        return all(item["status"].get("phase") == "Bound" for item in items)

    control_plane.wait_for(bound, timeout=60, what=f"the claims {', '.join(claims)} in {into} Bound")
    return claims


def _layout_on(
    control_plane: ControlPlane, plan: KubernetesLayerPlan, mount: Path, name: str
) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """The rendered fsx-layout Job, its whole-file-system claim bound to ``mount`` (a claim of its
    namespace named ``name``), on the real node by name (its root-zone affinity kept: the kubelet
    refuses the pod unless the node is in a root zone); its env and teams."""
    job = _layout_job(plan)
    namespace = job["metadata"]["namespace"]
    (claim,) = _host_path_volumes(
        control_plane, plan, namespace=namespace, mount=mount, into=namespace, suffix=name
    )
    job["metadata"]["name"] = name
    spec = job["spec"]["template"]["spec"]
    (volume,) = (v for v in spec["volumes"] if "persistentVolumeClaim" in v)
    volume["persistentVolumeClaim"]["claimName"] = claim
    spec["nodeName"] = REAL_NODE
    container = spec["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    teams = dict(entry.split(":") for entry in container["args"])
    return job, env, teams


def _run_job(control_plane: ControlPlane, job: dict[str, Any], timeout: float = 180) -> tuple[bool, str]:
    """Create ``job`` and wait for it to end: whether it succeeded, and its pods' logs."""
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    control_plane.kubectl("create", "-f", "-", input=json.dumps(job))

    def ended() -> dict[str, Any] | None:
        status = control_plane.kubectl.json("get", "job", "-n", namespace, name).get("status", {})
        done = {c["type"] for c in status.get("conditions", []) if c["status"] == "True"}
        return dict(status) if done & {"Complete", "Failed"} else None

    status = control_plane.wait_for(ended, timeout=timeout, what=f"the Job {name} ended")
    log = control_plane.kubectl("logs", "-n", namespace, f"job/{name}", check=False)
    return bool(status.get("succeeded")), log.stdout + log.stderr


def _owner_and_mode(path: Path) -> tuple[int, int, int]:
    found = path.stat()
    return found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)


def test_the_layout_job_needs_a_client_whose_root_is_not_squashed(
    control_plane: ControlPlane, server: tuple[FileServer, RealNode], default_plan: KubernetesLayerPlan
) -> None:
    """The rendered fsx-layout Job on the file system's new root (root-owned 0755): through a
    squashed client the server refuses its first mkdir (root is nobody there) and the Job fails;
    through a root zone's client, where it runs in the stack, the server lets root make the data
    sets' and each team's directory and hand them over (mode, then owner), as the server stores them."""
    file_server, _ = server
    assert list(file_server.export.iterdir()) == [], "the file system is laid out already"
    squashed = file_server.mounts["trainium-subnet"]
    job, env, teams = _layout_on(control_plane, default_plan, squashed, _JOBS[0])
    job["spec"]["backoffLimit"] = 0
    succeeded, log = _run_job(control_plane, job)
    assert not succeeded, log
    assert f"can't create directory '{DATA_MOUNT}/{env['DATASETS_DIR']}': Permission denied" in log, log
    assert list(file_server.export.iterdir()) == []

    root_zone = file_server.mounts["root-zone"]
    job, env, teams = _layout_on(control_plane, default_plan, root_zone, _JOBS[1])
    succeeded, log = _run_job(control_plane, job)
    assert succeeded, log
    owner = int(env["DATASETS_OWNER"])
    assert _owner_and_mode(file_server.export / env["DATASETS_DIR"]) == (owner, owner, 0o755), log
    for team, uid in teams.items():
        directory = file_server.export / env["TEAMS_DIR"] / team
        assert _owner_and_mode(directory) == (int(uid), int(uid), 0o2750), log
        assert f"handed from 0:0 to {uid}:{uid}" in log, log


def _team_pod(
    plan: KubernetesLayerPlan,
    name: str,
    script: str,
    image: str,
    change: Callable[[dict[str, Any]], None] | None,
) -> dict[str, Any]:
    """The run's pod as rendered (its security context, the trainer's volume mounts and volumes on
    the file system), on the real node by name, its container the stand-in image running ``script``.
    Left out: the init containers and the mounts of a ConfigMap or of the init containers' files
    (the run's program and the pod's passwd), the Trainium placement and device resources."""
    _, template = _run_task(plan)
    spec = template["spec"]
    trainer = spec["containers"][0]
    volumes = {
        v["name"]: v
        for v in spec["volumes"]
        if "persistentVolumeClaim" in v or ("emptyDir" in v and v["name"] != "pod-user")
    }
    container = {
        "name": trainer["name"],
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
        "securityContext": trainer["securityContext"],
        "volumeMounts": [m for m in trainer["volumeMounts"] if m["name"] in volumes],
    }
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeName": REAL_NODE,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": spec["securityContext"],
            "containers": [container],
            "volumes": list(volumes.values()),
        },
    }
    if change is not None:
        change(pod)
    return pod


# A container the runtime could not make (waiting, retried by the kubelet) or start (terminated).
_REFUSED = {
    "waiting": ("CreateContainerError", "CreateContainerConfigError", "RunContainerError"),
    "terminated": ("StartError", "ContainerCannotRun"),
}


def _pod_outcome(control_plane: ControlPlane, pod: dict[str, Any], timeout: float = 120) -> tuple[str, str]:
    """Create the pod; ("Succeeded"/"Failed", its log) once it ends, or (reason, message) when its
    container cannot be made or started (the runtime's refusal, which never ends by itself)."""
    control_plane.kubectl("create", "-f", "-", input=json.dumps(pod))
    name = pod["metadata"]["name"]

    def outcome() -> tuple[str, str] | None:
        found = control_plane.kubectl.json("get", "pod", "-n", NAMESPACE, name)
        for status in found["status"].get("containerStatuses", []):
            state = status.get("state", {})
            for kind, reasons in _REFUSED.items():
                if state.get(kind, {}).get("reason") in reasons:
                    return str(state[kind]["reason"]), str(state[kind].get("message", ""))
        phase = found["status"].get("phase")
        if phase in ("Succeeded", "Failed"):
            log = control_plane.kubectl("logs", "-n", NAMESPACE, name, check=False)
            return str(phase), log.stdout + log.stderr
        return None

    result: tuple[str, str] = control_plane.wait_for(outcome, timeout=timeout, what=f"the pod {name} ended")
    return result


_PROBE = (
    "id -u; id -g; echo written > /data/probe && stat -c 'probe %u:%g %a' /data/probe;"
    " stat -c 'data %u:%g %a' /data; ls /datasets > /dev/null && echo datasets readable;"
    " touch /datasets/probe 2>&1; true"
)


def test_the_team_pod_writes_its_directory_as_its_uid_on_the_squashing_server(
    control_plane: ControlPlane,
    server: tuple[FileServer, RealNode],
    team_volumes: str,
    default_plan: KubernetesLayerPlan,
) -> None:
    """The run's pod as the stack renders it (the team's uid, its volumes and mount paths) through a
    squashed client: runc makes every mount point, the team's uid writes its directory (the server
    checks the uid it is sent against the directory the layout handed over), reads the data sets
    and cannot write them. The same pod as another uid is refused its team's directory."""
    file_server, _ = server
    namespace, template = _run_task(default_plan)
    uid = template["spec"]["securityContext"]["runAsUser"]
    image = _layout_job(default_plan)["spec"]["template"]["spec"]["containers"][0]["image"]
    phase, log = _pod_outcome(control_plane, _team_pod(default_plan, "team-writes", _PROBE, image, None))
    assert phase == "Succeeded", log
    lines = log.splitlines()
    assert lines[:2] == [str(uid), str(uid)], log
    assert f"probe {uid}:{uid} 644" in log and f"data {uid}:{uid} 2750" in log, log
    assert "datasets readable" in log and "Read-only file system" in log, log
    assert (file_server.export / "teams" / namespace / "probe").stat().st_uid == uid

    def other_uid(pod: dict[str, Any]) -> None:
        context = pod["spec"]["securityContext"]
        context["runAsUser"] = context["runAsGroup"] = context["fsGroup"] = uid + 1

    phase, log = _pod_outcome(control_plane, _team_pod(default_plan, "other-uid", _PROBE, image, other_uid))
    assert phase == "Succeeded" and "Permission denied" in log and "probe " not in log, log


def test_the_data_sets_mount_beside_the_team_directory_and_nested_refused(
    control_plane: ControlPlane,
    server: tuple[FileServer, RealNode],
    team_volumes: str,
    default_plan: KubernetesLayerPlan,
) -> None:
    """The rendered run mounts the data sets beside the team's directory (its pod starts above). Nested
    inside it, as every run did before issue 21, runc (root, squashed to nobody by the server) cannot
    make the mount point in the team's 2750 directory: the container is never created and the pod
    waits with the runtime's error. If the stack nests the mount again, the pod of the test above
    fails the same way."""
    _, template = _run_task(default_plan)
    mounts = {m["name"]: m["mountPath"] for m in template["spec"]["containers"][0]["volumeMounts"]}
    assert not mounts["datasets"].startswith(mounts["data"].rstrip("/") + "/"), mounts
    image = _layout_job(default_plan)["spec"]["template"]["spec"]["containers"][0]["image"]

    def nested(pod: dict[str, Any]) -> None:
        for mount in pod["spec"]["containers"][0]["volumeMounts"]:
            if mount["name"] == "datasets":
                mount["mountPath"] = f"{DATA_MOUNT}/{DATASETS_DIR}"

    reason, message = _pod_outcome(control_plane, _team_pod(default_plan, "nested", "true", image, nested))
    assert reason in (*_REFUSED["waiting"], *_REFUSED["terminated"]), (reason, message)
    assert "permission denied" in message.lower() and f"{DATA_MOUNT}/{DATASETS_DIR}" in message, message


def test_the_staging_pod_writes_the_data_sets_through_the_kubelets_subpath(
    control_plane: ControlPlane,
    server: tuple[FileServer, RealNode],
    team_volumes: str,
    default_plan: KubernetesLayerPlan,
) -> None:
    """The rendered staging Job (its uid, the platform's; the whole file system's claim with the
    ``datasets`` subPath, which the kubelet resolves and bind-mounts on the relay's mount) through a
    root zone's client, its download replaced by a write (no network here): the platform's uid
    writes the data sets' directory the layout handed it."""
    file_server, _ = server
    (job,) = (
        m
        for m in _plan_manifests(default_plan)
        if m["kind"] == "Job" and m["metadata"]["name"].startswith("stage-")
    )
    namespace = job["metadata"]["namespace"]
    (claim,) = _host_path_volumes(
        control_plane,
        default_plan,
        namespace=namespace,
        mount=file_server.mounts["root-zone"],
        into=namespace,
        suffix="staging",
    )
    job["metadata"]["name"] = _JOBS[2]
    spec = job["spec"]["template"]["spec"]
    spec["nodeName"] = REAL_NODE
    (volume,) = (v for v in spec["volumes"] if "persistentVolumeClaim" in v)
    volume["persistentVolumeClaim"]["claimName"] = claim
    container = spec["containers"][0]
    mounts = {m["mountPath"]: m.get("subPath") for m in container["volumeMounts"]}
    assert mounts == {f"/{DATASETS_DIR}": DATASETS_DIR}, mounts
    probe = (
        f"id -u; mkdir -p /{DATASETS_DIR}/probe && echo staged > /{DATASETS_DIR}/probe/file"
        f" && stat -c 'staged %u:%g' /{DATASETS_DIR}/probe/file; ls /{DATASETS_DIR}"
    )
    container["command"] = ["sh", "-c", probe]
    container.pop("args", None)
    succeeded, log = _run_job(control_plane, job)
    uid = spec["securityContext"]["runAsUser"]
    assert succeeded and f"staged {uid}:{uid}" in log, log
    assert (file_server.export / DATASETS_DIR / "probe" / "file").stat().st_uid == uid
