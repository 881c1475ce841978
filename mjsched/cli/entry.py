"""The ``mjsched`` command (also ``python -m mjsched``).

Exit codes: 0 ok; 1 a run failed (or could not start: lock held), or mjsched itself
failed unexpectedly; 2 bad usage or input, an unknown job, a database that cannot be
reached. Errors are one line on stderr: ``mjsched: error: <message>``.

``main`` parses (parser.py), prepares the process (sys.path, logging), runs the verb's handler
with its Context and reports an error as that one line.
"""
from __future__ import annotations

import argparse
import getpass
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from . import config as config_mod
from .. import audit
from ..errors import JobNotActive, LockNotAcquired, SchedulerError
from ..logfmt import JsonLinesFormatter
from ..redaction import RedactingFilter, redact_text
from .context import Context
from .parser import build_parser
from .terminal import EXIT_FAILED, EXIT_OK, EXIT_USAGE

log = logging.getLogger(__name__)

# Commands whose output is their log (long-running): with --json it is one JSON object a line.
LOGGING_COMMANDS = ("run", "dashboard")


def flag_settings(args: argparse.Namespace) -> dict[str, tuple[Any, str]]:
    mapping = {"dsn": ("dsn", "--dsn"), "max_concurrent_jobs": ("max_concurrent_jobs", "--max-concurrent-jobs"),
               "lease": ("lease_timeout", "--lease"), "min_poll_interval": ("min_poll_interval", "--min-poll-interval"),
               "max_poll_interval": ("max_poll_interval", "--max-poll-interval"),
               "instance_name": ("instance_name", "--instance-name"),
               "shutdown_timeout": ("shutdown_timeout", "--shutdown-timeout"),
               "allowed_drivers": ("allowed_drivers", "--allowed-drivers"),
               "celery_allowed_apps": ("celery_allowed_apps", "--celery-allowed-apps"),
               "celery_allowed_brokers": ("celery_allowed_brokers", "--celery-allowed-brokers"),
               "metrics_port": ("metrics.port", "--metrics-port"), "metrics_host": ("metrics.host", "--metrics-host"),
               "engine_keep_runs_days": ("keep_runs_days", "--keep-runs-days"),
               "engine_keep_runs_count": ("keep_runs_count", "--keep-runs-count"),
               "purge_interval": ("purge_interval", "--purge-interval"),
               "alert_interval": ("alert_interval", "--alert-interval")}
    out = {}
    for attr, (key, flag) in mapping.items():
        value = getattr(args, attr, None)
        if isinstance(value, list):      # a repeatable flag: --allowed-drivers a --allowed-drivers b,c
            value = ",".join(value)
        if value is not None:
            out[key] = (value, flag)
    return out


def setup_logging(verbosity: int, command: str | None, json_lines: bool = False) -> None:
    level = logging.WARNING
    if command in ("run", "dashboard") or verbosity >= 1:
        level = logging.INFO
    if verbosity >= 2:
        level = logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    if json_lines and command in LOGGING_COMMANDS:   # their output is their log: --json makes it JSON lines
        handler.setFormatter(JsonLinesFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("mjsched").setLevel(level)
    if command != "run" and verbosity == 0:
        # one-shot commands: a retry that ends in an error is reported once, as that error
        logging.getLogger("mjsched.backends").setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, prepare the process, run the command, flush; exit code 0 ok, 1 failed, 2 bad usage or input."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "command", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    _prepare_process(args)
    code = _run_command(args)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        _silence_stdout()
    if _threads_left():
        os._exit(code)   # runs still executing past the drain bound: their leases lapse; do not hang
    return code


def _os_user() -> str | None:
    """Who runs the command, for the audit trail (the database login is recorded anyway)."""
    try:
        return getpass.getuser()[:255] or None
    except Exception:  # noqa: BLE001 - no user name here (a container with an unnamed uid)
        return None


def _prepare_process(args: argparse.Namespace) -> None:
    """The application's folders on sys.path, then logging (the demo sets up its own, from args.verbose)."""
    verbosity = int(getattr(args, "verbose", 0) or 0)
    sys.path[:0] = app_path(getattr(args, "app_dir", None) or [], sys.path)
    if args.command != "demo":
        setup_logging(verbosity, args.command, json_lines=bool(getattr(args, "json", False)))
    else:
        args.verbose = verbosity


def app_path(app_dirs: Sequence[str], path: Sequence[str]) -> list[str]:
    """What goes first on sys.path so that the application's modules import: each --app-dir, then
    the working directory, as `celery -A`, `flask` and `python -m` have it (`mjsched jobs
    import-celery proj.celery:app` run from the project's folder finds `proj`; an installed
    console script has only its own bin folder first). The working directory is not added
    again when it is there already, nor when it is gone."""
    front = [str(Path(directory).expanduser().resolve()) for directory in app_dirs]
    try:
        cwd = os.getcwd()
    except OSError:   # the folder was removed under us: nothing to import from there
        return front
    if cwd not in front and cwd not in path and "" not in path:
        front.append(cwd)
    return front


def _run_command(args: argparse.Namespace) -> int:
    """The command's handler, with SIGTERM ending it through the same cleanup as Ctrl-C; its context
    is closed whatever happens."""
    ctx: Context | None = None
    previous_term = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, _raise_interrupt)
        settings = config_mod.load(flag_settings(args), config_file=args.config)
        ctx = Context(args, settings)
        with audit.changes_by(_os_user(), via="cli"):   # the audit trail's who and how (013_audit.sql)
            return int(args.handler(ctx))
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - each reported as one line by _report
        return _report(exc, verbosity=int(getattr(args, "verbose", 0) or 0))
    finally:
        try:
            if ctx is not None:
                ctx.close()
        finally:
            if signal.getsignal(signal.SIGTERM) is _raise_interrupt:   # not while `run` is stopping
                signal.signal(signal.SIGTERM, previous_term)


def _report(exc: BaseException, verbosity: int) -> int:
    """A command's error as one line on stderr, and its exit code (called while handling it)."""
    if isinstance(exc, LockNotAcquired):
        print(f"mjsched: error: {_one_line(exc)} (it is running elsewhere; try again later)", file=sys.stderr)
        return EXIT_FAILED
    if isinstance(exc, JobNotActive):
        print(f"mjsched: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    if isinstance(exc, SchedulerError):
        print(f"mjsched: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(exc, KeyboardInterrupt):
        print("mjsched: interrupted", file=sys.stderr)
        return 130
    if isinstance(exc, BrokenPipeError):   # `mjsched runs | head`: the reader left; not an error of ours
        _silence_stdout()
        return EXIT_OK
    # Anything else is a bug in mjsched: one line, the traceback with -v.
    if verbosity:
        log.exception("unexpected error")
    print(f"mjsched: internal error: {type(exc).__name__}: {_one_line(exc)} (run with -v for the traceback)",
          file=sys.stderr)
    return EXIT_FAILED


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _raise_interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _one_line(exc: BaseException) -> str:
    return redact_text(" ".join(str(exc).split())) or type(exc).__name__


def _threads_left(grace: float = 1.0) -> bool:
    deadline = time.monotonic() + grace
    while True:
        alive = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon
                 and t.is_alive()]
        if not alive:
            return False
        if time.monotonic() > deadline:
            log.warning("%d job thread(s) still running at exit; exiting anyway (their leases lapse)", len(alive))
            return True
        time.sleep(0.05)

