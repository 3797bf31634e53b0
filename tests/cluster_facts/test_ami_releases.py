"""The AMI release table (cluster_facts/ami_releases.py): its facts hold together, the defaults are the
newest releases without a known fault that serve the training image, a release with a known fault for
a feature the nodes turn on is refused naming its fix, and a release the table does not know is taken
only with its facts declared, which synth then warns about."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from cluster_facts.ami_releases import (
    AMI_RELEASES,
    DEFAULT_AMI_RELEASES,
    FAST_IMAGE_PULL_DEADLOCK,
    KNOWN_FAULTS,
    declared_release,
    fixing_release,
    newest_release,
)
from cluster_facts.kubernetes_versions import EKS_VERSIONS
from cluster_facts.neuron_stack import NEURON_RELEASES, TRAINING_IMAGE, image_neuron_release
from cluster_facts.node_startup import FAST_IMAGE_PULL, FAST_IMAGE_PULL_FEATURE, FEATURES_TURNED_ON
from cluster_facts.versions import KUBECTL_LAYERS, version_key
from config import ConfigError, parse_config
from config.notices import configuration_notices
from tests.conftest import DEFAULT_CONFIG
from tests.yaml_edits import with_change

TODAY = EKS_VERSIONS["1.36"].eks_release


def _config(**group: Any) -> dict[str, Any]:
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    for key, value in group.items():
        data = with_change(data, f"trainium.node_groups.0.{key}", value)
    return data


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(data, source="env.yaml")
    return raised.value.lines()


def test_every_supported_kubernetes_version_has_releases_and_a_default() -> None:
    assert set(DEFAULT_AMI_RELEASES) == set(KUBECTL_LAYERS)
    for minor, release in DEFAULT_AMI_RELEASES.items():
        assert AMI_RELEASES[release].kubernetes_version == minor


def test_each_default_is_the_newest_release_without_a_fault_that_serves_the_training_image() -> None:
    """Adding a newer release without a known fault to the table makes this fail until the default
    moves to it (a deliberate change: a new release replaces every node of the group)."""
    sdk = image_neuron_release(TRAINING_IMAGE)
    assert sdk is not None
    needed = NEURON_RELEASES[sdk].driver
    for minor, release in DEFAULT_AMI_RELEASES.items():
        newest = newest_release(minor, driver_at_least=needed, features=FEATURES_TURNED_ON)
        assert newest is not None and newest.release_version == release, minor
    assert DEFAULT_AMI_RELEASES["1.36"] == "1.36.2-20260714"
    assert (AMI_RELEASES["1.36.2-20260714"].driver, AMI_RELEASES["1.36.2-20260714"].containerd) == (
        "2.29.0.0",
        "2.2.4-1.amzn2023.0.3",
    )


def test_the_fastimagepull_deadlock_is_recorded_on_exactly_the_v20260505_releases() -> None:
    faulty = sorted(r.release_version for r in AMI_RELEASES.values() if r.faults)
    assert faulty == ["1.33.11-20260505", "1.34.7-20260505", "1.35.4-20260505"]
    assert all(AMI_RELEASES[r].faults == (FAST_IMAGE_PULL_DEADLOCK,) for r in faulty)
    # containerd 2.2.3 is the cause; the release before it (2.2.1) and the fix's release are clean.
    assert AMI_RELEASES["1.34.7-20260423"].faults == ()
    assert AMI_RELEASES["1.34.8-20260610"].faults == ()
    assert FAST_IMAGE_PULL_DEADLOCK.feature == FAST_IMAGE_PULL_FEATURE
    assert fixing_release(FAST_IMAGE_PULL_DEADLOCK, "1.34") == "1.34.8-20260610"


def test_known_faults_name_their_sources_and_their_fix() -> None:
    for fault in KNOWN_FAULTS:
        assert fault.sources and fault.fixed_in.startswith("v")
        # The fixing release is in the table for every minor it shipped for.
        assert any(r.tag == fault.fixed_in for r in AMI_RELEASES.values())


def test_release_versions_name_their_kubernetes_minor_and_date() -> None:
    for version, release in AMI_RELEASES.items():
        assert version == release.release_version
        assert release.kubernetes_version in KUBECTL_LAYERS
        assert len(release.release_date) == 8
        assert version_key(release.driver) >= (2, 25)


def test_the_default_configuration_boots_a_release_without_a_known_fault() -> None:
    assert FAST_IMAGE_PULL, "the launch template turns FastImagePull on; this test guards that pairing"
    config = parse_config(_config())
    minor = config.cluster.kubernetes_version
    assert AMI_RELEASES[DEFAULT_AMI_RELEASES[minor]].faults == ()


def test_fastimagepull_with_a_v20260505_release_is_refused_naming_the_fix() -> None:
    data = with_change(_config(ami_release="1.34.7-20260505"), "cluster.kubernetes_version", "1.34")
    assert _problems(data) == [
        (
            "env.yaml: trainium.node_groups[0].ami_release: '1.34.7-20260505' (containerd 2.2.3-1.amzn2023.0.1) "
            "has a known fault with FastImagePull, which every Trainium node turns on: pod sandbox creation "
            "deadlocks, aws-node never starts and the node never becomes Ready (awslabs/amazon-eks-ami#2712, "
            "#2710); fixed in 1.34.8-20260610 (v20260610); newest without a known fault: 1.34.9-20260714"
        )
    ]


def test_an_unknown_release_without_declared_facts_is_refused() -> None:
    assert _problems(_config(ami_release="1.36.5-20261020")) == [
        (
            "env.yaml: trainium.node_groups[0].ami_release: '1.36.5-20261020' is not in the AMI release table "
            "(cluster_facts/ami_releases.py); newest of the table without a known fault: 1.36.2-20260714, or "
            "declare this release's facts under ami_facts: {neuron_driver, containerd} (docs/upgrades.md)"
        )
    ]


DECLARED = {"neuron_driver": "2.31.7.0", "containerd": "2.2.5-1.amzn2023.0.1"}


def test_an_unknown_release_with_declared_facts_is_taken_and_synth_says_it_rests_on_them() -> None:
    config = parse_config(_config(ami_release="1.36.5-20261020", ami_facts=DECLARED))
    assert configuration_notices(config, TODAY) == [
        (
            "trainium.node_groups[0].ami_facts",
            (
                "AMI release 1.36.5-20261020 is not in the table (cluster_facts/ami_releases.py): its Neuron "
                "driver 2.31.7.0 and containerd 2.2.5-1.amzn2023.0.1 rest on this declaration, not on a source "
                "the project has read; `make preflight` asks AWS that the release exists"
            ),
        )
    ]


def test_declared_facts_of_a_release_the_table_knows_are_refused() -> None:
    assert _problems(_config(ami_release="1.36.2-20260714", ami_facts=DECLARED)) == [
        (
            "env.yaml: trainium.node_groups[0].ami_facts: the AMI release table knows 1.36.2-20260714 (Neuron "
            "driver 2.29.0.0, containerd 2.2.4-1.amzn2023.0.3): remove ami_facts"
        )
    ]


def test_declared_facts_without_a_release_are_refused() -> None:
    assert _problems(_config(ami_facts=DECLARED)) == [
        (
            "env.yaml: trainium.node_groups[0].ami_facts: declares the facts of ami_release, which is not set; "
            "name the release these facts describe, or remove ami_facts"
        )
    ]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "neuron_driver",
            "2.31",
            "'2.31' is not a Neuron driver version (aws-neuronx-dkms) such as 2.31.7.0",
        ),
        ("containerd", "latest", "'latest' is not a containerd package version such as 2.2.4-1.amzn2023.0.3"),
    ],
)
def test_malformed_declared_facts_are_one_line_each(key: str, value: str, message: str) -> None:
    facts = {**DECLARED, key: value}
    assert _problems(_config(ami_release="1.36.5-20261020", ami_facts=facts)) == [
        f"env.yaml: trainium.node_groups[0].ami_facts.{key}: {message}"
    ]


def test_a_declared_release_with_the_faulty_containerd_before_the_fix_is_refused_too() -> None:
    """The fault follows from the declared facts: containerd 2.2.3 in a release built before v20260610."""
    facts = {"neuron_driver": "2.27.4.0", "containerd": "2.2.3-1.amzn2023.0.1"}
    data = with_change(
        _config(ami_release="1.35.4-20260512", ami_facts=facts), "cluster.kubernetes_version", "1.35"
    )
    [line] = _problems(data)
    assert line.startswith(
        "env.yaml: trainium.node_groups[0].ami_release: '1.35.4-20260512' (containerd 2.2.3-1.amzn2023.0.1) has "
        "a known fault with FastImagePull"
    )
    assert line.endswith(
        "fixed in 1.35.5-20260610 (v20260610); newest without a known fault: 1.35.6-20260714"
    )
    later = declared_release("1.35.9-20261020", neuron_driver="2.31.7.0", containerd="2.2.3-1.amzn2023.0.1")
    assert later.faults == ()


def test_a_release_whose_driver_is_too_old_for_the_image_suggests_only_releases_without_a_fault() -> None:
    data = with_change(_config(ami_release="1.34.2-20260107"), "cluster.kubernetes_version", "1.34")
    assert _problems(data) == [
        (
            "env.yaml: runs[0].image: 'public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-"
            "ubuntu24.04' is Neuron SDK 2.29.1, which needs Neuron driver 2.27.4.0 or later; AMI release "
            "1.34.2-20260107 brings 2.25.4.0: use AMI release 1.34.6-20260409, 1.34.6-20260415, 1.34.7-20260423, "
            "1.34.8-20260610, 1.34.9-20260618, 1.34.9-20260625, 1.34.9-20260714"
        )
    ]
