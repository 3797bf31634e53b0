"""``python -m preflight``: the report, the exit codes, and one-line errors without a traceback."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError

from preflight.cli import EXIT_AWS_UNAVAILABLE, EXIT_CHECK_FAILED, EXIT_LOCAL_PROBLEM, EXIT_OK, main
from tests.preflight.conftest import (
    EXAMPLE_CONFIG,
    EXAMPLE_TEMPLATE,
    REPO_ROOT,
    FakeAccount,
    default_config,
    example_config,
    real_clients,
    stub_clients,
)


def run(argv: list[str], factory: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, clients_factory=factory, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def never_called(region: str, max_attempts: int) -> Any:
    raise AssertionError("AWS must not be asked")


def subprocess_environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The child's environment: no AWS_* variable of the developer's, empty AWS config files."""
    empty = tmp_path / "empty"
    empty.write_text("")
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("AWS_") and key != "BOTO_CONFIG"
    }
    environment.update(
        AWS_CONFIG_FILE=str(empty),
        AWS_SHARED_CREDENTIALS_FILE=str(empty),
        BOTO_CONFIG=str(empty),
        AWS_EC2_METADATA_DISABLED="true",
        **extra,
    )
    return environment


def run_module(args: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "preflight", *args],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_passing_account_prints_the_table_and_exits_0(
    account: FakeAccount, stubbed_factory: Callable[..., Any]
) -> None:
    code, out, err = run(
        ["--config", str(EXAMPLE_CONFIG), *EXAMPLE_TEMPLATE], stubbed_factory(account, example_config())
    )

    assert (code, err) == (EXIT_OK, "")
    lines = out.splitlines()
    assert lines[0] == f"Preflight of {EXAMPLE_CONFIG} for account 444455556666 in us-east-1"
    assert lines[2].split() == ["CHECK", "STATUS", "DETAIL", "WHAT", "TO", "DO"]
    assert lines[-1] == "31 checks: 31 passed, 0 warned, 0 failed; ready for make deploy"
    assert all(len(line) <= 100 for line in lines)


def parse_table(out: str) -> dict[str, tuple[str, str, str]]:
    """CHECK -> (STATUS, DETAIL, WHAT TO DO), each cell's wrapped lines joined without whitespace."""
    lines = out.splitlines()
    header = lines[2]
    starts = [header.index(title) for title in ("CHECK", "STATUS", "DETAIL", "WHAT TO DO")]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    rows: dict[str, tuple[str, str, str]] = {}
    block: list[str] = []
    for line in [*lines[4:-2], ""]:
        if line.strip():
            block.append(line)
            continue
        cells = ["".join("".join(row[start:end].split()) for row in block) for start, end in bounds]
        rows[cells[0]] = (cells[1], cells[2], cells[3])
        block = []
    return rows


EXAMPLE_IMAGE_NAMES = (
    "neuron-device-plugin",
    "aws-efa-k8s-device-plugin",
    "vc-webhook-manager",
    "vc-controller-manager",
    "vc-scheduler",
    "cluster-autoscaler",
    "etcd",
    "alpine",
    "python",
    "pytorch-training-neuronx",
)
"""The image rows of config/example.yaml (one per image its nodes pull: test_image_checks.py)."""


def squeezed(text: str) -> str:
    return "".join(text.split())


