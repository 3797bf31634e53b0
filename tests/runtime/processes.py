"""Local processes of the runtime tests: free loopback ports, and stopping a process with all it started."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from pathlib import Path

__all__ = ["free_port", "kill_tree"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _process_tree(root: int) -> list[int]:
    """``root`` and its descendants, from /proc (torchrun puts workers in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, []))
    return tree


def kill_tree(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``process`` and every descendant, by PID, as deleting its pod would."""
    if process.poll() is None:
        # Stopped processes cannot fork: look again once the tree is frozen, then kill it all.
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in _process_tree(process.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
    process.wait(timeout=10)
