"""Build the real control plane's binaries for tests/cluster (and actionlint for the workflow test), once
per machine, from the Go module proxy.

Each component is a Go module of its own under ``tools/cluster-binaries/<component>/`` (different
dependency graphs): its go.mod names the pinned upstream module and lists the main packages as
``tool`` directives (Go 1.24+), its go.sum verifies every download. ``go build -o <dir> tool`` builds
them all. The output goes to a cache outside the clone, keyed by the component and a hash of what
decides its bytes (go.mod, go.sum, the build flags, and for Volcano the API addition below):

    ${XDG_CACHE_HOME:-~/.cache}/trainium-cluster/<component>-<key>/bin/<binary>

so a second run, another worktree or a fresh clone on the same machine builds nothing. A build
writes into a temporary directory and renames it into place, so a cache entry is whole or absent.

Run ``python -m tools.cluster_binaries`` (``make cluster-binaries``); ``--print-dir COMPONENT``
prints a component's directory without building; tests/cluster/binaries.py finds them the same way.

The Go command is the machine's (``GOTOOLCHAIN=local``: no other toolchain is downloaded) and
reaches only the module proxies in ``GOPROXY``: ``direct`` (fetching from version control) is
dropped, so nothing comes from any other site.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tools import debian_tools

__all__ = [
    "COMPONENTS",
    "CONTROL_PLANE_COMPONENTS",
    "NOT_BUILT",
    "Component",
    "binary_path",
    "build",
    "cache_root",
    "component_dir",
    "go_environment",
    "tools",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
MODULES = REPO_ROOT / "tools" / "cluster-binaries"
# Small binaries: no symbol table, no DWARF; no local paths inside them.
LDFLAGS = "-s -w"

# volcano.sh/volcano v1.15.1 builds against volcano.sh/apis from its own repository
# (replace => ./staging/src/volcano.sh/apis), which a module zip leaves out (a nested module), and
# the Go module proxy serves no volcano.sh/apis v1.15.x (refused: v1.15.0, v1.15.1; served:
# v1.14.0). The staging API of v1.15.1 differs from v1.14.0 in exactly one declaration that code
# uses: this constant (compared with `diff -r -w` of the two trees, comments left out; the other
# differences are the informers' watch-list wrapper, which changes no behaviour tested here, and a
# fake clientset for unit tests). The build copies the proxy's v1.14.0 (verified by go.sum) and adds
# the constant, word for word as v1.15.1's pkg/apis/scheduling/v1beta1/labels.go declares it.
VOLCANO_API_ADDITION = (
    "pkg/apis/scheduling/v1beta1/zz_queue_allocation_gate.go",
    (
        "package v1beta1\n\n"
        "// QueueAllocationGateKey: declared in volcano.sh/apis as of v1.15 (tools/cluster_binaries.py).\n"
        'const QueueAllocationGateKey = GroupName + "/queue-allocation-gate"\n'
    ),
)


# Where Kubernetes and Helm keep their own version; their release builds set it with -X. Unset, the
# API server reports v0.0.0-master and Helm's chart templates (semverCompare on the server's version)
# fail, so the build sets it from the version go.mod requires.
_KUBERNETES_VERSION = (
    "k8s.io/component-base/version.gitVersion={version}",
    "k8s.io/component-base/version.gitMajor={major}",
    "k8s.io/component-base/version.gitMinor={minor}",
    "k8s.io/component-base/version.gitTreeState=clean",
)


@dataclass(frozen=True)
class Component:
    name: str
    api_addition: tuple[str, str] | None = None
    """(path inside volcano.sh/apis, Go source) added to the API module before the build."""
    version_of: str | None = None
    """The required module whose version ``version_variables`` receive."""
    version_variables: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    """Go build tags (``-tags``)."""
    cgo: bool | None = None
    """``CGO_ENABLED`` for the build: True for runc (its nsenter and seccomp are C), False for the
    nodes' other binaries (static, as their upstream release builds are); None leaves Go's default."""
    release: str | None = None
    """The upstream release the go.mod's pseudo-version is the commit of, for a module with no
    semver tags (the running binary reports it; tests/cluster checks)."""
    instead_of: str | None = None
    """Why the release differs from the one the product deploys, and what that changes for the tests."""
    debian: str | None = None
    """The set of tools/debian_tools.py whose C libraries cgo compiles and links against (its
    pkg-config files are the only ones the build sees; its pins are part of the cache key)."""
    static: bool = False
    """Linked with ``-extldflags -static`` (a cgo binary that needs no shared library at run time)."""

    @property
    def module(self) -> Path:
        return MODULES / self.name

    def ldflags(self) -> str:
        flags = [LDFLAGS]
        if self.version_of is not None:
            version = required_version(self, self.version_of)
            major, minor = version.removeprefix("v").split(".")[:2]
            settings = [v.format(version=version, major=major, minor=minor) for v in self.version_variables]
            flags += [f"-X {setting}" for setting in settings]
        if self.static:
            flags.append("-extldflags -static")
        return " ".join(flags)

    def cgo_environment(self) -> dict[str, str]:
        """CGO_ENABLED and, with a Debian set, pkg-config pointed at that set only."""
        env: dict[str, str] = {}
        if self.cgo is not None:
            env["CGO_ENABLED"] = "1" if self.cgo else "0"
        if self.debian is not None:
            if not debian_tools.installed(self.debian):
                raise SystemExit(
                    f"cluster-binaries: {self.name} needs the Debian set {self.debian!r} in"
                    f" {debian_tools.root(self.debian)}; run `make debian-tools`"
                )
            root = debian_tools.root(self.debian)
            env.update(
                # The set's .pc files only (not the machine's), their -I and -L under the set.
                PKG_CONFIG_LIBDIR=":".join(str(p) for p in sorted(root.glob("usr/lib/*/pkgconfig"))),
                PKG_CONFIG_PATH="",
                PKG_CONFIG_SYSROOT_DIR=str(root),
            )
        return env


def required_version(component: Component, module: str) -> str:
    """The version of ``module`` the component's go.mod requires."""
    for raw in (component.module / "go.mod").read_text().splitlines():
        words = raw.split("//", 1)[0].split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) == 2 and words[0] == module:
            return words[1]
    raise SystemExit(f"{component.module / 'go.mod'} requires no {module}")


