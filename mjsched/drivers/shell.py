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
``errors="replace"``). The child is started with ``start_new_session=True`` and
cancellation (timeout, ``cancel_event``) signals the whole group: ``SIGTERM``,
then ``SIGKILL`` after :data:`KILL_GRACE` seconds, so no grandchild outlives
the run.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import IO, Any

from ..errors import ConfigurationError
from .base import BaseScheduledJob, ExecutionContext, JobResult
from .base import driver_named

TAIL_BYTES = 4096
KILL_GRACE = 2.0
REAP_SECONDS = 1.0   # after SIGKILL, how long the group is waited for to be gone
POLL_INTERVAL = 0.05
READER_JOIN_TIMEOUT = 2.0


class _TailReader(threading.Thread):
    """Drains one pipe so the child never blocks, keeping only the last bytes."""

    def __init__(self, stream: IO[bytes], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._stream = stream
        self._buffer = bytearray()
        self._lock = threading.Lock()

    def run(self) -> None:
        try:
            while True:
                chunk = self._stream.read1(65536) if hasattr(self._stream, "read1") else self._stream.read(65536)
                if not chunk:
                    break
                with self._lock:
                    self._buffer += chunk
                    if len(self._buffer) > TAIL_BYTES:
                        del self._buffer[:-TAIL_BYTES]
        except (OSError, ValueError):  # pipe closed under us
            pass
        finally:
            try:
                self._stream.close()
            except OSError:
                pass

    def tail(self) -> str:
        with self._lock:
            return bytes(self._buffer).decode("utf-8", errors="replace")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@driver_named("shell")
class ShellJob(BaseScheduledJob):
    """Run an external command; see the module docstring for the configuration."""

    isolation = "thread"          # the work already happens in a child process

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
        proc = _start(command, configuration.get("cwd"), configuration.get("env"))
        if isinstance(proc, JobResult):
            return proc
        context.logger.info("shell job started pid=%s: %s", proc.pid, _shown(command), extra={"action": "shell_start"})
        readers = _start_readers(proc)
        reason = _wait(proc, context.cancel_event, timeout)
        if reason is not None:
            context.logger.warning("shell job %s, terminating process group %s", reason, proc.pid,
                                   extra={"action": "shell_terminate"})
            terminate_process_group(proc, _kill_grace(context))
        for reader in readers:
            reader.join(READER_JOIN_TIMEOUT)
        details: dict[str, Any] = {
            "exit_code": proc.returncode,
            "stdout_tail": readers[0].tail(),
            "stderr_tail": readers[1].tail(),
        }
        return _result(proc.returncode, reason, timeout, details)


def _shown(command: str | list[str]) -> str:
    return command if isinstance(command, str) else " ".join(command)


def _start(command: str | list[str], cwd: str | None,
           env: dict[str, str] | None) -> subprocess.Popen[bytes] | JobResult:
    """The child in a session (so a process group) of its own, both outputs piped; a command
    that cannot start is a failed run saying why, not an exception."""
    try:
        return subprocess.Popen(
            command,
            shell=isinstance(command, str),
            cwd=cwd,
            env={**os.environ, **env} if env else None,
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


def _start_readers(proc: subprocess.Popen[bytes]) -> list[_TailReader]:
    """stdout's and stderr's readers, in that order, already draining."""
    assert proc.stdout is not None and proc.stderr is not None
    readers = [_TailReader(proc.stdout, f"mjsched-shell-out-{proc.pid}"),
               _TailReader(proc.stderr, f"mjsched-shell-err-{proc.pid}")]
    for reader in readers:
        reader.start()
    return readers


def _kill_grace(context: ExecutionContext) -> float:
    """SIGTERM to SIGKILL: KILL_GRACE, or less when the engine asks for less (a fenced run's
    is 0: its lease is about to pass to another engine, so the group dies at once)."""
    asked = getattr(context, "cancel_grace", None)
    return KILL_GRACE if asked is None else max(0.0, min(KILL_GRACE, float(asked)))


def _wait(proc: subprocess.Popen[bytes], cancel_event: threading.Event, timeout: float | None) -> str | None:
    """Wait for the child to exit (None), or until the run is cancelled ("cancelled") or its own
    timeout passes ("timeout"); cancellation is checked every POLL_INTERVAL."""
    deadline = time.monotonic() + timeout if timeout is not None else None
    while True:
        try:
            proc.wait(timeout=POLL_INTERVAL)
            return None
        except subprocess.TimeoutExpired:
            pass
        if cancel_event.is_set():
            return "cancelled"
        if deadline is not None and time.monotonic() >= deadline:
            return "timeout"


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


def _group_alive(pgid: int) -> bool:
    """Whether any process other than a zombie is still in group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc/self"):
        return True
    # Zombies still answer kill(0) until their (possibly non-reaping) parent
    # collects them; they hold no resources, so they do not count.
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def terminate_process_group(proc: subprocess.Popen, grace: float | None = None) -> None:
    """SIGTERM the child's process group, SIGKILL it after ``grace`` seconds, reap the child.

    The child was started with ``start_new_session=True``, so its pid is the group id.
    ``grace`` defaults to :data:`KILL_GRACE`.
    """
    grace = KILL_GRACE if grace is None else grace
    pgid = proc.pid
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _group_alive(pgid):
            return
        time.sleep(POLL_INTERVAL)
    _signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=max(grace, REAP_SECONDS))   # SIGKILL is not ignored: only the reaping is waited for
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        pass
    # Members of the group that were already reparented are reaped by init;
    # wait briefly so callers can rely on the group being gone.
    deadline = time.monotonic() + max(grace, REAP_SECONDS)
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL)
