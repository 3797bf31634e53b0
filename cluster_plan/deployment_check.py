"""The post-deployment check of each pipeline stage: a bash script (``scripts/deployment_check.sh``)
and the values it reads.

It runs in CodeBuild in the tooling account after a stage's TrainiumStack deploys, with the
stack's outputs as variables, assumes the stage's read-only check role
(constructs_trn/deployment_check_role.py) and checks the cluster, its Trainium node groups and
EFA interfaces, and that the cluster autoscaler can scale every Trainium group from zero: each
group's Auto Scaling group carries the node-template tags (labels, taint, Neuron and EFA devices from
the catalog) and the discovery tags. Where the API server is reachable it also checks that the
autoscaler runs, is healthy and lists every Trainium group, and that every Trainium node that runs
(at least the groups' min_size, 0 by default: no node needs to run) advertises its devices.

With ``fabric_check.pipeline`` (and a reachable API server) it then runs each group's fabric check:
deletes the last run, creates the Job the pipeline synth wrote (``cdk.out/fabric-check/<stage>/``),
waits for it to end (bounded: the autoscaler's time to bring the nodes plus the pods' deadline),
prints the launcher's table and verdict, and fails the stage with the verdict line unless it passed.

With the pipeline file's ``waves[].environments[].canary`` it runs the canary before the fabric
checks: ``make canary`` from the pipeline's checkout (the input ``CANARY_SOURCE``) with the stage's
environment file, through a kubeconfig whose tokens assume the check role afresh from CodeBuild's
own credentials; the canary's failure line fails the stage.
"""

from __future__ import annotations

from cluster_facts.autoscaling import (
    AUTOSCALER_NAME,
    AUTOSCALER_NAMESPACE,
    AUTOSCALER_STATUS_CONFIGMAP,
    discovery_tags,
    node_template_tags,
)
from cluster_facts.instance_catalog import TrainiumInstanceType
from cluster_facts.kubernetes_names import (
    EFA_INTERFACES_LABEL,
    EFA_RESOURCE,
    NEURON_DEVICES_LABEL,
    NEURON_RESOURCE,
    NODE_GROUP_LABEL,
    PLATFORM_NAMESPACE,
)
from cluster_facts.script_files import script_body
from cluster_facts.stack_outputs import StackOutput
from cluster_plan.canary_run import (
    canary_scale_down_minutes,
    canary_tensorboard_minutes,
    canary_timeout_minutes,
)
from cluster_plan.fabric_check_commands import pipeline_fabric_checks, wait_seconds
from cluster_plan.kubernetes_values import fabric_checks
from cluster_plan.review_files import fabric_check_job_file
from config.model import StackConfig
from k8s_charts.checks.fabric_check import job_name, skip_reason

__all__ = [
    "CANARY_SETUP_MINUTES",
    "CANARY_SOURCE",
    "CHECK_OUTPUTS",
    "DEVICE_WAIT_SECONDS",
    "deployment_check_env",
    "deployment_check_script",
    "deployment_check_timeout_minutes",
]

# The stack's outputs the check reads, by the variable it reads each as.
CHECK_OUTPUTS = {
    "CLUSTER_NAME": StackOutput.CLUSTER_NAME,
    "ECR_REPOSITORY_URI": StackOutput.ECR_REPOSITORY_URI,
    "FSX_FILE_SYSTEM_ID": StackOutput.FSX_FILE_SYSTEM_ID,
    "FSX_DNS_NAME": StackOutput.FSX_DNS_NAME,
    "FSX_MOUNT_NAME": StackOutput.FSX_MOUNT_NAME,
    "TRAINIUM_SUBNET_ID": StackOutput.TRAINIUM_SUBNET_ID,
}
# How long the check waits for the device plugins to advertise the devices of new nodes.
DEVICE_WAIT_SECONDS = 900
# Where the check finds the pipeline's checkout when it runs the canary (beside the synth output).
CANARY_SOURCE = "source"
# make canary's first step in a fresh build: the project's Python environment from the hashed lock.
CANARY_SETUP_MINUTES = 15