AUTOSCALER_RELEASE = "1.33.0"
AUTOSCALER_INSTEAD_OF = (
    "The product deploys cluster-autoscaler 1.36.1 (cluster_facts/versions.py); the Go module proxy"
    " serves k8s.io/autoscaler/cluster-autoscaler only at 1.33.0's commit (tools/cluster-binaries/"
    "cluster-autoscaler/go.mod lists what was tried; 1.36.1's commit 35e8a28 and tag answer 403). Read in"
    " the source, 1.33.0 -> 1.34.5 -> 1.36.1, for what tests/cluster/test_scale_from_zero.py relies on: a"
    " node group's template (kwok's TemplateNodeInfo, then simulator.SanitizedTemplateNodeInfoFromNodeGroup,"
    " which drops startup taints with taints.SanitizeTaints) is built the same way, 1.34 only labelling"
    " simulated template nodes cluster-autoscaler.kubernetes.io/template-node, 1.36 copying a template's"
    " CSINode (read only with --enable-csi-node-aware-scheduling, off) and keeping a cordoned example"
    " node's spec.unschedulable unless --scale-from-unschedulable (off); startup taints (utils/taints) are"
    " unchanged, 1.36 only accepting more prefixes with --startup-taint-prefix; the binpacking estimator"
    " gains a shortcut for pods with a hostname topology spread constraint, which training pods do not"
    " have, and 1.36 an opt-in fast path (--fastpath-binpacking-enabled, off); scale-down of an empty node"
    " is unchanged but for utilization equal to the threshold (now removable), a TTL for deletion-candidate"
    " taints (--node-deletion-candidate-ttl, 0 = off, as 1.33) and atomic (ZeroOrMaxNodeScaling) groups,"
    " which neither AWS groups nor kwok's are; 1.36's unneeded-node and eligibility code is refactored"
    " with the same decisions; --cordon-node-before-terminating became true by default, so the test"
    " passes it to 1.33.0; 1.36 runs extra loops when needed (--frequent-loops-enabled, now true: more"
    " passes, the same decisions) and handles DRA objects always (--enable-dynamic-resource-allocation is"
    " locked to true; the chart's ClusterRole grants resource.k8s.io list and watch; no DRA object exists"
    " in these scenarios); --max-node-startup-time (15 min) makes configurable what 1.33 hard-codes"
    " (clusterstate MaxNodeStartupTime); the kwok provider renamed nodegroups.fromNodeLabelAnnotation to"
    " fromNodeAnnotationKey (the test uses fromNodeLabelKey, in all three). Not covered by any run here:"
    " the AWS provider (node templates from Auto Scaling group tags, aws_manager.go buildNodeFromTemplate),"
    " which the kwok provider replaces."
)
"""Why the cluster autoscaler the tests run is not the release the product deploys, and what differs."""

