"""docs/costs.md quotes what ``preflight.costs`` computes from the stubbed Price List: keep them equal."""

from __future__ import annotations

import io
import re
from typing import Any

from config import StackConfig
from preflight.aws import gather_facts
from preflight.cli import main
from preflight.costs import cost_rows
from tests.preflight.conftest import (
    BLOCK_ID,
    DEFAULT_CONFIG,
    EXAMPLE_CONFIG,
    ODCR_ID,
    REPO_ROOT,
    FakeAccount,
    config_from,
    default_config,
    example_config,
    resize,
    stub_clients,
)
from tests.preflight.test_costs import EXAMPLE_COST_ROWS

DOC = (REPO_ROOT / "docs" / "costs.md").read_text()


def sized_account() -> FakeAccount:
    """The example's reservations as example.yaml describes them: an ODCR of 4, a block of 8."""
    account = FakeAccount()
    for reservation_id, count in ((ODCR_ID, 4), (BLOCK_ID, 8)):
        reservation = account.reservations[reservation_id]
        assert reservation is not None
        reservation.update(TotalInstanceCount=count, AvailableInstanceCount=count)
    return account


def total_of(account: FakeAccount, config: StackConfig) -> tuple[str, str, str, str]:
    """(idle per hour, idle per day, max_size per hour, max_size per day) as the total row says them."""
    stubbed = stub_clients(account, config)
    [total] = [
        row for row in cost_rows(config, gather_facts(config, stubbed.clients)) if row.check == "cost total"
    ]
    assert total.status == "PASS"
    found = re.match(
        r"idle (\$[\d,.]+)/h \(about (\$[\d,]+)/day\); at max_size (\$[\d,.]+)/h \(about (\$[\d,]+)/day\)",
        total.detail,
    )
    assert found is not None, total.detail
    idle, idle_day, peak, peak_day = found.groups()
    return idle, idle_day, peak, peak_day


def doc_row(starts: str) -> list[str]:
    [line] = [line for line in DOC.splitlines() if line.startswith(f"| {starts}")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def warm(data: dict[str, Any]) -> None:
    resize(data["trainium"]["node_groups"][0], min_size=2)


def without_odcr(data: dict[str, Any]) -> None:
    data["trainium"]["node_groups"][0]["capacity_reservation_id"] = None


def test_the_per_day_table_is_what_the_code_computes() -> None:
    default_account = FakeAccount()
    default_account.account_id = "111122223333"
    cases = {
        "config/default.yaml (": (default_account, default_config()),
        "config/default.yaml with `min_size` 2": (default_account, config_from(DEFAULT_CONFIG, warm)),
        "config/example.yaml (us-east-1; its ODCR": (sized_account(), example_config()),
        "config/example.yaml without the ODCR": (sized_account(), config_from(EXAMPLE_CONFIG, without_odcr)),
    }
    for starts, (account, config) in cases.items():
        idle, idle_day, peak, peak_day = total_of(account, config)
        assert doc_row(starts)[1:] == [f"{idle}/h", f"about {idle_day}", f"{peak}/h", f"about {peak_day}"], (
            starts
        )


def test_the_sample_rows_are_the_printed_rows(stubbed_factory: Any) -> None:
    sample = EXAMPLE_COST_ROWS.rsplit("\n\n", 1)[0]  # without the summary line
    assert f"```text\n{sample}\n```" in DOC

    account = FakeAccount()
    account.errors["get_products"] = (
        "AccessDeniedException",
        "User: arn:aws:iam::444455556666:user/ci is not authorized to perform: pricing:GetProducts",
    )
    out = io.StringIO()
    main(
        ["--config", str(EXAMPLE_CONFIG)],
        clients_factory=stubbed_factory(account, example_config()),
        stdout=out,
    )
    denied = out.getvalue().split("\n\n")[-2]  # the last row, before the summary
    assert denied.startswith("cost                      WARN")
    assert f"```text\n{denied}\n```" in DOC


def test_the_policy_lists_the_price_list_permission() -> None:
    assert '"pricing:GetProducts"' in DOC
