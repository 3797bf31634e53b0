"""``make outdated``: every pin with what the project knows and the newer versions its tables know."""

from __future__ import annotations

import io
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from cluster_facts.versions import ADDON_NAMES
from config import parse_config
from operator_tools.outdated import Pin, main, pins
from tests.conftest import DEFAULT_CONFIG, SYNTH_DATE
from tests.yaml_edits import with_change

TODAY = date.fromisoformat(SYNTH_DATE)


def _default(**changes: Any) -> Any:
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    for path, value in changes.items():
        data = with_change(data, path.replace("__", "."), value)
    return parse_config(data)


def _by_name(rows: list[Pin]) -> dict[str, Pin]:
    return {row.name: row for row in rows}


def test_the_default_configuration_lists_every_kind_of_pin() -> None:
    rows = _by_name(pins(_default(), TODAY))
    kubernetes = rows["kubernetes"]
    assert (kubernetes.pinned, kubernetes.attention) == ("1.36", False)
    assert "standard support until 2027-08-02 (247 days), extended until 2028-08-02" in kubernetes.known
    ami = rows["ami trn1-32xl"]
    assert ami.pinned == "1.36.2-20260714"
    assert ami.known == "Neuron driver 2.29.0.0, containerd 2.2.4-1.amzn2023.0.3; no known fault"
    sdk = rows["neuron sdk 2.29.1"]
    assert sdk.known.startswith("trains on the xla stack")
    assert sdk.newer == (
        "2.30.0 (trains on neither stack), 2.31.0 (trains on neither stack), 2.31.1 (trains on neither stack), "
        "2.32.0 (trains on neither stack), 2.33.0 (trains on the native stack)"
    )
    assert rows["kubectl layer"].pinned == "aws-cdk.lambda-layer-kubectl-v36 2.0.1"
    assert rows["kubectl layer"].known.startswith("kubectl 1.36.3, helm 4.2.3")
    assert rows["cluster autoscaler"].pinned == "v1.36.1"
    assert {f"add-on {name}" for name in ADDON_NAMES} <= set(rows)
    assert rows["chart volcano"].pinned == "1.15.1"
    assert rows["image quay.io/coreos/etcd"].known.startswith("pinned by tag")
    assert rows["image registry.k8s.io/autoscaling/cluster-autoscaler"].pinned == "v1.36.1"


def test_an_older_version_and_a_declared_release_are_marked() -> None:
    config = _default(
        cluster__kubernetes_version="1.34",
        trainium__node_groups__0__ami_release="1.34.12-20261020",
        trainium__node_groups__0__ami_facts={
            "neuron_driver": "2.31.7.0",
            "containerd": "2.2.5-1.amzn2023.0.1",
        },
    )
    rows = _by_name(pins(config, TODAY))
    assert rows["kubernetes"].attention
    assert "ends EKS standard support on 2026-12-02 (in 4 days)" in rows["kubernetes"].known
    assert rows["kubernetes"].newer == "1.35, 1.36"
    ami = rows["ami trn1-32xl"]
    assert ami.attention
    assert (
        ami.known
        == "not in the table: driver 2.31.7.0, containerd 2.2.5-1.amzn2023.0.1, as declared under ami_facts"
    )


def test_an_older_release_names_the_newest_one_without_a_fault() -> None:
    config = _default(trainium__node_groups__0__ami_release="1.36.1-20260610")
    assert _by_name(pins(config, TODAY))["ami trn1-32xl"].newer == "1.36.2-20260714"


def test_the_command_prints_the_pins_and_exits_0(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["--config", str(DEFAULT_CONFIG)], stdout=out, stderr=err) == 0
    text = out.getvalue()
    assert text.startswith(f"Pins of {DEFAULT_CONFIG} on {SYNTH_DATE}")
    assert "  kubernetes: 1.36\n    EKS release 2026-06-02" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        DEFAULT_CONFIG.read_text().replace('kubernetes_version: "1.36"', 'kubernetes_version: "1.30"')
    )
    assert main(["--config", str(bad)], stdout=out, stderr=err) == 1
    assert err.getvalue().startswith(f"{bad}: cluster.kubernetes_version: '1.30' has no kubectl layer")
