"""`make put` (torchx_trn/put_file.py) without a cluster: the kubectl calls it makes, in order, with
a recording stand-in for kubectl (a model: tests/cluster/test_put_file.py sends the same calls to the
real API server with Volcano); the one-line refusals of bad input before anything is created; the
bounded wait; the Job judged by the CEL model of the team policies as the real server judges it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.job_text import JOB_TEXT_LIMIT, job_text_size
from cluster_facts.kubernetes_names import team_rbac_group
from cluster_facts.kubernetes_plan import ManifestSet
from config import load_config
from k8s_charts.teams.team_settings import team_settings_data
from k8s_charts.teams.tenant_admission import JOBS_POLICY, PODS_POLICY
from k8s_charts.teams.tenant_job_rules import _text
from tests.admission import evaluate
from tests.conftest import EXAMPLE_CONFIG, REPO_ROOT
from tests.plans import shared_review_plan
from tests.tenant_cases import (
    CONTROLLER,
    MEMBER,
    AdmissionCase,
    decide,
    plan_namespace_labels,
    tenant_admission_manifests,
    volcano_pod,
)
from torchx_trn.put_file import (
    DEFAULT_TIMEOUT_SECONDS,
    POLL_SECONDS,
    PutError,
    Request,
    default_target,
    encode,
    payload_budget,
    put,
    put_job,
    target_problem,
)
from torchx_trn.team_settings import resolve_team

TEAM = "research"
SETTINGS = team_settings_data(
    team=TEAM,
    queue="research",
    claim="fsx-0a1b2c",
    datasets_claim="fsx-0a1b2c-datasets",
    uid=485811,
    node_groups={"trn1-32xl-block": "trn1.32xlarge"},
    device_claims={},
)


@dataclass
class FakeKubectl:
    """Answers each kubectl call from a table of (first arguments -> outputs), and records it."""

    phases: list[str] = field(default_factory=lambda: ["Pending", "Running", "Completed"])
    settings: dict[str, str] | None = field(default_factory=lambda: dict(SETTINGS))
    settings_error: str = ""
    create_error: str = ""
    pod: dict[str, Any] | None = None
    calls: list[tuple[tuple[str, ...], str | None]] = field(default_factory=list)

    def __call__(self, args: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        self.calls.append((tuple(args), stdin))
        verb, kind = args[0], args[1]

        def ok(body: Any = "") -> subprocess.CompletedProcess[str]:
            out = body if isinstance(body, str) else json.dumps(body)
            return subprocess.CompletedProcess(list(args), 0, out, "")

        def fail(error: str) -> subprocess.CompletedProcess[str]:
            return subprocess.CompletedProcess(list(args), 1, "", error)

        if verb == "get" and kind == "configmap":
            return fail(self.settings_error) if self.settings_error else ok({"data": self.settings})
        if verb == "create":
            return fail(self.create_error) if self.create_error else ok("job.batch.volcano.sh/x")
        if verb == "get" and kind == "jobs.batch.volcano.sh":
            phase = self.phases.pop(0) if len(self.phases) > 1 else self.phases[0]
            return ok({"status": {"state": {"phase": phase}}})
        if verb == "get" and kind == "pods":
            return ok({"items": [self.pod] if self.pod else []})
        if verb == "delete":
            return ok()
        raise AssertionError(f"unexpected kubectl {args}")

    def verbs(self) -> list[str]:
        return [" ".join(args[:2]) for args, _ in self.calls]

    def created(self) -> dict[str, Any]:
        [body] = [stdin for args, stdin in self.calls if args[0] == "create"]
        assert body is not None
        return dict(json.loads(body))


def _terminated(code: int, message: str) -> dict[str, Any]:
    return {
        "status": {"containerStatuses": [{"state": {"terminated": {"exitCode": code, "message": message}}}]}
    }


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _source(tmp_path: Path, content: bytes = b"print('hi')\n") -> Path:
    path = tmp_path / "train.py"
    path.write_bytes(content)
    return path


def _put(kubectl: FakeKubectl, request: Request, **kwargs: Any) -> str:
    clock = Clock()
    return put(request, run=kubectl, sleep=clock.sleep, clock=clock, **kwargs)


def test_a_put_creates_one_job_waits_reports_the_pods_line_and_deletes_the_job(tmp_path: Path) -> None:
    kubectl = FakeKubectl(pod=_terminated(0, "written: code/train.py (12 bytes, sha256 abc)"))
    source = _source(tmp_path)
    line = _put(kubectl, Request(team=TEAM, file=source, to="code/train.py"))
    assert (
        line
        == f"put {source} -> team {TEAM} (/data/code/train.py in its pods): written: code/train.py (12 bytes, sha256 abc)"
    )
    assert kubectl.verbs() == [
        "get configmap",
        "create -f",
        "get jobs.batch.volcano.sh",
        "get jobs.batch.volcano.sh",
        "get jobs.batch.volcano.sh",
        "get pods",
        "delete jobs.batch.volcano.sh",
    ]
    assert all(
        "-n" in args and args[args.index("-n") + 1] == TEAM
        for args, _ in kubectl.calls
        if args[0] != "create"
    )
    job = kubectl.created()
    name = job["metadata"]["name"]
    assert kubectl.calls[-1][0][2] == name and job["metadata"]["namespace"] == TEAM
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["PUT_TO"] == "code/train.py" and env["PUT_ROOT"] == "/data"
    assert env["PUT_DATA"] == encode(source.read_bytes())
    assert pod["securityContext"]["runAsUser"] == 485811
    assert pod["nodeSelector"] == {"trainium/node-group": "trn1-32xl-block"}
    assert pod["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "fsx-0a1b2c"}}]
    assert job["spec"]["queue"] == "research"


def test_two_puts_of_the_same_file_are_two_jobs_of_their_own_names(tmp_path: Path) -> None:
    """Volcano's controller loses a Job re-created under a name it still caches (docs/runs.md)."""
    source = _source(tmp_path)
    names = set()
    for _ in range(2):
        kubectl = FakeKubectl(pod=_terminated(0, "unchanged"))
        _put(kubectl, Request(team=TEAM, file=source, to="code/train.py"))
        names.add(kubectl.created()["metadata"]["name"])
    assert len(names) == 2


