"""The canary run: a training run of the first team, built and rendered by the chart every run
uses (k8s_charts/runs/training_run.py ``TrainingRunChart``), whose script is the canary's worker program
(cluster_programs/canary_worker.py, shipped in the run's ConfigMap and checked by its SHA-256).

So the canary takes the real path: the run's queue and gang, its node group's label and taint, the
team's claims and uid, the data-set mount read-only, run_worker.sh, torchrun and the etcd
rendezvous, every Neuron device and EFA interface of the node, and the run's output directory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import cdk8s

from cluster_facts.kubernetes_names import (
    DATA_MOUNT,
    DATASETS_ROOT,
    ETCD_CLIENT_PORT,
    ETCD_SERVICE_NAME,
    TRAINING_POD_LABELS,
)
from cluster_facts.script_files import program_text
from cluster_plan.kubernetes_values import image_source, placeholder_file_system
from config.consistency import node_group_stacks
from config.model import StackConfig, TrainiumNodeGroupSettings
from config.workloads import DEFAULT_TRAINING_IMAGE
from k8s_charts.runs.tensorboard import RELOAD_SECONDS
from k8s_charts.runs.training_run import PROGRAM_DIR, TrainingRun, TrainingRunChart

__all__ = [
    "CANARY_NAME",
    "CANARY_PROGRAM",
    "canary_image",
    "canary_manifests",
    "canary_run",
    "canary_scale_down_minutes",
    "canary_size",
    "canary_tensorboard_minutes",
    "canary_timeout_minutes",
]

CANARY_NAME = "canary"
CANARY_PROGRAM = "canary_worker.py"
CANARY_PROGRAM_STAGES = ("neuron_devices", "efa_devices", "compile", "collective")
"""The stages of NOT_MEASURABLE (operator_tools/canary_report.py) whose check the canary's program
runs (cluster_programs/canary_worker.py): named, it runs none of them."""
# Large enough to be bandwidth-bound across nodes, small enough to take seconds.
CANARY_MESSAGE_BYTES = 256 * 2**20


def canary_timeout_minutes(config: StackConfig) -> int:
    """How long the run may take by default: the autoscaler's time to bring the nodes, then 30 minutes."""
    return config.autoscaler.max_node_provision_minutes + 30


def canary_scale_down_minutes(config: StackConfig) -> int:
    """How long the nodes may stay after the run: the autoscaler's unneeded time, its pass and a
    node's termination."""
    return config.autoscaler.scale_down_unneeded_minutes + 5


def canary_tensorboard_minutes() -> int:
    """How long TensorBoard may take to list the run after it ended: TensorBoard finds a new run at
    its first reload after the event file appears, up to ``RELOAD_SECONDS`` after its last reload
    ended, and a reload of many runs takes a while itself (measured: TensorBoard 2.21.0 at the 30 s
    interval listed a new run 24 s after its event file appeared; tests/cluster/test_canary_pods.py,
    10 s after the run's end); three intervals, in whole minutes."""
    return -(-3 * RELOAD_SECONDS // 60)


def canary_size(config: StackConfig, node_group: str | None) -> tuple[TrainiumNodeGroupSettings, int]:
    """The group (the first team's first, or the named one) and 2 nodes, or 1 where max_size is 1."""
    team = config.teams[0]
    groups = config.team_node_groups(team)
    group = next((g for g in groups if g.name == node_group), None) if node_group else groups[0]
    if group is None:
        allowed = ", ".join(g.name for g in groups)
        raise ValueError(f"node group {node_group!r} is not one team {team.name} may use; allowed: {allowed}")
    return group, min(2, group.max_size)


def canary_image(config: StackConfig, group: TrainiumNodeGroupSettings) -> tuple[str, str]:
    """The group's Neuron stack and the image the canary runs there: the cluster's training image on
    an xla group; on a native group, the image of the first configured run placed on it (the native
    stack names no default image: cluster_facts/neuron_stack.py); a ValueError when there is none."""
    stack, _ = node_group_stacks(config.trainium.node_groups, list(config.runs), config.teams)[group.name]
    if stack != "native":
        return stack, DEFAULT_TRAINING_IMAGE
    images = [run.image for run in config.runs if config.run_node_group(run).name == group.name]
    if not images:
        raise ValueError(
            f"node group {group.name!r} serves the native stack, for which the cluster names no image: "
            "configure a run on it (runs[].node_group, with its TorchNeuron image) for the canary to use"
        )
    return stack, images[0]


def canary_run(
    config: StackConfig, *, node_group: str | None = None, not_measurable: Sequence[str] = ()
) -> TrainingRun:
    """The canary's run; ``not_measurable``: the stages ``--not-measurable`` named
    (operator_tools/canary_report.py ``NOT_MEASURABLE``), those of its program passed to it as
    CANARY_NOT_MEASURABLE so that it runs no check of them (none: the variable is not set)."""
    team = config.teams[0]
    group, nodes = canary_size(config, node_group)
    stack, image = canary_image(config, group)
    file_system = placeholder_file_system(config)
    program = program_text(CANARY_PROGRAM)
    return TrainingRun(
        name=CANARY_NAME,
        instance=group.instance,
        node_group=group.name,
        nodes=nodes,
        image=image_source(config).resolve(image),
        namespace=team.name,
        queue=team.queue_name,
        claim_name=file_system.claim_name,
        datasets_claim_name=file_system.datasets_claim_name,
        script=f"{PROGRAM_DIR}/{CANARY_PROGRAM}",
        environment={
            "DATA_MOUNT": DATA_MOUNT,
            "DATASETS_ROOT": DATASETS_ROOT,
            "CANARY_NEURON_DEVICES": str(group.instance.chips),
            "CANARY_EFA_DEVICES": str(group.instance.efa_interfaces),
            "CANARY_NETWORK_GBPS": str(group.instance.network_gbps),
            "CANARY_THRESHOLD": str(config.fabric_check.threshold),
            "CANARY_MESSAGE_BYTES": str(CANARY_MESSAGE_BYTES),
            "CANARY_NEURON_STACK": stack,
            "PYTHONUNBUFFERED": "1",
            **(
                {"CANARY_NOT_MEASURABLE": ",".join(s for s in not_measurable if s in CANARY_PROGRAM_STAGES)}
                if set(not_measurable) & set(CANARY_PROGRAM_STAGES)
                else {}
            ),
        },
        program_files={CANARY_PROGRAM: program},
        cacheset=CANARY_NAME,
        # No restart: a failure ends the canary and says why.
        retries=0,
        rendezvous_endpoint=f"{ETCD_SERVICE_NAME}:{ETCD_CLIENT_PORT}",
        pod_labels=TRAINING_POD_LABELS,
        run_as=team.owner_id,
    )


def canary_manifests(run: TrainingRun) -> tuple[str, list[Mapping[str, Any]]]:
    """The run's id and its objects (the ConfigMap, then the Volcano Job), as the API takes them."""
    app = cdk8s.App()
    chart = TrainingRunChart(app, "canary", run=run)
    return chart.run_id, [dict(obj.to_json()) for obj in chart.api_objects]
