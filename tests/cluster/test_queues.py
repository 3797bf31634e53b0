"""Scenario f's queues (issues 22 and 23) under Volcano 1.15.1's real scheduler: a queue's capability
holds a gang beside free nodes; a team borrows an idle team's share of a shared group up to its
capability; a returning team is offered the next freed nodes before the borrower's further gang,
and nothing is evicted; with unequal weights, the queue furthest below its deserved share is
offered the freed node; over two groups of different instance types, a team borrows its whole
capability in every dimension and no more (docs/capacity.md, "Teams that share node groups").
tests/volcano_queue_model.py is the model of the same arithmetic, written before a real scheduler
ran here.

The configuration (``SHARED``): the default's one Trainium group, ``trn1-32xl``, at ``max_size`` 4 and
listed by two teams of equal weight, ``training`` (queue ``test``) and ``research``. Each queue's
capability is the group at max_size (4 nodes' worth), its deserved share half of it (2 nodes'
worth); the teams' ResourceQuotas set no amount (k8s_charts/teams/team_quota.py), so every gang's pods
exist and the queues alone decide. Every run is a 2-node gang that the plan renders and the test
applies with kubectl, as docs/runs.md says: ``bert-large`` of training, ``research-1`` to ``-3`` of
research. The unequal-weight scenario deploys ``WEIGHTED`` over it for one test (the example's
weights 1 and 2, the group at 6 nodes, four 1-node runs) and ``SHARED`` again after it; the
mixed-type one ``MIXED`` likewise (a trn1n group of 2 nodes beside, and two research runs on it).

The cluster autoscaler is not run here: the group's nodes are added as a scale-up to max_size
would add them (``add_nodes``, each checked by the node check's own writes), and two more where a
test needs free nodes beyond max_size (a manual scale-up, or nodes left over). What the autoscaler
does with pods left Unschedulable is test_scale_from_zero.py's. Runs run until a test ends them
(kwok_stages.yaml: ``pod-running``, then ``pod-exit`` on ``RunHandle.finish``). Volcano's scheduler
runs a session every second (the chart's ``--schedule-period``) and logs at ``-v=3``: the tests wait
on its sessions and its reasons (``SchedulerLog``), not on fixed sleeps.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from cluster_facts.kubernetes_names import EFA_RESOURCE, NEURON_RESOURCE
from config import StackConfig, parse_config
from tests.cluster.control_plane import ControlPlane
from tests.cluster.nodes import group_nodes
from tests.cluster.plans import config_data, plan_of
from tests.cluster.runs import RunHandle, end_runs, run_handle
from tests.cluster.scheduler_log import SchedulerLog
from tests.conftest import DEFAULT_CONFIG
from tests.yaml_edits import with_change

GROUP = "trn1-32xl"
MAX_SIZE = 4
BORROWER, RETURNING = "research", "training"
RETURNING_RUN = "bert-large"
BORROWER_RUNS = ("research-1", "research-2", "research-3")
SHARED = with_change(
    with_change(
        with_change(config_data(DEFAULT_CONFIG), "trainium.node_groups.0.max_size", MAX_SIZE),
        "teams",
        [{"name": RETURNING, "queue": "test"}, {"name": BORROWER}],
    ),
    "runs",
    [
        {"name": RETURNING_RUN, "preset": "bert-large", "team": RETURNING},
        *({"name": run, "preset": "bert-large", "team": BORROWER} for run in BORROWER_RUNS),
    ],
)
CONFIG = parse_config(SHARED)
NODES = [f"{GROUP}-queues-{index}" for index in range(MAX_SIZE)]
"""The group at max_size."""
EXTRA_NODES = [f"{GROUP}-queues-extra-{index}" for index in range(2)]
"""Beyond max_size: a manual scale-up, or nodes left over."""
WEIGHTED_MAX_SIZE = len(NODES) + len(EXTRA_NODES)
SMALL_RUNS = {
    RETURNING: ("training-small-1", "training-small-2"),
    BORROWER: ("research-small-1", "research-small-2"),
}
"""1-node runs: with them the queues' allocations step by one node."""
WEIGHTED = with_change(
    with_change(
        with_change(SHARED, "trainium.node_groups.0.max_size", WEIGHTED_MAX_SIZE),
        "teams.1.weight",
        2,
    ),
    "runs",
    [
        *SHARED["runs"],
        *(
            {"name": run, "preset": "bert-large", "team": team, "nodes": 1}
            for team, names in SMALL_RUNS.items()
            for run in names
        ),
    ],
)
"""``SHARED`` with research at weight 2 (training keeps 1, the example's weights) and the group at 6
nodes (``NODES`` and ``EXTRA_NODES``): training deserves 2 nodes' worth, research 4; each queue's
capability is all 6."""
WEIGHTED_CONFIG = parse_config(WEIGHTED)
MIXED_GROUP = "trn1n-32xl"
MIXED_NODES = [f"{MIXED_GROUP}-queues-{index}" for index in range(2)]
"""A second group of another instance type (trn1n: 16 EFA interfaces a node, trn1 has 8), at max_size."""
MIXED_EXTRA_NODE = f"{MIXED_GROUP}-queues-extra-0"
MIXED_RUNS = ("research-trn1n", "research-trn1n-more")
MIXED = with_change(
    with_change(
        SHARED,
        "trainium.node_groups",
        [
            *SHARED["trainium"]["node_groups"],
            {
                "name": MIXED_GROUP,
                "instance_type": "trn1n.32xlarge",
                "min_size": 0,
                "max_size": len(MIXED_NODES),
                "capacity_type": "on_demand",
                "capacity_reservation_id": None,
                "placement_group": True,
            },
        ],
    ),
    "runs",
    [
        *SHARED["runs"],
        {
            "name": MIXED_RUNS[0],
            "preset": "bert-large",
            "team": BORROWER,
            "node_group": MIXED_GROUP,
            "nodes": 2,
        },
        {
            "name": MIXED_RUNS[1],
            "preset": "bert-large",
            "team": BORROWER,
            "node_group": MIXED_GROUP,
            "nodes": 1,
        },
    ],
)
"""``SHARED`` with a trn1n group beside the trn1 one, both teams on both (they list no groups): each
queue's capability is both groups at max_size (4 trn1 and 2 trn1n nodes), its deserved share half."""
MIXED_CONFIG = parse_config(MIXED)
NO_NODE_TRIED = "Origin reason"
"""Volcano's gang message names the first node error it met (job_info.go ``FitError``, 834-845);
a gang none of whose tasks reached a node has none."""


