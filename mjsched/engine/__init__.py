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
  options.py       EngineOptions: the engine's tuning, validated once (the CLI builds it too); its
                   lease_budget holds every interval derived from the lease (mjsched/lease_budget.py)
  jobs.py          the row values of a job created or changed (validated, first due instant)
  refs.py          a job named by id or by name: the one rule the API and the CLI use
  declared.py      jobs declared in code: ensure_job, sync_jobs (create, or update to match)
  dispatch.py      Dispatcher: one poll (sweep cadence, schedule refresh, claim and replay with a
                   PendingClaim, carrying out each claim's plan (scheduling.plan_claim), Queue-mode
                   enqueue, the next delay), the stop gate
  run.py           Run: one run's life, its methods the transitions (start, finish, time out,
                   cancel, lose the lease, hand back), its fields changed only by them; and
                   RunRegistry, the runs in flight (the one lock runs change under)
  outcomes.py      what follows a run's written end: log line, listeners, retry notice, notification
  worker_pool.py   WorkerPool: the capped daemon threads that execute runs
  leases.py        Heartbeat (formerly LeaseKeeper): each beat renews the leases of the runs that want
                   them in one call, enforces run timeouts, reads cancel requests; stalled completions
  fencing.py       LeaseFence: stops a run before its unrenewed lease can be taken over
  completions.py   CompletionWriter: batched, retried completion writes
  housekeeping.py  start-up checks (schema, gone engines of this host), scheduling of unscheduled
                   jobs, the permission probe, the high-frequency warning
  log_once.py      LogOnce, JobReports: errors about a job logged once (claims and the sweep share it)
  set_aside.py     SetAside: claimed rows no engine can schedule or decode, cleared and remembered
  changes.py       ChangeFeed: the LISTEN thread that wakes the dispatcher
  listeners.py     EngineListener: the typed observer protocol
  stats.py         EngineStats: engine.stats, counters any thread bumps under one lock
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
