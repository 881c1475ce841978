"""Is an engine in the registry alive? One rule for `mjsched status` and the dashboard.

Every claim refreshes an engine's ``last_seen_at`` (claim_due_jobs), and a live engine claims at
least every ``heartbeat_seconds`` (its poll bound, recorded at registration; with every slot
taken, at least once a second). So an engine
silent for a few of those is **stale**: probably gone, its runs left to lapse. An engine on
*this* host whose pid no longer exists is **dead** at once. Engines of an older release
record no heartbeat; for them only the lease tells (they renew every lease/4).
"""
from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any, Mapping

STALE_AFTER_HEARTBEATS = 3      # missed polls before an engine is called stale
MIN_STALE_SECONDS = 5.0         # a busy database may delay a poll this long without alarm

LIVE, STALE, DEAD, STOPPED = "live", "stale", "dead", "stopped"


def pid_exists(pid: int) -> bool:
    """True when a process with this pid exists on this host (signal 0 probes, sends nothing)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:      # it exists, under another user
        return True
    return True


def stale_after(heartbeat_seconds: float | None, lease_seconds: float) -> float:
    """Seconds of silence after which an engine is stale."""
    if heartbeat_seconds:
        return max(MIN_STALE_SECONDS, STALE_AFTER_HEARTBEATS * float(heartbeat_seconds))
    return float(lease_seconds)


def silent_seconds(row: Mapping[str, Any]) -> float | None:
    silent = row.get("silent_for")
    if isinstance(silent, timedelta):
        return silent.total_seconds()
    return None if silent is None else float(silent)


def engine_state(row: Mapping[str, Any], *, lease_seconds: float, host: str | None = None) -> str:
    """``live``, ``stale``, ``dead`` (this host, pid gone) or ``stopped``, for one registry row
    (instance, host, pid, silent_for, heartbeat_seconds, stopped_at)."""
    if row.get("stopped_at") is not None:
        return STOPPED
    here = socket.gethostname() if host is None else host
    if row.get("host") == here and row.get("pid") is not None and not pid_exists(int(row["pid"])):
        return DEAD
    silent = silent_seconds(row)
    if silent is not None and silent > stale_after(row.get("heartbeat_seconds"), lease_seconds):
        return STALE
    return LIVE
