"""cluster_programs/kube_mirror.py against a stand-in API whose lists and watches the test writes:
what a mirror does with each kind of event, with a 410, a broken watch and a silent one, and that
its reads do not grow with the passes. The real API server's watch semantics (field selectors, RBAC
of the watch verb, bookmarks) are exercised by the gang watchdog's loop in tests/cluster/
(test_watchdog.py and every module that starts it), which reads through these mirrors.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.pod_programs import program
from tests.stand_in_api import json_api

PATH = "/api/v1/namespaces/team-a/pods"


def pod(name: str, version: int, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-a", "resourceVersion": str(version)},
        "status": {"phase": phase},
    }


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


class Server:
    """Lists answer ``listed`` at ``version``; each watch answers the next batch of ``watches`` (a
    list of events, or an HTTP status), then ends, as a watch the server times out does; once they
    are used up a watch waits a moment and ends with nothing."""

    def __init__(self, listed: list[dict[str, Any]], version: int, watches: list[Any]) -> None:
        self.listed, self.version, self.watches = listed, version, watches
        self.relisted: tuple[list[dict[str, Any]], int] | None = None
        """What every list after the first answers (None: the same)."""
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.lock = threading.Lock()

    def answer(self, method: str, path: str, headers: Mapping[str, str], body: Any) -> tuple[int, Any]:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
        with self.lock:
            self.requests.append(("watch" if "watch" in query else "list", query))
            batch = self.watches.pop(0) if "watch" in query and self.watches else None
        if "watch" not in query:
            listed, version = self.listed, self.version
            if self.relisted is not None and self.count("list") > 1:
                listed, version = self.relisted
            return 200, {"metadata": {"resourceVersion": str(version)}, "items": listed}
        if batch is None:
            time.sleep(0.2)
            return 200, ""
        if isinstance(batch, int):
            return batch, {"kind": "Status", "code": batch}
        return 200, "".join(json.dumps(e) + "\n" for e in batch)

    def count(self, kind: str) -> int:
        with self.lock:
            return sum(1 for k, _ in self.requests if k == kind)

    def watched_from(self) -> list[str]:
        with self.lock:
            return [q["resourceVersion"][0] for k, q in self.requests if k == "watch"]


def mirrored(server: Server, url: str, token: Path, **changes: Any) -> Any:
    api = program("kube_api").Api(server=url, token_file=str(token), ca_file=None)
    return (
        program("kube_mirror")
        .Mirror(api, PATH, query={"fieldSelector": "status.phase!=Succeeded"}, **changes)
        .start()
    )


def settle(condition: Any, seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("t")
    return path


def names(mirror: Any) -> list[str]:
    return sorted(obj["metadata"]["name"] for obj in mirror.items())


def test_a_mirror_lists_once_then_follows_the_watch_from_the_lists_version(token: Path) -> None:
    server = Server(
        [pod("a", 5), pod("b", 6)],
        10,
        [
            [
                event("MODIFIED", pod("a", 11, "Pending")),
                event("DELETED", pod("b", 12)),
                event("ADDED", pod("c", 13)),
                event("BOOKMARK", {"metadata": {"resourceVersion": "15"}}),
            ]
        ],
    )
    with json_api(server.answer) as url:
        mirror = mirrored(server, url, token)
        try:
            assert names(mirror)  # listed
            settle(lambda: names(mirror) == ["a", "c"])
            (a,) = [obj for obj in mirror.items() if obj["metadata"]["name"] == "a"]
            assert a["status"]["phase"] == "Pending"
            settle(lambda: len(server.watched_from()) >= 2)
            assert server.watched_from()[:2] == ["10", "15"]  # the list's version, then the bookmark's
            # The field selector goes with the watch: the server, not the mirror, decides membership.
            watches = [q for k, q in server.requests if k == "watch"]
            assert all(q["fieldSelector"] == ["status.phase!=Succeeded"] for q in watches)
            assert all(q["allowWatchBookmarks"] == ["true"] for q in watches)
        finally:
            mirror.stop()
    assert server.count("list") == 1


@pytest.mark.parametrize("expired", ["status", "event"])
def test_a_410_lists_again_and_watches_from_the_new_list(expired: str, token: Path) -> None:
    gone: Any = 410 if expired == "status" else [event("ERROR", {"kind": "Status", "code": 410})]
    server = Server([pod("a", 5)], 10, [gone])
    server.relisted = ([pod("z", 20)], 20)
    with json_api(server.answer) as url:
        mirror = mirrored(server, url, token)
        try:
            settle(lambda: names(mirror) == ["z"])
            settle(lambda: len(server.watched_from()) >= 2)
        finally:
            mirror.stop()
    assert server.count("list") == 2
    assert server.watched_from()[:2] == ["10", "20"]


def test_a_broken_watch_serves_the_copy_for_a_while_then_refuses(token: Path) -> None:
    now = [0.0]
    server = Server([pod("a", 5)], 10, [500] * 1000)
    with json_api(server.answer) as url:
        mirror = mirrored(server, url, token, stale_seconds=120, clock=lambda: now[0])
        try:
            settle(lambda: mirror.broken_at is not None)
            assert names(mirror) == ["a"]  # still current enough
            now[0] = 121
            with pytest.raises(program("kube_api").ApiError, match="watch has been broken for 121 s"):
                mirror.items()
        finally:
            mirror.stop()
    # Failures are retried after a pause, not in a loop: 5 s apart (RETRY_SECONDS).
    assert server.count("watch") <= 2


def test_a_watch_the_server_ends_at_once_is_not_retried_in_a_loop(token: Path) -> None:
    server = Server([pod("a", 5)], 10, [[] for _ in range(100)])
    with json_api(server.answer) as url:
        mirror = mirrored(server, url, token)
        try:
            time.sleep(1.5)
        finally:
            mirror.stop()
    assert server.count("watch") <= 3  # one a second at most (MIN_WATCH_SECONDS)


def test_reading_a_mirror_costs_no_request(token: Path) -> None:
    server = Server([pod(f"p{i}", i) for i in range(50)], 100, [])
    with json_api(server.answer) as url:
        mirrors = program("kube_mirror").Mirrors(
            program("kube_api").Api(server=url, token_file=str(token), ca_file=None)
        )
        try:
            for _ in range(20):
                assert len(mirrors.items(PATH, fieldSelector="x")) == 50
            assert len(mirrors.items(PATH, fieldSelector="y")) == 50  # another list, another mirror
        finally:
            mirrors.stop()
    assert server.count("list") == 2


def test_a_mirror_whose_list_failed_says_why_at_once(token: Path) -> None:
    api = program("kube_api").Api(server="http://127.0.0.1:9", token_file=str(token), ca_file=None)
    mirror = program("kube_mirror").Mirror(api, PATH).start()
    try:
        with pytest.raises(program("kube_api").ApiError, match=r"Connection refused|not listed within"):
            mirror.items(wait_seconds=5)
    finally:
        mirror.stop()
