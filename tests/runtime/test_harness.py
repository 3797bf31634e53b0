"""The harness changes only what one machine forces (fast: no process starts here)."""

from __future__ import annotations

from pathlib import Path

from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from k8s_charts.data_staging import SCRIPT_PATH
from tests.runtime.harness import (
    STANDIN,
    container_environment,
    expand_references,
    local_etcd_args,
    local_launcher,
    option_value,
    rendered_container,
    volcano_pod_fields,
    with_option,
)


def test_the_launcher_keeps_every_rendered_option_but_endpoint_workers_and_script(
    plan: KubernetesLayerPlan,
) -> None:
    rendered = list(rendered_container(plan, step="bert-train", kind="Job", name="bert-train").args)
    local = local_launcher(rendered, endpoint="127.0.0.1:4001", nproc_per_node=1, script_args=["--x", "1"])

    script = rendered.index(SCRIPT_PATH)
    expected = with_option(
        with_option(rendered[:script], "--rdzv_endpoint", "127.0.0.1:4001"), "--nproc_per_node", "1"
    )
    assert local == [*expected, "--local_addr", "127.0.0.1", str(STANDIN), "--x", "1"]
    assert option_value(rendered, "--rdzv_backend") == option_value(local, "--rdzv_backend") == "etcd"


def test_etcd_keeps_the_rendered_flags_on_loopback(plan: KubernetesLayerPlan) -> None:
    rendered = list(rendered_container(plan, step="etcd", kind="Deployment", name="etcd-server").args)
    local = local_etcd_args(rendered, client_port=4001, peer_port=4002, data_dir=Path("/tmp/x"))

    assert "--enable-v2=true" in local
    assert option_value(local, "--listen-client-urls") == "http://127.0.0.1:4001"
    assert option_value(local, "--advertise-client-urls") == "http://127.0.0.1:4001"
    assert option_value(local, "--initial-cluster") == "etcd-server=http://127.0.0.1:4002"
    assert option_value(local, "--data-dir") == "/tmp/x"
    assert [arg.split("=")[0] for arg in local] == [arg.split("=")[0] for arg in rendered]


def test_the_environment_is_built_as_kubernetes_and_volcano_build_it() -> None:
    fields = volcano_pod_fields(job="bert-train", job_uid="u-1", version=3, task="worker", index=1)
    env = [
        {
            "name": "JOB_VERSION",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['volcano.sh/job-version']"}},
        },
        {
            "name": "GROUP",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['scheduling.k8s.io/group-name']"}},
        },
        {"name": "RDZV_ID", "value": "$(GROUP)-$(JOB_VERSION)-$(LATER)-$$(GROUP)"},
        {"name": "LATER", "value": "x"},
    ]
    environment = container_environment(env, pod_fields=fields, appended={"VC_TASK_INDEX": "1"})

    # A reference to a variable defined later stays as written; $$ escapes.
    assert environment["RDZV_ID"] == "bert-train-u-1-3-$(LATER)-$(GROUP)"
    assert environment["VC_TASK_INDEX"] == "1"
    assert (
        expand_references("--rdzv_id=$(RDZV_ID)", environment)
        == "--rdzv_id=bert-train-u-1-3-$(LATER)-$(GROUP)"
    )
