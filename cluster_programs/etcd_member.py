"""Prepare one member of a team's rendezvous etcd before it starts (k8s_charts/etcd.py).

Run by the init container of each etcd pod with the member's etcd flags; etcd then starts with
``--config-file`` alone, reading the file written here. What it decides is the one setting that
cannot be static, ``initial-cluster-state``, and the membership that goes with it:

- The data directory holds a write-ahead log: the member restarts with its data (a restarted
  container keeps its emptyDir; etcd then ignores the initial-cluster settings).
- No data, and another member answers: the cluster runs and this pod replaced a member that lost its
  data (a drain, a lost node, a manifest change: a new pod gets a new emptyDir). Restarted under its
  old identity with an empty log, the member would be killed by the leader's next heartbeat
  ("tocommit(N) is out of range [lastIndex(0)]. Was the raft log corrupted, truncated, or lost?";
  etcd 3.5 shows it in tests/runtime/test_etcd_members.py), and with ``new`` it refuses to start
  ("member ... has already been bootstrapped"). So the old member is removed, a new one is added
  with this pod's peer URL, and etcd joins with ``existing``, taking the data from the leader. Both
  changes need the cluster's quorum: without it (two of three members lost at once) this retries
  until ``--deadline`` and exits 1; the kubelet then starts it again.
- No data and no member answers for ``--bootstrap-wait`` seconds: the cluster's first start (or
  every member lost at once): ``new``, with the static initial cluster. A member answers clients
  only once the cluster has had a quorum, so every member of a first start takes this path. Were a
  running cluster unreachable for that long, ``new`` makes etcd refuse to start (above) rather than
  found a second cluster: the member waits in CrashLoopBackOff until its pod is deleted.

Arguments: ``--config FILE`` (written), ``--members NAME=CLIENT_URL,...`` (every member's client
URL, this one's included), ``--bootstrap-wait SECONDS``, ``--deadline SECONDS``, then etcd's own
flags, each ``--key=value`` (``--name``, ``--data-dir`` and ``--initial-advertise-peer-urls`` are
required). Membership calls go to etcd's v3 JSON gateway (``/v3/cluster/member/...``). Standard
library only: it runs on the platform's Python image.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_LIST_TIMEOUT = 3.0
# etcd answers a membership change within its request timeout (7 s by default) or fails it.
_CHANGE_TIMEOUT = 10.0
_RETRY_SECONDS = 2.0


def log(message: str) -> None:
    print(f"etcd-member: {message}", flush=True)


def etcd_flags(flags: Sequence[str]) -> dict[str, Any]:
    """``--key=value`` flags as etcd's configuration file holds them: its keys are the flags' names,
    true and false are booleans (``enable-v2``), every other value here is a string."""
    config: dict[str, Any] = {}
    for flag in flags:
        if not flag.startswith("--") or "=" not in flag:
            raise SystemExit(f"etcd-member: etcd flags must be --key=value, got {flag!r}")
        key, value = flag[2:].split("=", 1)
        config[key] = {"true": True, "false": False}.get(value, value)
    for required in ("name", "data-dir", "initial-advertise-peer-urls", "initial-cluster"):
        if required not in config:
            raise SystemExit(f"etcd-member: the etcd flag --{required} is required")
    return config


def has_data(data_dir: Path) -> bool:
    wal = data_dir / "member" / "wal"
    return wal.is_dir() and any(wal.iterdir())


def _call(client_url: str, path: str, body: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{client_url.rstrip('/')}/v3/cluster/member/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer: dict[str, Any] = json.load(response)
    return answer


def member_list(client_urls: Sequence[str], *, quiet: bool) -> tuple[str, list[dict[str, Any]]] | None:
    """The first member that answers, and the membership it knows (not linearizable: a member
    answers this without a quorum, once the cluster has had one)."""
    for url in client_urls:
        try:
            return url, _call(url, "list", {}, _LIST_TIMEOUT).get("members", [])
        except (OSError, ValueError) as error:
            if not quiet:
                log(f"{url}: no member list ({error})")
    return None


def _error(error: Exception) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"{error.code} {error.read().decode(errors='replace')[:300]}"
    return str(error)


def rejoin(url: str, members: Sequence[Mapping[str, Any]], name: str, peer_url: str) -> list[dict[str, Any]]:
    """Remove every member with ``peer_url`` (this pod's former self, started or not) and add a new
    one; the membership after the addition."""
    for member in members:
        if peer_url in member.get("peerURLs", []):
            log(f"removing member {member['ID']} ({member.get('name') or 'never started'}): its data is lost")
            _call(url, "remove", {"ID": member["ID"]}, _CHANGE_TIMEOUT)
    added = _call(url, "add", {"peerURLs": [peer_url]}, _CHANGE_TIMEOUT)
    log(f"added member {added['member']['ID']} for {name} at {peer_url}")
    members_after: list[dict[str, Any]] = added["members"]
    return members_after


def initial_cluster(members: Sequence[Mapping[str, Any]], name: str, peer_url: str) -> str:
    """``name=peer URL`` of every member, as ``existing`` needs it: etcd checks the peer URLs against
    the running cluster's; the names of the others are only labels (an added, unstarted member has none)."""
    entries: list[str] = []
    for member in members:
        urls = member.get("peerURLs", [])
        label = name if peer_url in urls else member.get("name") or f"member-{member['ID']}"
        entries.extend(f"{label}={url}" for url in urls)
    return ",".join(sorted(entries))


def decide(config: dict[str, Any], others: Sequence[str], *, bootstrap_wait: float, deadline: float) -> None:
    """Set ``initial-cluster-state`` (and, to join, ``initial-cluster``) in ``config``."""
    name, peer_url = config["name"], config["initial-advertise-peer-urls"]
    if has_data(Path(config["data-dir"])):
        log("the data directory holds a write-ahead log: restarting with it")
        config["initial-cluster-state"] = "existing"
        return
    started = time.monotonic()
    attempts = 0
    while True:
        # Each silent member is logged once (a first start hears none for --bootstrap-wait).
        answer = member_list(others, quiet=attempts > 0)
        attempts += 1
        if answer is None:
            if time.monotonic() - started >= bootstrap_wait:
                log(f"no member answered for {bootstrap_wait:.0f} s: starting the cluster")
                config["initial-cluster-state"] = "new"
                return
        else:
            url, members = answer
            try:
                members = rejoin(url, members, name, peer_url)
            except (OSError, ValueError, KeyError) as error:
                log(f"could not change the membership through {url}: {_error(error)}")
            else:
                config["initial-cluster-state"] = "existing"
                config["initial-cluster"] = initial_cluster(members, name, peer_url)
                return
        if time.monotonic() - started >= deadline:
            raise SystemExit(f"etcd-member: no membership for {name} after {deadline:.0f} s; giving up")
        time.sleep(_RETRY_SECONDS)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="etcd-member")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--members", required=True)
    parser.add_argument("--bootstrap-wait", type=float, required=True)
    parser.add_argument("--deadline", type=float, required=True)
    arguments, flags = parser.parse_known_args(argv)
    config = etcd_flags(flags)
    members = dict(entry.split("=", 1) for entry in arguments.members.split(","))
    others = [url for member, url in members.items() if member != config["name"]]
    decide(config, others, bootstrap_wait=arguments.bootstrap_wait, deadline=arguments.deadline)
    arguments.config.write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
    log(f"{arguments.config}: initial-cluster-state {config['initial-cluster-state']}")


if __name__ == "__main__":
    main(sys.argv[1:])
