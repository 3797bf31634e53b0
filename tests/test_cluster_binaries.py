"""The control plane of tests/cluster is built at the versions the product deploys.

The versions live in tools/cluster-binaries/*/go.mod (the Go command reads them, go.sum verifies
what they name); what the product deploys lives in cluster_facts/versions.py, the default
configuration and the kubectl Lambda layer pinned in requirements.txt. These tests fail when the two
drift apart.
"""

from __future__ import annotations

import importlib
import re
import tarfile
from pathlib import Path

import pytest

from cluster_facts.image_pins import ETCD_IMAGE
from cluster_facts.versions import (
    CLUSTER_AUTOSCALER_IMAGE_TAGS,
    KUBECTL_LAYERS,
    VOLCANO_CHART_VERSION,
    version_key,
)
from config import load_config
from tests.cluster import binaries as cluster_binaries_finder
from tests.conftest import DEFAULT_CONFIG, REPO_ROOT
from tools import cluster_binaries, debian_tools
from tools.cluster_binaries import COMPONENTS, CONTROL_PLANE_COMPONENTS, NOT_BUILT, component_dir, tools

MINOR = load_config(DEFAULT_CONFIG).cluster.kubernetes_version


def _go_mod(component: str) -> str:
    return (COMPONENTS[component].module / "go.mod").read_text()


def _required(component: str, module: str) -> str:
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", _go_mod(component), re.MULTILINE)
    assert match, f"{component}/go.mod requires no {module}"
    return match.group(1)


def _replacements(component: str) -> dict[str, str]:
    return dict(re.findall(r"^\s*(?:replace\s+)?(\S+) => \S+ (v\S+)$", _go_mod(component), re.MULTILINE))


def _layer_dockerfile() -> str:
    """The kubectl layer's build file, inside the installed package's jsii bundle: it names the
    kubectl and helm releases the layer's zip holds (``ARG KUBECTL_VERSION``, ``ARG HELM_VERSION``)."""
    module_name, _ = KUBECTL_LAYERS[MINOR]
    package = Path(importlib.import_module(module_name).__file__ or "").parent
    (bundle,) = (package / "_jsii").glob("*.jsii.tgz")
    with tarfile.open(bundle) as archive:
        member = archive.extractfile("package/layer/Dockerfile")
        assert member is not None
        return member.read().decode()


