"""The pod script of `make put` (torchx_trn/scripts/put_file.sh), run for real: with the environment
its Job gives it (torchx_trn/put_file.py ``put_job``), on a temporary directory standing in for the
team's directory, under dash with coreutils (the training image is Ubuntu: /bin/sh is dash) and
under busybox's sh and applets (the platform's Alpine image), as the pod runs ``/bin/sh -c``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tools import debian_tools
from torchx_trn.put_file import PUT_SCRIPT, encode, put_job
from torchx_trn.team_settings import ResolvedTeam

pytestmark = pytest.mark.process

TEAM = ResolvedTeam(
    claim="fsx-0a1b2c", node_group="trn1-32xl", uid=485811, instance_type="trn1.32xlarge", queue="q"
)
_APPLETS = (
    "sh",
    "base64",
    "gzip",
    "sha256sum",
    "cut",
    "mktemp",
    "readlink",
    "mkdir",
    "mv",
    "rm",
    "chmod",
    "wc",
    "tr",
    "cat",
)


@pytest.fixture(params=["dash", "busybox"])
def shell(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The command and PATH of one shell: dash with the system's coreutils, or busybox alone."""
    if request.param == "dash":
        dash = shutil.which("dash")
        assert dash, "dash is not installed (Debian's /bin/sh)"
        return {"command": [dash, "-c"], "path": os.environ["PATH"]}
    busybox = debian_tools.busybox()
    if busybox is None:
        pytest.skip("busybox: `make debian-tools` could not unpack busybox-static, and the machine has none")
    bin_dir = tmp_path_factory.mktemp("busybox-bin")
    for applet in _APPLETS:
        (bin_dir / applet).symlink_to(busybox)
    return {"command": [str(bin_dir / "sh"), "-c"], "path": str(bin_dir)}


def _environment(to: str, content: bytes, *, sha256: str | None = None) -> dict[str, str]:
    """The container's environment as the Job renders it (its PUT_ROOT replaced by the test's)."""
    job = put_job(
        name="put-x",
        namespace="research",
        team=TEAM,
        to=to,
        sha256=sha256 or hashlib.sha256(content).hexdigest(),
        data=encode(content),
        image="i:1",
    )
    [container] = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    assert container["command"][:2] == ["/bin/sh", "-c"] and container["command"][2] == PUT_SCRIPT
    return {e["name"]: e["value"] for e in container["env"]}


def _run(shell: dict[str, Any], root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    termination = root.parent / "termination-log"
    termination.unlink(missing_ok=True)
    return subprocess.run(
        [*shell["command"], PUT_SCRIPT, "put-file"],
        env={**env, "PUT_ROOT": str(root), "TERMINATION_LOG": str(termination), "PATH": shell["path"]},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _team_dir(tmp_path: Path) -> Path:
    root = tmp_path / "teams" / "research"
    root.mkdir(parents=True)
    return root


def _leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".put.*"))


def test_the_file_is_written_whole_with_the_teams_modes_and_the_line_says_so(
    shell: dict[str, Any], tmp_path: Path
) -> None:
    root = _team_dir(tmp_path)
    content = b"print('hello')\n" * 100
    result = _run(shell, root, _environment("code/train.py", content))
    assert result.returncode == 0, result.stderr
    target = root / "code" / "train.py"
    assert target.read_bytes() == content
    digest = hashlib.sha256(content).hexdigest()
    line = f"written: code/train.py ({len(content)} bytes, sha256 {digest})"
    assert result.stdout.strip() == line
    assert (tmp_path / "teams" / "termination-log").read_text().strip() == line
    assert (
        oct(target.stat().st_mode & 0o777) == "0o640"
        and oct((root / "code").stat().st_mode & 0o777) == "0o750"
    )
    assert _leftovers(root) == []