def test_a_failed_check_exits_1_and_says_so(
    account: FakeAccount, stubbed_factory: Callable[..., Any]
) -> None:
    account.quotas["L-2C3B7624"] = 128.0
    account.offerings["trn1n.32xlarge"] = ["use1-az4", "use1-az5"]
    code, out, _ = run(
        ["--config", str(EXAMPLE_CONFIG), *EXAMPLE_TEMPLATE], stubbed_factory(account, example_config())
    )

    assert code == EXIT_CHECK_FAILED
    statuses = {check: status for check, (status, _, _) in parse_table(out).items()}
    assert statuses == {
        "account": "PASS",
        "vpczones": "PASS",
        "trainiumzone": "PASS",
        "offeringtrn1n-32xl": "FAIL",
        "offeringtrn1-32xl-block": "PASS",
        "quotaon-demand": "FAIL",
        "lambdaconcurrency": "PASS",
        "reservationtrn1n-32xl": "PASS",
        "reservationtrn1-32xl-block": "PASS",
        "kubernetes1.36": "PASS",
        "clusterversion": "PASS",
        "eksdates1.36": "PASS",
        "eksversions": "PASS",
        "amirecommended1.36": "PASS",
        "amitrn1n-32xl": "PASS",
        "amitrn1-32xl-block": "PASS",
        **{f"image{name}": "PASS" for name in EXAMPLE_IMAGE_NAMES},
        "costtrn1n-32xl": "PASS",
        "costtrn1-32xl-block": "PASS",
        "costsystemnodes": "PASS",
        "costfixed": "PASS",
        "costtotal": "PASS",
    }
    assert (
        out.splitlines()[-1]
        == "31 checks: 29 passed, 0 warned, 2 failed; fix the FAIL rows and run preflight again"
    )


def test_report_wraps_long_rows_within_the_width(
    account: FakeAccount, stubbed_factory: Callable[..., Any]
) -> None:
    del account.zones["us-east-1"]["us-east-1a"]
    account.offerings["trn1n.32xlarge"] = ["use1-az4", "use1-az5"]
    code, out, _ = run(
        ["--config", str(EXAMPLE_CONFIG), "--width", "90", *EXAMPLE_TEMPLATE],
        stubbed_factory(account, example_config()),
    )

    assert code == EXIT_CHECK_FAILED
    table = out.splitlines()[2:-2]  # between the title (which holds the path) and the summary
    assert max(len(line) for line in table) <= 90
    # Every wrapped cell reads back whole, in its own column.
    rows = parse_table(out)
    status, detail, action = rows["offeringtrn1n-32xl"]
    assert status == "FAIL"
    assert detail == squeezed(
        "trn1n.32xlarge is not offered in use1-az6 (trainium.availability_zone_id); "
        "offered in: use1-az4 (us-east-1d), use1-az5 (us-east-1f)"
    )
    assert action == squeezed(
        "set trainium.availability_zone_id to one of use1-az4, use1-az5, then run with --write"
    )
    assert rows["account"] == ("PASS", squeezed("credentials are for account 444455556666"), "-")


def test_warnings_alone_exit_0(account: FakeAccount, stubbed_factory: Callable[..., Any]) -> None:
    account.zone_states["us-east-1a"] = "impaired"
    code, out, _ = run(
        ["--config", str(EXAMPLE_CONFIG), *EXAMPLE_TEMPLATE], stubbed_factory(account, example_config())
    )

    assert code == EXIT_OK
    assert (
        out.splitlines()[-1]
        == "31 checks: 30 passed, 1 warned, 0 failed; deployable, but read the WARN rows first"
    )


def test_invalid_configuration_prints_its_error_lines_and_exits_3(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    text = EXAMPLE_CONFIG.read_text().replace("region: us-east-1", "region: us-east-one")
    broken.write_text(text.replace("  nat_gateways: 2", "  nat_gateway: 2"))
    code, out, err = run(["--config", str(broken)], never_called)

    assert (code, out) == (EXIT_LOCAL_PROBLEM, "")
    assert err.splitlines() == [
        f"{broken}: region: 'us-east-one' is not an AWS region name such as us-west-2",
        (
            f"{broken}: vpc.nat_gateway: unknown key; did you mean 'nat_gateways'? allowed here: "
            "vpc_id, private_subnets, trainium_subnet, cidr, availability_zones, nat_gateways, "
            "flow_log_retention_days"
        ),
    ]


def test_missing_configuration_file_exits_3(tmp_path: Path) -> None:
    code, _, err = run(["--config", str(tmp_path / "nope.yaml")], never_called)

    assert code == EXIT_LOCAL_PROBLEM
    assert err == f"{tmp_path / 'nope.yaml'}: configuration file not found\n"


def test_bad_arguments_exit_3_not_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["--config", str(EXAMPLE_CONFIG), "--max-attempts", "0"], clients_factory=never_called)

    assert raised.value.code == EXIT_LOCAL_PROBLEM
    assert "--max-attempts: 0 is not a positive number" in capsys.readouterr().err


