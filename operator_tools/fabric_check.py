"""``make fabric-check``: the kubectl commands that run one node group's fabric check and read its verdict.

The check is rendered by ``make synth`` into ``cdk.out/k8s/fabric-check-<group>.yaml`` (the Volcano
Job; its service account, RBAC and NetworkPolicy are applied at deploy in step ``fabric-checks``).
This prints, per group: delete the last run (a Volcano Job's spec cannot change), apply, wait for
the launcher pod and for its end, its log from the table to the verdict, and the verdict alone.
A group that cannot be checked (max_size below 2, no team's queue) is named with its reason on
standard error and the exit status is 1.

python -m operator_tools.fabric_check --config config/default.yaml [--group trn1-32xl] [--out cdk.out]
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from cluster_facts.kubernetes_names import PLATFORM_NAMESPACE
from cluster_plan.fabric_check_commands import wait_seconds
from cluster_plan.kubernetes_values import fabric_checks
from config import ConfigError, StackConfig, load_config
from k8s_charts.checks.fabric_check import FabricCheckValues, job_name, launcher_pod, skip_reason

__all__ = ["CREATE_WAIT_SECONDS", "commands", "main"]

CREATE_WAIT_SECONDS = 5 * 60
"""Volcano creates the job's pods within seconds of the apply (queued gangs get their pods)."""
# The launcher's termination message holds the verdict (and what was tainted).
VERDICT_PATH = "{.status.containerStatuses[0].state.terminated.message}"


def commands(config: StackConfig, check: FabricCheckValues, *, out: str, config_path: str) -> list[str]:
    """The shell lines that run ``check`` from its rendered file and print its verdict."""
    file = shlex.quote(f"{out}/k8s/{job_name(check.node_group)}.yaml")
    pod = f"pod/{launcher_pod(check.node_group)}"
    namespace = f"kubectl -n {PLATFORM_NAMESPACE}"
    lines = [
        (
            f"# {job_name(check.node_group)}: {check.nodes} x {check.instance.name} over EFA "
            f"({check.instance.network_gbps} Gbps each), threshold {check.threshold:g}; "
            "the autoscaler brings the nodes and lets them go"
        ),
    ]
    if not Path(f"{out}/k8s/{job_name(check.node_group)}.yaml").exists():
        lines.append(f"make synth CONFIG={shlex.quote(config_path)} OUT={shlex.quote(out)}")
    lines += [
        f"kubectl delete -f {file} --ignore-not-found --cascade=foreground --wait",
        f"kubectl apply -f {file}",
        f"{namespace} wait --for=create {pod} --timeout={CREATE_WAIT_SECONDS}s",
        (
            f"{namespace} wait --for=jsonpath='{{.status.containerStatuses[0].state.terminated.reason}}' "
            f"{pod} --timeout={wait_seconds(config)}s"
        ),
        f"{namespace} logs {pod} | sed -n '/^nccom-test result table:/,$p'",
        f"{namespace} get {pod} -o jsonpath='{VERDICT_PATH}'",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make fabric-check", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--group", default="", help="one node group (default: every Trainium group)")
    parser.add_argument("--out", default="cdk.out", help="where make synth wrote the review files")
    arguments = parser.parse_args(argv)
    try:
        config = load_config(arguments.config)
    except ConfigError as error:
        print("\n".join(error.lines()), file=sys.stderr)
        return 1
    checks = fabric_checks(config)
    if arguments.group:
        checks = tuple(check for check in checks if check.node_group == arguments.group)
        if not checks:
            groups = ", ".join(group.name for group in config.trainium.node_groups)
            print(
                f"{arguments.config}: no Trainium node group {arguments.group!r}; groups: {groups}",
                file=sys.stderr,
            )
            return 2
    status = 0
    for check in checks:
        reason = skip_reason(check)
        if reason is not None:
            print(f"{job_name(check.node_group)}: cannot run: {reason}", file=sys.stderr)
            status = 1
            continue
        print("\n".join(commands(config, check, out=arguments.out, config_path=arguments.config)))
    return status


if __name__ == "__main__":
    sys.exit(main())