NOT_BUILT: dict[str, str] = {}
"""Components the tests would run and cannot build from the Go module proxy, and why."""

COMPONENTS = {
    component.name: component
    for component in (
        Component("kubernetes", version_of="k8s.io/kubernetes", version_variables=_KUBERNETES_VERSION),
        Component("kubectl", version_of="k8s.io/kubernetes", version_variables=_KUBERNETES_VERSION),
        Component("volcano", api_addition=VOLCANO_API_ADDITION),
        Component("kwok"),
        Component(
            "cluster-autoscaler",
            tags=("kwok",),
            release=AUTOSCALER_RELEASE,
            instead_of=AUTOSCALER_INSTEAD_OF,
        ),
        Component(
            "helm",
            version_of="helm.sh/helm/v4",
            version_variables=("helm.sh/helm/v4/internal/version.version={version}",),
        ),
        # The real nodes of tests/cluster (tests/cluster/real_nodes.py): the kubelet and kube-proxy at
        # the control plane's release, containerd at the AMI's minor, runc, the CNI plugins.
        Component(
            "kubelet", version_of="k8s.io/kubernetes", version_variables=_KUBERNETES_VERSION, cgo=False
        ),
        Component(
            "containerd",
            version_of="github.com/containerd/containerd/v2",
            version_variables=("github.com/containerd/containerd/v2/version.Version={version}",),
            # btrfs needs cgo and its headers, devmapper and ZFS need their tools: the nodes here use
            # the overlayfs or native snapshotter (tests/cluster/real_nodes.py).
            tags=("no_btrfs", "no_devmapper", "no_zfs"),
            cgo=False,
        ),
        Component(
            "runc",
            version_of="github.com/opencontainers/runc",
            version_variables=("main.version={version}",),
            # libseccomp (Debian's, unpacked by `make debian-tools`): the RuntimeDefault profile the
            # platform's pods ask for is applied, not refused. Static, with netgo and osusergo (as
            # runc's own `make static` release builds): no libseccomp.so or NSS module at run time.
            tags=("seccomp", "netgo", "osusergo"),
            cgo=True,
            debian="libseccomp",
            static=True,
        ),
        Component(
            "cni-plugins",
            version_of="github.com/containernetworking/plugins",
            version_variables=(
                "github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion={version}",
            ),
            cgo=False,
        ),
        # The NetworkPolicy enforcer of the real nodes: kube-router's network policy controller
        # alone (go.mod says why v2.1.0 and what is wrong with it); it runs Debian's ipset.
        Component(
            "kube-router",
            version_of="github.com/cloudnativelabs/kube-router/v2",
            version_variables=("github.com/cloudnativelabs/kube-router/v2/pkg/version.Version={version}",),
            cgo=False,
        ),
        # The real nodes' cluster DNS: CoreDNS, run as EKS's coredns add-on runs it, a pod in
        # kube-system behind the kube-dns Service (tests/cluster/cluster_dns.py). Its upstream main
        # package, every plugin of its plugin.cfg compiled in, as its release builds are.
        Component("coredns", cgo=False),
        # The teams' rendezvous etcd (ETCD_IMAGE's release, cluster_facts/image_pins.py): the binary of
        # the etcd image's stand-in (tests/cluster/standin_images.py), which a real pod runs.
        Component("etcd", cgo=False),
        # The device plugin stand-in of the real nodes (a program of this repository, main.go).
        Component("fake-device-plugin", cgo=False),
        # The DRA drivers' kubelet plugin stand-in of the real nodes (a program of this repository,
        # main.go; tests/cluster/test_dra_pods.py).
        Component("dra-kubelet-plugin", cgo=False),
        # The real nodes' NFS client (a program of this repository, main.go): this kernel has FUSE but
        # no NFS client, so the relay mounts the root-squashing server's export (tests/cluster/nfs_server.py).
        Component("nfs-fuse-relay", cgo=False),
        # Not a control plane binary: the workflow linter tests/operator_tools/test_review_workflow.py runs, built and
        # cached the same way (its version comes from the module's build info).
        Component("actionlint"),
    )
}


