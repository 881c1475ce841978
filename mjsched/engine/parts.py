"""EngineParts: the engine's parts, built once in dependency order (``wiring.build_parts``).

One frozen record of who the engine is made of, each part typed: the facade, the start and
stop steps (EngineControl) and manual runs (ManualRuns) take it, not the facade. Tests and
operators may read it (``SchedulingEngine.parts``); it is not a stable API.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..backends.base import Backend
from ..clock import DbClock
from .alerting import AlertWatcher
from .background import BackgroundTasks
from .cancellation import Cancellation
from .changes import ChangeFeed
from .completions import CompletionWriter
from .dispatch import Dispatcher
from .housekeeping import Housekeeping
from .leases import Heartbeat
from .listeners import Listeners
from .once import DuePass
from .options import EngineOptions
from .poller import Poller
from .retention import RunPurger
from .run import RunRegistry, RunServices
from .stats import EngineStats
from .wakeup import Wakeup
from .worker_pool import WorkerPool


@dataclass(frozen=True)
class EngineParts:
    """Listed in the order they are built: each takes only parts above it."""

    options: EngineOptions
    backend: Backend
    stats: EngineStats                  # the engine's counters (SchedulingEngine.stats), shared by the parts
    wakeup: Wakeup                      # "poll again at once": made first, the poller sleeps on it
    listeners: Listeners
    clock: DbClock
    registry: RunRegistry               # the runs in flight: the one lock runs change under
    pool: WorkerPool                    # the capped pool scheduled runs execute on
    side_work: BackgroundTasks          # notifications: never on the completion writer's thread
    writer: CompletionWriter
    cancellation: Cancellation
    keeper: Heartbeat
    run_services: RunServices           # what every run shares
    purger: RunPurger
    alerts: AlertWatcher
    housekeeping: Housekeeping
    dispatcher: Dispatcher              # one poll
    due_pass: DuePass                   # run_due_jobs
    poller: Poller                      # the poll loop's thread
    changes: ChangeFeed                 # the LISTEN thread