@pytest.fixture(scope="module")
def shared(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    control_plane.apply_plan(plan_of(SHARED))
    try:
        control_plane.add_nodes(group_nodes(CONFIG, GROUP, NODES))
        yield control_plane
    finally:
        end_runs(control_plane, [team.name for team in CONFIG.teams])
        control_plane.remove_nodes([*NODES, *EXTRA_NODES])


@pytest.fixture
def runs(shared: ControlPlane) -> Iterator[dict[str, RunHandle]]:
    """Every run of ``SHARED``, none applied; after the test, none left and no node beyond max_size."""
    plan = plan_of(SHARED)
    try:
        yield {run.name: run_handle(shared, plan, run.name) for run in CONFIG.runs}
    finally:
        end_runs(shared, [team.name for team in CONFIG.teams])
        shared.remove_nodes(EXTRA_NODES)


def _over_shared(
    plane: ControlPlane,
    data: dict[str, Any],
    config: StackConfig,
    group: str,
    nodes: list[str],
    *,
    later: tuple[str, ...] = (),
) -> Iterator[dict[str, RunHandle]]:
    """A fixture's body: ``data`` deployed over ``SHARED`` with ``nodes`` of ``group`` added, none of
    its runs applied. After the test, its runs ended, those nodes (and ``later``, the ones the test
    adds itself) removed, and ``SHARED`` deployed again. ``config`` is ``data`` parsed."""
    plan = plan_of(data)
    plane.apply_plan(plan)
    try:
        plane.add_nodes(group_nodes(config, group, nodes))
        yield {run.name: run_handle(plane, plan, run.name) for run in config.runs}
    finally:
        end_runs(plane, [team.name for team in config.teams])
        plane.remove_nodes([*nodes, *later])
        plane.apply_plan(plan_of(SHARED))


@pytest.fixture
def weighted(shared: ControlPlane, runs: dict[str, RunHandle]) -> Iterator[dict[str, RunHandle]]:
    """``WEIGHTED`` deployed over ``SHARED`` (both Queues and the fabric check's policy change: three
    ``kubectl apply``), the group's 6 nodes up (``EXTRA_NODES`` added)."""
    yield from _over_shared(shared, WEIGHTED, WEIGHTED_CONFIG, GROUP, EXTRA_NODES)


def _nodes_of(pods: list[dict[str, Any]]) -> set[str]:
    return {str(pod["spec"].get("nodeName", "")) for pod in pods}


def _unschedulable(run: RunHandle) -> str:
    """The gang's ``Unschedulable`` condition's message (gang.go ``OnSessionClose``, 251-272), or ''."""
    found: list[dict[str, Any]] = run.plane.kubectl.json(
        "get", "podgroups.scheduling.volcano.sh", "-n", run.namespace
    )["items"]
    [group] = [g for g in found if g["metadata"]["name"].startswith(f"{run.name}-")]
    for condition in group.get("status", {}).get("conditions", []):
        if condition["type"] == "Unschedulable" and condition["status"] == "True":
            assert condition["reason"] == "NotEnoughResources", condition
            return str(condition["message"])
    return ""


def _waits_for_a_node(run: RunHandle) -> bool:
    """The gang passed its queue: its condition names a node that could not hold a task."""
    return NO_NODE_TRIED in _unschedulable(run)


def _queue_allocated(plane: ControlPlane, queue: str) -> dict[str, str] | None:
    """What Volcano counts as allocated to ``queue``: its status, written at each session's close
    (session.go ``updateQueueStatus``, 501-552)."""
    found = plane.kubectl.json("get", "queues.scheduling.volcano.sh", queue)
    allocated: dict[str, str] = found.get("status", {}).get("allocated", {})
    return allocated or None


def _borrow_the_group(runs: dict[str, RunHandle]) -> list[dict[str, Any]]:
    """research's first two gangs, on every node of the group: its capability, twice its share."""
    first, second = runs[BORROWER_RUNS[0]], runs[BORROWER_RUNS[1]]
    first.apply()
    second.apply()
    plane = first.plane
    held = [*plane.wait_for(first.running, timeout=60, what=f"{first.name} running")]
    held += plane.wait_for(second.running, timeout=60, what=f"{second.name} running")
    assert _nodes_of(held) == set(NODES)
    return held


@pytest.fixture
def mixed(shared: ControlPlane, runs: dict[str, RunHandle]) -> Iterator[dict[str, RunHandle]]:
    """``MIXED`` deployed over ``SHARED``, the trn1n group's nodes up to its max_size (the test adds
    ``MIXED_EXTRA_NODE`` itself)."""
    yield from _over_shared(shared, MIXED, MIXED_CONFIG, MIXED_GROUP, MIXED_NODES, later=(MIXED_EXTRA_NODE,))


def test_a_team_borrows_an_idle_teams_share_up_to_its_capability(
    shared: ControlPlane, runs: dict[str, RunHandle]
) -> None:
    """training is idle; research's gangs take every node of the shared group. Volcano counts the
    queue at twice its deserved share and at its capability: ``deserved`` is no limit (capacity.go
    registers no overused test; allocate.go 294 skips only an overused queue)."""
    _borrow_the_group(runs)
    queue = CONFIG.team(BORROWER).queue_name
    spec = shared.kubectl.json("get", "queues.scheduling.volcano.sh", queue)["spec"]
    capability = spec["capability"][NEURON_RESOURCE]
    allocated = shared.wait_for(
        lambda: (
            (found := _queue_allocated(shared, queue)) and found.get(NEURON_RESOURCE) == capability and found
        ),
        timeout=30,
        what=f"Volcano's allocated chips of queue {queue} at its capability",
    )
    assert int(allocated[NEURON_RESOURCE]) == 2 * int(spec["deserved"][NEURON_RESOURCE]), (allocated, spec)
    assert not runs[RETURNING_RUN].pods(), "the lending team is idle"


def test_a_queues_capability_keeps_a_gang_pending_beside_free_nodes(
    shared: ControlPlane, runs: dict[str, RunHandle]
) -> None:
    """research holds its capability (the group at max_size) and queues a third gang while two free
    nodes of the group exist beyond max_size. The team's quota admits its pods; Volcano's capacity
    plugin refuses each task before it looks for a node (allocate.go 744-747, capacity.go 1629-1660:
    allocated plus the task over the realCapability, the capability within the cluster's total,
    1078-1088), so the gang stays Pending with no node error and the free nodes stay idle. Once one
    of research's gangs ends, the third is placed."""
    log = SchedulerLog(shared)
    _borrow_the_group(runs)
    shared.add_nodes(group_nodes(CONFIG, GROUP, EXTRA_NODES))
    third = runs[BORROWER_RUNS[2]]
    third.apply()
    pods = shared.wait_for(
        lambda: (found := third.pods()) and len(found) == third.replicas() and found,
        timeout=30,
        what=f"{third.name}'s pods created (the team's quota admits them)",
    )
    tasks = [pod["metadata"]["name"] for pod in pods]

    def refused() -> bool:
        placed = _nodes_of(third.pods()) - {""}
        assert not placed, f"the queue's capability did not hold: {third.name} placed on {sorted(placed)}"
        return set(tasks) <= log.queue_refusals(BORROWER)

    shared.wait_for(
        refused,
        timeout=30,
        what=f"queue {BORROWER} refusing every task of {third.name} (the scheduler's log)",
    )
    log.wait_sessions(2)
    assert _nodes_of(third.pods()) == {""}, "the queue's capability did not hold"
    message = _unschedulable(third)
    assert message.endswith(f"Pending: {third.replicas()} Unschedulable"), message
    assert NO_NODE_TRIED not in message, message
    assert set(third.scheduling_reasons()) == {"Unschedulable"}
    gangs = shared.kubectl.json("get", "pods", "-A", "-l", "volcano.sh/job-name")["items"]
    assert not _nodes_of(gangs) & set(EXTRA_NODES), "a node beyond max_size was used"

    runs[BORROWER_RUNS[0]].finish(0)
    shared.wait_for(third.running, timeout=60, what=f"{third.name} placed once {BORROWER_RUNS[0]} finished")


def test_a_returning_team_goes_first_for_the_next_free_node_and_nothing_is_evicted(
    shared: ControlPlane, runs: dict[str, RunHandle]
) -> None:
    """research borrows the whole group, then queues a third gang; training, idle until now, queues
    its gang after it. training's gang waits (Unschedulable: no node) and nothing of research is
    evicted (no reclaim; the pods keep their uids, the Jobs their version and retry count). When a
    research gang ends, both gangs pass their queues, and the queue furthest below its deserved
    share goes first (capacity.go 1183-1193, 1544-1561, 1800-1829: training 0, research 1): training's
    gang gets the freed nodes although research's was queued earlier. research's third gang runs
    when its second ends."""
    log = SchedulerLog(shared)
    held = _borrow_the_group(runs)
    first, second, third = (runs[name] for name in BORROWER_RUNS)
    returning = runs[RETURNING_RUN]
    third.apply()
    shared.wait_for(
        lambda: len(log.queue_refusals(BORROWER)) == third.replicas(),
        timeout=30,
        what=f"{third.name} held by its queue",
    )
    returning.apply()
    shared.wait_for(
        lambda: (
            (reasons := returning.scheduling_reasons())
            and len(reasons) == returning.replicas()
            and set(reasons) == {"Unschedulable"}
        ),
        timeout=30,
        what=f"{returning.name}'s pods Unschedulable (what the autoscaler acts on below max_size)",
    )
    log.wait_sessions(3)
    # It waits for nodes, not for its queue.
    assert NO_NODE_TRIED in _unschedulable(returning)
    assert not log.queue_refusals(CONFIG.team(RETURNING).queue_name)
    # Nothing of research was evicted for it.
    still = [*first.pods(), *second.pods()]
    assert {p["metadata"]["uid"] for p in still} == {p["metadata"]["uid"] for p in held}
    assert all(p["status"].get("phase") == "Running" for p in still)
    for run in (first, second):
        status = run.job_status()
        assert (status.get("version", 0), status.get("retryCount", 0)) == (0, 0), (run.name, status)

    freed = _nodes_of(first.pods())
    first.finish(0)
    placed = shared.wait_for(
        returning.running, timeout=60, what=f"{returning.name} placed on the freed nodes"
    )
    assert _nodes_of(placed) == freed
    # research's third gang passed its queue too, and found no node left.
    shared.wait_for(
        lambda: NO_NODE_TRIED in _unschedulable(third),
        timeout=30,
        what=f"{third.name} past its queue, waiting for nodes",
    )
    assert _nodes_of(third.pods()) == {""}

    second.finish(0)
    shared.wait_for(third.running, timeout=60, what=f"{third.name} placed once {second.name} finished")


def test_with_unequal_weights_the_queue_furthest_below_its_deserved_share_goes_first(
    shared: ControlPlane, weighted: dict[str, RunHandle]
) -> None:
    """The example's weights on the shared group: training 1, research 2, the group at 6 nodes. Each
    Queue deserves its weight over the sum of the weights of the group at max_size (training 2
    nodes' worth, research 4), and may hold all 6. Both teams hold 3 nodes, then queue a 1-node gang
    each, training's first; both pass their queues and wait for a node. training's 1-node run ends:
    training holds 2 nodes, its deserved share (share 1), research 3 of its 4 (share 3/4). research's
    gang gets the freed node (capacity.go 1183-1193, 1541-1561, 1800-1829), although it holds more
    nodes, queued later, and would go second under equal weights (2/3 against 1). Volcano then counts
    each queue at exactly its deserved share."""
    log = SchedulerLog(shared)
    training, research = (WEIGHTED_CONFIG.team(name).queue_name for name in (RETURNING, BORROWER))

    def queue_spec(queue: str) -> dict[str, Any]:
        spec: dict[str, Any] = shared.kubectl.json("get", "queues.scheduling.volcano.sh", queue)["spec"]
        return spec

    whole = int(queue_spec(training)["capability"][NEURON_RESOURCE])
    chips_per_node = whole // WEIGHTED_MAX_SIZE
    for team in WEIGHTED_CONFIG.teams:
        spec = queue_spec(team.queue_name)
        assert int(spec["capability"][NEURON_RESOURCE]) == whole, (team.name, spec)
        assert int(spec["deserved"][NEURON_RESOURCE]) * 3 == whole * team.weight, (team.name, spec)
    deserved = {queue: int(queue_spec(queue)["deserved"][NEURON_RESOURCE]) for queue in (training, research)}
    assert deserved == {training: 2 * chips_per_node, research: 4 * chips_per_node}

    # 3 nodes each: every node of the group held.
    holding = [
        weighted[RETURNING_RUN],
        weighted[SMALL_RUNS[RETURNING][0]],
        weighted[BORROWER_RUNS[0]],
        weighted[SMALL_RUNS[BORROWER][0]],
    ]
    for run in holding:
        run.apply()
    held = [
        pod for run in holding for pod in shared.wait_for(run.running, timeout=60, what=f"{run.name} running")
    ]
    assert _nodes_of(held) == {*NODES, *EXTRA_NODES}

    def allocated_nodes() -> dict[str, int]:
        return {
            queue: int((_queue_allocated(shared, queue) or {}).get(NEURON_RESOURCE, "0")) // chips_per_node
            for queue in (training, research)
        }

    shared.wait_for(
        lambda: allocated_nodes() == {training: 3, research: 3},
        timeout=30,
        what="Volcano's allocated chips: 3 nodes' worth each",
    )

    # Each team queues a 1-node gang, training's first; each passes its queue and waits for a node.
    waiting = [weighted[SMALL_RUNS[RETURNING][1]], weighted[SMALL_RUNS[BORROWER][1]]]
    for run in waiting:
        run.apply()
        shared.wait_for(
            functools.partial(_waits_for_a_node, run),
            timeout=30,
            what=f"{run.name} past its queue, waiting for a node",
        )
    log.wait_sessions(2)
    assert not log.queue_refusals(training) and not log.queue_refusals(research)
    assert all(_nodes_of(run.pods()) == {""} for run in waiting)

    ending = weighted[SMALL_RUNS[RETURNING][0]]
    freed = _nodes_of(ending.pods())
    ending.finish(0)
    late_training, late_research = waiting
    placed = shared.wait_for(
        late_research.running, timeout=60, what=f"{late_research.name} placed on the freed node"
    )
    assert _nodes_of(placed) == freed
    shared.wait_for(
        lambda: allocated_nodes() == {training: 2, research: 4},
        timeout=30,
        what="Volcano's allocated chips at each queue's deserved share",
    )
    assert {queue: nodes * chips_per_node for queue, nodes in allocated_nodes().items()} == deserved
    log.wait_sessions(2)
    assert _nodes_of(late_training.pods()) == {""}
    assert NO_NODE_TRIED in _unschedulable(late_training)


def test_over_two_instance_types_a_team_borrows_its_whole_capability_and_no_more(
    shared: ControlPlane, mixed: dict[str, RunHandle]
) -> None:
    """The queues' arithmetic over groups of different shapes (trn1: 8 EFA interfaces a node, trn1n:
    16), which tests/volcano_queue_model.py models: training idle, research's gangs hold every node
    of both groups at max_size. Volcano counts its queue at the capability in every dimension (96
    chips, and 64 EFA interfaces: 4 x 8 + 2 x 16), twice its deserved share. A 1-node trn1n gang of
    research more, with a free trn1n node beyond max_size, is refused by the queue and stays
    unplaced; once research's trn1n run ends, it is placed."""
    log = SchedulerLog(shared)
    queue = MIXED_CONFIG.team(BORROWER).queue_name
    spec = shared.kubectl.json("get", "queues.scheduling.volcano.sh", queue)["spec"]
    holding = [mixed[BORROWER_RUNS[0]], mixed[BORROWER_RUNS[1]], mixed[MIXED_RUNS[0]]]
    for run in holding:
        run.apply()
    held = [
        pod for run in holding for pod in shared.wait_for(run.running, timeout=60, what=f"{run.name} running")
    ]
    assert _nodes_of(held) == {*NODES, *MIXED_NODES}
    allocated = shared.wait_for(
        lambda: (
            (found := _queue_allocated(shared, queue))
            and found.get(NEURON_RESOURCE) == spec["capability"][NEURON_RESOURCE]
            and found.get(EFA_RESOURCE) == spec["capability"][EFA_RESOURCE]
            and found
        ),
        timeout=30,
        what=f"Volcano's allocated chips and EFA interfaces of queue {queue} at its capability",
    )
    assert (allocated[NEURON_RESOURCE], allocated[EFA_RESOURCE]) == ("96", "64"), allocated
    assert int(spec["deserved"][EFA_RESOURCE]) * 2 == int(spec["capability"][EFA_RESOURCE]), spec

    shared.add_nodes(group_nodes(MIXED_CONFIG, MIXED_GROUP, [MIXED_EXTRA_NODE]))
    more = mixed[MIXED_RUNS[1]]
    more.apply()
    [pod] = shared.wait_for(
        lambda: (found := more.pods()) and len(found) == more.replicas() and found,
        timeout=30,
        what=f"{more.name}'s pod created",
    )

    def refused() -> bool:
        placed = _nodes_of(more.pods()) - {""}
        assert not placed, f"the queue's capability did not hold: {more.name} placed on {sorted(placed)}"
        return pod["metadata"]["name"] in log.queue_refusals(queue)

    shared.wait_for(refused, timeout=30, what=f"queue {queue} refusing {more.name} (the scheduler's log)")
    log.wait_sessions(2)
    assert _nodes_of(more.pods()) == {""}, "the queue's capability did not hold"

    mixed[MIXED_RUNS[0]].finish(0)
    placed = shared.wait_for(
        more.running, timeout=60, what=f"{more.name} placed once research's trn1n run ended"
    )
    assert _nodes_of(placed) <= {*MIXED_NODES, MIXED_EXTRA_NODE}
