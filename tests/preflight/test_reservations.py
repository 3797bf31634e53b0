"""The reservation check against the configuration: warm nodes (min_size) and max_size against what
the reservation holds, a Capacity Block's window by date, and room for a node group update (none
needed: reserved groups update without surge).

Each test changes one thing in an otherwise passing account (whose reservations leave room for
the surge) and runs the Stubber-backed facts through the pure checks; the CLI tests at the end
check the exit code each outcome gives.
"""

from __future__ import annotations

import dataclasses
import io
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from config import StackConfig, load_config
from preflight.aws import gather_facts
from preflight.checks import UPDATE_SURGE, CheckResult, check_reservation
from preflight.cli import EXIT_CHECK_FAILED, EXIT_OK, main
from tests.preflight.conftest import (
    BLOCK_END,
    BLOCK_ID,
    BLOCK_START,
    EXAMPLE_CONFIG,
    NOW,
    ODCR_ID,
    FakeAccount,
    config_from,
    example_config,
    resize,
    stub_clients,
    template_of,
)
from tests.preflight.test_cli import parse_table, squeezed

ODCR_ROW = "reservation trn1n-32xl"  # trainium.node_groups[0]: on_demand, max_size 4
BLOCK_ROW = "reservation trn1-32xl-block"  # trainium.node_groups[1]: capacity_block, max_size 8
WINDOW = "2026-06-01 11:30 UTC to 2026-06-15 11:30 UTC"


def reservation_rows(
    account: FakeAccount, config: StackConfig | None = None, *, now: datetime = NOW
) -> dict[str, CheckResult]:
    config = config or example_config()
    stubbed = stub_clients(account, config, now=now)
    facts = gather_facts(config, stubbed.clients)
    stubbed.assert_all_asked()
    rows = [
        check_reservation(config, facts, index)
        for index, group in enumerate(config.trainium.node_groups)
        if group.capacity_reservation_id
    ]
    return {row.check: row for row in rows}


def holding(account: FakeAccount, reservation_id: str, count: int) -> FakeAccount:
    item = account.reservations[reservation_id]
    assert item is not None
    item.update(TotalInstanceCount=count, AvailableInstanceCount=count)
    return account


def with_group(index: int, *, min_size: int | None = None, max_size: int | None = None) -> StackConfig:
    def edit(data: dict[str, Any]) -> None:
        resize(data["trainium"]["node_groups"][index], min_size=min_size, max_size=max_size)

    return config_from(EXAMPLE_CONFIG, edit)


def test_the_fake_accounts_reservations_pass_with_room_for_the_surge(account: FakeAccount) -> None:
    rows = reservation_rows(account)

    assert {check: row.status for check, row in rows.items()} == {ODCR_ROW: "PASS", BLOCK_ROW: "PASS"}
    # DEFAULT: one zone, maxUnavailable 1, twice the zones wins. MINIMAL stops a node first: no surge.
    assert UPDATE_SURGE == {"DEFAULT": 2, "MINIMAL": 0}
    config = example_config()
    assert [group.update_strategy for group in config.trainium.node_groups] == ["MINIMAL", "MINIMAL"]


# --- min_size and max_size against the reservation ---------------------------------------------


def test_warm_nodes_beyond_the_reservation_fail_naming_min_size(account: FakeAccount) -> None:
    rows = reservation_rows(holding(account, ODCR_ID, 2), with_group(0, min_size=3))

    row = rows[ODCR_ROW]
    assert row.status == "FAIL"
    assert "reserves 2 instances, trainium.node_groups[0].min_size keeps 3 warm nodes" in row.detail
    assert "reserves 2 instances, trainium.node_groups[0].max_size is 4" in row.detail
    assert row.action.startswith(
        "lower trainium.node_groups[0].min_size to at most 2; lower trainium.node_groups[0].max_size"
    )


def test_max_size_beyond_the_odcr_fails_naming_max_size(account: FakeAccount) -> None:
    rows = reservation_rows(holding(account, ODCR_ID, 3))

    row = rows[ODCR_ROW]
    assert row.status == "FAIL"
    assert row.detail.endswith("reserves 3 instances, trainium.node_groups[0].max_size is 4")
    assert "min_size" not in row.detail  # min_size 0: no warm node to fit
    assert row.action.startswith("lower trainium.node_groups[0].max_size")


# --- a Capacity Block's window ---------------------------------------------------------------------


def test_capacity_block_whose_window_has_ended_fails_with_its_start_and_end(account: FakeAccount) -> None:
    # The state still says active (it lags); the clock is past the end.
    rows = reservation_rows(account, now=BLOCK_END + timedelta(minutes=5))

    row = rows[BLOCK_ROW]
    assert row.status == "FAIL"
    assert row.detail == (
        f"Capacity Block {BLOCK_ID} active: 10 x trn1.32xlarge (10 available) in use1-az6 (us-east-1c), "
        f"{WINDOW}; its window has ended: no instance can launch in it"
    )
    assert row.action == "buy a new Capacity Block and set trainium.node_groups[1].capacity_reservation_id"


