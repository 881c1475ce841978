"""How the engine's parts are built and connected: one place that says who calls whom.

``wire`` gives a SchedulingEngine its parts (as attributes the facade and the tests use):
the registry and pool of runs, what every run shares (RunServices), the lease keeper, cancellation, the purger,
housekeeping, the dispatcher, the one-pass runner, the poller and the change feed.
"""
from __future__ import annotations

from typing import Any

from ..clock import DbClock
from ..lease_budget import DEFAULT_STATEMENT_TIMEOUT, LeaseBudget
from .background import BackgroundTasks
from .cancellation import Cancellation
from .alerting import AlertWatcher
from .changes import ChangeFeed
from .completions import CompletionWriter
from .dispatch import Dispatcher
from .housekeeping import Housekeeping
from .leases import Heartbeat
from .listeners import Listeners
from .once import DuePass
from .options import EngineOptions
from .outcomes import Outcomes
from .poller import Poller
from .retention import RunPurger
from .run import RunRegistry, RunServices
from .worker_pool import WorkerPool


def backend_defaults(opts: EngineOptions, backend_options: dict[str, Any]) -> dict[str, Any]:
    """The connection pool sized to the cap, and every call and every lock wait bounded
    relative to the lease (README "Timeouts and half-open connections"); what the caller gave wins."""
    out = dict(backend_options)
    budget = LeaseBudget.of(opts.lease_timeout, heartbeat_interval=opts.heartbeat_interval,
                            statement_timeout=float(out.get("statement_timeout", DEFAULT_STATEMENT_TIMEOUT)),
                            call_timeout=out.get("call_timeout"))    # a given call bound: the retries follow it
    out.setdefault("pool_size", opts.max_concurrent_jobs + 4)
    out.setdefault("call_timeout", budget.call_timeout)
    out.setdefault("retry_max_delay", budget.retry_max_delay)
    out.setdefault("lock_timeout", budget.lock_timeout)
    return out


def wire(engine: Any, opts: EngineOptions) -> None:
    """The parts, each of one concern; the runs (through RunServices) and the dispatcher hold the others.
    (``engine`` is typed Any: the facade imports this module.)"""
    engine._listeners = Listeners()
    engine._clock = DbClock(engine.backend.db_now)
    engine._registry = RunRegistry(on_slot_freed=lambda: engine._poller.wake())
    engine._pool = WorkerPool(engine.max_concurrent_jobs)
    engine._side_work = BackgroundTasks()    # notifications: never on the completion writer's thread
    engine._writer = CompletionWriter(engine.backend, batch_window=opts.completion_batch_window,
                                      give_up_after=opts.lease_budget.writer_give_up)
    outcomes = Outcomes(stats=engine.stats, listeners=engine._listeners, clock=engine._clock,
                        side_work=engine._side_work, notifier=lambda: engine.notifier)
    engine._runs = RunServices(backend=engine.backend, registry=engine._registry, pool=engine._pool,
                               writer=engine._writer, keeper=lambda: engine._keeper, outcomes=outcomes,
                               clock=engine._clock, stats=engine.stats, instance=engine.instance_name,
                               lease_seconds=engine.lease_timeout,
                               allowed_drivers=engine.allowed_drivers, wake=lambda: engine._poller.wake(),
                               default_max_runtime=opts.default_max_runtime, celery_allow=opts.celery_allow)
    engine._cancels = Cancellation(engine.backend, engine._registry, grace=opts.cancel_grace,
                                   on_overdue_soon=lambda: engine._keeper.poke())
    engine._keeper = Heartbeat(engine.backend, engine._registry, instance=engine.instance_name,
                               budget=opts.lease_budget, on_cancel_check=engine._cancels.check)
    engine._purger = RunPurger(engine.backend, opts, engine.stats)
    engine._alerts = AlertWatcher(engine.backend, opts, engine.stats, notifier=lambda: engine.notifier)
    engine._housekeeping = Housekeeping(engine.backend, engine._clock, purger=engine._purger, alerts=engine._alerts)
    engine._dispatcher = Dispatcher(backend=engine.backend, options=opts, registry=engine._registry,
                                    services=engine._runs, writer=engine._writer, keeper=engine._keeper,
                                    housekeeping=engine._housekeeping, clock=engine._clock,
                                    side_work=engine._side_work, stats=engine.stats, wake=lambda: engine._poller.wake())
    engine._due_pass = DuePass(dispatch=lambda sweep: engine._listeners.observe(
                                   lambda: engine._dispatcher.dispatch(sweep))[0],
                               keep_queue_ticks=engine._dispatcher.keep_queue_ticks, registry=engine._registry,
                               backend=engine.backend, side_work=engine._side_work, cap=engine.max_concurrent_jobs)
    engine._poller = Poller(lambda: engine._listeners.observe(engine._dispatcher.poll)[1], min_interval=engine.min_poll_interval,
                            max_interval=engine.max_poll_interval)
    engine._changes = ChangeFeed(engine.backend, engine.on_job_changed)
