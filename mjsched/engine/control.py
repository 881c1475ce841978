"""Starting, stopping and closing an engine: the order of the steps, in one place.

Start: the start-up checks, then the loop threads. Stop: close the gate, drain within the
bound, let what still runs lapse. Close: stop, give cancelled runs a grace period, hand
back what is left, then close the connections. ``SchedulingEngine`` delegates here.
"""
from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
import weakref
from typing import Any

from ..drivers.registry import register_builtin_drivers
from ..errors import ConfigurationError, EngineStopped
from ..forking import ProcessGuard, track
from ..version import __version__
from .run import hand_back_held

log = logging.getLogger(__name__)

CLOSE_GRACE_SECONDS = 5.0   # close(): how long cancelled runs may take to return and be recorded (one budget
                            # for the runs, their completions and notifications together)
# What a completion or notification handed over at the very end of the grace still gets to
# land (one statement): a run that returned just in time is recorded, not left to lapse.
CLOSE_LAST_WRITE_SECONDS = 1.0


# Engines not closed yet: at interpreter exit each is closed, so what it holds is handed back.
_open_engines: "weakref.WeakSet[Any]" = weakref.WeakSet()


@atexit.register
def _close_open_engines() -> None:
    for engine in list(_open_engines):
        try:
            engine.close()
        except Exception as exc:  # noqa: BLE001 - exit must go on
            log.warning("closing engine %s at exit failed: %s", engine.instance_name, exc)


