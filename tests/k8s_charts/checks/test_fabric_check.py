"""The fabric check: its verdict on recorded nccom-test outputs, its pod scripts run under bash
with a stand-in nccom-test, and the Volcano Job and NetworkPolicy its chart renders."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import NEURON_TAINT_KEY, NODE_GROUP_LABEL, SAFE_TO_EVICT_ANNOTATION
from k8s_charts.checks.fabric_check import (
    DEFAULT_MESSAGE_BYTES,
    DEFAULT_THRESHOLD,
    SSHD_CAPABILITIES,
    VERDICT_PROGRAM,
    FabricCheckAccessChart,
    FabricCheckChart,
    fabric_check_labels,
    job_name,
)
from tests.conftest import REPO_ROOT
from tests.guardrails.test_k8s_policy import checkov, failures
from tests.k8s_charts.manifests import Manifest, only, synth
from tests.k8s_validation import assert_valid
from tests.pod_programs import program

SAMPLES = Path(__file__).parent / "fabric_samples"
VERDICT_FILE = REPO_ROOT / "cluster_programs" / "fabric_verdict.py"
IMAGE = "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.27.1-ubuntu24.04"
TRN1 = CATALOG["trn1.32xlarge"]
GIB = 1024**3


verdict = program("fabric_verdict")


def sample(name: str) -> str:
    return (SAMPLES / f"{name}.txt").read_text()


def judge_trn1(text: str, **overrides: Any) -> Any:
    arguments: dict[str, Any] = {
        "network_gbps": TRN1.network_gbps,
        "threshold": DEFAULT_THRESHOLD,
        "size_bytes": GIB,
        "nodes": 2,
    }
    return verdict.judge(text, **{**arguments, **overrides})


# --- Units -------------------------------------------------------------------------------------


def test_one_gib_per_second_is_8_59_decimal_gigabits_per_second() -> None:
    assert verdict.gib_per_s_to_gbps(1.0) == pytest.approx(8.589934592)
    # trn1.32xlarge: 800 Gbps of EFA is 93.13 GiB/s; the default quarter of it 23.28 GiB/s.
    assert verdict.gbps_to_gib_per_s(800) == pytest.approx(93.1323, abs=1e-4)
    assert DEFAULT_THRESHOLD * verdict.gbps_to_gib_per_s(800) == pytest.approx(23.2831, abs=1e-4)


def test_the_default_threshold_sits_between_tcp_and_the_published_efa_figure() -> None:
    # The nccom-test user guide's two-node trn1 all-reduce: 47.09 GiB/s at 1 GiB.
    published = verdict.gib_per_s_to_gbps(47.09) / TRN1.network_gbps
    assert published == pytest.approx(0.506, abs=1e-3)
    assert published >= 2 * DEFAULT_THRESHOLD
    # A TCP fallback has one ENA interface, on one network card of the instance's eight.
    one_card = 1 / TRN1.efa_network_cards
    assert one_card < DEFAULT_THRESHOLD


# --- Parsing the table ---------------------------------------------------------------------------


def test_the_documented_two_node_table_parses_row_by_row() -> None:
    rows = verdict.parse_table(sample("docs_two_node_example"))
    assert len(rows) == 28
    assert [row.size_bytes for row in rows] == [2**exponent for exponent in range(3, 31)]
    last = rows[-1]
    assert (last.size_bytes, last.count, last.data_type, last.time_us) == (GIB, GIB // 4, "fp32", 41806)
    assert (last.algbw_gib_per_s, last.busbw_gib_per_s) == (23.92, 47.09)
    # algbw = size / time in GiB/s; busbw = algbw x 2(r-1)/r for 64 ranks (the guide's formulas).
    assert GIB / GIB / (last.time_us / 1e6) == pytest.approx(last.algbw_gib_per_s, abs=0.01)
    assert last.algbw_gib_per_s * 2 * 63 / 64 == pytest.approx(last.busbw_gib_per_s, abs=0.05)


@pytest.mark.parametrize("name", ["healthy_efa", "tcp_fallback", "efa_degraded"])
def test_recorded_tables_are_consistent_with_the_bus_bandwidth_formula(name: str) -> None:
    rows = verdict.parse_table(sample(name))
    assert [row.size_bytes for row in rows] == [64 * 2**20 * 2**step for step in range(5)]
    for row in rows:
        algbw = row.size_bytes / GIB / (row.time_us / 1e6)
        assert algbw == pytest.approx(row.algbw_gib_per_s, abs=0.006)
        assert algbw * 2 * 63 / 64 == pytest.approx(row.busbw_gib_per_s, abs=0.006)


def test_header_variants_and_interleaved_log_lines_are_read() -> None:
    text = """\