def tools(component: Component) -> list[str]:
    """The main packages the go.mod lists as ``tool`` directives, in order."""
    packages: list[str] = []
    in_block = False
    for raw in (component.module / "go.mod").read_text().splitlines():
        line = raw.split("//", 1)[0].strip()
        if in_block:
            if line == ")":
                in_block = False
            elif line:
                packages.append(line)
        elif line == "tool (":
            in_block = True
        elif line.startswith("tool "):
            packages.append(line.removeprefix("tool ").strip())
    if not packages:
        raise SystemExit(f"{component.module / 'go.mod'}: no tool directive names a binary to build")
    return packages


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trainium-cluster"


def _key(component: Component) -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((component.module / name).read_bytes())
    # A module with a program of its own (fake-device-plugin, dra-kubelet-plugin): its source decides the bytes too.
    for source in sorted(component.module.glob("*.go")):
        digest.update(source.name.encode() + source.read_bytes())
    flags = [component.ldflags(), "-trimpath", component.api_addition]
    if component.tags:
        flags.append(component.tags)
    if component.cgo is not None:
        flags.append(f"cgo={component.cgo}")
    if component.debian is not None:
        flags.append(debian_tools.pins(component.debian))
    digest.update(json.dumps(flags).encode())
    return digest.hexdigest()[:16]


def component_dir(component: Component) -> Path:
    return cache_root() / f"{component.name}-{_key(component)}"


CONTROL_PLANE_COMPONENTS = ("kubernetes", "kubectl", "helm", "kwok", "volcano", "cluster-autoscaler")
"""What the control plane with kwok's nodes runs (tests/cluster/binaries.py ``find_binaries``): all
``make bench-scale`` needs, so on a fresh machine it builds these (``--control-plane``) and not the
real nodes' kubelet, containerd, runc, CNI plugins, CoreDNS, etcd and device plugin, about 9 of the
first cold build's minutes (docs/performance.md)."""


def binary_path(component: str, binary: str) -> Path:
    """Where ``binary`` of ``component`` is once built (``make cluster-binaries``)."""
    return component_dir(COMPONENTS[component]) / "bin" / binary


