"""End to end through the pinned CDK CLI, as `make synth` runs it: offline, deterministic, and
refusing a bad configuration with one line per problem and nothing synthesized."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, Synthesized
from tests.guardrails.reports import plugin_report
from tools.synth_report import describe

CDK = REPO_ROOT / "node_modules" / ".bin" / "cdk"


def offline_environment() -> dict[str, str]:
    """No credentials and no instance metadata: any AWS call at synth would fail."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    environment.update(
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
        CDK_DISABLE_VERSION_CHECK="1",
        CDK_DISABLE_CLI_TELEMETRY="1",
    )
    return environment


def cdk_synth(
    config: Path | str, output: Path, *, pipeline: Path | str | None = None
) -> subprocess.CompletedProcess[str]:
    """`cdk synth` as `make synth [PIPELINE=...]` runs it, offline, into ``output``."""
    assert CDK.exists(), "the pinned CDK CLI is missing: run the tests through `make test`"
    context = ["-c", f"config={config}"] + (["-c", f"pipeline={pipeline}"] if pipeline else [])
    return subprocess.run(
        [str(CDK), "synth", "--quiet", *context, "--output", str(output)],
        cwd=REPO_ROOT,
        env=offline_environment(),
        capture_output=True,
        text=True,
        # A pipeline synthesizes four TrainiumStacks.
        timeout=600 if pipeline else 300,
        check=False,
    )


def without_metadata(template: dict[str, Any]) -> dict[str, Any]:
    # The CLI asks for path and asset metadata; an in-process synth does not.
    resources = {
        logical_id: {key: value for key, value in resource.items() if key != "Metadata"}
        for logical_id, resource in template["Resources"].items()
    }
    return {**template, "Resources": resources}


@pytest.fixture(scope="module")
def cli_synth(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    output = tmp_path_factory.mktemp("cdk.out")
    return cdk_synth("config/default.yaml", output), output


def test_default_synth_works_offline_without_lookups(
    cli_synth: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, output = cli_synth
    assert result.returncode == 0, result.stderr
    manifest = json.loads((output / "manifest.json").read_text())
    assert "missing" not in manifest, f"context lookups were requested: {manifest.get('missing')}"
    assert not (REPO_ROOT / "cdk.context.json").exists()
    assert "Node 20 is end-of-life" not in result.stderr


def test_the_app_runs_cdk_nag_and_passes(cli_synth: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """app.py registers AwsSolutions itself: the CLI's synth of the whole app is checked and clean."""
    _, output = cli_synth
    report = plugin_report(output)
    assert report["conclusion"] == "success"
    assert report["violations"] == []
    assert report["suppressedViolations"], "acknowledged findings are expected in the report"


def test_synth_writes_each_chart_as_yaml(
    cli_synth: tuple[subprocess.CompletedProcess[str], Path], default_stack: Synthesized
) -> None:
    _, output = cli_synth
    written = sorted(path.name for path in (output / "k8s").glob("*.yaml"))
    manifest_sets = default_stack.stack.kubernetes_plan.manifest_sets()
    assert written == sorted(f"{step.name}.yaml" for step in manifest_sets)


def test_synth_writes_a_summary_and_reports_what_it_wrote(
    cli_synth: tuple[subprocess.CompletedProcess[str], Path], default_stack: Synthesized
) -> None:
    """The line `make synth` ends with (tools/synth_report.py), on the real CLI's output."""
    _, output = cli_synth
    assert sorted(path.name for path in (output / "summary").iterdir()) == ["TrainiumStack.md"]
    charts = len(default_stack.stack.kubernetes_plan.manifest_sets())
    assert describe(output) == (
        f"wrote {output}/: TrainiumStack.template.json, {charts} charts in {output}/k8s/, "
        f"summary in {output}/summary/TrainiumStack.md"
    )


def test_cli_template_equals_the_in_process_template(
    cli_synth: tuple[subprocess.CompletedProcess[str], Path], default_stack: Synthesized
) -> None:
    _, output = cli_synth
    from_cli = json.loads((output / "TrainiumStack.template.json").read_text())
    assert without_metadata(from_cli) == without_metadata(default_stack.json)


def test_bad_configuration_fails_the_synth_with_one_line_per_problem(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    text = (REPO_ROOT / "config" / "default.yaml").read_text()
    config.write_text(
        text.replace("instance_type: trn1.32xlarge", "instance_type: trn1.64xlarge").replace(
            '"111122223333"', '"1111"'
        )
    )
    output = tmp_path / "cdk.out"
    result = cdk_synth(config, output)
    assert result.returncode != 0
    assert f"{config}: account: '1111' is not a 12-digit AWS account id" in result.stderr
    assert (
        f"{config}: trainium.node_groups[0].instance_type: 'trn1.64xlarge' is not in the Trainium instance catalog"
        in result.stderr
    )
    assert "Traceback" not in result.stderr
    assert not list(output.glob("*.template.json"))
    assert not (output / "k8s").exists()


def test_missing_configuration_file_fails_the_synth(tmp_path: Path) -> None:
    output = tmp_path / "cdk.out"
    result = cdk_synth(tmp_path / "absent.yaml", output)
    assert result.returncode != 0
    assert f"{tmp_path / 'absent.yaml'}: configuration file not found" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(output.glob("*.template.json"))
    assert not (output / "k8s").exists()
