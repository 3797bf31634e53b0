"""`make put` as a user types it: make's recipe, the module's command line, kubectl found on PATH.

kubectl is a stand-in here (a script on PATH that answers from a table and records each call): a model
of the API server's answers. The same calls against the real API server and Volcano, as a team
member: tests/cluster/test_put_file.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from k8s_charts.teams.team_settings import team_settings_data
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.process

SETTINGS = team_settings_data(
    team="research",
    queue="research",
    claim="fsx-0a1b2c",
    datasets_claim="fsx-0a1b2c-datasets",
    uid=485811,
    node_groups={"trn1-32xl-block": "trn1.32xlarge"},
    device_claims={},
)
# Answers by the first two arguments; the calls are appended to $FAKE_KUBECTL_LOG as JSON lines.
FAKE_KUBECTL = """#!{python}
import json, os, sys
args = sys.argv[1:]
stdin = sys.stdin.read() if args[:1] == ["create"] else None
with open(os.environ["FAKE_KUBECTL_LOG"], "a") as log:
    log.write(json.dumps({{"args": args, "stdin": stdin}}) + "\\n")
answers = json.loads(os.environ["FAKE_KUBECTL_ANSWERS"])
code, out, err = answers.get(" ".join(args[:2]), [0, "", ""])
sys.stdout.write(out if isinstance(out, str) else json.dumps(out))
sys.stderr.write(err)
sys.exit(code)
"""


def _kubectl_on_path(tmp_path: Path, answers: dict[str, Any]) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(FAKE_KUBECTL.format(python=sys.executable))
    kubectl.chmod(0o755)
    environment = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    return {
        **environment,
        "PATH": f"{bin_dir}{os.pathsep}{environment['PATH']}",
        "FAKE_KUBECTL_LOG": str(tmp_path / "calls.jsonl"),
        "FAKE_KUBECTL_ANSWERS": json.dumps(answers),
    }


def _calls(tmp_path: Path) -> list[dict[str, Any]]:
    log = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _make(environment: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "put", *arguments],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_make_put_runs_the_command_with_kubectl_from_path(tmp_path: Path) -> None:
    source = tmp_path / "train.py"
    source.write_text("print('hi')\n")
    pod = {
        "status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 0, "message": "written: x"}}}]}
    }
    environment = _kubectl_on_path(
        tmp_path,
        {
            "get configmap": [0, {"data": SETTINGS}, ""],
            "create -f": [0, "job.batch.volcano.sh/put-x\n", ""],
            "get jobs.batch.volcano.sh": [0, {"status": {"state": {"phase": "Completed"}}}, ""],
            "get pods": [0, {"items": [pod]}, ""],
        },
    )
    result = _make(environment, "TEAM=research", f"FILE={source}", "TO=code/train.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"put {source} -> team research (/data/code/train.py in its pods): written: x\n"
    calls = _calls(tmp_path)
    assert [" ".join(c["args"][:2]) for c in calls] == [
        "get configmap",
        "create -f",
        "get jobs.batch.volcano.sh",
        "get pods",
        "delete jobs.batch.volcano.sh",
    ]
    job = json.loads(calls[1]["stdin"])
    assert job["kind"] == "Job" and job["metadata"]["namespace"] == "research"


def test_make_put_without_team_or_file_says_what_to_set(tmp_path: Path) -> None:
    environment = _kubectl_on_path(tmp_path, {})
    result = _make(environment, "FILE=x")
    assert result.returncode == 2
    assert result.stderr.splitlines()[0].startswith("make put: set TEAM=<team> FILE=<local file>")
    assert _calls(tmp_path) == []


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        (
            ["TEAM=nosuch", "FILE={tmp}/train.py"],
            "make put: team 'nosuch': no ConfigMap nosuch/trainium-team",
        ),
        (["TEAM=research", "FILE={tmp}/missing.py"], "make put: FILE={tmp}/missing.py: no such file"),
        (["TEAM=research", "FILE={tmp}/train.py", "TO=../x"], "make put: TO=../x has a '..' component"),
        (["TEAM=research", "FILE={tmp}/big.bin"], "make put: FILE={tmp}/big.bin is too big to put"),
    ],
)
def test_a_refusal_is_one_line_on_stderr_and_nothing_is_created(
    tmp_path: Path, arguments: list[str], line: str
) -> None:
    (tmp_path / "train.py").write_text("x = 1\n")
    (tmp_path / "big.bin").write_bytes(os.urandom(100_000))
    not_found = 'Error from server (NotFound): configmaps "trainium-team" not found\n'
    answer = [1, "", not_found] if "TEAM=nosuch" in arguments else [0, {"data": SETTINGS}, ""]
    environment = _kubectl_on_path(tmp_path, {"get configmap": answer})
    result = _make(environment, *(a.format(tmp=tmp_path) for a in arguments))
    assert result.returncode != 0
    [said] = [line for line in result.stderr.splitlines() if line.startswith("make put:")]
    assert said.startswith(line.format(tmp=tmp_path)), result.stderr
    assert not any(c["args"][0] == "create" for c in _calls(tmp_path))


def test_the_module_runs_on_the_standard_library_alone(tmp_path: Path) -> None:
    """A team member's python3 has none of the stack's packages: -S (no site-packages) still runs it."""
    result = subprocess.run(
        [sys.executable, "-S", "-m", "torchx_trn.put_file", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "--team" in result.stdout and "--to" in result.stdout