def go_environment() -> dict[str, str]:
    env = dict(os.environ)
    configured = subprocess.run(
        ["go", "env", "GOPROXY"], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()
    proxies = [
        entry
        for part in configured.split("|")
        for entry in part.split(",")
        if entry.strip() and entry.strip() not in ("direct", "off")
    ]
    if not proxies:
        raise SystemExit(f"GOPROXY={configured!r} names no module proxy; the build fetches only from one")
    env.update(
        GOPROXY=",".join(proxies),
        GOTOOLCHAIN="local",
        GOFLAGS="-mod=readonly",
    )
    return env


def _with_api_addition(component: Component, env: dict[str, str], work: Path) -> list[str]:
    """A go.mod beside the component's that builds against volcano.sh/apis plus the addition."""
    assert component.api_addition is not None
    relative, source = component.api_addition
    module = component.module
    found = subprocess.run(
        ["go", "mod", "download", "-json", "volcano.sh/apis"],
        cwd=module,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    upstream = Path(json.loads(found.stdout)["Dir"])
    apis = work / "apis"
    shutil.copytree(upstream, apis)
    for path in apis.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    (apis / relative).write_text(source)
    modfile = work / "go.mod"
    pinned = [
        line
        for line in (module / "go.mod").read_text().splitlines()
        if line.startswith("replace volcano.sh/apis ")
    ]
    if len(pinned) != 1:
        raise SystemExit(
            f"{module / 'go.mod'}: expected one `replace volcano.sh/apis => volcano.sh/apis <version>` line"
        )
    modfile.write_text(
        (module / "go.mod").read_text().replace(pinned[0], f"replace volcano.sh/apis => {apis}")
    )
    shutil.copy(module / "go.sum", work / "go.sum")
    return [f"-modfile={modfile}"]


def build(component: Component, *, quiet: bool = False) -> tuple[Path, bool]:
    """The component's directory, built unless it is cached; and whether it was built now."""
    target = component_dir(component)
    if (target / "bin").is_dir():
        return target, False
    target.parent.mkdir(parents=True, exist_ok=True)
    env = go_environment()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".{component.name}-", dir=target.parent) as temporary:
        work = Path(temporary)
        extra = _with_api_addition(component, env, work) if component.api_addition else []
        out = work / "out" / "bin"
        out.mkdir(parents=True)
        command = [
            "go",
            "build",
            "-trimpath",
            f"-ldflags={component.ldflags()}",
            *([f"-tags={','.join(component.tags)}"] if component.tags else []),
            *extra,
            "-o",
            f"{out}/",
            "tool",
        ]
        if not quiet:
            print(f"cluster-binaries: building {component.name}: {' '.join(tools(component))}", flush=True)
        subprocess.run(
            command,
            cwd=component.module,
            env={**env, **component.cgo_environment()},
            check=True,
        )
        try:
            (work / "out").rename(target)
        except OSError:
            # Another build (another worktree) put the same key in place first: same inputs, same bytes.
            if not (target / "bin").is_dir():
                raise
    if not quiet:
        print(f"cluster-binaries: {component.name} built in {time.monotonic() - started:.0f} s -> {target}")
    return target, True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("components", nargs="*", help=f"default: all ({', '.join(COMPONENTS)})")
    parser.add_argument(
        "--print-dir", metavar="COMPONENT", help="print the component's directory; build nothing"
    )
    parser.add_argument(
        "--control-plane",
        action="store_true",
        help=f"only the control plane with kwok's nodes ({', '.join(CONTROL_PLANE_COMPONENTS)})",
    )
    args = parser.parse_args(argv)
    if args.control_plane:
        args.components = [*CONTROL_PLANE_COMPONENTS, *args.components]
    if args.print_dir:
        print(component_dir(COMPONENTS[args.print_dir]))
        return 0
    unknown = [name for name in args.components if name not in COMPONENTS]
    if unknown:
        parser.error(f"unknown component(s) {', '.join(unknown)}; known: {', '.join(COMPONENTS)}")
    if shutil.which("go") is None:
        print("cluster-binaries: no `go` on PATH; install Go 1.26 (README: Requirements)", file=sys.stderr)
        return 1
    started = time.monotonic()
    built = []
    for name in args.components or list(COMPONENTS):
        _, was_built = build(COMPONENTS[name])
        if was_built:
            built.append(name)
    elapsed = time.monotonic() - started
    print(
        f"cluster-binaries: {'built ' + ', '.join(built) if built else 'all cached, nothing built'}"
        f" ({elapsed:.1f} s) in {cache_root()}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
