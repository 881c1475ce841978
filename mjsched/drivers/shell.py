"""The ``shell`` driver: run a command in its own process group.

Configuration:

``command``
    A list of strings (executed directly, no shell) or a string (run through
    ``/bin/sh -c``). Required.
``timeout``
    Seconds (> 0). Past it the whole process group is terminated and the run
    fails. Optional; the engine's ``max_runtime`` also applies through
    ``context.cancel_event``.
``cwd``
    Working directory. Optional.
``env``
    ``{name: value}`` strings, merged over ``os.environ``. Optional.

Exit status 0 is success. ``details`` holds ``exit_code`` and the last
:data:`TAIL_BYTES` bytes of stdout and stderr (decoded with
``errors="replace"``), read by the run's own thread.

No process outlives the run. The child is started in a session of its own, carrying the
run's mark in its environment (:mod:`mjsched.proctree`). When the run ends — the command
exits, its timeout passes, ``cancel_event`` is set — everything left of it gets ``SIGTERM``:
its process group, its descendants and every process carrying the mark, also one that
started a session of its own or was orphaned by a double fork; ``SIGKILL`` follows after
:data:`KILL_GRACE` seconds (less when ``context.cancel_grace`` asks for less). Pipes held
open by a process that escaped anyway (one that cleared its environment, or where
``/proc`` is missing: only the group is found there) are read for at most
:data:`DRAIN_SECONDS` more.
"""
from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import threading
import time
from typing import IO, Any

from .. import proctree, tracing
from ..errors import ConfigurationError
from .base import BaseScheduledJob, ExecutionContext, JobResult
from .base import driver_named

log = logging.getLogger(__name__)

TAIL_BYTES = 4096
KILL_GRACE = 2.0
REAP_SECONDS = 1.0   # after SIGKILL, how long the child is waited for to be reaped
POLL_INTERVAL = 0.05
DRAIN_SECONDS = 0.5  # once the run's processes are gone, how long its pipes are read to their end


class _Output:
    """Drains the child's stdout and stderr from the run's own thread (no reader threads to
    leak), keeping only the last :data:`TAIL_BYTES` of each."""

    def __init__(self, *streams: IO[bytes]) -> None:
        self._selector = selectors.DefaultSelector()
        self._tails: list[bytearray] = []
        for index, stream in enumerate(streams):
            os.set_blocking(stream.fileno(), False)
            self._selector.register(stream, selectors.EVENT_READ, index)
            self._tails.append(bytearray())

    @property
    def open(self) -> bool:
        return bool(self._selector.get_map())

    def pump(self, timeout: float) -> None:
        """Read what is there, waiting up to ``timeout`` for something to come."""
        if not self.open:
            time.sleep(timeout)
            return
        for key, _ in self._selector.select(timeout):
            stream = key.fileobj
            try:
                chunk = os.read(stream.fileno(), 65536)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self._close(stream)  # type: ignore[arg-type]
                continue
            tail = self._tails[key.data]
            tail += chunk
            if len(tail) > TAIL_BYTES:
                del tail[:-TAIL_BYTES]

    def finish(self, bound: float) -> None:
        """Read to the end, for at most ``bound`` seconds (a process that escaped the run may
        hold a pipe open; it does not hold the run), then close both pipes."""
        deadline = time.monotonic() + bound
        while self.open and time.monotonic() < deadline:
            self.pump(max(0.0, min(POLL_INTERVAL, deadline - time.monotonic())))
        for key in list(self._selector.get_map().values()):
            self._close(key.fileobj)  # type: ignore[arg-type]
        self._selector.close()

    def tail(self, index: int) -> str:
        return bytes(self._tails[index]).decode("utf-8", errors="replace")

    def _close(self, stream: IO[bytes]) -> None:
        self._selector.unregister(stream)
        try:
            stream.close()
        except OSError:
            pass


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@driver_named("shell")
class ShellJob(BaseScheduledJob):
    """Run an external command; see the module docstring for the configuration."""

    isolation = "thread"          # the work already happens in a child process
    configuration_keys = frozenset({"command", "timeout", "cwd", "env"})

    def validate_configuration(self, configuration: dict[str, Any]) -> None:
        if not isinstance(configuration, dict):
            raise ConfigurationError("configuration", configuration, "must be an object")
        command = configuration.get("command")
        if command is None:
            raise ConfigurationError("configuration.command", command, "required: a list of strings or a shell string")
        if isinstance(command, str):
            if not command.strip():
                raise ConfigurationError("configuration.command", command, "must not be empty")
        elif isinstance(command, list):
            if not command:
                raise ConfigurationError("configuration.command", command, "must not be an empty list")
            if not all(isinstance(part, str) for part in command):
                raise ConfigurationError("configuration.command", command, "every element must be a string")
        else:
            raise ConfigurationError("configuration.command", command, "must be a list of strings or a string")

        timeout = configuration.get("timeout")
        if timeout is not None and (not _number(timeout) or timeout <= 0):
            raise ConfigurationError("configuration.timeout", timeout, "must be a number of seconds > 0")

        cwd = configuration.get("cwd")
        if cwd is not None and (not isinstance(cwd, str) or not cwd):
            raise ConfigurationError("configuration.cwd", cwd, "must be a non-empty string (a directory path)")

        env = configuration.get("env")
        if env is not None:
            if not isinstance(env, dict):
                raise ConfigurationError("configuration.env", env, "must be an object of string to string")
            for key, value in env.items():
                if not isinstance(key, str) or not key or "=" in key:
                    raise ConfigurationError("configuration.env", key, "variable names must be non-empty strings without '='")
                if not isinstance(value, str):
                    raise ConfigurationError(f"configuration.env.{key}", value, "must be a string")

    def execute(self, context: ExecutionContext) -> JobResult:
        configuration = context.job.configuration
        self.validate_configuration(configuration)
        command = configuration["command"]
        timeout = configuration.get("timeout")
        mark = proctree.new_mark()
        proc = _start(command, configuration.get("cwd"), configuration.get("env"), mark)
        if isinstance(proc, JobResult):
            return proc
        context.logger.info("shell job started pid=%s: %s", proc.pid, _shown(command), extra={"action": "shell_start"})
        assert proc.stdout is not None and proc.stderr is not None
        processes = proctree.RunProcesses(proc.pid, mark, group=proc.pid)
        output = _Output(proc.stdout, proc.stderr)
        try:
            reason = _wait(proc, output, context.cancel_event, timeout)
            if reason is not None:
                context.logger.warning("shell job %s, terminating process group %s", reason, proc.pid,
                                       extra={"action": "shell_terminate"})
            # the run ends here: whatever it started goes with it, in its group or not
            killed = processes.end(_kill_grace(context), pause=output.pump)
            if killed:
                context.logger.warning("shell job pid=%s: %d process(es) ignored SIGTERM and were killed", proc.pid,
                                       killed, extra={"action": "shell_kill"})
        finally:
            _reap(proc, processes)
            output.finish(DRAIN_SECONDS)
        exit_code = proc.returncode
        details: dict[str, Any] = {"exit_code": exit_code, "stdout_tail": output.tail(0), "stderr_tail": output.tail(1)}
        return _result(exit_code, reason, timeout, details)


