"""The team's settings ConfigMap (k8s_charts/teams/team_settings.py) and TorchX's ``--team`` (issue 33):
the stack writes what a run of the team needs into its namespace, the team's members may read that
one ConfigMap, and the component takes the claim, node group, uid and instance type from it,
refusing an instance type that is not its node group's. The real torchx CLI reading it from a
stand-in API server is the last test (tests/torchx_dryrun.py runs the CLI)."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cluster_facts.kubernetes_names import TEAM_SETTINGS_CONFIGMAP
from cluster_plan.kubernetes_values import review_plan
from config import load_config
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
from tests.torchx_dryrun import (
    CASES,
    dryrun_job,
    run_torchx,
    submission_environment,
    team_claim,
    torchx_available,
)
from torchx_trn.team_settings import ResolvedTeam, resolve_team


def settings_of(config: Path) -> dict[str, dict[str, str]]:
    """Each team's ConfigMap data, by namespace, as the plan renders it."""
    step = review_plan(load_config(config)).step("training-namespace")
    return {
        manifest["metadata"]["namespace"]: dict(manifest["data"])
        for manifest in step.manifests  # type: ignore[union-attr]
        if manifest["kind"] == "ConfigMap" and manifest["metadata"]["name"] == TEAM_SETTINGS_CONFIGMAP
    }


def test_every_team_namespace_holds_its_settings() -> None:
    config = load_config(EXAMPLE_CONFIG)
    settings = settings_of(EXAMPLE_CONFIG)
    assert set(settings) == {team.name for team in config.teams}
    research = settings["research"]
    assert research["claim"] == team_claim(EXAMPLE_CONFIG, "research")
    assert (research["queue"], research["uid"]) == ("research", str(config.team("research").owner_id))
    assert json.loads(research["node_groups"]) == [
        {"name": "trn1-32xl-block", "instance_type": "trn1.32xlarge", "devices": "device-plugin"}
    ]


def test_members_may_read_the_settings_and_no_other_configmap() -> None:
    step = review_plan(load_config(DEFAULT_CONFIG)).step("training-namespace")
    (role,) = [m for m in step.manifests if m["kind"] == "Role"]  # type: ignore[union-attr]
    rules = [rule for rule in role["rules"] if "configmaps" in rule["resources"]]
    assert rules == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [TEAM_SETTINGS_CONFIGMAP],
            "verbs": ["get"],
        }
    ]


def test_the_settings_fill_what_the_command_leaves_out() -> None:
    data = settings_of(EXAMPLE_CONFIG)["training"]
    assert resolve_team("training", data) == ResolvedTeam(
        claim=data["claim"],
        node_group="trn1n-32xl",
        uid=int(data["uid"]),
        instance_type="trn1n.32xlarge",
        queue="test",
    )


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        (
            {"instance_type": "trn1.32xlarge"},
            (
                "node group 'trn1n-32xl' is trn1n.32xlarge, not trn1.32xlarge: a Job of that shape could never be "
                "placed there; leave --instance_type out (it follows the node group) or pick a group of trn1.32xlarge"
            ),
        ),
        (
            {"node_group": "trn1-32xl-block"},
            "team training may not use node group 'trn1-32xl-block'; its groups: trn1n-32xl",
        ),
        ({"uid": 12345}, "team training's uid is 248061, not 12345; leave --uid out"),
    ],
)
def test_a_command_that_disagrees_with_the_settings_is_refused(given: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError) as raised:
        resolve_team("training", settings_of(EXAMPLE_CONFIG)["training"], **given)
    assert str(raised.value) == problem


class _SettingsApi(http.server.BaseHTTPRequestHandler):
    """GET of each team's settings ConfigMap, as the API server answers it; 404 for anything else."""

    settings: ClassVar[dict[str, dict[str, str]]] = {}

    def do_GET(self) -> None:
        for namespace, data in self.settings.items():
            if self.path == f"/api/v1/namespaces/{namespace}/configmaps/{TEAM_SETTINGS_CONFIGMAP}":
                body = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": TEAM_SETTINGS_CONFIGMAP, "namespace": namespace},
                    "data": data,
                }
                code = 200
                break
        else:
            body, code = {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"}, 404
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        pass


TEAM_COMMAND = (
    'torchx run --dryrun --workspace "" -s kubernetes -cfg queue=test,namespace=training '
    "torchx_trn/components.py:trainium_ddp --team training --script my_train.py --nnodes 2"
)
"""The README's command (as a dry run): the default team's two nodes, everything else from --team."""


def _named(job: dict[str, Any]) -> str:
    return json.dumps(job, sort_keys=True).replace(job["metadata"]["name"], "<job>")


def _dry_job(result: Any, namespace: str) -> str:
    assert result.returncode == 0, result.stderr[-3000:]
    import yaml  # noqa: PLC0415

    job = yaml.safe_load(result.stdout.split("=== SCHEDULER REQUEST ===", 1)[1])
    job["metadata"]["namespace"] = namespace
    return _named(job)


def _kubeconfig(path: Path, port: int) -> dict[str, str]:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "test"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return {"KUBECONFIG": str(path)}


@pytest.mark.process
def test_torchx_with_team_submits_what_the_four_flags_did(tmp_path: Path) -> None:
    """``--team`` against a stand-in API server holding the rendered settings: the dry runs' Jobs are
    the ones the four flags gave (the README's command and the example's trn1n team); a wrong
    --instance_type and an unknown team are refused before anything is submitted."""
    problem = torchx_available()
    assert problem is None, problem
    default_case = next(case for case in CASES if case.name == "default-team")
    case = next(case for case in CASES if case.name == "example-trn1n")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SettingsApi)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    env = _kubeconfig(tmp_path / "kubeconfig", server.server_port)
    base = TEAM_COMMAND.replace("--nnodes 2", "--nnodes 4")
    try:
        _SettingsApi.settings = settings_of(default_case.config)
        readme = run_torchx(TEAM_COMMAND, env=env)
        _SettingsApi.settings = settings_of(case.config)
        with_team = run_torchx(base, env=env)
        wrong = run_torchx(f"{base} --instance_type trn1.32xlarge", env=env)
        no_team = run_torchx(base.replace("--team training", "--team nobody"), env=env)
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert _dry_job(readme, default_case.namespace) == _named(dryrun_job(default_case))
    assert _dry_job(with_team, case.namespace) == _named(dryrun_job(case))
    assert submission_environment(case)["NODE_GROUP"] == "trn1n-32xl"
    assert wrong.returncode != 0
    assert "node group 'trn1n-32xl' is trn1n.32xlarge, not trn1.32xlarge" in wrong.stderr
    assert no_team.returncode != 0
    assert "cannot read team nobody's settings (ConfigMap nobody/trainium-team): Not Found" in no_team.stderr
