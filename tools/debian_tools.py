"""Debian packages a test or a build needs and a machine may lack, unpacked into ``.tools/<set>/``
(never installed on the system): the OpenSSH server that tests/k8s_charts/checks/test_fabric_ssh.py runs the
fabric check's worker command with; libseccomp, which runc's seccomp support is compiled and linked
against (tools/cluster_binaries.py); busybox-static, the shell and applets of the stand-in images of
tests/cluster/standin_images.py; ipset, which kube-router's network policy controller runs;
nfs-ganesha and rpcbind, the root-squashing file server of tests/cluster/nfs_server.py; iptables and
nft, which kube-router and kube-proxy (nftables mode) of tests/cluster/real_nodes.py run.

Each package is pinned by version and SHA-256 of its .deb, read on 2026-11-28 from
deb.debian.org's bookworm/main through ``apt-get download``. Known wrong: a Debian security update
replaces a version in the mirror, and the pinned one can then no longer be downloaded; this says so
in one line, and the tests that need the set skip with their reason until the pin moves (read the
new version with ``apt-cache policy <package>`` and its checksum from the downloaded .deb).

Run by ``make debian-tools`` (a prerequisite of ``make test``). Without the mirror (no network, no
apt) it prints why and exits 0: the tests skip and say why, rather than ``make test`` failing on a
machine that cannot fetch; a checksum mismatch exits 1.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TOOLS_DIR = REPO_ROOT / ".tools"


@dataclass(frozen=True)
class DebianPackage:
    name: str
    version: str
    sha256: str


SETS: dict[str, tuple[DebianPackage, ...]] = {
    # sshd 9.2p1 as Debian 12 builds it (PAM and audit in), and the one library it links that a
    # minimal Debian lacks (libwrap.so.0: "error while loading shared libraries" without it).
    "openssh": (
        DebianPackage(
            "openssh-server",
            "1:9.2p1-2+deb12u10",
            "933cd92a2329f9bf26d22660a834ae18ebdbe8df9c6127e4d9fcb098dac9cf72",
        ),
        DebianPackage(
            "libwrap0", "7.6.q-32", "cbce2669a3ba4d74cfdc52b14f38014893e23d85a33d109a3422c342eefc55f8"
        ),
    ),
    # runc's seccomp (github.com/seccomp/libseccomp-golang, cgo, `#cgo pkg-config: libseccomp`): the
    # headers, pkg-config file and static library of -dev, and the shared library its .so names.
    # runc is linked statically (as its own release builds are), so it needs neither at run time.
    "libseccomp": (
        DebianPackage(
            "libseccomp-dev",
            "2.5.4-1+deb12u1",
            "5fb305f3aeb293e2b78a4cfcb58c0f42179703c371a408d002c8454661e6b7b2",
        ),
        DebianPackage(
            "libseccomp2",
            "2.5.4-1+deb12u1",
            "108fe67957ca7cf9ba51d801118a1b37d404bea7b6e365025cd00779e9eca38d",
        ),
    ),
    # One static binary with every applet (sh, wget, tar, id ...): the stand-in images' userland.
    "busybox": (
        DebianPackage(
            "busybox-static",
            "1:1.35.0-4+deb12u1+b1",
            "3d3fdbe91d4660c873e14b092c213fe81c1da6362daa236eb25d0171eb108744",
        ),
    ),
    # The ipset command kube-router's network policy controller runs (tools/cluster-binaries/
    # kube-router/go.mod) and the library it links; libmnl.so.0 it takes from the machine (from the
    # "netfilter" set where it runs with both on LD_LIBRARY_PATH, as the real nodes do). Read
    # 2026-11-29 (bookworm/main, 7.17-1); checked: `ipset create`/`add` and an iptables
    # `-m set --match-set` rule work in a fresh network namespace on this kernel (CONFIG_IP_SET).
    "ipset": (
        DebianPackage("ipset", "7.17-1", "4bcc86f6658ca92fe2e21a6a7d4fd162d3b94ec3cdc709a9cf05f0a8ad9c7725"),
        DebianPackage(
            "libipset13", "7.17-1", "67fe7a8366878b0431b6e247c04b131b43df90f8090000a2681e63d4c22d02ca"
        ),
    ),
    # The real-node tier's root-squashing file server (tests/cluster/nfs_server.py): nfs-ganesha 4.3
    # (user space: this kernel has no nfsd) with its VFS back end, the libraries it links that a
    # minimal Debian lacks, and rpcbind (ganesha refuses to start unless it can register NFSv3 with
    # one: "Cannot register NFS V3 on TCP"). Read on 2026-11-29 through `apt-get download`. Assumed
    # on the machine (Debian 12's base): libacl1, libblkid1, libcap2, libcom-err2, libdbus-1-3,
    # libgssapi-krb5-2, libkrb5-3, libuuid1, libbsd0, libtirpc3, libsystemd0. Known wrong: 4.3 is
    # bookworm's, three years behind upstream's 6.x; the tier uses NFSv3 only.
    "nfs-ganesha": (
        DebianPackage(
            "nfs-ganesha", "4.3-2", "2ed8b2a2130f67fcb40503be612fb415fd41b5208707395fa4d8cca2db4ec02c"
        ),
        DebianPackage(
            "nfs-ganesha-vfs", "4.3-2", "cc7d9043eaa2889d85b485b1a6a1ca886eaffa20dfb795fc3f129f6e9ad92f8d"
        ),
        DebianPackage(
            "libntirpc4.3", "4.3-2", "ff994fc7981f89d6109391840371f07dab5da293486f231abe98f6b75e8d6d41"
        ),
        DebianPackage(
            "liburcu8", "0.13.2-1", "8647049698200fb5e20a130a09059b51878bb98643a120c7b0c6cbfd3f9b42dd"
        ),
        DebianPackage(
            "libnfsidmap1",
            "1:2.6.2-4+deb12u1",
            "ac06d355b1effb7786313eacc762963457354caad6bce60d2053a90581c21e3b",
        ),
        DebianPackage(
            "libwbclient0",
            "2:4.17.12+dfsg-0+deb12u4",
            "5d3cd7c22cfab552afcd0cfc514890a4ac1498507693b1262f3de8af47ab3bc4",
        ),
        DebianPackage(
            "rpcbind", "1.2.6-6+b1", "5b83e6bd548aec9f84870e9c6f2a29a0292ecb8e2b8480049f73d0df17163883"
        ),
        DebianPackage(
            "libwrap0", "7.6.q-32", "cbce2669a3ba4d74cfdc52b14f38014893e23d85a33d109a3422c342eefc55f8"
        ),
    ),
    # iptables 1.8.9 (its nf_tables backend, xtables-nft-multi) and nft 1.0.6, which the real nodes'
    # kube-router and kube-proxy run (tests/cluster/real_nodes.py), with the libraries they link
    # that Debian 12's base lacks. Read 2026-11-29 (bookworm/main) through `apt-get download`: the
    # versions this machine had installed by hand that morning (/var/log/dpkg.log), which a fresh
    # machine lacks. libmnl0, libxtables12 and libip4tc2 were on this machine before (iproute2's,
    # and its image's), and are here all the same: one version of the netfilter libraries, ours.
    # Assumed on the machine (checked with ldd against the unpacked binaries, LD_LIBRARY_PATH at
    # this set's lib directory; all in its image since 2025-06-24 or Debian's base): libc6,
    # libjansson4, libedit2, libgmp10, libtinfo6, libbsd0, libmd0. The extensions (``-m set``,
    # ``-m comment`` ...) are found through XTABLES_LIBDIR; the alternatives dpkg's postinst would
    # make (``iptables`` -> ``xtables-nft-multi``) are LINKS below. Known wrong: the legacy backend
    # (xtables-legacy-multi) is unpacked but unused and unchecked; nft's own ``-i`` (libedit) is
    # unchecked.
    "netfilter": (
        DebianPackage(
            "iptables", "1.8.9-2", "2928d3ca6ca8a3dc3f423f6752822b1f3614a5ba609ff7806bcba4449ffe90e1"
        ),
        DebianPackage(
            "nftables",
            "1.0.6-2+deb12u2",
            "966ff20ce58c17163a771c02ddbca264291408f94c512bd85dd18da0ebdbe88c",
        ),
        DebianPackage(
            "libnftables1",
            "1.0.6-2+deb12u2",
            "3a8223f9bfba99d97bf25296ac83de307ab036e1df63e5965f88809266851947",
        ),
        DebianPackage(
            "libnftnl11", "1.2.4-2", "9e619e1470a1915264e906020f3bfc046fd8458043b1342686d997b5078213af"
        ),
        DebianPackage(
            "libxtables12", "1.8.9-2", "cb841d66950a43af4a398625313d2f3da9065299c9738538de6c2c3495857040"
        ),
        DebianPackage(
            "libip4tc2", "1.8.9-2", "f2c48b367f9ec13f9aa577e7ccf81b371ce5d5fe22dddf9d7aa99f1e0bb7cfc4"
        ),
        DebianPackage(
            "libip6tc2", "1.8.9-2", "be88db3dfa2fe3345ea343207f7c75345602686121e579023d021c348b9b4f4d"
        ),
        DebianPackage(
            "libnetfilter-conntrack3",
            "1.0.9-3",
            "65f1539238f60fcc85d115acd640474f45c77bfddcf402eb7d75965a783c2bc8",
        ),
        DebianPackage(
            "libnfnetlink0", "1.0.2-2", "ae5cbba417ea48f34c1f72c27e8146a81f20614c1296bca2cd7234c8215fddcc"
        ),
        DebianPackage(
            "libmnl0", "1.0.4-3", "4581f42e3373cb72f9ea4e88163b17873afca614a6c6f54637e95aa75983ea7c"
        ),
    ),
}

# Symbolic links made in a set after unpacking (path in the set: target), where dpkg would have made
# them when configuring (not run here: nothing is installed). iptables' postinst makes ``iptables``
# and the rest alternatives of the nf_tables backend (update-alternatives, priority 20 over legacy's
# 10); xtables-nft-multi picks its command by the name it is run by.
LINKS: dict[str, dict[str, str]] = {
    "netfilter": {
        f"usr/sbin/{command}": "xtables-nft-multi"
        for command in (
            "iptables",
            "iptables-save",
            "iptables-restore",
            "ip6tables",
            "ip6tables-save",
            "ip6tables-restore",
        )
    },
}


def root(name: str) -> Path:
    """Where the set is unpacked (its packages' paths below it: ``usr/lib/...``, ``bin/...``)."""
    return TOOLS_DIR / name


def environment(names: Sequence[str], after: str = "/usr/bin:/bin") -> dict[str, str]:
    """This process's environment for a program that runs the sets' commands: their ``usr/sbin``
    first on PATH, then ``after`` (by default no sbin directory: nothing falls back on a copy this
    machine has), their libraries on LD_LIBRARY_PATH (a fresh machine lacks them), and, with
    "netfilter", iptables' extensions at XTABLES_LIBDIR (``-m set``, ``-m comment`` ...; iptables
    looks in /usr/lib/x86_64-linux-gnu/xtables without it)."""
    env = {
        **os.environ,
        "PATH": ":".join([*(str(root(name) / "usr" / "sbin") for name in names), after]),
        "LD_LIBRARY_PATH": ":".join(str(root(name) / _LIBRARIES) for name in names),
    }
    if "netfilter" in names:
        env["XTABLES_LIBDIR"] = str(root("netfilter") / _LIBRARIES / "xtables")
    return env


_LIBRARIES = Path("usr/lib/x86_64-linux-gnu")


def pinned_busybox() -> Path:
    """Where `make debian-tools` unpacks the pinned busybox-static's binary (present once
    ``installed("busybox")``): the stand-in images' busybox (tests/cluster/standin_images.py)."""
    return root("busybox") / "bin" / "busybox"


def busybox() -> str | None:
    """The pinned busybox-static's binary once `make debian-tools` has unpacked it, else the machine's
    busybox if it has one (a fresh Debian has none): the Alpine images' shell and applets for the
    tests that run the platform's pod scripts."""
    if installed("busybox"):
        return str(pinned_busybox())
    return shutil.which("busybox")


def installed(name: str) -> bool:
    """The set is unpacked, as pinned now."""
    return stamp(name).is_file() and stamp(name).read_text() == _stamp_text(name)


def pins(name: str) -> str:
    """The set's packages, versions and checksums (what a build keyed on the set hashes)."""
    return _stamp_text(name)


def stamp(name: str) -> Path:
    """Written last: its presence means the set is complete and as pinned."""
    return TOOLS_DIR / name / ".installed"


def _stamp_text(name: str) -> str:
    packages = "".join(f"{p.name} {p.version} {p.sha256}\n" for p in SETS[name])
    return packages + "".join(
        f"link {path} {target}\n" for path, target in sorted(LINKS.get(name, {}).items())
    )


class Unavailable(Exception):
    """The mirror or apt could not be reached: the tests that need the set skip."""


def _download(package: DebianPackage, directory: Path) -> Path:
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise Unavailable("no apt-get or dpkg-deb on this machine")
    result = subprocess.run(
        ["apt-get", "download", f"{package.name}={package.version}"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = sorted(directory.glob(f"{package.name}_*.deb"))
    if result.returncode != 0 or not found:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise Unavailable(f"apt-get download {package.name}={package.version} failed: {last}")
    return found[0]


def install(name: str) -> None:
    """Download, verify and unpack one set into .tools/<name>/, unless it is there as pinned."""
    packages = SETS[name]
    if installed(name):
        return
    target = root(name)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)  # dpkg-deb -x creates only the last directory of its target
    with tempfile.TemporaryDirectory() as scratch:
        for package in packages:
            deb = _download(package, Path(scratch))
            digest = hashlib.sha256(deb.read_bytes()).hexdigest()
            if digest != package.sha256:
                raise ValueError(
                    f"{deb.name}: sha256 {digest}, pinned {package.sha256} (tools/debian_tools.py)"
                )
            subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True, timeout=120)
    for path, link_target in LINKS.get(name, {}).items():
        (target / path).symlink_to(link_target)
    stamp(name).write_text(_stamp_text(name))


def main(names: list[str]) -> int:
    for name in names or sorted(SETS):
        try:
            install(name)
        except Unavailable as reason:
            print(
                f"debian-tools: {name} not installed ({reason}); the tests that need it skip", file=sys.stderr
            )
        except ValueError as mismatch:
            print(f"debian-tools: {mismatch}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
