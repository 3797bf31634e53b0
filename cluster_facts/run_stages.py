"""The stages of a run started on zero Trainium nodes, from ``kubectl apply`` to its first step.

One list, in order, for everything that speaks of them: the modelled timeline (``make timeline``,
operator_tools/timeline.py) prints its expected time per stage in this order, and the canary
(``make canary``) measures the same stages on a real account, so the two read side by side.
Only the ids and titles live here; what each stage costs, and why, belongs to the model.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RUN_STAGES", "RunStage", "stage_ids"]


@dataclass(frozen=True)
class RunStage:
    id: str
    """Short, stable, snake_case: what the model and the canary key their figures by."""
    title: str
    """What has happened when the stage ends."""


RUN_STAGES: tuple[RunStage, ...] = (
    RunStage("pods_pending", "the Job is admitted and its gang's pods are pending"),
    RunStage("scale_up", "the cluster autoscaler has raised the node group"),
    RunStage("instance_launch", "EC2 has launched the instances"),
    RunStage("node_join", "the nodes have joined the cluster and are Ready"),
    RunStage("device_plugins", "the Neuron and EFA devices are advertised"),
    RunStage("node_check", "the new-node check has passed and lifted the startup taint"),
    RunStage("pods_bound", "the gang is bound to the nodes"),
    RunStage("image_pull", "the training image is on the nodes"),
    RunStage("data_ready", "the run's data sets are staged and verified"),
    RunStage("compile", "the training graphs are compiled or loaded from the compile cache"),
    RunStage("rendezvous", "the workers have met and formed the process group"),
    RunStage("first_step", "the first training step is done"),
)


def stage_ids() -> tuple[str, ...]:
    return tuple(stage.id for stage in RUN_STAGES)
