"""Operator tooling: the ``mjsched`` command and what only it needs. The library never
imports this package (tests/unit/test_import_graph.py checks it).

  entry.py            main(): parse, prepare the process (sys.path, logging), run the verb's
                      handler, report an error as one line with its exit code
  parser.py           the argument parser: global flags, one builder per verb; it names the
                      handlers, so no handler module imports it
  context.py          Context (arguments, settings, database, engines, masked output), UsageError,
                      resolving a JOB argument
  jobs_commands.py    the ``jobs`` verbs (add, edit, apply, list, show, pause, resume, remove,
                      unlock, preview, import-celery)
  runs_commands.py    ``runs`` (and --follow), ``runs show``, ``runs cancel``, ``runs prune``; how a run is shown
  engine_commands.py  ``init-db``, ``run`` (and --once), ``execute``, ``status``, ``config``, ``dashboard``
  demo.py             ``mjsched demo``
  jobfile.py          the TOML file ``jobs apply`` reads
  tomlfile.py         reads a TOML file (errors name file, line and column)
  terminal.py         shared terminal helpers: tables, times, durations, exit codes, the graceful stop
  config.py           the layered configuration (file, MJSCHED_* environment, flags); the only reader
                      of MJSCHED_*; builds the engine's EngineOptions
  embedded.py         the embedded PostgreSQL the zero-setup commands start

May import: anything in ``mjsched`` (the engine, the web dashboard, metrics).
"""
from .entry import main

__all__ = ["main"]
