"""Lists kept current by watches, for a program that reads the same collections every pass.

The gang watchdog read every team namespace's unfinished pods, PodGroups and Jobs and the Trainium
nodes' metadata in full on every pass: at 1,024 simulated nodes and 20 teams, 43 requests and 15 MiB
a pass, 2.3 s (issue #36, docs/performance.md). A ``Mirror`` reads its collection once (a page of
500 at a time) and then follows a watch from the list's resourceVersion, the way client-go's
informers do (Kubernetes API concepts, "Efficient detection of changes"): a pass reads the copy in
memory, and the API server sends only what changed.

What it does when the watch cannot go on:
- the stream ends (the server's ``timeoutSeconds``, a dropped connection): watch again from the
  last resourceVersion seen (an event's or a bookmark's: ``allowWatchBookmarks``);
- ``410 Gone`` (the version is older than the server keeps, as an HTTP status or an ERROR event):
  list again, then watch from the new list;
- any other failure: wait ``RETRY_SECONDS`` and try again. While the copy is not current (no list
  yet, or the watch broken for longer than ``stale_seconds``), ``items`` raises ``ApiError``: the
  program's pass fails and is logged as any failed read, instead of acting on an old copy.

``Mirrors`` keeps one per distinct list and has the ``items`` signature of ``kube_api.Api``, so a
pass reads through either. Objects are shared with the copy: callers must not change them.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from kube_api import METADATA_WATCH, Api, ApiError

__all__ = ["Mirror", "Mirrors"]

WATCH_TIMEOUT_SECONDS = 290
"""The server ends each watch after this long (``timeoutSeconds``); the mirror watches again."""
RETRY_SECONDS = 5
MIN_WATCH_SECONDS = 1.0
"""A watch the server ends sooner is followed by a pause this long: a server that ends every watch at
once costs a request a second, not a loop of them."""
Key = tuple[str, str]


class _Expired(Exception):
    """410 Gone: the resourceVersion is older than the server keeps."""


def _key(obj: dict[str, Any]) -> Key:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


class Mirror:
    """One collection (``path`` and ``query``, as ``Api.items`` takes them) kept current by a watch."""

    def __init__(
        self,
        api: Api,
        path: str,
        *,
        metadata_only: bool = False,
        query: dict[str, str] | None = None,
        stale_seconds: float = 120,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # An Api of its own: ``last_list_version`` is per client, and this runs in its own thread.
        self.api = Api(server=api.server, token_file=api.token_file, ca_file=api.ca_file)
        self.path, self.metadata_only, self.query = path, metadata_only, dict(query or {})
        self.stale_seconds, self.clock = stale_seconds, clock
        self.objects: dict[Key, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.synced = threading.Event()
        self.attempted = threading.Event()
        """Set once the first list has succeeded or failed: a reader waits for that, not longer."""
        self.broken_at: float | None = None
        """When the watch last failed, until a list or a watch succeeds again."""
        self.last_error = ""
        self.lists = 0
        self.watches = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"mirror {path}", daemon=True)

    def start(self) -> Mirror:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def items(self, wait_seconds: float = 60) -> list[dict[str, Any]]:
        """The collection as last seen; ``ApiError`` while it is not current (before the first list
        succeeded: at once once a list failed, as a list of the API would)."""
        self.attempted.wait(wait_seconds)
        if not self.synced.is_set():
            with self.lock:
                error = self.last_error or f"not listed within {wait_seconds:.0f} s"
            raise ApiError(f"GET {self.path}: {error}")
        with self.lock:
            broken = self.broken_at
            if broken is not None and self.clock() - broken > self.stale_seconds:
                raise ApiError(
                    f"GET {self.path}: its watch has been broken for {self.clock() - broken:.0f} s ({self.last_error})"
                )
            return list(self.objects.values())

    # --- the thread --------------------------------------------------------------------------------

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._list()
                started = time.monotonic()
                version = self._watch(version)
                if time.monotonic() - started < MIN_WATCH_SECONDS:
                    self._stop.wait(MIN_WATCH_SECONDS)
            except _Expired:
                version = ""
            except ApiError as error:
                with self.lock:
                    self.last_error = str(error)
                    if self.broken_at is None:
                        self.broken_at = self.clock()
                self.attempted.set()
                self._stop.wait(RETRY_SECONDS)

    def _list(self) -> str:
        objects = {
            _key(obj): obj
            for page in self.api.pages(self.path, metadata_only=self.metadata_only, **self.query)
            for obj in page
        }
        self.lists += 1
        with self.lock:
            self.objects = objects
            self.broken_at = None
        self.synced.set()
        self.attempted.set()
        return self.api.last_list_version

    def _watch(self, version: str) -> str:
        """Follow the watch from ``version`` until the server ends it; the last version seen."""
        parameters = {
            **self.query,
            "watch": "1",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_SECONDS),
        }
        accept = METADATA_WATCH if self.metadata_only else "application/json"
        self.watches += 1
        events = self.api.stream(
            f"{self.path}?{urllib.parse.urlencode(parameters)}",
            accept=accept,
            read_timeout=WATCH_TIMEOUT_SECONDS + 30,
            on_open=self._mended,
        )
        try:
            for event in events:
                version = self._apply(event, version)
                if self._stop.is_set():
                    break
        except ApiError as error:
            if error.status == 410:
                raise _Expired from None
            raise
        return version

    def _mended(self) -> None:
        with self.lock:
            self.broken_at = None

    def _apply(self, event: dict[str, Any], version: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired
            raise ApiError(f"watch {self.path}: {obj.get('message') or obj}", obj.get("code"))
        with self.lock:
            if kind in ("ADDED", "MODIFIED"):
                self.objects[_key(obj)] = obj
            elif kind == "DELETED":
                self.objects.pop(_key(obj), None)
        return str((obj.get("metadata") or {}).get("resourceVersion") or version)


class Mirrors:
    """One ``Mirror`` per distinct list asked for, started at its first ``items``."""

    def __init__(self, api: Api, *, stale_seconds: float = 120) -> None:
        self.api = api
        self.stale_seconds = stale_seconds
        self.mirrors: dict[tuple[str, bool, tuple[tuple[str, str], ...]], Mirror] = {}

    def items(self, path: str, *, metadata_only: bool = False, **query: str) -> list[dict[str, Any]]:
        key = (path, metadata_only, tuple(sorted(query.items())))
        mirror = self.mirrors.get(key)
        if mirror is None:
            mirror = Mirror(
                self.api, path, metadata_only=metadata_only, query=query, stale_seconds=self.stale_seconds
            ).start()
            self.mirrors[key] = mirror
        return mirror.items()

    def stop(self) -> None:
        for mirror in self.mirrors.values():
            mirror.stop()