def deployment_check_env(
    config: StackConfig, *, stage_id: str, check_role_arn: str, canary_config: str | None = None
) -> dict[str, str]:
    """What the check knows from the configuration (the stack's outputs arrive as variables).
    ``canary_config``: the stage's environment file, relative to the repository, when the check
    runs the canary."""
    return {
        "STAGE": stage_id,
        "TARGET_ACCOUNT": config.account,
        "TARGET_REGION": config.region,
        "EXPECTED_CLUSTER_NAME": config.name,
        "CHECK_ROLE_ARN": check_role_arn,
        "CHECK_OUTPUT_VARIABLES": " ".join(CHECK_OUTPUTS),
        # name:EFA interfaces per instance, for each Trainium node group
        "TRAINIUM_NODE_GROUPS": " ".join(
            f"{group.name}:{group.instance.efa_interfaces}" for group in config.trainium.node_groups
        ),
        # "group key=value" per line: the tags each group's Auto Scaling group must carry.
        "TRAINIUM_TEMPLATE_TAGS": "\n".join(
            f"{group.name} {key}={value}"
            for group in config.trainium.node_groups
            for key, value in _expected_tags(config, group.name, group.instance).items()
        ),
        "MIN_TRAINIUM_NODES": str(sum(group.min_size for group in config.trainium.node_groups)),
        "AUTOSCALER_NAMESPACE": AUTOSCALER_NAMESPACE,
        "AUTOSCALER_DEPLOYMENT": AUTOSCALER_NAME,
        "AUTOSCALER_STATUS_CONFIGMAP": AUTOSCALER_STATUS_CONFIGMAP,
        # CodeBuild has no route to a private-only API server (it runs in the tooling account).
        "CHECK_KUBERNETES": "true" if config.cluster.endpoint_public_cidrs else "false",
        "DEVICE_WAIT_SECONDS": str(DEVICE_WAIT_SECONDS),
        "NODE_GROUP_LABEL": NODE_GROUP_LABEL,
        "NEURON_DEVICES_LABEL": NEURON_DEVICES_LABEL,
        "EFA_INTERFACES_LABEL": EFA_INTERFACES_LABEL,
        "NEURON_RESOURCE": NEURON_RESOURCE,
        "EFA_RESOURCE": EFA_RESOURCE,
        **_fabric_check_env(config, stage_id=stage_id),
        "CANARY": "true" if canary_config else "false",
        "CANARY_SOURCE": CANARY_SOURCE,
        "CANARY_CONFIG": canary_config or "",
    }


def _fabric_check_env(config: StackConfig, *, stage_id: str) -> dict[str, str]:
    checks = pipeline_fabric_checks(config)
    skipped = [
        f"{job_name(check.node_group)}: {reason}"
        for check in fabric_checks(config)
        if (reason := skip_reason(check)) is not None
    ]
    return {
        "FABRIC_CHECK": "true" if checks else "false",
        "FABRIC_CHECK_NAMESPACE": PLATFORM_NAMESPACE,
        "FABRIC_CHECK_JOBS": " ".join(fabric_check_job_file(stage_id, check.node_group) for check in checks),
        "FABRIC_CHECK_SKIPPED": "\n".join(skipped) if checks else "",
        "FABRIC_CHECK_WAIT_SECONDS": str(wait_seconds(config)),
    }


def _expected_tags(config: StackConfig, name: str, instance: TrainiumInstanceType) -> dict[str, str]:
    # EKS writes the first two discovery tags (enabled=true, <cluster>=owned); the stack writes the
    # node-template tags, among them the third discovery tag.
    enabled, owner, _ = discovery_tags(config.name)
    dra = config.node_group(name).uses_dra
    return {enabled: "true", owner: "owned", **node_template_tags(instance, node_group=name, dra=dra)}


def deployment_check_script() -> str:
    """The check as one CodeBuild command: the script in a subshell, so its ``exit`` ends only the check."""
    return f"(\n{script_body('cluster_plan', 'deployment_check.sh')})"


def deployment_check_timeout_minutes(config: StackConfig, *, canary: bool = False) -> int:
    """CodeBuild's limit for the check: 30 minutes, the fabric checks' bounded waits when it runs
    them, and the canary's setup, run, TensorBoard and scale-down bounds when it runs it (at most
    CodeBuild's own limit, 8 hours)."""
    checks = len(pipeline_fabric_checks(config))
    canary_minutes = (
        CANARY_SETUP_MINUTES
        + canary_timeout_minutes(config)
        + canary_tensorboard_minutes()
        + canary_scale_down_minutes(config)
        if canary
        else 0
    )
    return min(480, 30 + checks * -(-wait_seconds(config) // 60) + canary_minutes)
