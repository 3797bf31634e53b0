"""Volcano's scheduler's own log, read by the tests that wait on its sessions and its reasons
rather than on fixed sleeps (its process logs at ``-v=3``; a session runs every second, the chart's
``--schedule-period``)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cluster.control_plane import ControlPlane

__all__ = ["SchedulerLog"]


class SchedulerLog:
    """Volcano's scheduler's own log (its process's output), from where a test began."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.path: Path = plane.processes.get("volcano-scheduler").log
        self.start = self.path.stat().st_size

    def text(self) -> str:
        with self.path.open("rb") as log:
            log.seek(self.start)
            return log.read().decode(errors="replace")

    def wait_sessions(self, count: int) -> None:
        """``count`` more scheduling sessions closed (framework/session.go ``closeSession``)."""
        target = self.text().count("Close Session ") + count
        self.plane.wait_for(
            lambda: self.text().count("Close Session ") >= target,
            timeout=30,
            what=f"{count} more scheduling sessions",
        )

    def queue_refusals(self, queue: str) -> set[str]:
        """The tasks (pods) the capacity plugin found over ``queue``'s realCapability (allocate.go
        744-747)."""
        return set(
            re.findall(
                rf"Queue <{re.escape(queue)}> is overused when considering task <([^>]+)>", self.text()
            )
        )
