"""The harness changes only what one machine forces (fast: no process starts here)."""

from __future__ import annotations

from pathlib import Path

from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from tests.runtime.harness import (
    STANDIN,
    launcher_script_index,
    local_etcd_args,
    local_launcher,
    option_value,
    rendered_container,
    training_job,
    with_option,
)


def test_the_launcher_keeps_every_rendered_option_but_endpoint_workers_and_script(
    plan: KubernetesLayerPlan,
) -> None:
    rendered = list(training_job(plan).args)
    local = local_launcher(rendered, endpoint="127.0.0.1:4001", nproc_per_node=1, script_args=["--x", "1"])

    script = launcher_script_index(rendered)
    assert rendered[script].endswith("/dp_bert_large_hf_pretrain_hdf5.py")
    options = with_option(rendered[:script], "--rdzv_endpoint", "127.0.0.1:4001")
    assert local == [
        *with_option(options, "--nproc_per_node", "1"),
        "--local_addr",
        "127.0.0.1",
        str(STANDIN),
        "--x",
        "1",
    ]
    assert option_value(local, "--rdzv_backend") == "etcd"
    assert option_value(local, "--rdzv_id") == "$(RDZV_ID)"


def test_etcd_keeps_the_rendered_flags_on_loopback(plan: KubernetesLayerPlan) -> None:
    rendered = list(rendered_container(plan, step="etcd", kind="Deployment", name="etcd-server").args)
    local = local_etcd_args(rendered, client_port=4001, peer_port=4002, data_dir=Path("/tmp/x"))

    assert "--enable-v2=true" in local
    assert option_value(local, "--listen-client-urls") == "http://127.0.0.1:4001"
    assert option_value(local, "--advertise-client-urls") == "http://127.0.0.1:4001"
    assert option_value(local, "--initial-cluster") == "etcd-server=http://127.0.0.1:4002"
    assert option_value(local, "--data-dir") == "/tmp/x"
    assert [arg.split("=")[0] for arg in local] == [arg.split("=")[0] for arg in rendered]
