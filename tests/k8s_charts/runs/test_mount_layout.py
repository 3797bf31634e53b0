"""Every pod's volume mounts can be made on a node whose root the file system squashes.

A model written here, because no container runtime or Lustre client runs in the tests: the runtime
(runc, as the node's root) makes each volume's mount point inside the container's filesystem before
the container starts; a mount point below another volume's mount is a directory made on that
volume. On Lustre with root squash the node's root is nobody (65534) there, so the parent directory
must let nobody search and write it; a team's directory (the team's uid, mode 2750, made by
cluster_programs/fsx_layout.sh) lets nobody do neither, and a read-only mount lets no one write.
When the runtime cannot, the pod sits in CreateContainerError and never fails: a run at /data with
its data sets at /data/datasets billed its Trainium nodes until someone noticed (issue 21).

The model: for each pod of the plan (and of the TorchX component), each volume mount whose path lies
below another mount's path; the parent's volume is a claim of the stack's file system (FSx CSI);
its directory's owner and mode come from the layout (below); the pod is squashed unless it is
pinned to the zones whose nodes keep root (``root_zones``: the platform Jobs). The mount point is
possible only when the parent is writable and searchable by the node's root as the file system sees
it, and mounted read-write.

What a real server decides now (tests/cluster/test_file_server.py: nfs-ganesha with root squash,
the real kubelet and runc, the rendered pods; NFSv3 through a FUSE relay, not Lustre: docs/testing.md
"The root-squashing file server"), and so what this model still stands for:
- the run's data sets beside the team's directory, and nested inside it refused (the runtime cannot
  make the mount point): ``test_the_data_sets_mount_beside_the_team_directory_and_nested_refused``
  and ``test_the_team_pod_writes_its_directory_as_its_uid_on_the_squashing_server`` decide it for the
  default configuration's run; ``test_the_check_finds_the_data_sets_mounted_inside_the_teams_directory``
  below stays as this model's own check;
- root making directories only where it is not squashed:
  ``test_the_layout_job_needs_a_client_whose_root_is_not_squashed`` (the layout Job refused through a
  squashed client, laying out the teams through a root zone's);
- what only this model covers: every other pod of both configurations (staging, TensorBoard, etcd,
  the fabric check, the device plugins), the example configuration's teams, the TorchX components'
  Jobs, and read-only parent volumes. They stay here until the real node runs them.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import (
    DATA_MOUNT,
    DATASETS_DIR,
    DATASETS_ROOT,
    PLATFORM_NAMESPACE,
    ROOT_SQUASH_ID,
    TEAMS_DIR,
)
from cluster_facts.kubernetes_plan import ManifestSet
from cluster_plan.kubernetes_values import root_zones
from config import load_config
from k8s_charts.addons.fsx_storage import CSI_DRIVER
from k8s_charts.shared.platform_jobs import ZONE_LABEL
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
from tests.plans import shared_review_plan
from tests.torchx_dryrun import CASES, dryrun_job, torchx_available

Manifest = Mapping[str, Any]

# The directories of the file system, as the layout Job leaves them (tests/k8s_charts/runs/test_fsx_layout.py
# runs the script and checks each): path -> (owner uid, mode). Team directories come from the Job's
# arguments (<team>:<uid>), each mode 2750.
_ROOT_OWNED = 0o755
_TEAM_MODE = 0o2750
_LAYOUT_BASE = {
    "/": (0, _ROOT_OWNED),
    f"/{DATASETS_DIR}": (0, _ROOT_OWNED),
    f"/{TEAMS_DIR}": (0, _ROOT_OWNED),
}


@dataclass(frozen=True)
class Problem:
    pod: str
    mount: str
    parent: str
    reason: str

    def __str__(self) -> str:
        return f"{self.pod}: {self.mount} inside {self.parent}: {self.reason}"


@dataclass(frozen=True)
class Volume:
    """A volume of a pod as the mount-point question needs it."""

    lustre_path: str | None
    """The volume's directory on the file system; None for anything that is not on it."""
    read_only: bool


def _pod_templates(manifest: Manifest) -> Iterator[tuple[str, Mapping[str, Any]]]:
    spec = manifest.get("spec", {})
    name = f"{manifest['kind']} {manifest['metadata'].get('namespace', '')}/{manifest['metadata']['name']}"
    if manifest["kind"] == "Pod":
        yield name, spec
    elif "template" in spec and "spec" in spec["template"]:
        yield name, spec["template"]["spec"]
    for task in spec.get("tasks", []):
        yield f"{name} task {task['name']}", task["template"]["spec"]


def layout(objects: list[Manifest]) -> dict[str, tuple[int, int]]:
    """The file system's directories (owner, mode), the teams' from the layout Job's arguments."""
    [job] = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].startswith("fsx-layout-")]
    [container] = job["spec"]["template"]["spec"]["containers"]
    teams = {
        f"/{TEAMS_DIR}/{entry.split(':')[0]}": (int(entry.split(":")[1]), _TEAM_MODE)
        for entry in container["args"]
    }
    return {**_LAYOUT_BASE, **teams}


