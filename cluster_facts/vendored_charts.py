"""The Helm charts kept in this repository, and where each came from.

The cluster installs Volcano and the Cluster Autoscaler from copies of their chart directories under
``charts/`` (``charts/<name>-<version>/``), taken byte for byte from the upstream repository at the
release tag by ``make vendor-charts`` (tools/vendor_chart.py). Beside each copy,
``charts/<name>-<version>.provenance.json`` records the source (repository, tag, commit, path), the
sha256 of every file and what was left out and why; tests/cluster_facts/test_vendored_charts.py recomputes it,
so an edited or added file fails. The stack ships each directory as an S3 asset of its own and the
kubectl handler installs the release from it (constructs_trn/kubernetes_layer.py): nothing is
downloaded from a Helm repository at deploy time.

Paths are relative to the repository root, as they appear in the review files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cluster_facts.versions import CLUSTER_AUTOSCALER_CHART_VERSION, VOLCANO_CHART_VERSION

__all__ = [
    "CHARTS_DIRECTORY",
    "CLUSTER_AUTOSCALER_CHART",
    "VENDORED_CHARTS",
    "VOLCANO_CHART",
    "VendoredChart",
    "repository_path",
]

CHARTS_DIRECTORY = "charts"
_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, kw_only=True)
class VendoredChart:
    """One chart directory taken from a tag of its upstream git repository."""

    name: str
    """The chart's name (Chart.yaml ``name``)."""
    version: str
    """The chart's version (Chart.yaml ``version``); the release tag follows it."""
    repository: str
    """The upstream git repository, as ``git clone`` takes it."""
    tag: str
    path: str
    """The chart's directory in the upstream repository at ``tag``."""
    dropped: Mapping[str, str] = field(default_factory=dict)
    """Paths in the chart directory that are not copied, each with the reason."""
    hook_waits: int = 0
    """The chart's hook Jobs and Pods that Helm waits for (up to ``--timeout`` each) on an install or
    upgrade, on top of ``--wait`` (cluster_facts.deploy_timeouts); tests/cluster_facts/test_deploy_timeouts.py
    counts them in the templates."""

    @property
    def directory(self) -> str:
        return f"{CHARTS_DIRECTORY}/{self.name}-{self.version}"

    @property
    def provenance(self) -> str:
        return f"{self.directory}.provenance.json"


VOLCANO_CHART = VendoredChart(
    name="volcano",
    version=VOLCANO_CHART_VERSION,
    repository="https://github.com/volcano-sh/volcano",
    tag=f"v{VOLCANO_CHART_VERSION}",
    path="installer/helm/chart/volcano",
    dropped={
        "crd/v1": (
            "a symbolic link to crd/bases that no template reads (the chart's crd_version helper "
            "yields bases or v1beta1); an S3 asset and the handler's unzip would turn it into a "
            "second copy of every CRD"
        ),
        "charts/jobflow/crd/v1": "the same link in the jobflow subchart, read by none of its templates",
    },
    # templates/admission-init.yaml: the pre-install,pre-upgrade Job that writes the webhook's
    # certificate (rendered while custom.admission_enable is on, the chart's default and the stack's).
    hook_waits=1,
)

CLUSTER_AUTOSCALER_CHART = VendoredChart(
    name="cluster-autoscaler",
    version=CLUSTER_AUTOSCALER_CHART_VERSION,
    repository="https://github.com/kubernetes/autoscaler",
    tag=f"cluster-autoscaler-chart-{CLUSTER_AUTOSCALER_CHART_VERSION}",
    # Under cluster-autoscaler/ since the charts moved there; charts/cluster-autoscaler before.
    path="cluster-autoscaler/charts/cluster-autoscaler",
)

VENDORED_CHARTS = (VOLCANO_CHART, CLUSTER_AUTOSCALER_CHART)


def repository_path(relative: str) -> Path:
    """``relative`` (a chart directory or provenance record) as a path in this checkout."""
    return _ROOT / relative