def test_refused_credentials_exit_2(account: FakeAccount, stubbed_factory: Callable[..., Any]) -> None:
    account.errors["get_caller_identity"] = (
        "InvalidClientTokenId",
        "The security token included in the request is invalid.",
    )
    code, out, err = run(
        ["--config", str(EXAMPLE_CONFIG), *EXAMPLE_TEMPLATE], stubbed_factory(account, example_config())
    )

    assert (code, out) == (EXIT_AWS_UNAVAILABLE, "")
    assert err == (
        "preflight: AWS refused the credentials (InvalidClientTokenId: The security token included in the "
        "request is invalid.); renew them (aws sso login, or new keys) and retry\n"
    )


@pytest.mark.process
def test_missing_credentials_exit_2_with_a_message_and_no_traceback(tmp_path: Path) -> None:
    """The real entry point, in a child process with no credentials anywhere it could look."""
    result = run_module(["--config", "config/example.yaml"], subprocess_environment(tmp_path))

    assert result.returncode == EXIT_AWS_UNAVAILABLE, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("preflight: no AWS credentials found: set AWS_PROFILE")
    assert len(result.stderr.splitlines()) == 1
    assert "Traceback" not in result.stderr


@pytest.mark.process
def test_unknown_profile_exits_2(tmp_path: Path) -> None:
    environment = subprocess_environment(tmp_path, AWS_PROFILE="no-such-profile")
    result = run_module(["--config", "config/example.yaml"], environment)

    assert result.returncode == EXIT_AWS_UNAVAILABLE, result.stderr
    assert "no-such-profile" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert "Traceback" not in result.stderr


@pytest.mark.process
def test_unreachable_endpoint_exits_2_in_a_child_process(tmp_path: Path) -> None:
    """A closed port on the loopback interface: connection refused at once, never the internet."""
    environment = subprocess_environment(
        tmp_path,
        AWS_ACCESS_KEY_ID="AKIAIOSFODNN7EXAMPLE",
        AWS_SECRET_ACCESS_KEY="fake",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",
    )
    result = run_module(["--config", "config/example.yaml", "--max-attempts", "1"], environment)

    assert result.returncode == EXIT_AWS_UNAVAILABLE, result.stderr
    assert result.stderr.startswith("preflight: cannot reach AWS (Could not connect to the endpoint URL")
    assert len(result.stderr.splitlines()) == 1
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "error",
    [
        EndpointConnectionError(endpoint_url="https://sts.us-east-1.amazonaws.com/"),
        ConnectTimeoutError(endpoint_url="https://sts.us-east-1.amazonaws.com/"),
    ],
    ids=["endpoint-connection", "connect-timeout"],
)
def test_network_errors_are_retried_then_exit_2(error: Exception, sleeps: list[float]) -> None:
    """The error is raised where the HTTP request would be sent, so the retry handler sees it."""
    sent: list[str] = []

    def unreachable(request: Any, **_: Any) -> None:
        sent.append(request.url)
        raise error

    def factory(region: str, max_attempts: int) -> Any:
        clients = real_clients(region, max_attempts=max_attempts)
        clients.sts.meta.events.register_first("before-send", unreachable)
        return clients

    code, out, err = run(["--config", str(EXAMPLE_CONFIG), "--max-attempts", "3", *EXAMPLE_TEMPLATE], factory)

    assert (code, out) == (EXIT_AWS_UNAVAILABLE, "")
    assert len(sent) == 3 and len(sleeps) == 2
    assert err.startswith("preflight: cannot reach AWS (")
    assert err.count("\n") == 1


def test_stubbed_clients_are_the_production_clients() -> None:
    """The tests' clients carry the retry settings ``make_clients`` gives the real ones."""
    stubbed = stub_clients(FakeAccount(), default_config(), max_attempts=5)
    for client in (
        stubbed.clients.sts,
        stubbed.clients.ec2,
        stubbed.clients.service_quotas,
        stubbed.clients.eks,
    ):
        assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": 5}
