"""The project's TorchX component (torchx_trn/components.py), through the real torchx CLI.

``torchx run --dryrun -s kubernetes`` prints the Volcano Job its Kubernetes scheduler would submit.
For each documented command (tests/torchx_dryrun.py), against the rendered Kubernetes layer of the
command's configuration: the Job passes strict schema validation (the Volcano 1.15.1 CRDs), uses
the team's queue and namespace, asks for every Neuron device and EFA interface of the instance type
with one worker per NeuronCore, on the team's node group, mounts the team's claims (the data sets
read-only), rendezvouses at the team's etcd (whose NetworkPolicy admits its pods) under an id of each
attempt's own, and runs as the team's uid from the start. The team admission policies' verdicts on
these Jobs are in tests/torchx_trn/test_torchx_admission.py. The id's behaviour with a real
etcd and real torchrun agents is in tests/runtime/test_torchx_rendezvous.py.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import (
    DATA_MOUNT,
    DATASETS_ROOT,
    EFA_RESOURCE,
    ETCD_CLIENT_PORT,
    ETCD_SERVICE_NAME,
    INSTANCE_TYPE_LABEL,
    NEURON_RESOURCE,
    NEURON_TAINT_KEY,
    NODE_GROUP_LABEL,
    PLATFORM_NAMESPACE,
    ROOT_SQUASH_ID,
    RUNS_ROOT,
    TORCHX_POD_LABELS,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_JOB_NAMESPACE_LABEL,
)
from config.workloads import DEFAULT_TRAINING_IMAGE
from k8s_charts.teams.etcd import ETCD_LABELS
from tests.conftest import DEFAULT_CONFIG, REPO_ROOT
from tests.k8s_validation import assert_valid, schema_problems
from tests.netpol import Cluster, Pod
from tests.torchx_dryrun import (
    CASES,
    DOC,
    NATIVE_IMAGE,
    Case,
    docs_commands,
    dryrun_job,
    plan_objects,
    run_torchx,
    submission_environment,
    team_claim,
    torchx_available,
)
from tests.volcano_retries_model import restarts_before_failure
from torchx_trn import trainium
from torchx_trn.scripts.rendezvous_attempt import attempt_id

BY_NAME = {case.name: case for case in CASES}


@pytest.fixture(scope="module", autouse=True)
def _torchx_cli() -> None:
    problem = torchx_available()
    assert problem is None, problem


@pytest.fixture(scope="module", params=[case.name for case in CASES])
def rendered(request: pytest.FixtureRequest) -> tuple[Case, dict[str, Any]]:
    case = BY_NAME[request.param]
    return case, dryrun_job(case)


def containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        container for task in job["spec"]["tasks"] for container in task["template"]["spec"]["containers"]
    ]


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_job_passes_strict_schema_validation(rendered: tuple[Case, dict[str, Any]]) -> None:
    _, job = rendered
    assert (job["apiVersion"], job["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    assert schema_problems(job) == []
    assert_valid([job])


def test_the_job_goes_to_the_teams_queue_and_namespace(rendered: tuple[Case, dict[str, Any]]) -> None:
    case, job = rendered
    objects = plan_objects(case.config)
    queues = {obj["metadata"]["name"] for obj in objects if obj["kind"] == "Queue"}
    namespaces = {obj["metadata"]["name"] for obj in objects if obj["kind"] == "Namespace"}
    assert job["spec"]["queue"] == case.queue
    assert case.queue in queues and case.namespace in namespaces
    assert job["spec"]["schedulerName"] == "volcano"


def test_every_pod_takes_a_whole_node_of_the_instance_type(rendered: tuple[Case, dict[str, Any]]) -> None:
    case, job = rendered
    instance = CATALOG[case.instance_type]
    assert len(job["spec"]["tasks"]) == case.nnodes
    for task in job["spec"]["tasks"]:
        spec = task["template"]["spec"]
        # The team's node group of that instance type (the admission policy allows only the team's).
        assert spec["nodeSelector"] == {
            INSTANCE_TYPE_LABEL: case.instance_type,
            NODE_GROUP_LABEL: submission_environment(case)["NODE_GROUP"],
        }
        [container] = spec["containers"]
        limits = container["resources"]["limits"]
        assert (limits[NEURON_RESOURCE], limits[EFA_RESOURCE]) == (
            str(instance.chips),
            str(instance.efa_interfaces),
        )
        # The taint's key is the resource's name: EKS's ExtendedResourceToleration tolerates it.
        assert NEURON_TAINT_KEY in limits
        assert option(container["command"], "--nproc_per_node") == str(instance.processes_per_node)
        assert option(container["command"], "--nnodes") == str(case.nnodes)


def test_pods_mount_the_teams_claims(rendered: tuple[Case, dict[str, Any]]) -> None:
    case, job = rendered
    claims = {
        obj["metadata"]["name"]
        for obj in plan_objects(case.config)
        if obj["kind"] == "PersistentVolumeClaim" and obj["metadata"]["namespace"] == case.namespace
    }
    for task in job["spec"]["tasks"]:
        spec = task["template"]["spec"]
        volumes = {
            volume["name"]: volume["persistentVolumeClaim"]
            for volume in spec["volumes"]
            if "persistentVolumeClaim" in volume
        }
        [container] = spec["containers"]
        # (claim, the volume read-only, the mount read-only): the kubelet mounts read-only only
        # when the volume says so (kubernetes#69843).
        mounted = {
            mount["mountPath"]: (
                volumes[mount["name"]]["claimName"],
                volumes[mount["name"]].get("readOnly", False),
                mount.get("readOnly", False),
            )
            for mount in container["volumeMounts"]
            if mount["name"] in volumes
        }
        claim = team_claim(case.config, case.namespace)
        assert mounted == {
            DATA_MOUNT: (claim, False, False),
            DATASETS_ROOT: (f"{claim}-datasets", True, True),
        }
        assert {volume["claimName"] for volume in volumes.values()} <= claims


def test_the_etcd_networkpolicy_of_the_team_admits_the_pods_and_no_other_teams(
    rendered: tuple[Case, dict[str, Any]],
) -> None:
    case, job = rendered
    objects = plan_objects(case.config)
    [service] = [
        obj
        for obj in objects
        if obj["kind"] == "Service"
        and obj["metadata"]["name"] == ETCD_SERVICE_NAME
        and obj["metadata"]["namespace"] == case.namespace
    ]
    assert [port["port"] for port in service["spec"]["ports"]] == [ETCD_CLIENT_PORT]
    etcd = Pod(case.namespace, ETCD_LABELS, "10.0.1.5", "etcd-server")
    teams = {obj["metadata"]["name"] for obj in objects if obj["kind"] == "Namespace"} - {"trainium-system"}
    cluster = Cluster(objects)
    for index, task in enumerate(job["spec"]["tasks"]):
        template_labels = task["template"]["metadata"]["labels"]
        assert TORCHX_POD_LABELS.items() <= template_labels.items()
        # The labels Volcano's controller adds to every pod it creates for the Job (and that an
        # admission policy lets no one else set, k8s_charts/teams/job_pod_admission.py): etcd admits them.
        labels = {
            **template_labels,
            VOLCANO_JOB_NAME_LABEL: job["metadata"]["name"],
            VOLCANO_JOB_NAMESPACE_LABEL: case.namespace,
        }
        assert not cluster.may_connect(
            Pod(case.namespace, template_labels, "10.0.2.99"), etcd, ETCD_CLIENT_PORT
        ), "TorchX's own labels, which anyone can set, are not enough"
        [container] = task["template"]["spec"]["containers"]
        # A short name: the Service of the pod's own namespace, the team's etcd.
        assert option(container["command"], "--rdzv_endpoint") == f"{ETCD_SERVICE_NAME}:{ETCD_CLIENT_PORT}"
        assert f"{case.namespace}/{ETCD_SERVICE_NAME}" in cluster.policies_selecting(etcd, "Ingress")
        assert cluster.may_connect(
            Pod(case.namespace, labels, f"10.0.2.{index + 10}"), etcd, ETCD_CLIENT_PORT
        )
        for other in teams - {case.namespace}:
            assert not cluster.may_connect(Pod(other, labels, "10.0.3.10"), etcd, ETCD_CLIENT_PORT)


def test_the_rendezvous_id_is_chosen_per_attempt_inside_the_pod(
    rendered: tuple[Case, dict[str, Any]],
) -> None:
    """The rendered command runs the rendezvous program first, with the job's name as the base id;
    the program (no ``$``, so neither TorchX's macros nor Kubernetes touch it) picks the attempt."""
    _, job = rendered
    name = job["metadata"]["name"]
    for container in containers(job):
        command = container["command"]
        assert command[:3] == ["python3", "-c", trainium.RENDEZVOUS_PROGRAM]
        assert "$" not in trainium.RENDEZVOUS_PROGRAM
        assert command[3:6] == ["python3", "-m", "torch.distributed.run"]
        assert option(command, "--rdzv_backend") == "etcd"
        assert option(command, "--rdzv_id") == name


def test_the_rendered_program_picks_the_first_attempt_whose_rendezvous_is_open(
    rendered: tuple[Case, dict[str, Any]],
) -> None:
    """The program as rendered (its text from the Job), fed etcd's answers for attempts 0 and 1
    closed: it execs the launcher under ``<job>-a2``. A stand-in python3 prints what it is given."""
    _, job = rendered
    program = containers(job)[0]["command"][2]
    name = job["metadata"]["name"]
    closed = {f"{name}-a0", f"{name}-a1"}
    assert attempt_id(name, lambda run: "closed" if run in closed else None) == f"{name}-a2"
    assert attempt_id(name, lambda run: "final" if run == f"{name}-a0" else None) == f"{name}-a0"
    # The program's own main() against a status function: run it with python, its HTTP call replaced.
    driver = (
        "import sys, json, os\n"
        f"namespace = {{'__name__': 'rendered'}}\nexec({program!r}, namespace)\n"
        f"closed = {sorted(closed)!r}\n"
        "namespace['rendezvous_status'] = lambda endpoint, run: 'closed' if run in closed else None\n"
        "namespace['os'].execvp = lambda file, argv: (print(json.dumps(argv)), sys.exit(0))\n"
        "namespace['main'](sys.argv[1:])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", driver, *containers(job)[0]["command"][3:]],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    launched = json.loads(result.stdout.splitlines()[-1])
    assert option(launched, "--rdzv_id") == f"{name}-a2"
    assert launched[:3] == ["python3", "-m", "torch.distributed.run"]


def test_output_directory_and_script_arguments_reach_the_pod() -> None:
    case = BY_NAME["example-research"]
    job = dryrun_job(case)
    name = job["metadata"]["name"]
    for container in containers(job):
        env = {item["name"]: item["value"] for item in container["env"]}
        assert env["OUTPUT_DIR"] == f"{RUNS_ROOT}/{name}"
        # Kubernetes expands $(OUTPUT_DIR) in the command from the env above.
        assert container["command"][-4:] == [
            "--data",
            "/datasets/wikitext",
            "--output_dir",
            "$(OUTPUT_DIR)",
        ]
    # Each replica its own compile cache; retries restart the whole job on a failed or evicted pod.
    caches = {
        next(item["value"] for item in container["env"] if item["name"] == "NEURON_CC_FLAGS")
        for container in containers(job)
    }
    assert len(caches) == case.nnodes
    for task in job["spec"]["tasks"]:
        assert {(policy["event"], policy["action"]) for policy in task["policies"]} == {
            ("PodEvicted", "RestartJob"),
            ("PodFailed", "RestartJob"),
        }
    # --max_retries 2: two whole-gang restarts, so maxRetry 3 (tests/volcano_retries_model.py).
    assert job["spec"]["maxRetry"] == 3
    assert restarts_before_failure(job) == 2


def test_no_retries_means_no_restart() -> None:
    """--max_retries 0 (the default): TorchX renders no RestartJob policy, so a failed pod ends the
    run, whatever maxRetry Volcano's webhook stores."""
    job = dryrun_job(BY_NAME["default-team"])
    assert all("policies" not in task for task in job["spec"]["tasks"])
    assert restarts_before_failure(job) == 0


def test_the_pods_environment_is_the_clusters_own_runs() -> None:
    """EFA, Neuron runtime and proxy settings equal those of the run the default plan renders."""
    [run_job] = [
        obj
        for obj in plan_objects(DEFAULT_CONFIG)
        if obj["kind"] == "Job"
        and obj["apiVersion"].startswith("batch.volcano.sh/")
        and obj["metadata"]["namespace"] != PLATFORM_NAMESPACE  # the fabric checks
    ]
    [container] = run_job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    run_env = {item["name"]: item.get("value") for item in container["env"]}
    assert {name: run_env[name] for name in trainium.FABRIC_ENVIRONMENT} == dict(trainium.FABRIC_ENVIRONMENT)
    assert trainium.DEFAULT_IMAGE == DEFAULT_TRAINING_IMAGE


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        (
            "--instance_type trn9.big",
            f"--instance_type 'trn9.big' is not a Trainium instance type of this cluster; known: {', '.join(CATALOG)}",
        ),
        ("--image public.ecr.aws/neuron/pytorch-training-neuronx:latest", "--image 'public.ecr.aws/neuron/"),
        ("--claim fsx-12c4d6-datasets", "--claim 'fsx-12c4d6-datasets' is not the file system's claim"),
        ("--nnodes 0", "--nnodes must be at least 1, got 0"),
        ("--node_group 'trn1 32xl'", "--node_group 'trn1 32xl' is not a node group's name"),
        ("--uid 0", "--uid 0 is not a team's uid"),
        (f"--uid {ROOT_SQUASH_ID}", f"--uid {ROOT_SQUASH_ID} is not a team's uid"),
        (
            "-cfg priority_class=system-node-critical",
            "-cfg priority_class=system-node-critical: a team's jobs run at priority class trainium-training",
        ),
    ],
)
def test_a_bad_argument_gives_one_line_that_names_it(arguments: str, line: str) -> None:
    cfg = "queue=test,namespace=training"
    if arguments.startswith("-cfg "):
        cfg += "," + arguments.removeprefix("-cfg ")
        arguments = ""
    command = (
        f'torchx run --dryrun --workspace "" -s kubernetes -cfg {cfg} '
        f"torchx_trn/components.py:trainium_ddp --script my_train.py {arguments}"
    )
    for option, value in (("--claim", "fsx-12c4d6"), ("--node_group", "trn1-32xl"), ("--uid", "123456")):
        if option not in arguments:
            command += f" {option} {value}"
    result = run_torchx(command, env={})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    found = [text for text in result.stderr.splitlines() if text.strip().startswith(line)]
    assert len(found) == 1, result.stderr


