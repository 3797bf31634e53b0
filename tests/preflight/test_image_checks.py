"""The image rows of ``make preflight``: one per image the nodes pull; a missing one fails in one row
naming the image, where it was looked for and the key or pin it comes from."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cluster_facts.neuron_stack import DEVICE_PLUGIN_IMAGE
from preflight.cli import EXIT_CHECK_FAILED, EXIT_OK, main
from preflight.image_checks import check_images
from preflight.image_inventory import pulled_images
from tests.preflight.conftest import (
    EXAMPLE_CONFIG,
    EXAMPLE_TEMPLATE,
    FakeAccount,
    config_from,
    example_config,
)
from tests.preflight.test_cli import EXAMPLE_IMAGE_NAMES, parse_table, squeezed

OTHER_TRAINING_IMAGE = (
    "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.27.1-ubuntu24.04"
)


def run(
    account: FakeAccount, stubbed_factory: Callable[..., Any], path: Path = EXAMPLE_CONFIG
) -> tuple[int, dict[str, Any]]:
    config = example_config() if path == EXAMPLE_CONFIG else config_from(path)
    out = io.StringIO()
    code = main(
        ["--config", str(path), "--width", "400", *EXAMPLE_TEMPLATE],
        clients_factory=stubbed_factory(account, config),
        stdout=out,
        stderr=io.StringIO(),
    )
    return code, {
        check: row for check, row in parse_table(out.getvalue()).items() if check.startswith("image")
    }


def test_every_image_of_the_example_is_one_passing_row(
    account: FakeAccount, stubbed_factory: Callable[..., Any]
) -> None:
    code, rows = run(account, stubbed_factory)
    assert code == EXIT_OK
    assert list(rows) == [f"image{name}" for name in EXAMPLE_IMAGE_NAMES]
    assert {status for status, _, _ in rows.values()} == {"PASS"}
    assert "askedecr:BatchGetImagein602401143452" in rows["imageaws-efa-k8s-device-plugin"][1]


def test_a_missing_device_plugin_tag_fails_in_one_row_naming_the_pin(
    account: FakeAccount, stubbed_factory: Callable[..., Any]
) -> None:
    account.registries.missing.add(DEVICE_PLUGIN_IMAGE)
    code, rows = run(account, stubbed_factory)
    assert code == EXIT_CHECK_FAILED
    failed = {check: row for check, row in rows.items() if row[0] == "FAIL"}
    assert list(failed) == ["imageneuron-device-plugin"]
    _, detail, action = failed["imageneuron-device-plugin"]
    assert detail == squeezed(
        f"{DEVICE_PLUGIN_IMAGE}, pulled through the account's cache, which fetches it from public.ecr.aws "
        "(the Neuron device plugin: DEVICE_PLUGIN_VERSION (cluster_facts/neuron_stack.py)): not found, asked "
        "public.ecr.aws's API: 404 MANIFEST_UNKNOWN: no manifest 2.29.149.0 in neuron/neuron-device-plugin"
    )
    assert action == squeezed(
        "change the pin DEVICE_PLUGIN_VERSION (cluster_facts/neuron_stack.py) to an image public.ecr.aws has"
    )


def test_each_missing_image_is_its_own_row(account: FakeAccount, stubbed_factory: Callable[..., Any]) -> None:
    account.registries.missing.update(
        {"quay.io/coreos/etcd:v3.5.33", "docker.io/volcanosh/vc-scheduler:v1.15.1"}
    )
    account.ecr_missing.add(
        "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20"
    )
    code, rows = run(account, stubbed_factory)
    assert code == EXIT_CHECK_FAILED
    assert sorted(check for check, row in rows.items() if row[0] == "FAIL") == [
        "imageaws-efa-k8s-device-plugin",
        "imageetcd",
        "imagevc-scheduler",
    ]
    assert (
        "EFA_DEVICE_PLUGIN_TAGv0.5.20(cluster_facts/image_pins.py)"
        in rows["imageaws-efa-k8s-device-plugin"][1]
    )
    assert "ImageNotFound:Requestedimagenotfound" in rows["imageaws-efa-k8s-device-plugin"][1]


def test_a_missing_run_image_names_its_configuration_key(
    account: FakeAccount, stubbed_factory: Callable[..., Any], tmp_path: Any
) -> None:
    text = EXAMPLE_CONFIG.read_text().replace(
        "image: public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04",
        f"image: {OTHER_TRAINING_IMAGE}",
    )
    path = tmp_path / "my-account.yaml"
    path.write_text(text)
    account.registries.missing.add(OTHER_TRAINING_IMAGE)
    code, rows = run(account, stubbed_factory, path)
    assert code == EXIT_CHECK_FAILED
    [(_, detail, action)] = [row for row in rows.values() if row[0] == "FAIL"]
    assert "runllm:runs[1].image" in detail
    assert action == "setruns[1].imagetoanimagetheregistryhas"


def test_a_throttled_registry_warns_and_does_not_fail(
    account: FakeAccount, stubbed_factory: Callable[..., Any]
) -> None:
    account.registries.throttled.add("registry-1.docker.io")
    code, rows = run(account, stubbed_factory)
    assert code == EXIT_OK
    warned = {check: row for check, row in rows.items() if row[0] == "WARN"}
    assert sorted(warned) == ["imagevc-controller-manager", "imagevc-scheduler", "imagevc-webhook-manager"]
    assert "429TOOMANYREQUESTSfromdocker.io" in warned["imagevc-scheduler"][1]


def test_without_ecr_permission_the_efa_row_warns_with_the_permission(
    account: FakeAccount, stubbed_factory: Callable[..., Any]
) -> None:
    denied = (
        "User: arn:aws:iam::444455556666:user/ci is not authorized to perform: ecr:BatchGetImage on resource: "
        "arn:aws:ecr:us-east-1:602401143452:repository/eks/aws-efa-k8s-device-plugin because no "
        "identity-based policy allows the ecr:BatchGetImage action"
    )
    account.errors["batch_get_image"] = ("AccessDeniedException", denied)
    code, rows = run(account, stubbed_factory)
    assert code == EXIT_OK
    status, _, action = rows["imageaws-efa-k8s-device-plugin"]
    assert (status, action) == ("WARN", "allowecr:BatchGetImage(read-only)forthesecredentials")


def test_clients_without_registries_give_not_asked_rows() -> None:
    images = pulled_images(example_config())
    rows = check_images(images, {})
    assert {row.status for row in rows} == {"WARN"}
    assert all(row.detail.endswith(": not asked") for row in rows)
