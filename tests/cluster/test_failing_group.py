"""A failure that hits every new node of a group (issue 30, item 2), with the real cluster autoscaler:
the replacements stop at the budget, the autoscaler never halts, and the group goes to zero and stays
there while the gang waits, so the bill stops.

A gang is queued on zero nodes of its group (``max_size`` two above the gang, as in
test_scale_from_zero.py, whose plan this is). The real autoscaler adds the gang's nodes through its
kwok provider; on each new node the node check's program runs whole (``node_check.py --once`` from
its ConfigMap, with a token bound to its DaemonSet pod on the node, tests/cluster/node_check_kwok.py),
its tools stood in by outputs of a trn1.32xlarge missing a Neuron device: every new node fails. The
budget's record is the real ConfigMap under the real RBAC, written concurrently by the checks of the
gang's nodes. The stand-in ``aws`` records the check's calls; the test plays EC2 Auto Scaling for
them: an instance marked Unhealthy is terminated (its Node deleted) and replaced by a new node of the
group (kwok's own form, so the provider counts it), until the group's ``Launch`` is suspended.

Timings (``TEST_TIMINGS``): the autoscaler's scale-down-unneeded-time and delay-after-add are 20 s
where the product has 5 minutes; a node launches, joins and pulls at once (the product's estimate:
6 and 3 minutes); the check takes seconds (the product's: about 2 minutes, 5 at most for a failing
node). So the product's bound, two rounds of launch + pull + check + scale-down-unneeded (about
38 minutes of a node each, docs/capacity.md), is here two rounds of check + 20 s.

What it cannot show: ``Launch`` suspended on a real Auto Scaling group (the kwok provider creates
nodes itself; the call is recorded), and the 15 minutes a never-ready node counts as NotStarted
(``MaxNodeStartupTime``, a constant): tests/stacks/test_unready_limits.py holds that arithmetic.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_facts.node_check import (
    NODE_CHECK_FAILED_TAINT_KEY,
    NODE_CHECK_NAMESPACE,
    NODE_CHECK_TAINT,
    NODE_CHECK_TAINT_KEY,
    replacement_record,
)
from config import StackConfig, parse_config
from tests.cluster.autoscaler import TEST_TIMINGS, Autoscaler, start_autoscaler
from tests.cluster.control_plane import ControlPlane
from tests.cluster.node_check_kwok import kwok_instance
from tests.cluster.plans import plan_of
from tests.cluster.processes import StartupError
from tests.cluster.runs import RunHandle, run_handle
from tests.cluster.test_node_check import HEALTHY
from tests.k8s_charts.checks.test_node_check import SAMPLES, write_tools

RUN = "bert-large"
SPARE = 2
"""As test_scale_from_zero.py: the group may hold two nodes more than the gang (the same plan)."""
FAILING = {**HEALTHY, "NEURON_LS": "neuron_ls_trn1_device_missing.json"}
NODE_CHECK_KWOK = Path(__file__).parent / "node_check_kwok.py"
UNNEEDED_SECONDS = int(TEST_TIMINGS["scale-down-unneeded-time"].removesuffix("s"))
CHECK_SECONDS = 45
"""A check here: the bound token, the program with its stand-in tools (about 5 s, eight EFA
loopbacks), on a loaded 2-core machine."""
READY_SECONDS = 70
"""A withheld node keeps its startup taint until it has been Ready this long (node_check.py
``TEMPLATE_READY_SECONDS``: the autoscaler's one-minute stabilization, a constant): here, where a node
is Ready at once and checked in seconds, the check waits it out; in the product the image pull and
the check take longer."""
BOUND_SECONDS = 2 * (CHECK_SECONDS + READY_SECONDS + UNNEEDED_SECONDS) + 30
"""From the gang queued to the group at zero: two rounds (the gang's nodes; the one replacement) of a
check and the autoscaler's scale-down-unneeded-time, and the autoscaler's loops (2 s) and deletions."""
HOLD_SECONDS = UNNEEDED_SECONDS + 20
"""How long the group must stay at zero with the gang still queued: longer than a scale-down, many loops."""


@pytest.fixture(scope="module")
def config_data(default_config: StackConfig) -> dict[str, Any]:
    data = default_config.model_dump(mode="json", exclude_unset=True)
    run = next(r for r in default_config.runs if r.name == RUN)
    group = default_config.run_node_group(run).name
    for settings in data["trainium"]["node_groups"]:
        if settings["name"] == group:
            settings["max_size"] = run.nodes + SPARE
    return data


@pytest.fixture(scope="module")
def config(config_data: dict[str, Any]) -> StackConfig:
    return parse_config(config_data)


@pytest.fixture(scope="module")
def file_system() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


@dataclass
class Checks:
    """The node check's program on each new node (``NodeAgent.check``), and what it printed."""

    plane: ControlPlane
    tools: Path
    record: Path
    lustre_port: int
    outputs: dict[str, str] = field(default_factory=dict)

    def __call__(self, node: str) -> None:
        directory, environment = self.plane.node_check_program()
        token = self.plane.node_check_token(node)
        result = subprocess.run(
            [sys.executable, str(NODE_CHECK_KWOK), str(directory)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={
                **os.environ,
                **environment,
                "NODE_NAME": node,
                "POD_NAMESPACE": NODE_CHECK_NAMESPACE,
                "LUSTRE_HOST": "127.0.0.1",
                "LUSTRE_PORT": str(self.lustre_port),
                "PATH": f"{self.tools}{os.pathsep}{os.environ['PATH']}",
                "SAMPLES": str(SAMPLES),
                "RECORD": str(self.record),
                **FAILING,
                **self.plane.kube_api_environment(token),
            },
        )
        self.outputs[node] = f"exit {result.returncode}\n{result.stdout}{result.stderr}"

    def aws(self, verb: str) -> list[str]:
        return [
            line
            for line in self.record.read_text().splitlines()
            if line.startswith(f"aws autoscaling {verb} ")
        ]


def _after_this_second() -> None:
    """Wait into the next wall-clock second. The check records a replacement (to the second, as the
    Node's creationTimestamp is) before it marks the instance, and counts a later failure as a repeat
    only from a node created in a later second (node_check_budget.decide). EC2 takes minutes to launch a
    replacement; played here at once, it could register within the recorded second and count as one of
    the failed node's own launch (the CI failure of 2026-11-28: withheld, launches never suspended)."""
    time.sleep(1.05 - time.time() % 1)


@dataclass
class PlayedGroup:
    """EC2 Auto Scaling for the group, as the check's calls reach it: an instance marked Unhealthy is
    terminated (its Node deleted) and replaced by a new node of the group, unless ``Launch`` is
    suspended. At most ``limit`` replacements: today's unbounded loop must end the test, not hang it."""

    plane: ControlPlane
    autoscaler: Autoscaler
    checks: Checks
    group: str
    limit: int = 6
    done: set[str] = field(default_factory=set)
    replacements: list[str] = field(default_factory=list)

    def step(self) -> None:
        nodes = {kwok_instance(n["metadata"]["name"]): n for n in self.autoscaler.nodes(self.group)}
        suspended = bool(self.checks.aws("suspend-processes"))
        for line in self.checks.aws("set-instance-health"):
            instance = line.split("--instance-id ", 1)[1].split()[0]
            if instance in self.done or instance not in nodes:
                continue
            self.done.add(instance)
            node = nodes[instance]
            replace = not suspended and len(self.replacements) < self.limit
            if replace:
                _after_this_second()
            # The terminated node and its replacement in one step: an Auto Scaling group keeps its
            # size through a replacement, so the autoscaler sees no gap to fill.
            self.plane.kubectl("delete", "node", node["metadata"]["name"], "--wait=false")
            if replace:
                self.replacements.append(self._launch(node))

    def _launch(self, replaced: dict[str, Any]) -> str:
        """A new instance of the group registers: the replaced node's registration, a new name."""
        name = f"{self.group}-r{len(self.replacements)}"
        metadata = replaced["metadata"]
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {**metadata["labels"], "kubernetes.io/hostname": name},
                "annotations": {
                    key: value
                    for key, value in metadata.get("annotations", {}).items()
                    if not key.startswith("node.alpha.kubernetes.io/")
                },
            },
            # As the group's nodes register: the Neuron taint and the node check's startup taint.
            "spec": {
                "providerID": f"kwok:{name}",
                "taints": [
                    *(t for t in replaced["spec"].get("taints", []) if t["key"] == "aws.amazon.com/neuron"),
                    dict(NODE_CHECK_TAINT),
                ],
            },
            "status": {
                "capacity": replaced["status"]["capacity"],
                "allocatable": replaced["status"]["allocatable"],
            },
        }
        self.plane.create([node])
        return name


@pytest.fixture(scope="module")
def failing_group(
    control_plane: ControlPlane,
    config: StackConfig,
    config_data: dict[str, Any],
    file_system: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunHandle, Autoscaler, PlayedGroup]]:
    plan = plan_of(config_data)
    control_plane.apply_plan(plan)
    handle = run_handle(control_plane, plan, RUN)
    control_plane.kubectl(
        "delete",
        "job.batch.volcano.sh",
        handle.name,
        "-n",
        handle.namespace,
        "--ignore-not-found",
        "--wait=true",
    )
    run = next(r for r in config.runs if r.name == RUN)
    group = config.run_node_group(run).name
    work = tmp_path_factory.mktemp("failing-group")
    record = work / "aws-calls"
    record.touch()
    checks = Checks(control_plane, write_tools(work / "bin"), record, file_system)
    autoscaler = start_autoscaler(control_plane, config, check=checks)
    try:
        yield handle, autoscaler, PlayedGroup(control_plane, autoscaler, checks, group)
    finally:
        control_plane.kubectl(
            "delete", "job.batch.volcano.sh", handle.name, "-n", handle.namespace, "--ignore-not-found"
        )
        autoscaler.stop()
        # The group's record as the deploy leaves it, for the modules after this one.
        control_plane.kubectl(
            "patch", "configmap", replacement_record(group), "-n", NODE_CHECK_NAMESPACE,
            "--type=json", "-p", '[{"op": "remove", "path": "/data"}]', check=False,
        )  # fmt: skip


