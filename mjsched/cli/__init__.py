"""Operator tooling: the ``mjsched`` command and what only it needs. The library never
imports this package (tests/unit/test_import_graph.py checks it).

  commands.py  the argument parser, the commands, main()
  terminal.py  shared terminal helpers: tables, times, durations, exit codes, the graceful stop
  config.py    the layered configuration (file, MJSCHED_* environment, flags); the only reader
               of MJSCHED_*; builds the engine's EngineOptions
  embedded.py  the embedded PostgreSQL the zero-setup commands start
  demo.py      ``mjsched demo``

May import: anything in ``mjsched`` (the engine, the web dashboard, metrics).
"""
from .commands import main

__all__ = ["main"]
