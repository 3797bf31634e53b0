"""``--write``: the zone names follow the zone id, and nothing else in the file changes."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from config import load_config
from preflight.cli import EXIT_CHECK_FAILED, EXIT_LOCAL_PROBLEM, EXIT_OK, main
from preflight.rewrite import RewriteError, ZoneChange, apply_zone_changes, edit_zone_names
from tests.preflight.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG, FakeAccount


def write(path: Path, account: FakeAccount, factory_for: Callable[..., Any]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    factory = factory_for(account, load_config(path))
    code = main(
        ["--config", str(path), "--write", "--width", "400"], clients_factory=factory, stdout=out, stderr=err
    )
    return code, out.getvalue(), err.getvalue()


def copy_of(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / source.name
    shutil.copyfile(source, target)
    return target


def test_write_example_changes_only_the_zone_names(
    tmp_path: Path, account: FakeAccount, stubbed_factory: Callable[..., Any]
) -> None:
    """use1-az6 is us-east-1b in this account: the Trainium zone and its VPC zone both follow."""
    account.zones["us-east-1"].update({"us-east-1b": "use1-az6", "us-east-1c": "use1-az2"})
    path = copy_of(EXAMPLE_CONFIG, tmp_path)
    before = path.read_bytes()

    code, out, err = write(path, account, stubbed_factory)

    expected = before.replace(
        b"  availability_zones: [us-east-1a, us-east-1c]\n",
        b"  availability_zones: [us-east-1a, us-east-1b]\n",
    ).replace(
        b"  availability_zone: us-east-1c     # must be one of vpc.availability_zones\n",
        b"  availability_zone: us-east-1b     # must be one of vpc.availability_zones\n",
    )
    assert expected != before
    assert path.read_bytes() == expected  # comments, alignment, flow list and quoting untouched
    config = load_config(path)
    assert config.trainium.availability_zone == "us-east-1b"
    assert config.vpc.availability_zones == ["us-east-1a", "us-east-1b"]
    # The report is about the file as written: the zone check passes now.
    assert (code, err) == (EXIT_OK, "")
    assert out.splitlines()[0] == (
        f"--write: {path}: trainium.availability_zone us-east-1c -> us-east-1b, "
        "vpc.availability_zones[1] us-east-1c -> us-east-1b"
    )
    assert "trainium zone             PASS    use1-az6 is us-east-1b in this account" in out


def test_write_default_keeps_the_vpc_zones_when_the_new_name_is_already_one(
    tmp_path: Path, account: FakeAccount, stubbed_factory: Callable[..., Any]
) -> None:
    """usw2-az4 is us-west-2a here, already a VPC zone: only trainium.availability_zone changes."""
    account.account_id = "111122223333"
    account.zones["us-west-2"].update({"us-west-2a": "usw2-az4", "us-west-2d": "usw2-az2"})
    path = copy_of(DEFAULT_CONFIG, tmp_path)
    before = path.read_bytes()

    code, out, _ = write(path, account, stubbed_factory)

    assert path.read_bytes() == before.replace(
        b"  availability_zone: us-west-2d\n", b"  availability_zone: us-west-2a\n"
    )
    assert before.count(b"#") == path.read_bytes().count(b"#")
    config = load_config(path)
    assert (config.trainium.availability_zone, config.vpc.availability_zones) == (
        "us-west-2a",
        ["us-west-2a", "us-west-2d"],
    )
    assert code == EXIT_OK
    assert out.splitlines()[0] == f"--write: {path}: trainium.availability_zone us-west-2d -> us-west-2a"


def test_write_with_nothing_to_change_leaves_the_file_alone(
    tmp_path: Path, account: FakeAccount, stubbed_factory: Callable[..., Any]
) -> None:
    path = copy_of(EXAMPLE_CONFIG, tmp_path)
    os.utime(path, (1_000_000_000, 1_000_000_000))
    before = path.read_bytes()

    code, out, _ = write(path, account, stubbed_factory)

    assert code == EXIT_OK
    assert out.splitlines()[0] == f"--write: {path} already uses this account's zone names; not changed"
    assert path.read_bytes() == before
    assert path.stat().st_mtime == 1_000_000_000


def test_write_with_an_unknown_zone_id_writes_nothing(
    tmp_path: Path, account: FakeAccount, stubbed_factory: Callable[..., Any]
) -> None:
    path = copy_of(EXAMPLE_CONFIG, tmp_path)
    path.write_text(
        path.read_text().replace("availability_zone_id: use1-az6", "availability_zone_id: use1-az9")
    )
    before = path.read_bytes()

    code, _, err = write(path, account, stubbed_factory)

    assert code == EXIT_CHECK_FAILED
    assert err == (
        f"--write: {path} not changed: trainium.availability_zone_id use1-az9 is not a zone of us-east-1; "
        "nothing to write\n"
    )
    assert path.read_bytes() == before


def test_write_refuses_zone_names_of_another_account(
    tmp_path: Path, account: FakeAccount, stubbed_factory: Callable[..., Any]
) -> None:
    account.account_id = "999988887777"
    account.zones["us-east-1"].update({"us-east-1b": "use1-az6", "us-east-1c": "use1-az2"})
    path = copy_of(EXAMPLE_CONFIG, tmp_path)
    before = path.read_bytes()

    code, _, err = write(path, account, stubbed_factory)

    assert code == EXIT_CHECK_FAILED
    assert err == (
        f"--write: {path} not changed: the credentials are for account 999988887777, the file is for "
        "444455556666; zone names differ between accounts\n"
    )
    assert path.read_bytes() == before


def test_edit_keeps_quotes_and_crlf_line_endings() -> None:
    text = (
        "vpc:\r\n"
        "  availability_zones: ['us-west-2a', \"us-west-2d\"]  # quoted\r\n"
        "trainium:\r\n"
        '  availability_zone: "us-west-2d"\r\n'
    )
    changes = [
        ZoneChange("trainium.availability_zone", "us-west-2d", "us-west-2b"),
        ZoneChange("vpc.availability_zones[1]", "us-west-2d", "us-west-2b"),
    ]

    assert edit_zone_names(text, changes) == text.replace("us-west-2d", "us-west-2b")


def test_edit_block_style_list() -> None:
    text = "vpc:\n  availability_zones:\n    - us-west-2a\n    - us-west-2d   # trainium\n"
    change = ZoneChange("vpc.availability_zones[1]", "us-west-2d", "us-west-2c")

    assert (
        edit_zone_names(text, [change])
        == "vpc:\n  availability_zones:\n    - us-west-2a\n    - us-west-2c   # trainium\n"
    )


def test_edit_refuses_a_value_it_does_not_expect() -> None:
    text = "trainium:\n  availability_zone: &zone us-west-2d\n"
    change = ZoneChange("trainium.availability_zone", "us-west-2d", "us-west-2b")

    with pytest.raises(RewriteError, match=r"line 2: expected trainium.availability_zone: us-west-2d"):
        edit_zone_names(text, [change])


def test_a_result_that_would_not_load_is_never_written(tmp_path: Path) -> None:
    """us-west-2b is not a VPC zone: changing only the Trainium zone would break the file."""
    path = copy_of(DEFAULT_CONFIG, tmp_path)
    before = path.read_bytes()

    with pytest.raises(RewriteError, match=r"not written, the result would not load: .*must be one of"):
        apply_zone_changes(path, [ZoneChange("trainium.availability_zone", "us-west-2d", "us-west-2b")])

    assert path.read_bytes() == before
    assert sorted(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_write_failure_exits_3(
    tmp_path: Path, account: FakeAccount, stubbed_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    account.zones["us-east-1"].update({"us-east-1b": "use1-az6", "us-east-1c": "use1-az2"})
    path = copy_of(EXAMPLE_CONFIG, tmp_path)
    before = path.read_bytes()

    def refuse(*_: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("preflight.rewrite.os.replace", refuse)
    code, out, err = write(path, account, stubbed_factory)

    assert code == EXIT_LOCAL_PROBLEM
    assert err == f"--write: {path}: cannot write: Permission denied\n"
    assert path.read_bytes() == before
    assert "trainium zone             FAIL" in out  # the report describes the file as it still is
