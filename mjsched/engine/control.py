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

from ..drivers.registry import register_builtin_drivers
from ..errors import ConfigurationError, EngineStopped
from ..forking import ProcessGuard, track
from ..version import __version__
from .parts import EngineParts
from .run import hand_back_held

log = logging.getLogger(__name__)

CLOSE_GRACE_SECONDS = 5.0   # close(): how long cancelled runs may take to return and be recorded (one budget
                            # for the runs, their completions and notifications together)
# What a completion or notification handed over at the very end of the grace still gets to
# land (one statement): a run that returned just in time is recorded, not left to lapse.
CLOSE_LAST_WRITE_SECONDS = 1.0


# Engines not closed yet (their controls, which the engine holds): at interpreter exit each is
# closed, so what it holds is handed back.
_open_engines: "weakref.WeakSet[EngineControl]" = weakref.WeakSet()


@atexit.register
def _close_open_engines() -> None:
    for engine in list(_open_engines):
        try:
            engine.close()
        except Exception as exc:  # noqa: BLE001 - exit must go on
            log.warning("closing engine %s at exit failed: %s", engine.instance_name, exc)


class EngineControl:
    """Whether the engine polls or is closed, and the steps that change it (under one lock)."""

    def __init__(self, parts: EngineParts) -> None:
        """``parts``: the engine's parts these steps start, stop and close."""
        self._p = parts
        self.instance_name: str = parts.options.instance_name or ""
        self._lock = threading.Lock()
        self.polling = False
        self.stopped = False    # stop() ended polling: the gate is closed until start() again
        self.closed = False
        self._process = ProcessGuard()
        _open_engines.add(self)
        track(self)

    def after_fork_in_child(self) -> None:
        """A forked copy never runs (mjsched/forking.py): nor is it closed at this process's exit."""
        self._process.mark()
        _open_engines.discard(self)

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
                  method, self.instance_name, self._process.pid)
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
        p, opts = self._p, self._p.options
        with self._lock:
            if self.polling:
                log.info("polling already started")
                return
            p.housekeeping.check_installed()
            p.housekeeping.release_previous_engines(self.instance_name)
            p.backend.register_engine(self.instance_name, socket.gethostname(), os.getpid(), __version__,
                                      heartbeat_seconds=opts.max_poll_interval,
                                      max_concurrent_jobs=opts.max_concurrent_jobs,
                                      allowed_drivers=opts.allowed_drivers)
            swept = p.backend.sweep_expired_leases()
            if swept.swept or swept.locks_freed:
                log.warning("start-up: cleared %d stale lock(s) and abandoned %d run(s) whose lease had expired",
                            swept.locks_freed, swept.swept, extra={"action": "stale_locks_cleared"})
            p.dispatcher.schedule_unscheduled()
            p.housekeeping.probe_permissions()
            p.housekeeping.warn_high_frequency_at_start()
            p.dispatcher.open_gate()
            for run in p.registry.busy():
                run.keep_lease()   # runs a previous stop gave up on are ours again while they last
            register_builtin_drivers()
            p.pool.prestart()
            self.polling = True
            p.keeper.start()
            self.stopped = False
            p.poller.start()
            p.changes.start()
            log.info("polling started: instance %s, cap %d, lease %gs, drivers %s", self.instance_name,
                     opts.max_concurrent_jobs, opts.lease_timeout,
                     ",".join(sorted(opts.allowed_drivers)) if opts.allowed_drivers is not None else "all",
                     extra={"action": "polling_started"})

    def stop(self, wait: bool, max_wait: float | None) -> None:
        """See ``SchedulingEngine.stop_polling``."""
        if max_wait is not None:
            if isinstance(max_wait, bool) or not isinstance(max_wait, (int, float)) or max_wait < 0:
                raise ConfigurationError("max_wait", max_wait, "must be a number of seconds >= 0, or None")
        if self._forked_noop("stop_polling"):
            return
        p = self._p
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
            p.changes.stop()
            p.poller.stop(timeout=0)       # the loop starts no poll after the one under way
            p.dispatcher.close_gate(wait, left())
            if wait:
                p.registry.wait_idle(left())
                p.writer.flush(left())
                p.side_work.flush(left())
            still = [run for run in p.registry.busy() if not run.manual]
            for run in still:
                run.cancel(keep_lease=False)      # its lease lapses, so another engine can take the job over
            if still:
                log.warning("stopped with %d run(s) still executing (%s); they keep their leases until expiry",
                            len(still), ", ".join(f"{r.job.name}/{r.run_id}" for r in still),
                            extra={"action": "stopped_with_inflight"})
            p.poller.join(left(at_least=0.5))
            p.housekeeping.unregister(self.instance_name, left(at_least=0.5))
            log.info("polling stopped after %.2fs", time.monotonic() - started, extra={"action": "polling_stopped"})

    def close(self) -> bool:
        """See ``SchedulingEngine.close``; False when it was closed already (or is a forked copy)."""
        if self._forked_noop("close"):
            return False
        p = self._p
        with self._lock:
            if self.closed:
                return False
            self.closed = True
        _open_engines.discard(self)
        if self.polling:
            self.stop(wait=False, max_wait=None)
        p.changes.join(timeout=10.0)
        # One grace for everything close() waits on that the runs owe: their return, their
        # completions, the notifications that follow. Each wait had 5 s of its own, so one
        # completion that would not land (its job row held, the database failing) was waited
        # for three times (runs idle, flush, the writer's stop): 15 s, not the documented 5.
        grace_end = time.monotonic() + CLOSE_GRACE_SECONDS

        def left(floor: float = 0.0) -> float:
            return max(floor, grace_end - time.monotonic())
        going = p.registry.busy()
        for run in going:
            run.cancel(keep_lease=True)     # ours until handed back below: no other engine takes it meanwhile
        if going:
            p.registry.wait_idle(left())
        p.writer.flush(left(CLOSE_LAST_WRITE_SECONDS))
        p.purger.join(left())
        p.alerts.join(left())
        hand_back_held(p.run_services)
        p.keeper.stop()
        p.writer.stop(timeout=left())   # flushed just above: what is left now would not land
        p.side_work.flush(left(CLOSE_LAST_WRITE_SECONDS))
        p.side_work.shutdown()
        p.pool.shutdown()
        p.backend.close()
        return True