def _shown(command: str | list[str]) -> str:
    return command if isinstance(command, str) else " ".join(command)


def _start(command: str | list[str], cwd: str | None, env: dict[str, str] | None,
           mark: str) -> subprocess.Popen[bytes] | JobResult:
    """The child in a session (so a process group) of its own, carrying the run's mark, both
    outputs piped; a command that cannot start is a failed run saying why, not an exception."""
    try:
        return subprocess.Popen(
            command,
            shell=isinstance(command, str),
            cwd=cwd,
            env=proctree.marked_environment({**os.environ, **tracing.environment(), **(env or {})}, mark),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        if cwd is not None and not os.path.isdir(cwd):
            message = f"working directory not found: {cwd!r}"
        else:
            missing = exc.filename or (command[0] if isinstance(command, list) else _shown(command))
            message = f"executable not found: {missing!r}"
    except (PermissionError, NotADirectoryError, OSError) as exc:
        message = f"could not start {_shown(command)!r}: {type(exc).__name__}: {exc}"
    return JobResult(False, message, {"exit_code": None, "stdout_tail": "", "stderr_tail": ""})


def _kill_grace(context: ExecutionContext) -> float:
    """SIGTERM to SIGKILL: KILL_GRACE, or less when the engine asks for less (a fenced run's
    is 0: its lease is about to pass to another engine, so the group dies at once)."""
    asked = getattr(context, "cancel_grace", None)
    return KILL_GRACE if asked is None else max(0.0, min(KILL_GRACE, float(asked)))


def _wait(proc: subprocess.Popen[bytes], output: _Output, cancel_event: threading.Event,
          timeout: float | None) -> str | None:
    """Drain the outputs until the child exits (None; it is left unreaped, so its pid and group
    id stay its own while its tree is ended), the run is cancelled ("cancelled") or its own
    timeout passes ("timeout"); checked at least every POLL_INTERVAL."""
    deadline = time.monotonic() + timeout if timeout is not None else None
    while True:
        if proctree.exited(proc):
            return None
        if cancel_event.is_set():
            return "cancelled"
        if deadline is not None and time.monotonic() >= deadline:
            return "timeout"
        if output.open:
            output.pump(POLL_INTERVAL)
        else:
            cancel_event.wait(POLL_INTERVAL)


def _reap(proc: subprocess.Popen[bytes], processes: proctree.RunProcesses) -> None:
    """Collect the child; one still running here (an exception on the way) is killed first,
    with its tree."""
    if proc.poll() is None:
        processes.kill()
        proc.kill()
    try:
        proc.wait(timeout=REAP_SECONDS)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        log.warning("shell job pid=%s not reaped %gs after SIGKILL", proc.pid, REAP_SECONDS)


def _result(exit_code: int | None, reason: str | None, timeout: float | None, details: dict[str, Any]) -> JobResult:
    """Only exit status 0 of a child left to finish is success; the message says how it ended."""
    if reason == "timeout":
        details["timed_out"] = True
        return JobResult(False, f"timed out after {timeout:g}s; process group killed", details)
    if reason == "cancelled":
        details["cancelled"] = True
        return JobResult(False, "cancelled; process group killed", details)
    if exit_code == 0:
        return JobResult(True, None, details)
    if exit_code is not None and exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        return JobResult(False, f"command killed by {name}", details)
    return JobResult(False, f"command exited with status {exit_code}", details)
