"""The EKS version table (cluster_facts/kubernetes_versions.py): one row per supported minor with its
dates, a warning with the date and the extra cost when standard support ends within 90 days, a
refusal naming the key once extended support has ended, and the default not aged on the real clock."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Annotations, Match

from cluster_facts.kubernetes_versions import (
    EKS_VERSIONS,
    SYNTH_DATE_VARIABLE,
    WARN_DAYS,
    extra_cost_per_month,
    support_notice,
    support_problem,
    synth_date,
)
from cluster_facts.versions import KUBECTL_LAYERS
from config import ConfigError, load_config, parse_config
from config.notices import configuration_notices
from tests.conftest import DEFAULT_CONFIG, synthesize
from tests.yaml_edits import with_change


def _with_version(minor: str) -> dict[str, Any]:
    return with_change(yaml.safe_load(DEFAULT_CONFIG.read_text()), "cluster.kubernetes_version", minor)


def test_every_version_the_configuration_accepts_has_its_dates() -> None:
    assert set(EKS_VERSIONS) == set(KUBECTL_LAYERS)
    for minor, version in EKS_VERSIONS.items():
        assert version.minor == minor and version.source
        assert version.upstream_release < version.eks_release < version.end_of_standard_support
        # 14 months of standard support, then 12 of extended (the EKS user guide's rule).
        months = (version.end_of_standard_support.year - version.eks_release.year) * 12 + (
            version.end_of_standard_support.month - version.eks_release.month
        )
        assert months == 14, minor
        assert version.end_of_extended_support == version.end_of_standard_support.replace(
            year=version.end_of_standard_support.year + 1
        )


def test_the_default_is_the_newest_version_the_table_knows() -> None:
    default = load_config(DEFAULT_CONFIG).cluster.kubernetes_version
    assert default == max(EKS_VERSIONS, key=lambda minor: EKS_VERSIONS[minor].eks_release) == "1.36"


def test_the_default_has_not_left_standard_support_on_the_real_clock() -> None:
    """The one test that reads the machine's date: when it fails, the default has aged (move it,
    docs/upgrades.md); the rest of the suite runs on tests/conftest.py's fixed date."""
    default = load_config(DEFAULT_CONFIG).cluster.kubernetes_version
    today = datetime.now(UTC).date()
    assert today < EKS_VERSIONS[default].end_of_standard_support, (
        f"Kubernetes {default} left EKS standard support on {EKS_VERSIONS[default].end_of_standard_support}"
    )


def test_extended_support_costs_fifty_cents_more_per_hour() -> None:
    assert extra_cost_per_month() == pytest.approx(0.50 * 730)


def test_no_warning_while_standard_support_lasts_more_than_90_days() -> None:
    end = EKS_VERSIONS["1.36"].end_of_standard_support
    assert support_notice("1.36", end - timedelta(days=WARN_DAYS + 1)) is None


def test_a_warning_with_the_date_and_the_cost_within_90_days() -> None:
    assert support_notice("1.34", date(2026, 11, 28)) == (
        "Kubernetes 1.34 ends EKS standard support on 2026-12-02 (in 4 days): extended support bills "
        "$0.60 instead of $0.10 per cluster hour, about $365 more a month; upgrade to 1.36 (docs/upgrades.md)"
    )


def test_a_warning_once_standard_support_has_ended() -> None:
    assert support_notice("1.33", date(2026, 11, 28)) == (
        "Kubernetes 1.33 left EKS standard support on 2026-07-29; EKS upgrades it itself after 2027-07-29: "
        "extended support bills $0.60 instead of $0.10 per cluster hour, about $365 more a month; upgrade "
        "to 1.36 (docs/upgrades.md)"
    )


def test_synth_warns_about_the_configured_version_naming_the_key() -> None:
    config = parse_config(_with_version("1.34"))
    [(key, message)] = configuration_notices(config, date(2026, 11, 28))
    assert key == "cluster.kubernetes_version"
    assert message.startswith("Kubernetes 1.34 ends EKS standard support on 2026-12-02 (in 4 days)")


def test_a_version_past_extended_support_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SYNTH_DATE_VARIABLE, "2027-07-30")
    with pytest.raises(ConfigError) as raised:
        parse_config(_with_version("1.33"), source="env.yaml")
    assert raised.value.lines() == [
        (
            "env.yaml: cluster.kubernetes_version: '1.33' left EKS extended support on 2027-07-29: EKS creates "
            "no cluster on it and upgrades existing ones itself; allowed: 1.34, 1.35, 1.36"
        )
    ]
    assert support_problem("1.33", date(2027, 7, 29)) is None


def test_the_synth_date_is_the_variable_or_the_utc_day(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SYNTH_DATE_VARIABLE, "2027-01-02")
    assert synth_date() == date(2027, 1, 2)
    monkeypatch.delenv(SYNTH_DATE_VARIABLE)
    assert synth_date() == datetime.now(UTC).date()


def test_cdk_synth_carries_each_notice_as_a_warning_on_the_stack() -> None:
    """What `cdk synth` prints as "[Warning at /TrainiumStack] ...": the 1.34 support notice (on the
    suite's date, 4 days before its standard support ends) and a declared AMI release."""
    data = with_change(_with_version("1.34"), "trainium.node_groups.0.ami_release", "1.34.12-20261020")
    data = with_change(
        data,
        "trainium.node_groups.0.ami_facts",
        {"neuron_driver": "2.31.7.0", "containerd": "2.2.5-1.amzn2023.0.1"},
    )
    synthesized = synthesize(parse_config(data))
    warnings = [
        str(entry.entry.data)
        for entry in Annotations.from_stack(synthesized.stack).find_warning("*", Match.any_value())
    ]
    assert [w.split(":", 1)[0] for w in warnings] == [
        "cluster.kubernetes_version",
        "trainium.node_groups[0].ami_facts",
    ]
    assert "ends EKS standard support on 2026-12-02" in warnings[0]
    assert "rest on this declaration" in warnings[1]
