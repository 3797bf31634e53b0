"""A passwd and group entry for the team uid a training pod runs as, which no image has.

A training pod runs as its team's uid (the owner of the team's directory; root is squashed on the
file system), and the image's /etc/passwd has no entry for it. ``POD_USER_ENVIRONMENT`` names the
user for tools that read ``USER`` and ``LOGNAME`` first (CPython's getpass.getuser()), but whatever
asks the passwd database itself fails: ``pwd.getpwuid(os.getuid())`` raises KeyError, ``id -un``
and ``whoami`` fail, and so does C code that calls getpwuid(3) (OpenSSH's client, for one, refuses
to run: "No user exists for uid"). So each training pod gets its own files:

- an init container on the pod's own image, as the pod's uid, copies the image's /etc/passwd and
  /etc/group into an emptyDir and adds ``POD_USER_NAME`` for the pod's uid and gid when the image
  has none (cluster_facts/scripts/pod_user.sh);
- the training container mounts the two files read-only over /etc/passwd and /etc/group (subPath
  mounts of that emptyDir), so the image's own users stay as they were.

Nothing runs as root and nothing of the image is written; it works with any image that has sh,
id, cut and grep. tests/cluster_facts/test_pod_user.py runs the script as a team uid and looks the user up
through the files as mounted. The stack's runs (k8s_charts/runs/training_run.py) and TorchX's
(torchx_trn/trainium.py) both add it.
"""

from __future__ import annotations

from typing import Any

from cluster_facts.kubernetes_names import POD_USER_ENVIRONMENT
from cluster_facts.script_files import script_body

__all__ = [
    "POD_USER_DIR",
    "POD_USER_FILES",
    "POD_USER_HOME",
    "POD_USER_NAME",
    "POD_USER_SCRIPT",
    "POD_USER_VOLUME",
    "pod_user_command",
    "pod_user_init_container",
    "pod_user_mounts",
    "pod_user_volume",
]

POD_USER_NAME = POD_USER_ENVIRONMENT["USER"]
POD_USER_HOME = POD_USER_ENVIRONMENT["HOME"]
POD_USER_VOLUME = "pod-user"
POD_USER_DIR = "/pod-user"
"""Where the init container writes the files (the emptyDir's mount)."""
POD_USER_FILES = {"/etc/passwd": "passwd", "/etc/group": "group"}
"""Mount path in the training container -> the file of the emptyDir mounted there."""
POD_USER_SCRIPT = script_body("cluster_facts", "pod_user.sh")
# The init container needs a moment of one CPU and a few MiB.
_RESOURCES = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}


def pod_user_command() -> list[str]:
    return ["/bin/sh", "-c", POD_USER_SCRIPT, "pod-user", POD_USER_DIR, POD_USER_NAME, POD_USER_HOME]


def pod_user_mounts() -> list[dict[str, Any]]:
    """The training container's mounts of the two files, read-only."""
    return [
        {"name": POD_USER_VOLUME, "mountPath": path, "subPath": file, "readOnly": True}
        for path, file in POD_USER_FILES.items()
    ]


def pod_user_init_container(image: str) -> dict[str, Any]:
    """The init container (plain data, as the API takes it) for a pod of ``image``; it runs as the
    pod's uid (the pod's securityContext) with no privilege at all."""
    return {
        "name": POD_USER_VOLUME,
        "image": image,
        "command": pod_user_command(),
        "resources": {kind: dict(values) for kind, values in _RESOURCES.items()},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
        "volumeMounts": [{"name": POD_USER_VOLUME, "mountPath": POD_USER_DIR}],
    }


def pod_user_volume() -> dict[str, Any]:
    return {"name": POD_USER_VOLUME, "emptyDir": {"sizeLimit": "1Mi"}}