def test_a_second_put_of_the_same_file_changes_nothing_and_a_new_version_replaces_it(
    shell: dict[str, Any], tmp_path: Path
) -> None:
    root = _team_dir(tmp_path)
    assert _run(shell, root, _environment("code/train.py", b"v1\n")).returncode == 0
    target = root / "code" / "train.py"
    inode = target.stat().st_ino
    again = _run(shell, root, _environment("code/train.py", b"v1\n"))
    assert again.returncode == 0 and again.stdout.startswith(
        "unchanged: code/train.py already holds these bytes"
    )
    assert target.stat().st_ino == inode
    newer = _run(shell, root, _environment("code/train.py", b"v2\n"))
    assert newer.returncode == 0 and newer.stdout.startswith("written: ")
    # Renamed into place: a new file (a reader that opened v1 keeps reading v1), never v1 rewritten.
    assert target.read_bytes() == b"v2\n" and target.stat().st_ino != inode
    assert _leftovers(root) == []


def test_bytes_of_another_checksum_are_refused_and_the_old_file_stays(
    shell: dict[str, Any], tmp_path: Path
) -> None:
    root = _team_dir(tmp_path)
    assert _run(shell, root, _environment("code/train.py", b"good\n")).returncode == 0
    result = _run(shell, root, _environment("code/train.py", b"tampered\n", sha256="0" * 64))
    assert result.returncode == 1
    assert result.stdout.startswith(
        "put refused: checksum mismatch for 'code/train.py': the bytes have sha256 "
    )
    assert result.stdout.strip().endswith(f"expected {'0' * 64}; nothing written")
    assert (root / "code" / "train.py").read_bytes() == b"good\n"
    assert _leftovers(root) == []


def test_bytes_that_do_not_decode_are_refused(shell: dict[str, Any], tmp_path: Path) -> None:
    root = _team_dir(tmp_path)
    env = {**_environment("x.py", b"x"), "PUT_DATA": "bm90IGd6aXA="}  # base64 of "not gzip"
    result = _run(shell, root, env)
    assert result.returncode == 1 and "the file's bytes do not decode" in result.stdout
    assert not (root / "x.py").exists() and _leftovers(root) == []


@pytest.mark.parametrize(
    ("to", "said"),
    [
        ("/etc/passwd", "'/etc/passwd' is absolute"),
        ("../training/code/train.py", "'../training/code/train.py' has a '..' component"),
        ("code/../../training/x", "has a '..' component"),
        ("./x", "has a '.' component"),
        ("code//x", "has a '' component"),
        ("code/", "ends with '/'"),
        ("", "no target path"),
    ],
)
def test_a_path_out_of_the_team_directory_is_refused(
    shell: dict[str, Any], tmp_path: Path, to: str, said: str
) -> None:
    root = _team_dir(tmp_path)
    neighbour = tmp_path / "teams" / "training"
    neighbour.mkdir()
    result = _run(shell, root, _environment(to, b"x"))
    assert (
        result.returncode == 1 and said in result.stdout and result.stdout.strip().endswith("nothing written")
    )
    assert list(neighbour.iterdir()) == [] and list(root.iterdir()) == []


def test_a_symbolic_link_out_of_the_team_directory_is_refused(shell: dict[str, Any], tmp_path: Path) -> None:
    root = _team_dir(tmp_path)
    neighbour = tmp_path / "teams" / "training"
    neighbour.mkdir()
    (root / "theirs").symlink_to(neighbour)
    for to in ("theirs/train.py", "theirs/new/dir/train.py"):
        result = _run(shell, root, _environment(to, b"x"))
        assert result.returncode == 1 and "leads outside the team directory" in result.stdout, result.stdout
    assert list(neighbour.iterdir()) == []
    # A link that stays inside is a path like any other.
    (root / "code").mkdir()
    (root / "latest").symlink_to(root / "code")
    assert _run(shell, root, _environment("latest/train.py", b"y")).returncode == 0
    assert (root / "code" / "train.py").read_bytes() == b"y"


def test_a_directory_is_not_replaced_by_a_file(shell: dict[str, Any], tmp_path: Path) -> None:
    root = _team_dir(tmp_path)
    (root / "code" / "train.py").mkdir(parents=True)
    result = _run(shell, root, _environment("code/train.py", b"x"))
    assert result.returncode == 1 and "'code/train.py' is a directory" in result.stdout
    assert (root / "code" / "train.py").is_dir()