def test_the_docs_show_exactly_the_tested_commands() -> None:
    """docs/torchx.md's torchx lines are the tested dry runs, and each submission is its dry run
    without --dryrun: the docs cannot drift from what is tested."""
    documented = docs_commands()
    tested = [case.command for case in CASES]
    dry = [line for line in documented if "--dryrun" in line]
    submitted = [line for line in documented if "--dryrun" not in line]
    assert dry == tested
    assert submitted and all(
        line.replace("torchx run ", "torchx run --dryrun ", 1) in tested for line in submitted
    )


def test_the_team_values_the_docs_show_are_the_configurations() -> None:
    """The node groups and uids docs/torchx.md and the README show for their examples are what the
    tests pass for them: the configuration's (and the derived uid the page prints, team_uid's)."""
    page = DOC.read_text()
    for case in CASES:
        values = submission_environment(case)
        assert f"NODE_GROUP={values['NODE_GROUP']}" in page, case.name
        assert f"TEAM_UID={values['TEAM_UID']}" in page, case.name
    default = submission_environment(BY_NAME["default-team"])
    assert f'print(team_uid("training"))\'   # {default["TEAM_UID"]}' in page


def test_the_readmes_torchx_command_is_a_tested_one() -> None:
    """The README shows the --team form, which tests/config/test_team_settings.py runs against the settings."""
    from tests.config.test_team_settings import TEAM_COMMAND  # noqa: PLC0415

    [line] = docs_commands(REPO_ROOT / "README.md")
    assert line.replace("torchx run ", "torchx run --dryrun ", 1) in [
        *(case.command for case in CASES),
        TEAM_COMMAND,
    ]