class EngineControl:
    """Whether the engine polls or is closed, and the steps that change it (under one lock)."""

    def __init__(self, engine: Any) -> None:
        """``engine``: the SchedulingEngine whose parts these steps use (typed Any: the facade
        imports this module, so naming its class here would make an import cycle)."""
        self._e = engine
        self._lock = threading.Lock()
        self.polling = False
        self.stopped = False    # stop() ended polling: the gate is closed until start() again
        self.closed = False
        self._process = ProcessGuard()
        _open_engines.add(engine)
        track(self)

    def after_fork_in_child(self) -> None:
        """A forked copy never runs (mjsched/forking.py): nor is it closed at this process's exit."""
        self._process.mark()
        _open_engines.discard(self._e)

    @property
    def forked(self) -> bool:
        """This process is a fork of the one that made the engine (its calls are refused)."""
        return self._process.moved()

    @property
    def owner_pid(self) -> int:
        return self._process.pid

    def _forked_noop(self, method: str) -> bool:
        """stop_polling() and close() in a forked copy: nothing runs here to stop or close,
        and the inherited connections are the parent's (never closed from here)."""
        if not self.forked:
            return False
        log.debug("%s() on a forked copy of engine %s (made in process %d): nothing to do here",
                  method, self._e.instance_name, self._process.pid)
        return True

    def check_dispatching(self, method: str) -> None:
        """``EngineStopped`` naming ``method`` once this engine starts no runs (stopped or closed):
        a poll by hand would return nothing while due jobs wait."""
        if self.closed:
            raise EngineStopped(method, "closed")
        if self.stopped:
            raise EngineStopped(method, "stopped")

    def start(self) -> None:
        """Run the start-up steps, then poll in the background; returns at once."""
        e = self._e
        with self._lock:
            if self.polling:
                log.info("polling already started")
                return
            e._housekeeping.check_installed()
            e._housekeeping.release_previous_engines(e.instance_name)
            e.backend.register_engine(e.instance_name, socket.gethostname(), os.getpid(), __version__,
                                      heartbeat_seconds=e.max_poll_interval,
                                      max_concurrent_jobs=e.max_concurrent_jobs, allowed_drivers=e.allowed_drivers)
            swept = e.backend.sweep_expired_leases()
            if swept.swept or swept.locks_freed:
                log.warning("start-up: cleared %d stale lock(s) and abandoned %d run(s) whose lease had expired",
                            swept.locks_freed, swept.swept, extra={"action": "stale_locks_cleared"})
            e._dispatcher.schedule_unscheduled()
            e._housekeeping.probe_permissions()
            e._housekeeping.warn_high_frequency_at_start()
            e._dispatcher.open_gate()
            for run in e._registry.busy():
                run.keep_lease()   # runs a previous stop gave up on are ours again while they last
            register_builtin_drivers()
            e._pool.prestart()
            self.polling = True
            e._keeper.start()
            self.stopped = False
            e._poller.start()
            e._changes.start()
            log.info("polling started: instance %s, cap %d, lease %gs, drivers %s", e.instance_name,
                     e.max_concurrent_jobs, e.lease_timeout,
                     ",".join(sorted(e.allowed_drivers)) if e.allowed_drivers is not None else "all",
                     extra={"action": "polling_started"})

    def stop(self, wait: bool, max_wait: float | None) -> None:
        """See ``SchedulingEngine.stop_polling``."""
        if max_wait is not None:
            if isinstance(max_wait, bool) or not isinstance(max_wait, (int, float)) or max_wait < 0:
                raise ConfigurationError("max_wait", max_wait, "must be a number of seconds >= 0, or None")
        if self._forked_noop("stop_polling"):
            return
        e = self._e
        started = time.monotonic()
        budget_end = None if (wait and max_wait is None) else started + (float(max_wait or 0) if wait else 0.0)

        def left(at_least: float = 0.0) -> float | None:
            """Seconds left of the budget (None: unbounded), but at least ``at_least``."""
            return None if budget_end is None else max(at_least, budget_end - time.monotonic())
        with self._lock:
            if not self.polling:
                return
            self.polling = False
            self.stopped = True
            e._changes.stop()
            e._poller.stop(timeout=0)       # the loop starts no poll after the one under way
            e._dispatcher.close_gate(wait, left())
            if wait:
                e._registry.wait_idle(left())
                e._writer.flush(left())
                e._side_work.flush(left())
            still = [run for run in e._registry.busy() if not run.manual]
            for run in still:
                run.cancel(keep_lease=False)      # its lease lapses, so another engine can take the job over
            if still:
                log.warning("stopped with %d run(s) still executing (%s); they keep their leases until expiry",
                            len(still), ", ".join(f"{r.job.name}/{r.run_id}" for r in still),
                            extra={"action": "stopped_with_inflight"})
            e._poller.join(left(at_least=0.5))
            e._housekeeping.unregister(e.instance_name, left(at_least=0.5))
            log.info("polling stopped after %.2fs", time.monotonic() - started, extra={"action": "polling_stopped"})

    def close(self) -> bool:
        """See ``SchedulingEngine.close``; False when it was closed already (or is a forked copy)."""
        if self._forked_noop("close"):
            return False
        e = self._e
        with self._lock:
            if self.closed:
                return False
            self.closed = True
        _open_engines.discard(e)
        if self.polling:
            self.stop(wait=False, max_wait=None)
        e._changes.join(timeout=10.0)
        # One grace for everything close() waits on that the runs owe: their return, their
        # completions, the notifications that follow. Each wait had 5 s of its own, so one
        # completion that would not land (its job row held, the database failing) was waited
        # for three times (runs idle, flush, the writer's stop): 15 s, not the documented 5.
        grace_end = time.monotonic() + CLOSE_GRACE_SECONDS

        def left(floor: float = 0.0) -> float:
            return max(floor, grace_end - time.monotonic())
        going = e._registry.busy()
        for run in going:
            run.cancel(keep_lease=True)     # ours until handed back below: no other engine takes it meanwhile
        if going:
            e._registry.wait_idle(left())
        e._writer.flush(left(CLOSE_LAST_WRITE_SECONDS))
        e._purger.join(left())
        e._alerts.join(left())
        hand_back_held(e._runs)
        e._keeper.stop()
        e._writer.stop(timeout=left())   # flushed just above: what is left now would not land
        e._side_work.flush(left(CLOSE_LAST_WRITE_SECONDS))
        e._side_work.shutdown()
        e._pool.shutdown()
        e.backend.close()
        return True