def claims(objects: list[Manifest]) -> dict[tuple[str, str], Volume]:
    """(namespace, claim) -> where its volume is on the file system, for the stack's claims."""
    volumes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "PersistentVolume"}
    whole = [v for v in volumes.values() if v["spec"]["claimRef"]["namespace"] == PLATFORM_NAMESPACE]
    [platform] = whole
    root = platform["spec"]["csi"]["volumeAttributes"]["mountname"]
    found: dict[tuple[str, str], Volume] = {}
    for claim in (o for o in objects if o["kind"] == "PersistentVolumeClaim"):
        volume = volumes[claim["spec"]["volumeName"]]
        assert volume["spec"]["csi"]["driver"] == CSI_DRIVER
        path = volume["spec"]["csi"]["volumeAttributes"]["mountname"].removeprefix(root) or "/"
        found[(claim["metadata"]["namespace"], claim["metadata"]["name"])] = Volume(
            lustre_path=path, read_only=bool(volume["spec"]["csi"].get("readOnly"))
        )
    return found


def _squashed(spec: Mapping[str, Any], root_zones: tuple[str, ...]) -> bool:
    """Root is squashed unless the pod runs only in zones whose nodes keep root."""
    terms = (
        spec.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
    )
    for term in terms.get("nodeSelectorTerms", []):
        for expression in term.get("matchExpressions", []):
            if (
                expression["key"] == ZONE_LABEL
                and expression["operator"] == "In"
                and set(expression["values"]) <= set(root_zones)
            ):
                return False
    return True


def _owner_and_mode(directories: Mapping[str, tuple[int, int]], path: str) -> tuple[int, int]:
    """A directory's owner and mode: its own, else its nearest listed ancestor's (what a team makes
    in its directory is the team's)."""
    while path not in directories:
        path = posixpath.dirname(path)
    return directories[path]


def _may_create_in(uid: int, owner: int, mode: int) -> bool:
    """Whether ``uid`` (no capabilities: root squashed is nobody) may make an entry: write and search."""
    bits = (mode >> 6) & 0o7 if uid == owner else mode & 0o7
    return bits & 0o3 == 0o3


def mount_problems(
    objects: list[Manifest],
    *,
    root_zones: tuple[str, ...],
    claim_volumes: Mapping[tuple[str, str], Volume],
    directories: Mapping[str, tuple[int, int]],
) -> list[Problem]:
    problems: list[Problem] = []
    for manifest in objects:
        namespace = manifest["metadata"].get("namespace", "")
        for pod, spec in _pod_templates(manifest):
            volumes: dict[str, Volume] = {}
            for volume in spec.get("volumes", []):
                claim = volume.get("persistentVolumeClaim")
                known = claim_volumes.get((namespace, claim["claimName"])) if claim else None
                volumes[volume["name"]] = Volume(
                    lustre_path=known.lustre_path if known else None,
                    read_only=bool(known and known.read_only) or bool(claim and claim.get("readOnly")),
                )
            squashed = _squashed(spec, root_zones)
            for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
                mounts = container.get("volumeMounts", [])
                for mount in mounts:
                    for parent in mounts:
                        inside = mount["mountPath"].startswith(parent["mountPath"].rstrip("/") + "/")
                        source = volumes.get(parent["name"])
                        if not inside or source is None or source.lustre_path is None:
                            continue
                        where = f"{pod} container {container['name']}"
                        relative = posixpath.relpath(mount["mountPath"], parent["mountPath"])
                        base = posixpath.join(source.lustre_path, parent.get("subPath", ""))
                        directory = posixpath.normpath(posixpath.join(base, posixpath.dirname(relative)))
                        if parent.get("readOnly") or source.read_only:
                            problems.append(
                                Problem(where, mount["mountPath"], parent["mountPath"], "read-only")
                            )
                            continue
                        owner, mode = _owner_and_mode(directories, directory)
                        uid = ROOT_SQUASH_ID if squashed else 0
                        if uid != 0 and not _may_create_in(uid, owner, mode):
                            problems.append(
                                Problem(
                                    where,
                                    mount["mountPath"],
                                    parent["mountPath"],
                                    f"{directory} on the file system is {owner}:{mode:o}; root is squashed to "
                                    f"{ROOT_SQUASH_ID} and cannot make the mount point there",
                                )
                            )
    return problems


def _plan_objects(config: Path) -> list[Manifest]:
    plan = shared_review_plan(load_config(config))
    return [dict(m) for step in plan if isinstance(step, ManifestSet) for m in step.manifests]


def _check(objects: list[Manifest], config: Path, extra: tuple[Manifest, ...] = ()) -> list[Problem]:
    return mount_problems(
        [*objects, *extra],
        root_zones=root_zones(load_config(config)),
        claim_volumes=claims(objects),
        directories=layout(objects),
    )