2026-Jan-20 17:02:11.0412 1187:1241 [0] CCOM INFO NET/OFI Selected Provider is efa (found 8 nics)
size(B)    count(elems)    type    time:avg(us)    time:p50(us)    algbw(GB/s)    busbw(GB/s)    algorithm
  1024             256    fp32            10.0              10           0.10           0.09         mesh
2026-Jan-20 17:02:11.0500 1187:1241 [0] CCOM INFO some 7 tokens 1 2 3 4 5
536870912       134217728    fp32         9689.51            9688          55.41         103.89    kangaring
Avg bus bandwidth:\t16.6181GB/s
"""
    rows = verdict.parse_table(text)
    assert [(row.size_bytes, row.busbw_gib_per_s) for row in rows] == [(1024, 0.09), (536870912, 103.89)]
    assert verdict.table_lines(text)[0].startswith("size(B)")
    assert verdict.table_lines(text)[-1].startswith("Avg bus bandwidth")


def test_a_failure_row_is_no_result() -> None:
    assert verdict.parse_table(sample("missing_rank")) == []


# --- Provider -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, provider",
    [
        ("[0] CCOM INFO NET/OFI Selected Provider is efa (found 8 nics)", "efa"),
        ("[0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)", "efa"),
        ("[0] CCOM INFO NET/OFI Selected Provider is tcp (found 1 nics)", "tcp"),
        ("[0] CCOM INFO NET/OFI Selected Provider is tcp;ofi_rxm (found 1 nics)", "tcp;ofi_rxm"),
        ("[0] CCOM INFO NET/OFI Selected Provider is sockets (found 1 nics)", "sockets"),
        ("[2] net_plugin.cc:97 CCOM WARN OFI plugin initNet() failed is EFA enabled?", "socket"),
        ("[0] NCCL INFO Using network Socket", "socket"),
        ("nothing about the network", "unknown"),
    ],
)
def test_the_provider_is_read_from_the_log(line: str, provider: str) -> None:
    assert verdict.detect_provider(line).name == provider


def test_one_rank_on_tcp_makes_the_run_tcp() -> None:
    text = "Selected Provider is efa (found 8 nics)\nSelected Provider is tcp (found 1 nics)\n"
    assert verdict.detect_provider(text).name == "tcp"


# --- The verdict on each recorded output ---------------------------------------------------------


def test_healthy_efa_passes_with_both_numbers() -> None:
    result = judge_trn1(sample("healthy_efa"))
    assert result.passed and result.exit_status == 0
    assert result.line == (
        "FABRIC CHECK PASS: all-reduce bus bandwidth 50.99 GiB/s (438.0 Gbps) at 1073741824 B over EFA "
        ">= required 23.28 GiB/s (0.25 x 800 Gbps = 200.0 Gbps)"
    )


def test_tcp_fallback_fails_naming_the_provider() -> None:
    result = judge_trn1(sample("tcp_fallback"))
    assert not result.passed and result.exit_status == 1
    assert result.line.startswith("FABRIC CHECK FAIL: network provider is tcp, not EFA (")
    assert "1.00 GiB/s (8.6 Gbps) at 1073741824 B, required 23.28 GiB/s" in result.line


def test_tcp_fails_even_when_the_threshold_would_let_it_pass() -> None:
    result = judge_trn1(sample("tcp_fallback"), threshold=0.001)
    assert not result.passed and "network provider is tcp" in result.line


def test_degraded_efa_fails_on_bandwidth() -> None:
    result = judge_trn1(sample("efa_degraded"))
    assert not result.passed
    assert result.line == (
        "FABRIC CHECK FAIL: bandwidth below threshold over EFA: all-reduce bus bandwidth 10.36 GiB/s "
        "(89.0 Gbps) at 1073741824 B < required 23.28 GiB/s (0.25 x 800 Gbps = 200.0 Gbps)"
    )


def test_a_missing_rank_fails_with_the_error_line() -> None:
    result = judge_trn1(sample("missing_rank"), exit_status=1)
    assert not result.passed
    assert result.line.startswith("FABRIC CHECK FAIL: nccom-test did not complete (exit status 1): ")
    assert "mpirun noticed that process rank 1" in result.line


def test_an_error_line_fails_the_check_even_with_exit_status_0() -> None:
    result = judge_trn1(sample("healthy_efa") + "1 errors found - test failed\n")
    assert not result.passed and '"1 errors found - test failed"' in result.line


def test_a_run_without_a_provider_line_fails_and_says_how_to_get_one() -> None:
    result = judge_trn1(sample("docs_two_node_example"))
    assert not result.passed
    assert "names no network provider" in result.line and "NCCL_DEBUG=INFO" in result.line
    assert "47.09 GiB/s" in result.line


def test_the_judged_size_must_be_in_the_table() -> None:
    result = judge_trn1(sample("healthy_efa"), size_bytes=2 * GIB)
    assert not result.passed and "no result for 2147483648 B" in result.line


def test_without_a_size_the_largest_row_is_judged() -> None:
    assert "at 1073741824 B" in judge_trn1(sample("healthy_efa"), size_bytes=None).line


def test_the_threshold_is_measured_against_the_instance_types_bandwidth() -> None:
    # 50.99 GiB/s is 438 Gbps: 0.55 of trn1's 800, 0.27 of trn1n's 1600, 0.14 of trn2's 3200.
    assert judge_trn1(sample("healthy_efa"), network_gbps=1600).passed
    assert not judge_trn1(sample("healthy_efa"), network_gbps=3200).passed
    assert not judge_trn1(sample("healthy_efa"), threshold=0.6).passed


@pytest.mark.parametrize("threshold", [0.0, -0.1, 1.01, 2.0, math.nan])
def test_a_threshold_outside_zero_to_one_is_refused_with_one_line(threshold: float) -> None:
    line = judge_trn1(sample("healthy_efa"), threshold=threshold).line
    assert line.startswith("FABRIC CHECK FAIL: threshold must be a fraction in (0, 1], got ")
    assert "\n" not in line


def test_fewer_than_two_nodes_is_refused() -> None:
    line = judge_trn1(sample("healthy_efa"), nodes=1).line
    assert line == (
        "FABRIC CHECK FAIL: a fabric check needs at least 2 nodes (EFA carries traffic between nodes), got 1"
    )


# --- The verdict program as the pod runs it ----------------------------------------------------


def run_program(*arguments: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", VERDICT_PROGRAM, *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.process
def test_the_program_prints_the_table_then_the_verdict_as_its_last_line(tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    result = run_program(
        "--network-gbps", "800", "--threshold", "0.25", "--nodes", "2", "--size", str(GIB),
        "--termination-log", str(termination), stdin=sample("healthy_efa"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "nccom-test result table:"
    assert lines[1].split() == [
        "size(B)",
        "count(elems)",
        "type",
        "time:avg(us)",
        "algbw(GB/s)",
        "busbw(GB/s)",
    ]
    assert len(lines) == 1 + 1 + 5 + 1 + 1
    assert lines[-1].startswith("FABRIC CHECK PASS: ")
    assert termination.read_text() == lines[-1] + "\n"


@pytest.mark.process
def test_the_program_refuses_a_bad_threshold_with_exit_status_2() -> None:
    result = run_program("--network-gbps", "800", "--threshold", "1.5", "--validate-only")
    assert result.returncode == 2
    assert result.stdout == "FABRIC CHECK FAIL: threshold must be a fraction in (0, 1], got 1.5\n"


# --- The launcher script under bash, with a stand-in nccom-test ----------------------------------

LAUNCHER_CHART = {
    "instance": TRN1,
    "node_group": "trn1",
    "nodes": 2,
    "image": IMAGE,
    "queue": "test",
    "namespace": "training",
    "threshold": DEFAULT_THRESHOLD,
}


def chart(**overrides: Any) -> list[Manifest]:
    manifests = synth(lambda app: FabricCheckChart(app, "fabric-check", **{**LAUNCHER_CHART, **overrides}))
    assert_valid(manifests)
    return manifests


def task(manifests: list[Manifest], name: str) -> dict[str, Any]:
    [found] = [t for t in only(manifests, "Job")["spec"]["tasks"] if t["name"] == name]
    return found


def container(manifests: list[Manifest], name: str) -> dict[str, Any]:
    [found] = task(manifests, name)["template"]["spec"]["containers"]
    return found


def plain_environment(manifests: list[Manifest], name: str) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container(manifests, name)["env"] if "value" in item}


# Prints a recorded output as nccom-test would and records how it was called.
FAKE_NCCOM_TEST = """\
#!{python}
import json, os, sys, time
with open(os.environ["RECORD"], "w") as record:
    json.dump({{"argv": sys.argv[1:], "NEURON_RT_ROOT_COMM_ID": os.environ.get("NEURON_RT_ROOT_COMM_ID")}}, record)