def _layer_arg(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", _layer_dockerfile(), re.MULTILINE)
    assert match, f"the kubectl layer's Dockerfile names no {name}"
    return match.group(1)


def test_the_api_server_scheduler_and_controller_manager_are_of_the_default_kubernetes_minor() -> None:
    version = _required("kubernetes", "k8s.io/kubernetes")
    assert version_key(version)[:2] == version_key(MINOR)
    # Every staging module is its published twin of the same patch release.
    twins = _replacements("kubernetes")
    assert twins, "kubernetes/go.mod replaces no staging module"
    patch = version.removeprefix("v1.")
    assert {v for k, v in twins.items() if k.startswith("k8s.io/")} == {f"v0.{patch}"}


def test_kubectl_and_helm_are_the_kubectl_layers() -> None:
    assert _required("kubectl", "k8s.io/kubernetes") == f"v{_layer_arg('KUBECTL_VERSION')}"
    assert set(_replacements("kubectl").values()) == {
        f"v0.{_layer_arg('KUBECTL_VERSION').removeprefix('1.')}"
    }
    helm = _layer_arg("HELM_VERSION")
    assert _required("helm", f"helm.sh/helm/v{helm.split('.')[0]}") == f"v{helm}"


def test_volcano_is_the_chart_release() -> None:
    assert _required("volcano", "volcano.sh/volcano") == f"v{VOLCANO_CHART_VERSION}"
    # Its own API module is the one substitution, and the build adds what it lacks (tools/cluster_binaries.py).
    assert "volcano.sh/apis" in _replacements("volcano")
    assert COMPONENTS["volcano"].api_addition is not None


def test_the_autoscaler_is_the_release_the_product_deploys_or_says_why_not() -> None:
    """Its module has no semver tags: the go.mod pins the pseudo-version of a release tag's commit,
    and the component names the release (the running binary reports it, tests/cluster/autoscaler.py
    checks). Another release than the product's must say why, naming both, so a new release there
    makes this fail and someone looks again at what the Go module proxy serves."""
    component = COMPONENTS["cluster-autoscaler"]
    assert component.tags == ("kwok",)
    assert re.fullmatch(
        r"v0\.0\.0-\d{14}-[0-9a-f]{12}",
        _required("cluster-autoscaler", "k8s.io/autoscaler/cluster-autoscaler"),
    )
    deployed = CLUSTER_AUTOSCALER_IMAGE_TAGS[MINOR].removeprefix("v")
    if component.release != deployed:
        reason = component.instead_of or ""
        assert deployed in reason and str(component.release) in _go_mod("cluster-autoscaler"), reason
    assert "cluster-autoscaler" not in NOT_BUILT


def test_etcd_is_the_release_of_the_teams_etcd_image() -> None:
    """The real pods' etcd (tests/cluster/test_run_pods.py) runs the binary built from this pin."""
    assert _required("etcd", "go.etcd.io/etcd/server/v3") == ETCD_IMAGE.rsplit(":", 1)[1]


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_each_component_builds_what_go_sum_verifies(component: str) -> None:
    module = COMPONENTS[component].module
    go_sum = (module / "go.sum").read_text()
    own = re.search(r"^module (\S+)", (module / "go.mod").read_text(), re.MULTILINE)
    for package in tools(COMPONENTS[component]):
        if own and package == own.group(1):
            # A program of this repository (fake-device-plugin): its source is here, hashed into
            # the cache key (tools/cluster_binaries.py _key), not a download go.sum verifies.
            continue
        modules = [
            m
            for m in re.findall(r"^(\S+) v\S+ h1:", go_sum, re.MULTILINE)
            if package == m or package.startswith(m + "/")
        ]
        assert modules, f"{component}/go.sum has no hash of the module providing {package}"


def test_runc_links_the_pinned_libseccomp_and_its_pins_key_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """runc's seccomp is compiled against the libseccomp `make debian-tools` unpacks (pkg-config sees
    that set's .pc only, never the machine's), linked statically; a new pin is a new cache entry, and
    a missing set stops the build with the target to run."""
    runc = COMPONENTS["runc"]
    assert runc.cgo and runc.static and runc.debian == "libseccomp"
    assert "seccomp" in runc.tags and "-extldflags -static" in runc.ldflags()
    monkeypatch.setattr(debian_tools, "TOOLS_DIR", tmp_path)
    with pytest.raises(SystemExit, match="make debian-tools"):
        runc.cgo_environment()
    pkgconfig = tmp_path / "libseccomp" / "usr/lib/x86_64-linux-gnu/pkgconfig"
    pkgconfig.mkdir(parents=True)
    debian_tools.stamp("libseccomp").write_text(debian_tools.pins("libseccomp"))
    env = runc.cgo_environment()
    assert env["CGO_ENABLED"] == "1"
    assert env["PKG_CONFIG_LIBDIR"] == str(pkgconfig) and env["PKG_CONFIG_PATH"] == ""
    assert env["PKG_CONFIG_SYSROOT_DIR"] == str(tmp_path / "libseccomp")
    before = component_dir(runc)
    (dev, *rest) = debian_tools.SETS["libseccomp"]
    moved = debian_tools.DebianPackage(dev.name, dev.version + "+1", dev.sha256)
    monkeypatch.setitem(debian_tools.SETS, "libseccomp", (moved, *rest))
    assert component_dir(runc) != before


def test_the_control_plane_set_is_every_component_the_kwok_tier_and_the_bench_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``make bench-scale`` builds only ``CONTROL_PLANE_COMPONENTS`` (``--control-plane``): the
    components ``find_binaries`` asks for, no fewer (the bench would fail on a fresh machine) and no
    more (it would build the real nodes' binaries it never runs)."""
    asked: list[str] = []

    def path(component: str, binary: str) -> Path:
        asked.append(component)
        return Path("/nonexistent") / binary

    monkeypatch.setattr(cluster_binaries_finder, "binary_path", path)
    with pytest.raises(cluster_binaries_finder.MissingBinaries):
        cluster_binaries_finder.find_binaries()
    assert set(asked) == set(CONTROL_PLANE_COMPONENTS)


def test_control_plane_builds_those_components_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []

    def build(component: cluster_binaries.Component) -> tuple[Path, bool]:
        built.append(component.name)
        return Path("/nonexistent"), False

    monkeypatch.setattr(cluster_binaries, "build", build)
    monkeypatch.setattr(cluster_binaries.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert cluster_binaries.main(["--control-plane"]) == 0
    assert built == list(CONTROL_PLANE_COMPONENTS)
    bench = (REPO_ROOT / "Makefile").read_text().split("\nbench-scale:", 1)[1].split("\n\n", 1)[0]
    assert (
        "tools.cluster_binaries --control-plane" in bench and "cluster-binaries" not in bench.split("\n")[0]
    )