def test_the_torchx_environment_holds_no_aws_cdk_cdk8s_or_pydantic() -> None:
    """Every dry run above loads the component in .venv-torchx: where only torchx is installed."""
    python = REPO_ROOT / ".venv-torchx" / "bin" / "python"
    probe = (
        "import importlib.util as u; print([m for m in ('aws_cdk', 'cdk8s', 'pydantic') if u.find_spec(m)])"
    )
    result = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


class _RecordingApiServer(http.server.BaseHTTPRequestHandler):
    """The part of the Kubernetes API that `torchx run -s kubernetes` calls: create a Volcano Job
    (recorded), then read its status (the created object, no status yet)."""

    created: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        job = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.created.append((self.path, job))
        self._answer(201, job)

    def do_GET(self) -> None:
        for path, job in self.created:
            if self.path == f"{path}/{job['metadata']['name']}/status":
                self._answer(200, job)
                return
        self._answer(404, {"kind": "Status", "code": 404})

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_the_documented_submission_creates_the_job_in_the_teams_namespace(tmp_path: Path) -> None:
    """The docs' submit line, run for real against a recording API server on loopback: the Job is
    created in the namespace of ``-cfg namespace=`` and is the one the dry run shows."""
    [submit] = [line for line in docs_commands() if "--dryrun" not in line]
    case = CASES[0]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RecordingApiServer)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}
                    ],
                    "users": [{"name": "u", "user": {"token": "test"}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            )
        )
        result = run_torchx(submit, env={**submission_environment(case), "KUBECONFIG": str(kubeconfig)})
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert result.returncode == 0, result.stderr[-3000:]
    [(path, job)] = _RecordingApiServer.created
    assert path == f"/apis/batch.volcano.sh/v1alpha1/namespaces/{case.namespace}/jobs"
    assert f"kubernetes://torchx/{case.namespace}:{job['metadata']['name']}" in result.stdout
    # The same Job as the dry run's, but for its unique name.
    assert _without_name(job) == _without_name(dryrun_job(case))


