"""tools/debian_tools.py: a set is unpacked only as pinned; without the mirror it says so and the
run goes on (the tests that need the set skip); a .deb whose checksum differs stops it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tools import debian_tools
from tools.debian_tools import DebianPackage, Unavailable


def _deb(directory: Path, name: str, files: dict[str, bytes]) -> Path:
    """A .deb of ``files`` built by dpkg-deb itself."""
    tree = directory / name
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1\nArchitecture: amd64\nMaintainer: t <t@t>\nDescription: t\n"
    )
    for path, content in files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(content)
    deb = directory / f"{name}_1_amd64.deb"
    subprocess.run(["dpkg-deb", "--build", str(tree), str(deb)], check=True, capture_output=True, timeout=60)
    return deb


@pytest.fixture
def tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(debian_tools, "TOOLS_DIR", tmp_path / "tools")
    return tmp_path / "tools"


def _serve(monkeypatch: pytest.MonkeyPatch, source: Path) -> list[str]:
    fetched: list[str] = []

    def download(package: DebianPackage, directory: Path) -> Path:
        fetched.append(package.name)
        deb = directory / source.name
        deb.write_bytes(source.read_bytes())
        return deb

    monkeypatch.setattr(debian_tools, "_download", download)
    return fetched


@pytest.mark.process
@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_a_pinned_set_is_unpacked_once(
    tmp_path: Path, tools_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deb = _deb(tmp_path, "tool", {"usr/sbin/tool": b"#!/bin/sh\n"})
    pinned = (DebianPackage("tool", "1", hashlib.sha256(deb.read_bytes()).hexdigest()),)
    monkeypatch.setitem(debian_tools.SETS, "t", pinned)
    fetched = _serve(monkeypatch, deb)
    assert debian_tools.main(["t"]) == 0
    assert (tools_dir / "t" / "usr/sbin/tool").read_bytes() == b"#!/bin/sh\n"
    assert debian_tools.main(["t"]) == 0
    assert fetched == ["tool"]  # the second run found the stamp


def test_a_deb_with_another_checksum_stops_the_run(
    tmp_path: Path, tools_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deb = tmp_path / "tool_1_amd64.deb"
    deb.write_bytes(b"tampered")
    monkeypatch.setitem(debian_tools.SETS, "t", (DebianPackage("tool", "1", "0" * 64),))
    _serve(monkeypatch, deb)
    assert debian_tools.main(["t"]) == 1
    assert "sha256" in capsys.readouterr().err and not debian_tools.stamp("t").exists()


def test_without_the_mirror_the_run_goes_on_and_says_why(
    tools_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unavailable(package: DebianPackage, directory: Path) -> Path:
        raise Unavailable("apt-get download openssh-server=1 failed: E: Unable to locate package")

    monkeypatch.setattr(debian_tools, "_download", unavailable)
    assert debian_tools.main(["openssh"]) == 0
    assert "openssh not installed" in capsys.readouterr().err
    assert not debian_tools.stamp("openssh").exists()


@pytest.mark.process
@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_a_sets_links_are_made_and_a_changed_link_unpacks_it_again(
    tmp_path: Path, tools_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As iptables' alternatives: dpkg's postinst would make them, and unpacking runs no postinst.
    deb = _deb(tmp_path, "multi", {"usr/sbin/multi": b"#!/bin/sh\n"})
    monkeypatch.setitem(
        debian_tools.SETS, "t", (DebianPackage("multi", "1", hashlib.sha256(deb.read_bytes()).hexdigest()),)
    )
    monkeypatch.setitem(debian_tools.LINKS, "t", {"usr/sbin/tool": "multi"})
    fetched = _serve(monkeypatch, deb)
    assert debian_tools.main(["t"]) == 0
    link = tools_dir / "t" / "usr/sbin/tool"
    assert link.is_symlink() and link.resolve() == tools_dir / "t" / "usr/sbin/multi"
    monkeypatch.setitem(debian_tools.LINKS, "t", {"usr/sbin/tool": "multi", "usr/sbin/tool-save": "multi"})
    assert not debian_tools.installed("t")
    assert debian_tools.main(["t"]) == 0
    assert (tools_dir / "t" / "usr/sbin/tool-save").is_symlink() and fetched == ["multi", "multi"]


_NETFILTER = debian_tools.root("netfilter")


@pytest.mark.process
@pytest.mark.skipif(
    not debian_tools.installed("netfilter") or os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root, unshare and the netfilter set (`make debian-tools`)",
)
def test_the_netfilter_set_runs_on_its_own() -> None:
    """What the real nodes' kube-proxy and kube-router run (tests/cluster/real_nodes.py): Debian's
    iptables and nft from the set, its own libraries, and a PATH with no sbin directory, so a copy
    this machine has (a fresh one has none) is never what runs."""
    env = debian_tools.environment(["netfilter"])
    assert "sbin" not in env["PATH"].replace(str(_NETFILTER / "usr" / "sbin"), "")
    for command in ("iptables", "iptables-save", "iptables-restore", "nft"):
        assert shutil.which(command, path=env["PATH"]) == str(_NETFILTER / "usr" / "sbin" / command)

    def run(*args: str) -> str:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, check=True)
        return done.stdout

    assert "iptables v1.8.9 (nf_tables)" in run("iptables", "-V")
    assert "nftables v1.0.6" in run("nft", "--version")
    for binary in ("xtables-nft-multi", "nft"):
        linked = run("ldd", str(_NETFILTER / "usr" / "sbin" / binary))
        for library in ("libnftnl.so.11", "libmnl.so.0", "libxtables.so.12"):
            (line,) = [line for line in linked.splitlines() if library in line]
            assert str(_NETFILTER) in line, line
    # In a network namespace of its own: a rule with an extension (-m comment, from XTABLES_LIBDIR:
    # the machine's extension directory, if it has one, is hidden under an empty tmpfs in a mount
    # namespace of the script's own), a restore, and nft reading the table iptables wrote.
    script = (
        "if [ -d /usr/lib/x86_64-linux-gnu/xtables ]; then"
        " mount -t tmpfs machines-extensions /usr/lib/x86_64-linux-gnu/xtables; fi"
        " && iptables -A INPUT -m comment --comment set -j ACCEPT"
        " && printf '*filter\\n:KUBE-TEST - [0:0]\\n-A KUBE-TEST -j RETURN\\nCOMMIT\\n'"
        " | iptables-restore --noflush && iptables-save -t filter && nft list ruleset"
    )
    out = run("unshare", "--mount", "--propagation", "private", "--net", "sh", "-c", script)
    assert "-A INPUT -m comment --comment set -j ACCEPT" in out
    assert "-A KUBE-TEST -j RETURN" in out and "table ip filter" in out
