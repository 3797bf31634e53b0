"""What a node lost mid-run costs: each step from the failure to training again, with its bound.

Numbers of components this project does not run here come with their source; the settings of
this project are named where they are set. docs/health.md ("A node lost mid-run") writes the path
out; tests/test_failure_recovery.py checks the sum against the goal.
"""

from __future__ import annotations

__all__ = [
    "LUSTRE_DEAD_CLIENT_EVICTION_SECONDS",
    "LUSTRE_OBD_TIMEOUT_SECONDS",
]

LUSTRE_OBD_TIMEOUT_SECONDS = 100
"""Lustre's ``obd_timeout`` default (lustre/obdclass/class_obd.c ``OBD_TIMEOUT_DEFAULT``). FSx for
Lustre manages its servers' settings and publishes no value of its own: the default is assumed."""

LUSTRE_DEAD_CLIENT_EVICTION_SECONDS = 250
"""How long a Lustre server keeps the locks (flocks included) of a client that died: its ping
evictor evicts a client not heard from in ``PING_EVICT_TIMEOUT`` = 6 x ``PING_INTERVAL``
(``obd_timeout / 4``; lustre/include/lustre_net.h), then waits another 3 x ``PING_INTERVAL`` before
it acts ("evictor takes PING_EVICT_TIMEOUT + 3 * PING_INTERVAL to evict", lustre/tests/recovery-small.sh),
and runs once per ``PING_INTERVAL``: 2.5 x ``obd_timeout`` in all. An evicted client's locks are
all invalidated (Lustre wiki, "Understanding Lustre Evictions"; the Lustre Operations Manual,
"Lustre Timeouts")."""
assert LUSTRE_DEAD_CLIENT_EVICTION_SECONDS == LUSTRE_OBD_TIMEOUT_SECONDS * 5 // 2