def _without_name(job: dict[str, Any]) -> dict[str, Any]:
    renamed: dict[str, Any] = json.loads(json.dumps(job).replace(job["metadata"]["name"], "<job>"))
    renamed["metadata"].pop("namespace", None)
    return renamed


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="starting as another uid needs root"
)
@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="needs a python3 any uid may run")
def test_the_rendered_program_runs_as_the_pods_uid_and_changes_no_identity() -> None:
    """The pod starts as the team's uid (runAsUser and runAsGroup, no passwd entry in the image): the
    rendered program, started so with the rendered environment, execs the launcher as that uid and
    gid, with no capability and HOME at /tmp. Here the "launcher" reports who it is."""
    case = BY_NAME["default-team"]
    job = dryrun_job(case)
    [container] = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    security = job["spec"]["tasks"][0]["template"]["spec"]["securityContext"]
    uid, gid = security["runAsUser"], security["runAsGroup"]
    assert uid == gid == int(submission_environment(case)["TEAM_UID"])
    environment = {item["name"]: item["value"] for item in container["env"]}
    report = "echo \"$(id -u) $(id -g) $(id -G) $(awk '/^CapEff/ {print $2}' /proc/self/status) $HOME\""
    # The launcher argv must hold the rendezvous options; a stand-in etcd answers "no such run".
    with etcd_without_runs() as endpoint:
        launcher = ["/bin/sh", "-c", report, "--rdzv_endpoint", endpoint, "--rdzv_id", "job"]
        result = subprocess.run(
            # The system's python3, not this venv's: the team's uid may not enter /root.
            ["/usr/bin/python3", "-c", container["command"][2], *launcher],
            env={**environment, "PATH": "/usr/bin:/bin"},
            user=uid,
            group=gid,
            extra_groups=[],
            cwd="/",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"{uid} {gid} {gid} 0000000000000000 /tmp"


@contextlib.contextmanager
def etcd_without_runs() -> Iterator[str]:
    """An etcd v2 stand-in on loopback that knows no rendezvous (every key: 404)."""

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# --- the native stack's component (trainium_native) -------------------------------------------------


def _native_job(**changes: Any) -> trainium.TrainiumJob:
    arguments: dict[str, Any] = {
        "script": "/data/code/train.py",
        "script_args": (),
        "claim": "fsx-12c4d6",
        "node_group": "trn2-native",
        "uid": 248061,
        "nnodes": 2,
        "instance_type": "trn2.48xlarge",
        "image": NATIVE_IMAGE,
        "cacheset": None,
        "max_retries": 0,
        "environment": {},
        "stack": "native",
        "logical_core_size": None,
    }
    return trainium.trainium_job(**{**arguments, **changes})


def test_the_native_job_runs_a_worker_per_logical_core_without_xla_settings() -> None:
    job = _native_job()
    assert option(job.launcher(job_id="j"), "--nproc_per_node") == "64"
    env = job.pod_environment(job_id="j", replica="0")
    assert "XLA_TRANSFER_SEED_ASYNC" not in env and "NEURON_LOGICAL_NC_CONFIG" not in env
    assert env["FI_PROVIDER"] == "efa"
    job = _native_job(logical_core_size=1)
    assert option(job.launcher(job_id="j"), "--nproc_per_node") == "128"
    assert job.pod_environment(job_id="j", replica="0")["NEURON_LOGICAL_NC_CONFIG"] == "1"


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        (
            {"instance_type": "trn1.32xlarge"},
            (
                "--instance_type 'trn1.32xlarge' does not run the native stack of trainium_native; allowed: "
                "trn2.48xlarge, trn2u.48xlarge"
            ),
        ),
        (
            {"image": DEFAULT_TRAINING_IMAGE},
            f"--image {DEFAULT_TRAINING_IMAGE!r} is of the xla stack: use trainium_ddp, or an image of SDK 2.33.0",
        ),
        (
            {"image": NATIVE_IMAGE, "stack": "xla", "instance_type": "trn2.48xlarge"},
            f"--image {NATIVE_IMAGE!r} is of the native stack: use trainium_native, or an image of SDK 2.27.1, 2.29.1",
        ),
        (
            {"logical_core_size": 4},
            "--lnc 4 is not a Logical NeuronCore size of trn2.48xlarge; allowed: 1, 2",
        ),
    ],
)
def test_a_job_of_the_wrong_stack_is_one_line(changes: dict[str, Any], line: str) -> None:
    with pytest.raises(ValueError) as raised:
        _native_job(**changes)
    assert str(raised.value) == line


def test_the_cli_refuses_the_xla_image_for_the_native_component() -> None:
    command = (
        'torchx run --dryrun --workspace "" -s kubernetes -cfg queue=test,namespace=training '
        f"torchx_trn/components.py:trainium_native --image {DEFAULT_TRAINING_IMAGE} --script train.py "
        "--claim fsx-12c4d6 --node_group trn2-native --uid 248061"
    )
    result = run_torchx(command, env={})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert any(
        text.strip().startswith("--image ") and "use trainium_ddp" in text
        for text in result.stderr.splitlines()
    )
