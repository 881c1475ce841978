"""How the engine's parts are built and connected: one place that says who calls whom.

``build_parts`` builds them once, in dependency order, into a frozen ``EngineParts``: the
registry and pool of runs, the completion writer, cancellation and the lease keeper, what
every run shares (RunServices), the purger, alerts, housekeeping, the dispatcher, the
one-pass runner, the poller and the change feed. No part is handed the facade: the one wake-up
flag (``Wakeup``) is made first, and the one cycle (cancellation and the keeper call each
other) goes through a ``LateCall`` bound before ``build_parts`` returns.
"""
from __future__ import annotations

from typing import Any, Callable, cast

from ..backends.base import Backend
from ..clock import DbClock
from ..lease_budget import DEFAULT_STATEMENT_TIMEOUT, LeaseBudget
from ..notify import Notifier
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
from .parts import EngineParts
from .poller import Poller
from .retention import RunPurger
from .run import RunRegistry, RunServices
from .stats import EngineStats
from .wakeup import Wakeup
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


class LateCall:
    """A call to a part built after the part that holds it: the one cycle of construction
    (Cancellation pokes the lease keeper, whose pass calls Cancellation back). Bound once, by
    ``build_parts``, before any part runs; a call before that (none is possible) does nothing."""

    def __init__(self) -> None:
        self._target: Callable[[], None] | None = None

    def bind(self, target: Callable[[], None]) -> None:
        self._target = target

    def __call__(self) -> None:
        if self._target is not None:
            self._target()


def announce_job_changed(dispatcher: Dispatcher, wakeup: Wakeup, purger: RunPurger) -> None:
    """A job was added or edited (here, or elsewhere: the change feed): the next poll re-reads
    the schedule, and comes at once; the purge stops backing off (retention rules may have changed)."""
    dispatcher.job_changed()
    purger.job_changed()
    wakeup.wake()


def build_parts(backend: Backend, opts: EngineOptions, stats: EngineStats, *,
                notifier: Callable[[], Notifier]) -> EngineParts:
    """The parts, each of one concern, built in the order they need each other; the runs
    (through RunServices) and the dispatcher hold the others. ``notifier`` is read at each
    notification: the facade's notifier may be replaced while the engine runs."""
    lease = opts.lease_timeout
    instance = opts.instance_name or ""
    allowed_drivers = cast("frozenset[str] | None", opts.allowed_drivers)   # as EngineOptions validated it
    wakeup = Wakeup()
    listeners = Listeners()
    stats.tell(listeners.counted)       # every counter's move is also a listener event (on_count)
    clock = DbClock(backend.db_now)
    registry = RunRegistry(on_slot_freed=wakeup)
    pool = WorkerPool(opts.max_concurrent_jobs)
    side_work = BackgroundTasks()
    writer = CompletionWriter(backend, batch_window=opts.completion_batch_window,
                              give_up_after=opts.lease_budget.writer_give_up)
    outcomes = Outcomes(stats=stats, listeners=listeners, clock=clock, side_work=side_work, notifier=notifier)
    poke_keeper = LateCall()
    cancellation = Cancellation(backend, registry, grace=opts.cancel_grace, on_overdue_soon=poke_keeper)
    keeper = Heartbeat(backend, registry, instance=instance, budget=opts.lease_budget,
                       on_cancel_check=cancellation.check)
    poke_keeper.bind(keeper.poke)
    run_services = RunServices(backend=backend, registry=registry, pool=pool, writer=writer, keeper=keeper,
                               outcomes=outcomes, clock=clock, stats=stats, instance=instance, lease_seconds=lease,
                               allowed_drivers=allowed_drivers, wake=wakeup,
                               default_max_runtime=opts.default_max_runtime, celery_allow=opts.celery_allow)
    purger = RunPurger(backend, opts, stats)
    alerts = AlertWatcher(backend, opts, stats, notifier=notifier)
    housekeeping = Housekeeping(backend, clock, purger=purger, alerts=alerts)
    dispatcher = Dispatcher(backend=backend, options=opts, registry=registry, services=run_services, writer=writer,
                            keeper=keeper, housekeeping=housekeeping, clock=clock, side_work=side_work,
                            stats=stats, wake=wakeup)
    due_pass = DuePass(dispatch=lambda sweep: listeners.observe(lambda: dispatcher.dispatch(sweep))[0],
                       keep_queue_ticks=dispatcher.keep_queue_ticks, registry=registry, backend=backend,
                       side_work=side_work, cap=opts.max_concurrent_jobs)
    poller = Poller(lambda: listeners.observe(dispatcher.poll)[1], min_interval=opts.min_poll_interval,
                    max_interval=opts.max_poll_interval, wakeup=wakeup)
    changes = ChangeFeed(backend, lambda: announce_job_changed(dispatcher, wakeup, purger))
    return EngineParts(options=opts, backend=backend, stats=stats, wakeup=wakeup, listeners=listeners, clock=clock,
                       registry=registry, pool=pool, side_work=side_work, writer=writer, cancellation=cancellation,
                       keeper=keeper, run_services=run_services, purger=purger, alerts=alerts,
                       housekeeping=housekeeping, dispatcher=dispatcher, due_pass=due_pass, poller=poller,
                       changes=changes)
