"""A team's runs outlive the loss of its etcd's members: real torchrun agents, the rendered launcher,
and real etcd members started as the rendered StatefulSet starts them (tests/runtime/etcd_cluster.py).

While a run trains, every agent asks etcd every 0.1 s how many nodes wait to join, and a connection
failure there is not caught (torch 2.9, ``EtcdRendezvousHandler.num_nodes_waiting``; k8s_charts/teams/etcd.py):

- one member (the chart as it was, rendered with one replica): killed mid-run and started again on
  its data two seconds later, as a container restarts, it ends the run: an agent whose read fails in that
  moment stops its workers and exits with ``EtcdConnectionFailed``, the other workers' collectives
  fail with it, and every agent exits with an error: in a cluster, failed pods and a RestartJob
  that spends a retry;
- the rendered three: the member the launchers dial is killed mid-run, then replaced by a new pod
  (empty data: its init container removes the old member and adds itself, and it copies the data);
  then another is killed and replaced. The run goes on through all of it: the same attempt and
  rendezvous, no worker restarted, and every agent ends 0 by itself;
- a replaced member cannot simply start as its old self: with its data gone, etcd refuses
  (``has already been bootstrapped``); through its init container it joins and holds the data.
"""

from __future__ import annotations

import re
import shutil
import time
import urllib.request

import pytest

import k8s_charts.teams.etcd
from k8s_charts.teams.etcd import EtcdChart, member_name
from tests.k8s_charts.manifests import only, synth
from tests.runtime.etcd_cluster import EtcdCluster
from tests.runtime.harness import Agent, LocalJob, RuntimeTools
from tests.runtime.test_rendezvous_ids import assert_trained, describe, run_ids

pytestmark = pytest.mark.slow

TRAINING = "standin: phase=train step="
KEYS = "/torchelastic/p2p"


def steps(agents: list[Agent]) -> int:
    """Collectives done so far, over every worker."""
    return sum(agent.output.count(TRAINING) for agent in agents)


def wait_for_training(agents: list[Agent]) -> None:
    assert all(agent.wait_for_output(f"{TRAINING}0", 60) for agent in agents), describe(agents)


def assert_goes_on(agents: list[Agent], seconds: float = 3) -> None:
    """Every agent still runs and the workers keep doing collectives for ``seconds``."""
    before = steps(agents)
    time.sleep(seconds)
    assert [agent.returncode for agent in agents] == [None] * len(agents), describe(agents)
    assert steps(agents) >= before + len(agents) * 5, describe(agents)


def test_one_member_restarted_mid_run_ends_the_run(
    runtime_tools: RuntimeTools,
    job: LocalJob,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(k8s_charts.teams.etcd, "ETCD_REPLICAS", 1)
    statefulset = only(synth(lambda app: EtcdChart(app, "etcd", namespace="training")), "StatefulSet")
    single = EtcdCluster(
        python=runtime_tools.python,
        etcd=runtime_tools.etcd,
        statefulset=statefulset,
        work_dir=tmp_path_factory.mktemp("single-etcd"),
    )
    try:
        one = LocalJob(
            tools=job.tools, container=job.container, etcd=single, work_dir=job.work_dir, nodes=job.nodes
        )
        with one.attempt("single", env={"STANDIN_SECONDS": "40"}) as agents:
            wait_for_training(agents)
            # Down for two seconds, on its data (a container restarts no sooner; a new pod later):
            # a restart faster than the agents' next reads (every 0.1 s, urllib3's retries) could
            # go unseen, which no pod restart is.
            single.kill(member_name(0))
            time.sleep(2)
            single.restart(member_name(0))
            single.wait_serving(member_name(0))
            for agent in agents:
                agent.wait(30)
            for agent in agents:
                assert agent.returncode not in (None, 0), describe(agents)
                assert not agent.stopped_by_harness, describe(agents)
                assert "standin: phase=train done" not in agent.output, describe(agents)
            # An agent whose read failed stops its workers; the others' collectives then fail.
            assert any("EtcdConnectionFailed" in agent.output for agent in agents), describe(agents)
    finally:
        single.stop()


def test_a_run_goes_on_while_members_are_lost_and_replaced(job: LocalJob, etcd: EtcdCluster) -> None:
    dialled = member_name(0)
    assert etcd.endpoint == f"127.0.0.1:{etcd.member(dialled).client_port}"
    with job.attempt("members-lost", env={"STANDIN_SECONDS": "40"}) as agents:
        wait_for_training(agents)
        [rendezvous] = run_ids(agents)
        for lost in (dialled, member_name(1)):
            etcd.kill(lost)
            assert_goes_on(agents)
            etcd.replace(lost)
            # The new member holds the run's rendezvous: it copied the data from the leader.
            etcd.wait_serving(lost, f"/v2/keys{KEYS}/run_{rendezvous}/rdzv/active_version")
            assert_goes_on(agents)
        for agent in agents:
            agent.wait(60)

    assert_trained(job, agents)
    assert run_ids(agents) == {rendezvous}
    restarts = {m for agent in agents for m in re.findall(r"restart=(\d+)", agent.output)}
    assert restarts == {"0"}, describe(agents)


def test_a_replaced_member_joins_through_its_init_container(etcd: EtcdCluster) -> None:
    kept = f"http://{etcd.endpoint}/v2/keys/kept"
    urllib.request.urlopen(urllib.request.Request(kept, data=b"value=1", method="PUT"), timeout=5).close()
    lost = etcd.member(member_name(2))
    etcd.kill(lost.name)
    # Started as its old self with its data gone (the configuration of its first start): refused.
    assert '"initial-cluster-state": "new"' in (lost.directory / "etcd.conf.json").read_text()
    shutil.rmtree(lost.directory / "data")
    etcd.restart(lost.name)
    assert lost.etcd is not None and lost.etcd.wait(timeout=30) != 0
    assert "has already been bootstrapped" in etcd.etcd_log(lost.name)

    etcd.replace(lost.name)
    etcd.wait_serving(lost.name, "/v2/keys/kept")
    assert "removing member" in etcd.init_log(lost.name)
    assert '"initial-cluster-state": "existing"' in (lost.directory / "etcd.conf.json").read_text()