def test_the_pods_refusal_is_the_commands_line_and_the_job_is_deleted(tmp_path: Path) -> None:
    said = "put refused: checksum mismatch for 'code/train.py': ...; nothing written"
    kubectl = FakeKubectl(phases=["Terminated"], pod=_terminated(1, said))
    with pytest.raises(PutError, match="failed \\(Job Terminated\\): put refused: checksum mismatch"):
        _put(kubectl, Request(team=TEAM, file=_source(tmp_path), to="code/train.py"))
    assert kubectl.verbs()[-1] == "delete jobs.batch.volcano.sh"


def test_the_wait_is_bounded_then_the_job_is_deleted_with_where_the_pod_was(tmp_path: Path) -> None:
    unplaced = {
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "message": "0/3 nodes are available"}],
        }
    }
    kubectl = FakeKubectl(phases=["Pending"], pod=unplaced)
    with pytest.raises(
        PutError, match=r"not done after 60 s \(not placed: 0/3 nodes are available\); deleted"
    ):
        _put(kubectl, Request(team=TEAM, file=_source(tmp_path), to="code/train.py"), timeout=60, poll=2)
    polls = kubectl.verbs().count("get jobs.batch.volcano.sh")
    assert polls == 60 // 2 + 1
    assert kubectl.verbs()[-1] == "delete jobs.batch.volcano.sh"
    assert DEFAULT_TIMEOUT_SECONDS == 1200 and POLL_SECONDS == 2.0


