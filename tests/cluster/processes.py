"""Local processes of the control plane: started with their output in a file, waited for with a
bound, stopped by PID, and their output's tail shown when something fails."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

__all__ = ["CLIENT_ENVIRONMENT", "Process", "Processes", "StartupError", "free_port", "wait_until"]

T = TypeVar("T")


CLIENT_ENVIRONMENT: dict[str, str] = {}
"""For every Kubernetes client started here (kubectl, helm and the processes)."""


class StartupError(AssertionError):
    """A wait ran out; the message carries the tails of the processes' output."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Process:
    name: str
    args: list[str]
    log: Path
    popen: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to this PID, SIGKILL after ``timeout``."""
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.popen.wait(timeout=timeout)


@dataclass
class Processes:
    """Every process one control plane started, in start order (stopped in reverse)."""

    log_dir: Path
    started: list[Process] = field(default_factory=list)

    def start(
        self,
        name: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Process:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as out:
            out.write(f"$ {' '.join(args)}\n".encode())
            out.flush()
            # A session of its own: a Ctrl-C at the terminal reaches pytest, which stops these by PID.
            popen = subprocess.Popen(
                list(args),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**(env if env is not None else os.environ), **CLIENT_ENVIRONMENT},
                cwd=cwd,
                start_new_session=True,
            )
        process = Process(name=name, args=list(args), log=log, popen=popen)
        self.started.append(process)
        return process

    def get(self, name: str) -> Process:
        for process in reversed(self.started):
            if process.name == name:
                return process
        raise KeyError(name)

    def stop(self, name: str) -> None:
        for process in [p for p in self.started if p.name == name]:
            process.stop()
            self.started.remove(process)

    def stop_all(self) -> None:
        for process in reversed(self.started):
            with contextlib.suppress(Exception):
                process.stop()
        self.started.clear()

    def report(self, lines: int = 30) -> str:
        """The tail of every process's output, and which ones have exited."""
        parts = []
        for process in self.started:
            state = "running" if process.alive() else f"EXITED {process.popen.returncode}"
            parts.append(
                f"--- {process.name} (pid {process.pid}, {state}), {process.log}:\n{process.tail(lines)}"
            )
        return "\n".join(parts)


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.5,
    processes: Processes | None = None,
    watch: Sequence[Process] = (),
) -> T:
    """``probe()`` until it returns something true, for at most ``timeout`` seconds.

    Fails at once when a process in ``watch`` has exited, and in any case with the output tails."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except Exception as error:  # noqa: BLE001 (a probe's error is a "not yet" until the deadline)
            last_error = error
        dead = [process.name for process in watch if not process.alive()]
        if dead or time.monotonic() > deadline:
            reason = f"exited: {', '.join(dead)}" if dead else f"not within {timeout:.0f} s"
            detail = f"; last error: {last_error}" if last_error is not None else ""
            tails = f"\n{processes.report()}" if processes is not None else ""
            raise StartupError(f"waiting for {what}: {reason}{detail}{tails}")
        time.sleep(interval)