def test_capacity_block_whose_window_has_not_begun_warns_with_its_start_and_end(account: FakeAccount) -> None:
    rows = reservation_rows(account, now=BLOCK_START - timedelta(days=3))

    row = rows[BLOCK_ROW]
    assert row.status == "WARN"
    assert row.detail.endswith(f"{WINDOW}; its window has not begun")
    assert row.action == "nodes can start only when it begins at 2026-06-01 11:30 UTC"


def test_scheduled_capacity_block_warns_with_its_start_and_end(account: FakeAccount) -> None:
    block = account.reservations[BLOCK_ID]
    assert block is not None
    block["State"] = "scheduled"
    rows = reservation_rows(account, now=BLOCK_START - timedelta(days=3))

    row = rows[BLOCK_ROW]
    assert row.status == "WARN"
    assert row.detail.endswith(
        f"scheduled: 10 x trn1.32xlarge (10 available) in use1-az6 (us-east-1c), {WINDOW}; not active yet (scheduled)"
    )
    assert row.action == "nodes can start only when it becomes active at 2026-06-01 11:30 UTC"


def test_capacity_block_inside_its_window_passes(account: FakeAccount) -> None:
    for moment in (BLOCK_START, BLOCK_END - timedelta(seconds=1)):
        assert reservation_rows(account, now=moment)[BLOCK_ROW].status == "PASS"


def test_without_a_clock_the_state_alone_decides(account: FakeAccount) -> None:
    config = example_config()
    stubbed = stub_clients(account, config, now=BLOCK_END + timedelta(days=30))
    facts = gather_facts(config, stubbed.clients)
    unknown_time = dataclasses.replace(facts, checked_at=None)

    assert check_reservation(config, facts, 1).status == "FAIL"
    assert check_reservation(config, unknown_time, 1).status == "PASS"


# --- room for an update: reserved groups replace nodes without surge ---------------------------------


@pytest.mark.parametrize("reservation_id", [ODCR_ID, BLOCK_ID])
def test_a_reservation_sized_exactly_to_max_size_passes_updates_need_no_surge(
    account: FakeAccount, reservation_id: str
) -> None:
    # The stack gives reserved groups the MINIMAL update strategy: EKS stops an old node before it
    # starts its replacement, so an update never needs more than max_size instances.
    size = 4 if reservation_id == ODCR_ID else 8
    row = reservation_rows(holding(account, reservation_id, size))[
        ODCR_ROW if reservation_id == ODCR_ID else BLOCK_ROW
    ]
    assert row.status == "PASS", row.detail
    assert "no room for an update" not in row.detail


@pytest.mark.parametrize(("held", "status"), [(7, "FAIL"), (8, "PASS"), (9, "PASS")])
def test_max_size_is_all_a_capacity_block_must_hold(account: FakeAccount, held: int, status: str) -> None:
    assert reservation_rows(holding(account, BLOCK_ID, held))[BLOCK_ROW].status == status


def test_a_reservation_too_small_for_max_size_fails_without_a_surge_warning(account: FakeAccount) -> None:
    row = reservation_rows(holding(account, BLOCK_ID, 7))[BLOCK_ROW]

    assert row.status == "FAIL"
    assert "no room for an update" not in row.detail


# --- the exit code each outcome gives ---------------------------------------------------------------


def run_cli(account: FakeAccount, stubbed_factory: Any, path: Path, now: datetime) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["--config", str(path), "--width", "400", "--template", str(template_of(load_config(path).name))],
        clients_factory=stubbed_factory(account, load_config(path), now=now),
        stdout=out,
        stderr=err,
    )
    assert err.getvalue() == ""
    return code, out.getvalue()


CASES = {
    # case: (exit code, status of the block's row, what the row says)
    # Warm nodes on a Capacity Block are refused by the configuration (config/model.py); an ODCR's
    # warm pool beyond the reservation: test_warm_nodes_beyond_the_reservation_fail_naming_min_size.
    "max_size": (EXIT_CHECK_FAILED, "FAIL", "reserves 6 instances, trainium.node_groups[1].max_size is 8"),
    "ended": (EXIT_CHECK_FAILED, "FAIL", f"{WINDOW}; its window has ended: no instance can launch in it"),
    "not begun": (EXIT_OK, "WARN", f"{WINDOW}; its window has not begun"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_reservation_input_is_one_row_with_the_exit_code_of_its_status(
    account: FakeAccount, stubbed_factory: Any, tmp_path: Path, case: str
) -> None:
    exit_code, status, says = CASES[case]
    path, now = EXAMPLE_CONFIG, NOW
    if case == "max_size":
        holding(account, BLOCK_ID, 6)
    if case == "ended":
        now = BLOCK_END + timedelta(hours=1)
    if case == "not begun":
        now = BLOCK_START - timedelta(hours=1)

    code, out = run_cli(account, stubbed_factory, path, now)

    assert code == exit_code
    rows = parse_table(out)
    row_status, detail, _ = rows["reservationtrn1-32xl-block"]
    assert row_status == status
    assert detail.startswith(squeezed(f"Capacity Block {BLOCK_ID}"))
    assert squeezed(says) in detail
    # Only that row changed.
    assert {check: row[0] for check, row in rows.items() if row[0] != "PASS"} == {
        "reservationtrn1-32xl-block": status
    }