time.sleep(float(os.environ.get("FAKE_SECONDS", "0")))
sys.stdout.write(open(os.environ["FAKE_OUTPUT"]).read())
sys.exit(int(os.environ.get("FAKE_STATUS", "0")))
"""
# Resolves the workers' names as the cluster DNS would, to loopback addresses.
FAKE_GETENT = """\
#!/bin/bash
case "$2" in
  fabric-check-trn1-worker-0.fabric-check-trn1) echo "127.0.0.1       $2" ;;
  fabric-check-trn1-worker-1.fabric-check-trn1) echo "127.0.0.2       $2" ;;
  *) exit 2 ;;
esac
"""
WORKER_HOSTS = "fabric-check-trn1-worker-0.fabric-check-trn1,fabric-check-trn1-worker-1.fabric-check-trn1"


@pytest.fixture
def workers_listening() -> Iterator[int]:
    """A TCP port open on 127.0.0.1 and 127.0.0.2: the two workers' sshd, as far as the launcher's
    wait can tell. Loopback only; closed after the test."""
    first = socket.create_server(("127.0.0.1", 0))
    port = first.getsockname()[1]
    second = socket.create_server(("127.0.0.2", port))
    stop = threading.Event()

    def accept(server: socket.socket) -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
                connection.close()
            except TimeoutError:
                continue
            except OSError:
                return

    threads = [threading.Thread(target=accept, args=(server,), daemon=True) for server in (first, second)]
    for thread in threads:
        thread.start()
    yield port
    stop.set()
    for thread in threads:
        thread.join(timeout=5)
    first.close()
    second.close()


def run_launcher(
    tmp_path: Path,
    *,
    output: str,
    ssh_port: int,
    status: int = 0,
    manifests: list[Manifest] | None = None,
    environ: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None, Path]:
    """Run the launcher container's command with its rendered environment and stand-ins for
    nccom-test and getent; return the result, how nccom-test was called and the termination log."""
    manifests = manifests if manifests is not None else chart()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (
        ("nccom-test", FAKE_NCCOM_TEST.format(python=sys.executable)),
        ("getent", FAKE_GETENT),
    ):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    # python3 is the image's interpreter; here the test's.
    (bin_dir / "python3").symlink_to(sys.executable)
    (tmp_path / "output.txt").write_text(output)
    record, termination = tmp_path / "record.json", tmp_path / "termination-log"
    env = {
        **plain_environment(manifests, "launcher"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "POD_IP": "127.0.0.9",
        "VC_WORKER_HOSTS": WORKER_HOSTS,
        "SSH_PORT": str(ssh_port),
        "WAIT_TIMEOUT_SECONDS": "3",
        "TERMINATION_LOG": str(termination),
        "TMPDIR": str(tmp_path),
        "RECORD": str(record),
        "FAKE_OUTPUT": str(tmp_path / "output.txt"),
        "FAKE_STATUS": str(status),
        **(environ or {}),
    }
    bash, flag, script, name, *programs = container(manifests, "launcher")["command"]
    result = subprocess.run(
        [shutil.which("bash") or bash, flag, script, name, *programs],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    called = json.loads(record.read_text()) if record.exists() else None
    return result, called, termination


needs_bash = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and timeout"
)


@pytest.mark.process
@needs_bash
def test_the_launcher_runs_nccom_test_across_the_workers_and_passes_on_healthy_efa(
    tmp_path: Path, workers_listening: int
) -> None:
    result, called, termination = run_launcher(
        tmp_path, output=sample("healthy_efa"), ssh_port=workers_listening
    )
    assert result.returncode == 0, result.stdout + result.stderr
    last = result.stdout.splitlines()[-1]
    assert last.startswith("FABRIC CHECK PASS: all-reduce bus bandwidth 50.99 GiB/s")
    assert termination.read_text() == last + "\n"
    assert called is not None
    # 2 nodes x 32 NeuronCores; the workers by address; the root communicator on the first worker.
    assert called["argv"] == [
        "-r", "64", "-N", "2", "-b", "67108864", "-e", "1073741824", "-f", "2", "-n", "20", "-w", "5",
        "-d", "fp32", "allr", "--hosts", "127.0.0.1", "127.0.0.2",
        "--data-collector-host", "127.0.0.9", "--data-collector-port", "60006", "--non-interactive", "--debug",
    ]  # fmt: skip
    assert called["NEURON_RT_ROOT_COMM_ID"] == "127.0.0.1:63182"
    # The raw output stays in the log above the verdict.
    assert "Selected Provider is efa (found 8 nics)" in result.stdout


@needs_bash
@pytest.mark.parametrize(
    "name, status, reason",
    [
        ("tcp_fallback", 0, "FABRIC CHECK FAIL: network provider is tcp, not EFA"),
        ("efa_degraded", 0, "FABRIC CHECK FAIL: bandwidth below threshold over EFA"),
        ("missing_rank", 1, "FABRIC CHECK FAIL: nccom-test did not complete (exit status 1)"),
    ],
)
@pytest.mark.process
def test_the_launcher_fails_on_each_broken_fabric(
    tmp_path: Path, workers_listening: int, name: str, status: int, reason: str
) -> None:
    result, called, termination = run_launcher(
        tmp_path, output=sample(name), status=status, ssh_port=workers_listening
    )
    assert result.returncode == 1
    last = result.stdout.splitlines()[-1]
    assert last.startswith(reason)
    assert termination.read_text() == last + "\n"
    assert called is not None


@pytest.mark.process
@needs_bash
def test_the_launcher_refuses_one_node_before_waiting(tmp_path: Path) -> None:
    result, called, termination = run_launcher(
        tmp_path,
        output="",
        ssh_port=1,
        environ={"NODES": "1", "VC_WORKER_HOSTS": WORKER_HOSTS.split(",", maxsplit=1)[0]},
    )
    assert result.returncode != 0 and called is None
    assert result.stdout.splitlines()[-1] == (
        "FABRIC CHECK FAIL: a fabric check needs at least 2 nodes (EFA carries traffic between nodes), got 1"
    )
    assert termination.read_text().startswith("FABRIC CHECK FAIL: a fabric check needs at least 2 nodes")


@pytest.mark.process
@needs_bash
def test_the_launcher_refuses_a_threshold_above_one(tmp_path: Path) -> None:
    result, called, _ = run_launcher(tmp_path, output="", ssh_port=1, environ={"THRESHOLD": "1.5"})
    assert result.returncode == 2 and called is None
    assert result.stdout == "FABRIC CHECK FAIL: threshold must be a fraction in (0, 1], got 1.5\n"


@pytest.mark.process
@needs_bash
def test_the_launcher_gives_up_on_a_worker_that_never_answers(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        closed_port = probe.getsockname()[1]  # free once closed: nothing listens there
    result, called, _ = run_launcher(
        tmp_path, output=sample("healthy_efa"), ssh_port=closed_port, environ={"WAIT_TIMEOUT_SECONDS": "1"}
    )
    assert result.returncode == 1 and called is None
    assert result.stdout.splitlines()[-1] == (
        "FABRIC CHECK FAIL: worker fabric-check-trn1-worker-0.fabric-check-trn1 (127.0.0.1) "
        f"did not answer on port {closed_port} within 1s"
    )


@pytest.mark.process
@needs_bash
def test_the_launcher_fails_when_volcano_lists_too_few_workers(
    tmp_path: Path, workers_listening: int
) -> None:
    result, called, _ = run_launcher(
        tmp_path,
        output=sample("healthy_efa"),
        ssh_port=workers_listening,
        environ={"VC_WORKER_HOSTS": WORKER_HOSTS.split(",", maxsplit=1)[0]},
    )
    assert result.returncode == 1 and called is None
    assert "expected 2 worker hosts" in result.stdout.splitlines()[-1]


@pytest.mark.process
@needs_bash
def test_a_hanging_nccom_test_is_stopped_and_fails_the_check(tmp_path: Path, workers_listening: int) -> None:
    result, called, _ = run_launcher(
        tmp_path,
        output=sample("healthy_efa"),
        ssh_port=workers_listening,
        environ={"RUN_TIMEOUT_SECONDS": "1", "FAKE_SECONDS": "30"},
    )
    assert result.returncode == 1 and called is not None
    assert result.stdout.splitlines()[-1] == "FABRIC CHECK FAIL: nccom-test did not finish within 1s"


# --- The worker script under bash, with stand-ins for sshd and ssh-keygen -------------------------

RECORDING_STANDIN = """\
#!{python}
import json, os, sys
with open(os.environ["RECORD_DIR"] + "/" + os.path.basename(sys.argv[0]), "w") as record:
    json.dump({{"argv0": sys.argv[0], "argv": sys.argv[1:]}}, record)
