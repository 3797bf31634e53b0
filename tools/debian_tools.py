"""Debian packages a test needs and a machine may lack, unpacked into ``.tools/<set>/`` (never
installed on the system): the OpenSSH server that tests/k8s/test_fabric_ssh.py runs the fabric
check's worker command with.

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
import shutil
import subprocess
import sys
import tempfile
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
}


def stamp(name: str) -> Path:
    """Written last: its presence means the set is complete and as pinned."""
    return TOOLS_DIR / name / ".installed"


def _stamp_text(packages: tuple[DebianPackage, ...]) -> str:
    return "".join(f"{p.name} {p.version} {p.sha256}\n" for p in packages)


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
    if stamp(name).is_file() and stamp(name).read_text() == _stamp_text(packages):
        return
    root = TOOLS_DIR / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)  # dpkg-deb -x creates only the last directory of its target
    with tempfile.TemporaryDirectory() as scratch:
        for package in packages:
            deb = _download(package, Path(scratch))
            digest = hashlib.sha256(deb.read_bytes()).hexdigest()
            if digest != package.sha256:
                raise ValueError(
                    f"{deb.name}: sha256 {digest}, pinned {package.sha256} (tools/debian_tools.py)"
                )
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=120)
    stamp(name).write_text(_stamp_text(packages))


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
