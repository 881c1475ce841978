"""Drivers for the process-isolation tests (module level: the child imports them by path).

Each writes what a test needs to check to ``configuration["dir"]`` (pids of the
child and of any grandchild) and registers under an ``iso-*`` name.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from typing import Any

import mjsched


def _note(context: Any, name: str, value: Any) -> None:
    directory = context.job.configuration.get("dir")
    if directory:
        with open(os.path.join(directory, name), "w") as fh:
            fh.write(str(value))


@mjsched.register_driver("iso-echo")
class EchoDriver(mjsched.BaseScheduledJob):
    """Returns its configuration's ``payload`` and its pid."""

    def execute(self, context: Any) -> Any:
        return mjsched.JobResult(True, None, {"payload": context.job.configuration.get("payload"),
                                              "pid": os.getpid(), "run_id": context.run.id,
                                              "job_name": context.job.name})


@mjsched.register_driver("iso-raise")
class RaisingDriver(mjsched.BaseScheduledJob):
    def execute(self, context: Any) -> Any:
        def deep_inside() -> None:
            raise LookupError("the widget ünïcode was not found")
        deep_inside()


@mjsched.register_driver("iso-exit")
class ExitDriver(mjsched.BaseScheduledJob):
    def execute(self, context: Any) -> Any:
        os._exit(int(context.job.configuration.get("code", 7)))


@mjsched.register_driver("iso-signal")
class SignalDriver(mjsched.BaseScheduledJob):
    def execute(self, context: Any) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)


@mjsched.register_driver("iso-odd-details")
class OddDetailsDriver(mjsched.BaseScheduledJob):
    def execute(self, context: Any) -> Any:
        return {"a_set": {1}, "nested": {"list": [1, 2.5, None, "x"]}, "text": "ü\u2603"}


@mjsched.register_driver("iso-heartbeat")
class HeartbeatDriver(mjsched.BaseScheduledJob):
    def execute(self, context: Any) -> Any:
        return {"heartbeat": context.heartbeat(), "cancelled": context.cancel_event.is_set()}


@mjsched.register_driver("iso-log")
class LoggingDriver(mjsched.BaseScheduledJob):
    def execute(self, context: Any) -> Any:
        context.logger.warning("hello from the child %s", "process", extra={"action": "child_hello"})
        logging.getLogger("some.library").error("library says %d", 42)
        return None


@mjsched.register_driver("iso-hang")
class HangDriver(mjsched.BaseScheduledJob):
    """Ignores cancel_event and SIGTERM's polite request; only SIGKILL ends it."""

    def execute(self, context: Any) -> Any:
        _note(context, "child.pid", os.getpid())
        time.sleep(float(context.job.configuration.get("seconds", 120)))
        return None


@mjsched.register_driver("iso-polite")
class PoliteDriver(mjsched.BaseScheduledJob):
    """Returns as soon as cancel_event is set."""

    def execute(self, context: Any) -> Any:
        _note(context, "child.pid", os.getpid())
        if context.cancel_event.wait(120):
            _note(context, "cancel.seen", time.time())
            return mjsched.JobResult(False, "stopped on request", {"cancelled": True})
        return None


@mjsched.register_driver("iso-busy")
class BusyDriver(mjsched.BaseScheduledJob):
    """Runs Python code for ``seconds`` whatever happens (signals are handled between its
    bytecodes), then answers whether its cancel_event was set."""

    def execute(self, context: Any) -> Any:
        _note(context, "child.pid", os.getpid())
        until = time.monotonic() + float(context.job.configuration.get("seconds", 1.5))
        spins = 0
        while time.monotonic() < until:
            spins += 1
        if context.cancel_event.is_set():
            return mjsched.JobResult(False, "stopped on request", {"cancelled": True})
        return {"spins": spins}


@mjsched.register_driver("iso-grandchild")
class GrandchildDriver(mjsched.BaseScheduledJob):
    """Starts ``sleep`` in a session of its own (as the shell driver does), then hangs or returns."""

    def execute(self, context: Any) -> Any:
        sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
        _note(context, "child.pid", os.getpid())
        _note(context, "grandchild.pid", sleeper.pid)
        if context.job.configuration.get("hang"):
            while True:
                time.sleep(1)
        return {"grandchild": sleeper.pid}


@mjsched.register_driver("iso-echo-by-default")
class ProcessByDefaultDriver(EchoDriver):
    """Its jobs run in a child process unless the job says otherwise."""

    isolation = "process"


@mjsched.register_driver("iso-double-fork")
class DoubleForkDriver(mjsched.BaseScheduledJob):
    """Leaves a daemon behind the classic way (fork, fork, parent exits): it is no longer
    a descendant, but it still holds every descriptor the child had open."""

    def execute(self, context: Any) -> Any:
        read_end, write_end = os.pipe()
        first = os.fork()
        if first == 0:
            if os.fork() == 0:
                os.write(write_end, f"{os.getpid()}\n".encode())
                time.sleep(300)
            os._exit(0)
        os.waitpid(first, 0)
        daemon = int(os.read(read_end, 64).decode())
        _note(context, "daemon.pid", daemon)
        return {"daemon": daemon}


@mjsched.register_driver("iso-orphans")
class OrphansDriver(mjsched.BaseScheduledJob):
    """Leaves a grandchild behind (``scenario``), notes its pid in ``dir``, then ends as
    ``outcome`` says: "complete" returns, "fail" raises, "hang" ignores cancellation.

    Scenarios: "setsid" (a child in a session of its own), "double-fork" (fork, setsid,
    fork, the middle one exits: an orphan in its own session), "holds-line" (the same, but
    the grandchild stays a copy of this interpreter, holding every descriptor it had,
    the line to the engine included), "bare-env" (as "double-fork", with an empty
    environment: only its descent tells it belongs to the run). Outcome "exit" is an
    abrupt ``os._exit(7)``."""

    def execute(self, context: Any) -> Any:
        configuration = context.job.configuration
        scenario = configuration["scenario"]
        if scenario == "setsid":
            grandchild = subprocess.Popen(["sleep", "120"], start_new_session=True, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid
        else:
            grandchild = _double_fork(exec_sleep=scenario != "holds-line", bare_env=scenario == "bare-env")
        _note(context, "child.pid", os.getpid())
        _note(context, "grandchild.pid", grandchild)
        outcome = configuration["outcome"]
        if outcome == "fail":
            raise RuntimeError("the job failed")
        if outcome == "exit":
            os._exit(7)
        if outcome == "hang":
            time.sleep(120)
        return {"grandchild": grandchild}


def _double_fork(exec_sleep: bool, bare_env: bool = False) -> int:
    """fork, setsid, fork; the middle process exits: the grandchild is an orphan in a session
    of its own. Its pid comes back through a pipe."""
    read_end, write_end = os.pipe()
    first = os.fork()
    if first == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                os.write(write_end, f"{os.getpid()}\n".encode())
                if exec_sleep:
                    os.execvpe("sleep", ["sleep", "120"], {"PATH": "/usr/bin:/bin"} if bare_env else os.environ)
                time.sleep(120)
        finally:
            os._exit(0)
    os.waitpid(first, 0)
    os.close(write_end)
    with os.fdopen(read_end) as fh:
        return int(fh.readline())
