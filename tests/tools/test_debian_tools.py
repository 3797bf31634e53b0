"""tools/debian_tools.py: a set is unpacked only as pinned; without the mirror it says so and the
run goes on (the tests that need the set skip); a .deb whose checksum differs stops it."""

from __future__ import annotations

import hashlib
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
