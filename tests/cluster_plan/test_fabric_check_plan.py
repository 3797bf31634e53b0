"""The fabric check in the plan, the review files and `make fabric-check`: one job per Trainium group,
rendered and never applied, its access applied; a group too small to check says why."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_facts.kubernetes_names import NEURON_TAINT_KEY, NODE_GROUP_LABEL, PLATFORM_NAMESPACE
from cluster_facts.kubernetes_plan import ManifestSet
from cluster_plan.review_files import write_kubernetes_yaml
from config import parse_config
from operator_tools.fabric_check import main as fabric_check_main
from tests.config.test_config import default_data, with_change
from tests.conftest import REPO_ROOT
from tests.k8s_validation import assert_valid
from tests.plans import shared_review_plan
from tests.yaml_edits import with_change as change_key

SMALL_GROUP = {"name": "trn1-single", "instance_type": "trn1.32xlarge", "max_size": 1}


def two_groups() -> dict[str, Any]:
    data = default_data()
    data["trainium"]["node_groups"].append(dict(SMALL_GROUP))
    return data


def step(data: dict[str, Any], name: str) -> ManifestSet:
    found = shared_review_plan(parse_config(data)).step(name)
    assert isinstance(found, ManifestSet)
    return found


def job(data: dict[str, Any], group: str = "trn1-32xl") -> dict[str, Any]:
    [manifest] = step(data, f"fabric-check-{group}").manifests
    return dict(manifest)


def launcher_env(manifest: dict[str, Any]) -> dict[str, str]:
    [launcher] = [task for task in manifest["spec"]["tasks"] if task["name"] == "launcher"]
    [container] = launcher["template"]["spec"]["containers"]
    return {item["name"]: item["value"] for item in container["env"] if "value" in item}


def test_each_group_gets_a_job_that_is_rendered_not_applied_in_the_platform_namespace() -> None:
    checked = step(default_data(), "fabric-check-trn1-32xl")
    assert not checked.applied
    assert checked.after == ("fabric-checks", "queue-test-open")
    manifest = job(default_data())
    assert_valid([manifest])
    assert (manifest["kind"], manifest["metadata"]["namespace"]) == ("Job", PLATFORM_NAMESPACE)
    spec = manifest["spec"]
    assert spec["queue"] == "test"  # the default team's queue, whose capability holds the group
    worker = next(task for task in spec["tasks"] if task["name"] == "worker")
    assert worker["replicas"] == 2  # the group's max_size
    pod = worker["template"]["spec"]
    assert pod["nodeSelector"] == {NODE_GROUP_LABEL: "trn1-32xl"}
    assert {"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["containers"][0]["resources"]["limits"] == {
        "aws.amazon.com/neuron": "16",
        "vpc.amazonaws.com/efa": "8",
        # Limited to its requests: the platform namespace's LimitRange would give it 1 CPU.
        "cpu": "112",
        "memory": "448Gi",
    }
    access = step(default_data(), "fabric-checks")
    assert access.applied and access.after == ("platform-namespace",)


def test_the_configuration_sets_threshold_size_and_taint() -> None:
    data = change_key(
        default_data(),
        "fabric_check",
        {"threshold": 0.4, "message_bytes": 2**28, "taint_failed_nodes": False},
    )
    environment = launcher_env(job(data))
    assert (environment["THRESHOLD"], environment["MAX_MESSAGE_BYTES"]) == ("0.4", str(2**28))
    assert "TAINT" not in environment
    assert [m["kind"] for m in step(data, "fabric-checks").manifests] == ["NetworkPolicy"]
    assert launcher_env(job(default_data()))["TAINT"] == "trainium/fabric-check=failed:NoSchedule"


def test_a_group_below_two_nodes_renders_no_job_and_says_why(tmp_path: Path) -> None:
    small = step(two_groups(), "fabric-check-trn1-single")
    assert small.manifests == () and not small.applied
    reason = (
        "node group trn1-single has max_size 1; a fabric check needs at least 2 nodes "
        "(EFA carries traffic between nodes)"
    )
    written = write_kubernetes_yaml(shared_review_plan(parse_config(two_groups())), tmp_path)
    text = (tmp_path / "fabric-check-trn1-single.yaml").read_text()
    assert f"# No fabric check: {reason}." in text
    assert list(yaml.safe_load_all(text)) == []
    assert tmp_path / "fabric-check-trn1-32xl.yaml" in written
    # Its access is not rendered either; the other group's is.
    names = {m["metadata"]["name"] for m in step(two_groups(), "fabric-checks").manifests}
    assert {name.removesuffix("-launcher") for name in names} == {"fabric-check-trn1-32xl"}


def test_a_group_no_team_may_use_is_not_checked() -> None:
    data = two_groups()
    data["trainium"]["node_groups"][1]["max_size"] = 2
    data["teams"] = [{"name": "training", "node_groups": ["trn1-32xl"]}]
    assert step(data, "fabric-check-trn1-single").note == (
        "No fabric check: no team's queue may use node group trn1-single (teams[].node_groups)."
    )


def test_the_review_file_says_how_to_run_it_again(tmp_path: Path) -> None:
    write_kubernetes_yaml(shared_review_plan(parse_config(default_data())), tmp_path)
    header = (tmp_path / "fabric-check-trn1-32xl.yaml").read_text().split("apiVersion:")[0]
    assert "NOT applied by this configuration" in header
    assert (
        "kubectl delete -f cdk.out/k8s/fabric-check-trn1-32xl.yaml --ignore-not-found --cascade=foreground --wait"
        in header
    )


# --- make fabric-check ---------------------------------------------------------------------------


def config_file(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_make_fabric_check_prints_the_kubectl_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    (out / "k8s").mkdir(parents=True)
    (out / "k8s" / "fabric-check-trn1-32xl.yaml").write_text("")
    status = fabric_check_main(["--config", str(config_file(tmp_path, default_data())), "--out", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0
    file = f"{out}/k8s/fabric-check-trn1-32xl.yaml"
    pod = "pod/fabric-check-trn1-32xl-launcher-0"
    assert lines[1:] == [
        f"kubectl delete -f {file} --ignore-not-found --cascade=foreground --wait",
        f"kubectl apply -f {file}",
        f"kubectl -n trainium-system wait --for=create {pod} --timeout=300s",
        # 15 minutes for the autoscaler's nodes, the pods' 60-minute deadline, 5 minutes of slack.
        (
            "kubectl -n trainium-system wait --for=jsonpath='{.status.containerStatuses[0].state.terminated.reason}' "
            f"{pod} --timeout=4800s"
        ),
        f"kubectl -n trainium-system logs {pod} | sed -n '/^nccom-test result table:/,$p'",
        f"kubectl -n trainium-system get {pod} -o jsonpath='{{.status.containerStatuses[0].state.terminated.message}}'",
    ]


def test_make_fabric_check_asks_for_a_synth_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config_file(tmp_path, default_data())
    assert fabric_check_main(["--config", str(path), "--out", str(tmp_path / "none")]) == 0
    assert f"make synth CONFIG={path} OUT={tmp_path / 'none'}" in capsys.readouterr().out.splitlines()


@pytest.mark.process
def test_make_fabric_check_on_a_group_too_small_says_so_and_fails(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            "make", "--no-print-directory", "-o", ".venv/.installed", "fabric-check",
            f"CONFIG={config_file(tmp_path, two_groups())}", "GROUP=trn1-single",
        ],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert (
        "fabric-check-trn1-single: cannot run: node group trn1-single has max_size 1; a fabric check needs "
        "at least 2 nodes (EFA carries traffic between nodes)"
    ) in result.stderr
    assert "Traceback" not in result.stderr


def test_make_fabric_check_names_an_unknown_group_and_a_bad_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, default_data())
    assert fabric_check_main(["--config", str(path), "--group", "trn9"]) == 2
    assert "no Trainium node group 'trn9'; groups: trn1-32xl" in capsys.readouterr().err
    bad = config_file(tmp_path, with_change("fabric_check.threshold", 2))
    assert fabric_check_main(["--config", str(bad)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"{bad}: fabric_check.threshold: 2.0 is not a fraction in (0, 1]; the default is 0.25"
    )