def test_an_interrupted_wait_still_deletes_the_job(tmp_path: Path) -> None:
    kubectl = FakeKubectl(phases=["Pending"])

    def interrupted(_: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        put(Request(team=TEAM, file=_source(tmp_path), to="a.py"), run=kubectl, sleep=interrupted)
    assert kubectl.verbs()[-1] == "delete jobs.batch.volcano.sh"


@pytest.mark.parametrize(
    ("case", "line"),
    [
        ("unknown-team", "team 'nosuch': no ConfigMap nosuch/trainium-team: not a team of this cluster"),
        ("not-a-member", "team 'research': your kubeconfig's user is not a member of it"),
        ("bad-team-name", "TEAM='Research!' is not a team's name"),
        ("missing-file", "FILE={tmp}/missing.py: no such file"),
        ("a-directory", "FILE={tmp}: not a regular file"),
        ("too-big", "is too big to put: 70000 bytes encode (gzip, base64) to"),
        ("absolute-to", "TO=/etc/passwd is absolute"),
        ("escaping-to", "TO=code/../../x has a '..' component"),
        ("directory-to", "TO=code/ ends with '/'"),
        ("empty-component", "TO=code//x.py has a '' component"),
        ("unknown-node-group", "team research may not use node group 'trn2-48xl'"),
        ("refused-by-the-server", "refused: Error from server: admission webhook denied the request"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_created(tmp_path: Path, case: str, line: str) -> None:
    kubectl = FakeKubectl()
    request = Request(team=TEAM, file=_source(tmp_path), to="code/train.py")
    if case == "unknown-team":
        request = Request(team="nosuch", file=request.file, to=request.to)
        kubectl.settings_error = 'Error from server (NotFound): configmaps "trainium-team" not found\n'
    elif case == "not-a-member":
        kubectl.settings_error = (
            'Error from server (Forbidden): configmaps "trainium-team" is forbidden: User "alice" cannot get'
        )
    elif case == "bad-team-name":
        request = Request(team="Research!", file=request.file, to=request.to)
    elif case == "missing-file":
        request = Request(team=TEAM, file=tmp_path / "missing.py", to=request.to)
    elif case == "a-directory":
        request = Request(team=TEAM, file=tmp_path, to=request.to)
    elif case == "too-big":
        request = Request(team=TEAM, file=_source(tmp_path, os.urandom(70_000)), to=request.to)
    elif case.endswith("-to") or case == "empty-component":
        to = {"absolute-to": "/etc/passwd", "escaping-to": "code/../../x", "directory-to": "code/"}.get(
            case, "code//x.py"
        )
        request = Request(team=TEAM, file=request.file, to=to)
    elif case == "unknown-node-group":
        request = Request(team=TEAM, file=request.file, to=request.to, node_group="trn2-48xl")
    elif case == "refused-by-the-server":
        kubectl.create_error = "Error from server: admission webhook denied\nthe request"
    with pytest.raises((PutError, ValueError)) as raised:
        _put(kubectl, request)
    message = str(raised.value)
    assert line.format(tmp=tmp_path) in message and "\n" not in message
    assert "delete jobs.batch.volcano.sh" not in kubectl.verbs()
    if case != "refused-by-the-server":
        assert not any(args[0] == "create" for args, _ in kubectl.calls)


def test_the_too_big_line_points_to_s3_sources_and_names_the_bound(tmp_path: Path) -> None:
    kubectl = FakeKubectl()
    with pytest.raises(PutError) as raised:
        _put(kubectl, Request(team=TEAM, file=_source(tmp_path, os.urandom(70_000)), to="x.bin"))
    assert f"may carry {JOB_TEXT_LIMIT} characters of text" in str(raised.value)
    assert "s3:// source (docs/runs.md)" in str(raised.value)


def test_the_budget_is_the_limit_less_the_rest_of_the_job_and_source_code_compresses_into_it() -> None:
    team = resolve_team(TEAM, SETTINGS)
    job = put_job(
        name="put-0123456789-abcdef",
        namespace=TEAM,
        team=team,
        to="code/train.py",
        sha256="0" * 64,
        data="",
        image="i:1",
    )
    budget = payload_budget(job)
    assert 60_000 < budget < JOB_TEXT_LIMIT
    # About three quarters of it in incompressible bytes; Python source several times that: four of
    # this project's modules, 131,782 bytes, encode to 46,856 characters.
    assert len(encode(os.urandom(budget * 3 // 4 - 100))) <= budget
    modules = ("plan.py", "checks/fabric_check.py", "checks/deployment_check_rbac.py", "runs/training_run.py")
    source = b"".join((REPO_ROOT / "k8s_charts" / name).read_bytes() for name in modules)
    assert len(source) > 2 * budget and len(encode(source)) < budget


def test_the_python_count_of_the_job_text_is_the_policys_cel() -> None:
    """The count the command fits the file under is the rule's own expression, evaluated by cel-python
    on the same Job (the real server agrees at the bound: tests/cluster/test_put_file.py)."""
    team = resolve_team(TEAM, SETTINGS)
    job = put_job(
        name="put-1",
        namespace=TEAM,
        team=team,
        to="code/t.py",
        sha256="f" * 64,
        data="QUJD" * 100,
        image="i:1",
    )
    assert evaluate(f"size({_text()})", {"object": job}) == job_text_size(job)


@pytest.mark.parametrize(
    ("to", "ok"),
    [
        ("code/train.py", True),
        ("a", True),
        (".hidden/x", True),
        ("", False),
        ("/a", False),
        ("a/..", False),
        ("./a", False),
        ("a/", False),
    ],
)
def test_the_target_path_stays_in_the_team_directory(to: str, ok: bool) -> None:
    assert (target_problem(to) is None) == ok


def test_the_default_target_is_the_code_directory() -> None:
    assert default_target(Path("/home/me/train.py")) == "code/train.py"


def test_the_job_and_its_pod_pass_the_team_policies_of_the_model(tmp_path: Path) -> None:
    """The CEL model of the example's team policies (tests/admission.py): the member's Job and the pod
    Volcano's controller makes for it admitted. The real server decides the same in the tier."""
    plan = shared_review_plan(load_config(EXAMPLE_CONFIG))
    settings = next(
        m["data"] for step in plan.steps if isinstance(step, ManifestSet) for m in step.manifests
        if m["kind"] == "ConfigMap" and m["metadata"]["name"] == "trainium-team" and m["metadata"]["namespace"] == TEAM
    )  # fmt: skip
    kubectl = FakeKubectl(settings=dict(settings), pod=_terminated(0, "written"))
    _put(kubectl, Request(team=TEAM, file=_source(tmp_path), to="code/train.py"))
    job = kubectl.created()
    manifests = tenant_admission_manifests(plan)
    labels = plan_namespace_labels(plan)[TEAM]
    member = AdmissionCase(
        id="put", policy=JOBS_POLICY, obj=job, user=MEMBER, groups=(team_rbac_group(TEAM),), allowed=True
    )
    pod = AdmissionCase(id="put-pod", policy=PODS_POLICY, obj=volcano_pod(job), user=CONTROLLER, allowed=True)
    for case in (member, pod):
        decision = decide(manifests, case, labels)
        assert decision.allowed, (case.id, decision)