"""


@pytest.mark.process
@needs_bash
def test_the_worker_serves_ssh_and_hands_the_fabric_environment_to_sessions(tmp_path: Path) -> None:
    manifests = chart()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sshd", "ssh-keygen", "mkdir"):
        (bin_dir / name).write_text(RECORDING_STANDIN.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    environment = {item["name"]: item["value"] for item in container(manifests, "worker")["env"]}
    env = {
        **environment,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "LD_LIBRARY_PATH": "/opt/aws/neuron/lib:/opt/amazon/efa/lib",
        "NEURON_RT_LOG_LEVEL": "has a space",
        "HOME": str(tmp_path),
        "RECORD_DIR": str(tmp_path),
    }
    bash, flag, script, name = container(manifests, "worker")["command"]
    result = subprocess.run(
        [shutil.which("bash") or bash, flag, script, name],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "ssh-keygen").read_text())["argv"] == ["-A"]
    sshd = json.loads((tmp_path / "sshd").read_text())
    assert sshd["argv0"] == str(bin_dir / "sshd")  # by absolute path: sshd re-executes itself
    assert sshd["argv"][:3] == ["-D", "-e", "-o"]
    assert sshd["argv"][3].startswith("SetEnv=")
    passed = dict(item.split("=", 1) for item in sshd["argv"][3].removeprefix("SetEnv=").split())
    assert {name: passed[name] for name in environment} == environment
    assert passed["LD_LIBRARY_PATH"] == "/opt/aws/neuron/lib:/opt/amazon/efa/lib"
    assert passed["PATH"] == env["PATH"]
    assert "NEURON_RT_LOG_LEVEL" not in passed and "NEURON_RT_LOG_LEVEL" in result.stderr
    assert "HOME" not in passed


# --- The chart ---------------------------------------------------------------------------------------


def test_the_chart_renders_one_valid_volcano_job() -> None:
    # Its NetworkPolicy is applied at deploy, with FabricCheckAccessChart: the job alone is run.
    manifests = chart()
    assert sorted((m["kind"], m["metadata"]["namespace"], m["metadata"]["name"]) for m in manifests) == [
        ("Job", "training", "fabric-check-trn1"),
    ]
    assert job_name("trn1") == "fabric-check-trn1"


def test_the_job_is_gang_scheduled_on_the_queue_with_ssh_and_worker_names() -> None:
    spec = only(chart(nodes=4, queue="research"), "Job")["spec"]
    assert spec["schedulerName"] == "volcano"
    assert spec["queue"] == "research"
    assert spec["minAvailable"] == 4 + 1
    assert spec["plugins"] == {
        "ssh": [],
        "svc": ["--publish-not-ready-addresses", "--disable-network-policy"],
    }
    assert [(t["name"], t["replicas"]) for t in spec["tasks"]] == [("worker", 4), ("launcher", 1)]


def test_the_launcher_decides_the_jobs_result_and_keeps_its_log() -> None:
    launcher = task(chart(), "launcher")
    assert launcher["policies"] == [
        {"event": "TaskCompleted", "action": "CompleteJob"},
        {"event": "PodFailed", "action": "TerminateJob"},
        {"event": "PodEvicted", "action": "TerminateJob"},
    ]
    # No restart anywhere: a rerun would delete the failed launcher and its verdict.
    job = only(chart(), "Job")
    assert "RestartJob" not in json.dumps(job)
    assert container(chart(), "launcher")["terminationMessagePolicy"] == "FallbackToLogsOnError"


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_each_worker_takes_every_neuron_device_and_efa_interface_of_its_node(instance_type: str) -> None:
    entry = CATALOG[instance_type]
    manifests = chart(instance=entry)
    resources = container(manifests, "worker")["resources"]
    assert resources["limits"] == {
        "aws.amazon.com/neuron": str(entry.chips),
        "vpc.amazonaws.com/efa": str(entry.efa_interfaces),
        # Its cpu and memory limits are its requests: the platform namespace's LimitRange would give it
        # 1 CPU and 512 MiB, and the API server refuses a request over its limit.
        **resources["requests"],
    }
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert int(resources["requests"]["cpu"]) <= entry.vcpus - 8
    environment = plain_environment(manifests, "launcher")
    assert environment["CORES_PER_NODE"] == str(entry.processes_per_node)
    assert environment["NETWORK_GBPS"] == str(entry.network_gbps)


def test_the_launcher_requests_no_device_and_little_cpu() -> None:
    resources = container(chart(), "launcher")["resources"]
    assert resources["requests"] == {"cpu": "1", "memory": "2Gi"}
    assert not any(name.startswith(("aws.amazon.com", "vpc.amazonaws.com")) for name in resources["limits"])


@pytest.mark.parametrize("task_name", ["worker", "launcher"])
def test_every_pod_follows_the_project_rules_on_the_node_group(task_name: str) -> None:
    template = task(chart(node_group="trn1n-reserved"), task_name)["template"]
    spec = template["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["nodeSelector"] == {NODE_GROUP_LABEL: "trn1n-reserved"}
    assert spec["tolerations"] == [{"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["activeDeadlineSeconds"] > 0
    [only_container] = spec["containers"]
    assert only_container["image"] == IMAGE
    capabilities = SSHD_CAPABILITIES if task_name == "worker" else {"drop": ["ALL"]}
    assert only_container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": capabilities,
    }
    assert {"cpu", "memory"} <= set(only_container["resources"]["requests"])
    assert fabric_check_labels("trn1n-reserved").items() <= template["metadata"]["labels"].items()


@pytest.mark.parametrize("task_name", ["worker", "launcher"])
def test_a_scale_down_never_takes_a_node_from_under_a_running_check(task_name: str) -> None:
    # Without it the autoscaler may remove a node mid-check (the launcher's node looks
    # underused), and a healthy group's verdict becomes a failure, as for a training pod.
    annotations = task(chart(), task_name)["template"]["metadata"]["annotations"]
    assert annotations[SAFE_TO_EVICT_ANNOTATION] == "false"


def test_both_tasks_use_efa_and_log_the_selected_provider() -> None:
    manifests = chart()
    for name in ("worker", "launcher"):
        environment = plain_environment(manifests, name)
        assert environment["FI_PROVIDER"] == "efa"
        assert environment["NCCL_DEBUG"] == "INFO"
        assert environment["CCOM_SOCKET_IFNAME"] == "eth0"


def test_the_network_policy_admits_exactly_the_checks_pods_to_each_other() -> None:
    manifests = chart()
    access = synth(
        lambda app: FabricCheckAccessChart(
            app,
            "access",
            node_group="trn1",
            nodes=2,
            namespace="training",
            taint=False,
            vpc_cidr="10.0.0.0/16",
        )
    )
    assert_valid(access)
    policy = only(access, "NetworkPolicy")["spec"]
    labels = fabric_check_labels("trn1")
    assert policy["podSelector"] == {"matchLabels": labels}
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["ingress"] == [{"from": [{"podSelector": {"matchLabels": labels}}]}]
    for name in ("worker", "launcher"):
        assert labels.items() <= task(manifests, name)["template"]["metadata"]["labels"].items()
    # Another group's check is a different set of pods.
    assert fabric_check_labels("trn2") != labels


def test_the_launcher_judges_the_largest_message_it_runs() -> None:
    environment = plain_environment(chart(message_bytes=256 * 2**20), "launcher")
    assert environment["MAX_MESSAGE_BYTES"] == str(256 * 2**20)
    assert environment["MIN_MESSAGE_BYTES"] == str(16 * 2**20)
    assert plain_environment(chart(), "launcher")["MAX_MESSAGE_BYTES"] == str(DEFAULT_MESSAGE_BYTES)


def test_the_rendered_commands_survive_kubernetes_variable_expansion() -> None:
    # Kubernetes rewrites $(NAME) and $$ in command, args and env values.
    job = only(chart(), "Job")
    for name in ("worker", "launcher"):
        for argument in container([job], name)["command"]:
            assert "$$" not in argument
            assert not re.search(r"\$\([A-Za-z_][A-Za-z0-9_]*\)", argument), argument


@pytest.mark.parametrize("threshold", [0.0, -0.5, 1.5, math.nan])
def test_the_chart_refuses_a_threshold_outside_zero_to_one(threshold: float) -> None:
    with pytest.raises(
        ValueError, match=re.escape(f"threshold must be a fraction in (0, 1], got threshold={threshold!r}")
    ):
        chart(threshold=threshold)


@pytest.mark.parametrize("nodes", [1, 0])
def test_the_chart_refuses_fewer_than_two_nodes(nodes: int) -> None:
    with pytest.raises(ValueError, match=f"needs at least 2 nodes .*got nodes={nodes}$"):
        chart(nodes=nodes)


@pytest.mark.parametrize("node_group", ["", "Trn1", "1trn", "a" * 33, "trn_1"])
def test_the_chart_refuses_a_node_group_name_that_cannot_name_pods(node_group: str) -> None:
    with pytest.raises(ValueError, match="node_group"):
        chart(node_group=node_group)


@pytest.mark.parametrize(
    "image", ["pytorch-training-neuronx:2.9.0", "public.ecr.aws/neuron/pytorch-training-neuronx:latest"]
)
def test_the_chart_refuses_an_unpinned_image(image: str) -> None:
    with pytest.raises(ValueError, match="not a pinned image"):
        chart(image=image)


def test_pod_host_names_fit_a_dns_label_for_the_longest_group_name() -> None:
    group = "g" + "x" * 31
    hostname = f"{job_name(group)}-worker-999"
    assert len(hostname) <= 63
    chart(node_group=group)


CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"


@pytest.mark.skipif(not CHECKOV.exists(), reason="checkov is installed by `make test`")
def test_the_rendered_yaml_passes_the_policy_checks(tmp_path: Path) -> None:
    (tmp_path / "fabric-check-trn1.yaml").write_text(yaml.safe_dump_all(chart(taint=True), sort_keys=False))
    access = synth(
        lambda app: FabricCheckAccessChart(
            app,
            "access",
            node_group="trn1",
            nodes=2,
            namespace="training",
            taint=True,
            vpc_cidr="10.0.0.0/16",
        )
    )
    (tmp_path / "fabric-check-access.yaml").write_text(yaml.safe_dump_all(access, sort_keys=False))
    report = checkov(tmp_path)
    assert report["summary"]["parsing_errors"] == 0
    assert report["summary"]["resource_count"] == 1 + len(access)
    assert failures(report) == []
