"""The Makefile's own behaviour: `make help` lists every target, `make synth` installs only what a
synth needs and leaves no output of the other mode behind, and the cdk targets pass the
configuration the same way.

The install stamps are passed with ``-o`` (never remade): these tests run make's real recipes but
must not reinstall anything. `make synth` runs a stand-in cdk that writes a small cloud assembly
of either kind; the real CLI's output is covered by tests/test_cli.py and tests/pipeline.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")

KEEP_INSTALLS = ["-o", ".venv/.installed", "-o", "node_modules/.installed"]


def make(*arguments: str) -> subprocess.CompletedProcess[str]:
    # A `make test` above this pytest passes its own flags down; these runs take only their own.
    environment = {
        key: value for key, value in os.environ.items() if key not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    }
    return subprocess.run(
        ["make", "--no-print-directory", *arguments],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def phony_targets() -> list[str]:
    text = (REPO_ROOT / "Makefile").read_text()
    return [target for line in re.findall(r"^\.PHONY:(.*)$", text, re.MULTILINE) for target in line.split()]


def test_help_lists_every_target_on_one_line() -> None:
    result = make("help")
    assert result.returncode == 0, result.stderr
    listed = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("make ")]
    assert sorted(listed) == sorted(phony_targets())
    assert "destroy" in listed


def test_synth_installs_python_and_the_cli_but_not_checkov(tmp_path: Path) -> None:
    """With every install missing, a dry run shows what each target would install."""
    missing = [f"VENV={tmp_path}/venv", "NODE_STAMP=" + str(tmp_path / "node.installed")]
    missing.append(f"CHECKOV_VENV={tmp_path}/checkov")
    missing.append(f"TORCHX_VENV={tmp_path}/torchx")
    synth = make("-n", "synth", *missing)
    setup = make("-n", "setup", *missing)
    assert synth.returncode == 0 and setup.returncode == 0, synth.stderr + setup.stderr
    for plan in (synth.stdout, setup.stdout):
        assert "pip install --quiet --require-hashes -r requirements-dev.lock" in plan
        assert "npm ci" in plan
    assert "--require-hashes -r requirements-checkov.lock" in setup.stdout
    assert "requirements-checkov" not in synth.stdout
    assert "--require-hashes -r requirements-torchx.lock" in setup.stdout
    assert "requirements-torchx" not in synth.stdout


@pytest.mark.parametrize("target", ["diff", "deploy", "destroy"])
def test_cdk_targets_pass_the_stack_and_the_configuration(target: str) -> None:
    result = make("-n", *KEEP_INSTALLS, target, "CONFIG=config/my-account.yaml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"node_modules/.bin/cdk {target} TrainiumStack -c config=config/my-account.yaml"
    ]


# Writes what the real CLI writes in each mode, as far as make synth and its report look.
FAKE_CDK = r"""#!/usr/bin/env bash
set -eu
out= pipeline=
while [ $# -gt 0 ]; do
  case "$1" in
    --output) out=$2; shift ;;
    -c) case "$2" in pipeline=?*) pipeline=${2#pipeline=} ;; esac; shift ;;
  esac
  shift
done
mkdir -p "$out/summary" "$out/asset.0123"
if [ -n "$pipeline" ]; then
  mkdir -p "$out/assembly-Dev"
  echo '{}' > "$out/TrainiumPipeline.template.json"
  echo '# Dev' > "$out/summary/Dev-TrainiumStack.md"
  cat > "$out/manifest.json" <<'EOF'
{"artifacts": {
  "assembly-Dev": {"type": "cdk:cloud-assembly", "properties": {"directoryName": "assembly-Dev"}},
  "TrainiumPipeline": {"type": "aws:cloudformation:stack", "properties": {"templateFile": "TrainiumPipeline.template.json"}}
}}
EOF
else
  mkdir -p "$out/k8s"
  echo '{}' > "$out/TrainiumStack.template.json"
  echo 'kind: Queue' > "$out/k8s/volcano-queue.yaml"
  echo '# TrainiumStack' > "$out/summary/TrainiumStack.md"
  cat > "$out/manifest.json" <<'EOF'
{"artifacts": {
  "TrainiumStack": {"type": "aws:cloudformation:stack", "properties": {"templateFile": "TrainiumStack.template.json"}}
}}
EOF
fi
"""


def entries(directory: Path) -> set[str]:
    return {str(path.relative_to(directory)) for path in directory.rglob("*")}


def test_synth_leaves_no_output_of_the_other_mode_and_says_what_it_wrote(tmp_path: Path) -> None:
    cdk = tmp_path / "cdk"
    cdk.write_text(FAKE_CDK)
    cdk.chmod(0o755)
    out = tmp_path / "out"
    synth = ["synth", *KEEP_INSTALLS, f"CDK={cdk}", f"OUT={out}"]

    plain = make(*synth)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines()[-1] == (
        f"wrote {out}/: TrainiumStack.template.json, 1 chart in {out}/k8s/, "
        f"summary in {out}/summary/TrainiumStack.md"
    )
    (out / "asset.4567").mkdir()  # staged by an earlier synth: kept, a later synth reuses it

    pipeline = make(*synth, "PIPELINE=config/pipeline.example.yaml")
    assert pipeline.returncode == 0, pipeline.stderr
    assert entries(out) == {
        "manifest.json",
        "TrainiumPipeline.template.json",
        "assembly-Dev",
        "summary",
        "summary/Dev-TrainiumStack.md",
        "asset.0123",
        "asset.4567",
    }
    assert pipeline.stdout.splitlines()[-1] == (
        f"wrote {out}/: TrainiumPipeline.template.json, 1 stage in assembly-Dev/, "
        f"summary in {out}/summary/Dev-TrainiumStack.md"
    )

    again = make(*synth)
    assert again.returncode == 0, again.stderr
    assert entries(out) == {
        "manifest.json",
        "TrainiumStack.template.json",
        "k8s",
        "k8s/volcano-queue.yaml",
        "summary",
        "summary/TrainiumStack.md",
        "asset.0123",
        "asset.4567",
    }


def test_preflight_synthesizes_then_checks_with_the_template() -> None:
    """The Lambda concurrency check reads what a deploy runs at once from the template of the same
    configuration: make preflight synthesizes it first and passes it."""
    result = make("-n", *KEEP_INSTALLS, "preflight", "CONFIG=config/my-account.yaml")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    synth = next(i for i, line in enumerate(lines) if "cdk synth" in line)
    assert "-c config=config/my-account.yaml" in lines[synth]
    assert (
        lines[-1]
        .rstrip()
        .endswith(
            "/python -m preflight --config config/my-account.yaml --template cdk.out/TrainiumStack.template.json"
        )
    )
    assert synth < len(lines) - 1


def test_runs_names_the_manifests_where_synth_wrote_them() -> None:
    """make runs OUT=... lists the manifests under OUT, as make synth OUT=... wrote them (issue 33)."""
    result = make("-n", *KEEP_INSTALLS, "runs", "OUT=build/review")
    assert "operator_tools.run_listing --config config/default.yaml --out build/review" in result.stdout