CONFIGS = [pytest.param(DEFAULT_CONFIG, id="default"), pytest.param(EXAMPLE_CONFIG, id="example")]


@pytest.mark.parametrize("config", CONFIGS)
def test_every_pod_of_the_plan_can_make_its_mount_points_under_root_squash(config: Path) -> None:
    objects = _plan_objects(config)
    kinds = {o["kind"] for o in objects}
    # What the walk covers: runs (Volcano Jobs), etcd, TensorBoard, the watchdog (Deployments),
    # staging, layout and the fabric check (Jobs), the device plugins (DaemonSets).
    assert {"Job", "Deployment", "DaemonSet"} <= kinds
    walked = [pod for o in objects for pod, _ in _pod_templates(o)]
    assert any("run" in pod or "bert-large" in pod for pod in walked)
    assert any("tensorboard" in pod for pod in walked) and any("etcd-server" in pod for pod in walked)
    assert any("stage-" in pod for pod in walked) and any("fsx-layout-" in pod for pod in walked)
    assert any("fabric-check" in pod for pod in walked)
    assert _check(objects, config) == []


def test_the_check_finds_the_data_sets_mounted_inside_the_teams_directory() -> None:
    """The layout every run had before: the model must refuse it (and so guards the fix)."""
    objects = _plan_objects(DEFAULT_CONFIG)
    [run] = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].startswith("bert-large-")]
    [task] = run["spec"]["tasks"]
    [trainer] = task["template"]["spec"]["containers"]
    for mount in trainer["volumeMounts"]:
        if mount["name"] == "datasets":
            mount["mountPath"] = f"{DATA_MOUNT}/{DATASETS_DIR}"
    [problem] = _check(objects, DEFAULT_CONFIG)
    assert problem.mount == "/data/datasets" and problem.parent == "/data"
    assert f"/{TEAMS_DIR}/training on the file system is " in problem.reason
    assert "2750; root is squashed to 65534" in problem.reason


def test_a_mount_point_inside_a_root_owned_directory_is_possible_only_where_root_is_root() -> None:
    """The platform's Jobs run where root is not squashed: a mount inside their whole-file-system
    claim would be made (as the file system's root); anywhere else it would not."""
    objects = _plan_objects(DEFAULT_CONFIG)
    [layout_job] = [
        o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].startswith("fsx-layout-")
    ]
    spec = layout_job["spec"]["template"]["spec"]
    [main] = spec["containers"]
    main["volumeMounts"].append({"name": "scratch", "mountPath": f"{DATA_MOUNT}/scratch"})
    spec["volumes"].append({"name": "scratch", "emptyDir": {}})
    assert _check(objects, DEFAULT_CONFIG) == []
    del spec["affinity"]
    [problem] = _check(objects, DEFAULT_CONFIG)
    assert problem.mount == "/data/scratch" and "0:755" in problem.reason


def test_a_mount_inside_a_read_only_volume_is_refused() -> None:
    objects = _plan_objects(DEFAULT_CONFIG)
    [board] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "tensorboard"]
    [server] = board["spec"]["template"]["spec"]["containers"]
    server["volumeMounts"].append({"name": "tmp", "mountPath": f"{DATA_MOUNT}/tmp"})
    [problem] = _check(objects, DEFAULT_CONFIG)
    assert (problem.mount, problem.reason) == ("/data/tmp", "read-only")


@pytest.mark.parametrize("config", CONFIGS)
def test_runs_mount_the_teams_directory_and_the_data_sets_side_by_side(config: Path) -> None:
    objects = _plan_objects(config)
    runs = [o for o in objects if o["kind"] == "Job" and o["apiVersion"].startswith("batch.volcano.sh")]
    runs = [o for o in runs if not o["metadata"]["name"].startswith("fabric-check")]
    assert runs
    for run in runs:
        for task in run["spec"]["tasks"]:
            [trainer] = task["template"]["spec"]["containers"]
            mounts = {m["name"]: (m["mountPath"], m.get("readOnly", False)) for m in trainer["volumeMounts"]}
            assert mounts["data"] == (DATA_MOUNT, False)
            assert mounts["datasets"] == (DATASETS_ROOT, True) == ("/datasets", True)


@pytest.mark.process
def test_the_torchx_components_pods_can_make_their_mount_points_under_root_squash() -> None:
    """The Volcano Job each documented TorchX command would submit (the real torchx CLI)."""
    if (missing := torchx_available()) is not None:
        pytest.skip(missing)
    for case in CASES:
        job = dryrun_job(case)
        objects = _plan_objects(case.config)
        # TorchX renders one task per replica.
        for task in job["spec"]["tasks"]:
            [container] = task["template"]["spec"]["containers"]
            mounts = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
            assert mounts[DATA_MOUNT] is False and mounts[DATASETS_ROOT] is True, mounts
        assert _check(objects, case.config, (job,)) == [], case.name