def _taints(node: dict[str, Any]) -> dict[str, str]:
    return {t["key"]: t.get("value", "") for t in node["spec"].get("taints", [])}


@dataclass
class Sample:
    """One look: the group's nodes by state, and the autoscaler's status of the cluster and group."""

    names: set[str]
    withheld: set[str]
    starting: set[str]
    cluster_health: str
    group_counts: dict[str, Any]


def _look(autoscaler: Autoscaler, group: str) -> Sample:
    nodes = autoscaler.nodes(group)
    status = yaml.safe_load(autoscaler.status() or "{}") or {}
    [group_status] = [g for g in status.get("nodeGroups", []) if g.get("name") == group] or [{}]
    return Sample(
        names={n["metadata"]["name"] for n in nodes},
        withheld={n["metadata"]["name"] for n in nodes if NODE_CHECK_FAILED_TAINT_KEY in _taints(n)},
        starting={n["metadata"]["name"] for n in nodes if NODE_CHECK_TAINT_KEY in _taints(n)},
        cluster_health=str(status.get("clusterWide", {}).get("health", {}).get("status", "")),
        group_counts=group_status.get("health", {}).get("nodeCounts", {}).get("registered", {}),
    )


def test_every_new_node_failing_costs_one_replacement_and_the_group_goes_to_zero(
    failing_group: tuple[RunHandle, Autoscaler, PlayedGroup], control_plane: ControlPlane, config: StackConfig
) -> None:
    run, autoscaler, played = failing_group
    group = played.group
    assert autoscaler.nodes(group) == [], "the group must start from zero nodes"
    run.apply()
    applied = time.monotonic()
    samples: list[Sample] = []
    seen: set[str] = set()

    def at_zero_after_failures() -> bool:
        played.step()
        sample = _look(autoscaler, group)
        samples.append(sample)
        seen.update(sample.names)
        return bool(played.done) and len(seen) > run.replicas() and not sample.names

    try:
        control_plane.wait_for(
            at_zero_after_failures, timeout=BOUND_SECONDS, what=f"the group {group} back at zero nodes"
        )
    except StartupError as error:
        scaling = [line for line in autoscaler.log().splitlines() if "Scale-" in line or "scale-up" in line]
        raise AssertionError(
            f"{error}\nnodes seen {sorted(seen)}, replacements {played.replacements}, aws calls:\n"
            f"{played.checks.record.read_text()}\nchecks:\n"
            + "\n".join(played.checks.outputs.values())
            + "\nautoscaler:\n"
            + "\n".join(scaling[-40:])
        ) from None
    took = time.monotonic() - applied
    print(
        f"from the gang queued to the group at zero: {took:.0f} s (bound {BOUND_SECONDS} s); nodes {sorted(seen)}"
    )

    # The budget: one replacement, then a repeat stopped the group's launches, once.
    assert len(played.checks.aws("set-instance-health")) == 1, played.checks.record.read_text()
    assert len(played.checks.aws("suspend-processes")) == 1, played.checks.record.read_text()
    assert played.replacements == [f"{group}-r0"]
    assert len(seen) == run.replicas() + 1, seen
    events = control_plane.kubectl.json("get", "events", "-n", NODE_CHECK_NAMESPACE)["items"]
    withheld = {e["involvedObject"]["name"] for e in events if e["reason"] == "ReplacementWithheld"}
    stopped = {e["involvedObject"]["name"] for e in events if e["reason"] == "NodeGroupLaunchesSuspended"}
    assert withheld == seen - {n for n in seen if kwok_instance(n) in played.done}, (withheld, played.done)
    # The node that stopped them: the replacement, or a node of the same launch whose check failed
    # at the same moment (the record's claim lets exactly one of them act).
    assert len(stopped) == 1, stopped
    [stopper] = stopped
    record = control_plane.kubectl.json(
        "get", "configmap", replacement_record(group), "-n", NODE_CHECK_NAMESPACE
    )
    assert len(json.loads(record["data"]["replacements"])) == 1
    assert f"after {stopper} failed NeuronDevicesMissing" in record["data"]["launches-suspended"]

    # The autoscaler never halted, counted every withheld node ready (not unready, not starting), and
    # removed each as an empty node.
    assert {s.cluster_health for s in samples if s.cluster_health} == {"Healthy"}
    # The status is the autoscaler's last loop's (every 2 s), a look may come between a swap and it.
    assert all(s.group_counts.get("unready", {}).get("total", 0) == 0 for s in samples)
    counted = [
        s
        for s in samples
        if s.withheld and s.withheld == s.names and s.group_counts.get("total") == len(s.names)
    ]
    assert counted, "no look at the group with only withheld nodes"
    assert any(
        s.group_counts.get("ready") == len(s.names) and not s.group_counts.get("notStarted") for s in counted
    ), [s.group_counts for s in counted]
    log = autoscaler.log()
    assert "Cluster is not ready for autoscaling" not in log
    for name in withheld:
        assert f'Scale-down: removing empty node "{name}"' in log, name

    # The bill stops: the gang still waits, and the autoscaler adds no node of the group for it.
    deadline = time.monotonic() + HOLD_SECONDS
    while time.monotonic() < deadline:
        played.step()
        assert autoscaler.nodes(group) == [], "the autoscaler added a node to the failing group"
        time.sleep(1)
    assert all(not p["spec"].get("nodeName") for p in run.pods()) and len(run.pods()) == run.replicas()
    assert autoscaler.process.alive() and autoscaler.agent.errors == []
