"""The engine: the ``SchedulingEngine`` facade and the parts it wires together.

What lives here, one concern a module:
  facade.py        SchedulingEngine: job CRUD, start/stop polling, execute_job, close
  control.py       EngineControl: the order of the steps that start, stop and close an engine
  once.py          DuePass: run_due_jobs, one pass over what is due now for scripts
  manual.py        ManualRuns: execute_job (with run parameters) and unlock_job
  wiring.py        how the parts are built and connected (build_parts), the backend's defaults
  parts.py         EngineParts: the engine's parts, typed and frozen (engine.parts)
  wakeup.py        Wakeup: "poll again at once", made before the poller and the parts that wake it
  cancellation.py  cancel_run: the request, and the engine's side of acting on it
  retention.py     RunPurger: run-history retention passes; prune_runs
  retrying.py      the next attempt of a failed tick, drawn from the retry policy
  options.py       EngineOptions: the engine's tuning, validated once (the CLI builds it too)
  jobs.py          the row values of a job created or changed (validated, first due instant)
  refs.py          a job named by id or by name: the one rule the API and the CLI use
  declared.py      jobs declared in code: ensure_job, sync_jobs (create, or update to match)
  dispatch.py      Dispatcher: one poll (sweep cadence, schedule refresh, claim and replay with a
                   PendingClaim, starting claims, Queue-mode enqueue, the next delay), the stop gate
  run.py           Run: one run's life, its methods the transitions (start, finish, time out,
                   cancel, lose the lease, hand back), its fields changed only by them
  outcomes.py      what follows a run's written end: log line, listeners, retry notice, notification
  runs.py          the registry of runs in flight (the one lock runs change under), the capped pool
  leases.py        LeaseKeeper: one renewal call per beat for the runs that want it, max_runtime,
                   stalled completions
  completions.py   CompletionWriter: batched, retried completion writes
  housekeeping.py  start-up checks (schema, gone engines of this host), scheduling of unscheduled
                   jobs, the permission probe, the high-frequency warning
  changes.py       ChangeFeed: the LISTEN thread that wakes the dispatcher
  listeners.py     EngineListener: the typed observer protocol
  poller.py        Poller: the thread that calls the dispatcher and sleeps
  background.py    BackgroundTasks: notifications off the completion writer's thread

May import: the core modules of ``mjsched`` (models, errors, backends, drivers, scheduling,
validation, execution, notify, clock, cron, ...). Never ``mjsched.cli`` or ``mjsched.web``
(tests/unit/test_import_graph.py checks it).
"""
from .facade import SchedulingEngine
from .housekeeping import process_alive
from .listeners import EngineListener
from .options import EngineOptions

__all__ = ["EngineListener", "EngineOptions", "SchedulingEngine", "process_alive"]
