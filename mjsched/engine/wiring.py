"""How the engine's parts are built and connected: one place that says who calls whom.

``wire`` gives a SchedulingEngine its parts (as attributes the facade and the tests use):
the registry and pool of runs, the run lifecycle, the lease keeper, cancellation, the purger,
housekeeping, the dispatcher, the one-pass runner, the poller and the change feed.
"""
from __future__ import annotations

from typing import Any

from ..backends.watchdog import call_timeout_for_lease
from ..clock import DbClock
from .background import BackgroundTasks
from .cancellation import Cancellation
from .changes import ChangeFeed
from .completions import CompletionWriter
from .dispatch import Dispatcher
from .housekeeping import Housekeeping
from .leases import LeaseKeeper
from .lifecycle import RunLifecycle
from .listeners import Listeners
from .once import DuePass
from .options import EngineOptions
from .poller import Poller
from .retention import RunPurger
from .runs import RunRegistry, WorkerPool


def backend_defaults(opts: EngineOptions, backend_options: dict[str, Any]) -> dict[str, Any]:
    """The connection pool sized to the cap, and every call bounded relative to the lease
    (README "Timeouts and half-open connections"); what the caller gave wins."""
    out = dict(backend_options)
    out.setdefault("pool_size", opts.max_concurrent_jobs + 4)
    out.setdefault("call_timeout", call_timeout_for_lease(opts.lease_timeout,
                                                          float(out.get("statement_timeout", 60.0))))
    out.setdefault("retry_max_delay", max(out["call_timeout"], min(15.0, opts.lease_timeout / 2)))
    return out


def wire(engine: Any, opts: EngineOptions) -> None:
    """The parts, each of one concern; the lifecycle and the dispatcher hold the others.
    (``engine`` is typed Any: the facade imports this module.)"""
    engine._listeners = Listeners()
    engine._clock = DbClock(engine.backend.db_now)
    engine._registry = RunRegistry(on_slot_freed=lambda: engine._poller.wake())
    engine._pool = WorkerPool(engine.max_concurrent_jobs)
    engine._side_work = BackgroundTasks()    # notifications: never on the completion writer's thread
    engine._writer = CompletionWriter(engine.backend, batch_window=opts.completion_batch_window,
                                      give_up_after=engine.lease_timeout + 60)
    engine._runs = RunLifecycle(backend=engine.backend, registry=engine._registry, pool=engine._pool,
                                writer=engine._writer, keeper=lambda: engine._keeper, side_work=engine._side_work,
                                clock=engine._clock, notifier=lambda: engine.notifier, listeners=engine._listeners,
                                stats=engine.stats, instance_name=engine.instance_name,
                                allowed_drivers=engine.allowed_drivers, wake=lambda: engine._poller.wake())
    engine._cancels = Cancellation(engine.backend, engine._registry, grace=opts.cancel_grace,
                                   on_overdue_soon=lambda: engine._keeper.poke())
    engine._keeper = LeaseKeeper(engine.backend, engine._registry, instance=engine.instance_name,
                                 lease_seconds=engine.lease_timeout, interval=opts.heartbeat_interval,
                                 on_timeout=engine._runs.time_out, on_lost=engine._runs.lose,
                                 on_cancel_check=engine._cancels.check, on_cancel_overdue=engine._runs.cancel_overdue)
    engine._purger = RunPurger(engine.backend, opts, engine.stats)
    engine._housekeeping = Housekeeping(engine.backend, engine._clock, purger=engine._purger)
    engine._dispatcher = Dispatcher(backend=engine.backend, options=opts, registry=engine._registry,
                                    lifecycle=engine._runs, writer=engine._writer, keeper=engine._keeper,
                                    housekeeping=engine._housekeeping, clock=engine._clock,
                                    side_work=engine._side_work, stats=engine.stats, wake=lambda: engine._poller.wake())
    engine._due_pass = DuePass(dispatch=lambda sweep: engine._observed_dispatch(sweep)[0], registry=engine._registry,
                               backend=engine.backend, side_work=engine._side_work, cap=engine.max_concurrent_jobs)
    engine._poller = Poller(engine._poll, min_interval=engine.min_poll_interval,
                            max_interval=engine.max_poll_interval)
    engine._changes = ChangeFeed(engine.backend, engine.on_job_changed)
