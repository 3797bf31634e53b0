"""TrainiumJob.admitted_job on its own (plain data, no torchx): what it adds to the Job TorchX renders,
what it keeps, and what it refuses. The Jobs the real CLI renders are judged by the team policies in
tests/torchx_trn/test_torchx_admission.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cluster_facts.kubernetes_names import INSTANCE_TYPE_LABEL, NODE_GROUP_LABEL, TRAINING_PRIORITY_CLASS
from torchx_trn.trainium import TrainiumJob, trainium_job

JOB = trainium_job(
    script="train.py",
    script_args=(),
    claim="fsx-abc123",
    node_group="trn1-32xl",
    uid=248061,
    nnodes=1,
    instance_type="trn1.32xlarge",
    image="public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04",
    cacheset=None,
    max_retries=0,
    environment={},
)


def rendered(job: TrainiumJob) -> dict[str, Any]:
    """The shape TorchX 0.7.0's scheduler renders for one replica (its role_to_pod, as plain data)."""
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "trainium-ddp-x7k2p9"},
        "spec": {
            "schedulerName": "volcano",
            "queue": "test",
            "tasks": [
                {
                    "name": "worker-0",
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": {}},
                        "spec": {
                            "restartPolicy": "Never",
                            "nodeSelector": {INSTANCE_TYPE_LABEL: job.instance.name},
                            "volumes": [
                                {"name": "dshm", "emptyDir": {"medium": "Memory"}},
                                *(
                                    {"name": f"mount-{i}", "persistentVolumeClaim": {"claimName": m.claim}}
                                    for i, m in enumerate(job.mounts)
                                ),
                            ],
                            "containers": [{"name": "worker-0", "securityContext": {}}],
                        },
                    },
                }
            ],
        },
    }


def test_it_adds_what_the_policies_require_and_keeps_what_torchx_rendered() -> None:
    job = rendered(JOB)
    before = copy.deepcopy(job)
    admitted = JOB.admitted_job(job, priority_class=None)
    assert job == before, "the input is left alone"
    assert admitted["spec"]["priorityClassName"] == TRAINING_PRIORITY_CLASS
    spec = admitted["spec"]["tasks"][0]["template"]["spec"]
    assert spec["nodeSelector"] == {INSTANCE_TYPE_LABEL: "trn1.32xlarge", NODE_GROUP_LABEL: "trn1-32xl"}
    assert spec["securityContext"]["runAsUser"] == spec["securityContext"]["runAsGroup"] == 248061
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    claims = {
        v["persistentVolumeClaim"]["claimName"]: v["persistentVolumeClaim"]
        for v in spec["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims["fsx-abc123"] == {"claimName": "fsx-abc123"}
    assert claims["fsx-abc123-datasets"] == {"claimName": "fsx-abc123-datasets", "readOnly": True}
    assert spec["restartPolicy"] == "Never" and spec["volumes"][0]["emptyDir"] == {"medium": "Memory"}


def test_a_privileged_container_stays_privileged_for_the_policies_to_refuse() -> None:
    """It adds; it does not launder what TorchX rendered (a device mount makes TorchX's container
    privileged): Pod Security refuses that, not the component's silence."""
    job = rendered(JOB)
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    admitted = JOB.admitted_job(job, priority_class=None)
    assert admitted["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["securityContext"]["privileged"]


@pytest.mark.parametrize("asked", [None, TRAINING_PRIORITY_CLASS])
def test_the_teams_priority_class_may_be_asked_for(asked: str | None) -> None:
    assert JOB.admitted_job(rendered(JOB), priority_class=asked)["spec"]["priorityClassName"] == (
        TRAINING_PRIORITY_CLASS
    )


def test_another_priority_class_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^-cfg priority_class=system-node-critical: a team's jobs run at"):
        JOB.admitted_job(rendered(JOB), priority_class="system-node-critical")
