"""Process isolation: run one driver in a child process that can always be stopped.

``run_in_process(driver_cls, context)`` is what ``run_driver`` calls for jobs
whose isolation is ``"process"``. The child is a fresh interpreter (spawn
semantics: nothing is forked from the threaded engine) started in its own
session and process group. It receives the frozen ``Job`` and ``JobRun`` and
the driver class by import path (``"pkg.module:Class"``), runs the driver, and
sends back the result over a socket pair; an exception comes back as a failed
result with its type, message and traceback tail, exactly as in thread mode.

Cancellation. When ``context.cancel_event`` is set (``max_runtime``, shutdown,
lease loss) the parent tells the child (its own ``cancel_event`` is set, by a
message and by ``SIGTERM``), signals the child's whole process tree with
``SIGTERM``, waits ``grace`` seconds, then stops and ``SIGKILL``\\ s the child with
its tree together, and reaps the child. No orphan survives (on Linux; see
:mod:`mjsched.proctree`): the child is a subreaper, so what its driver forks stays in
its tree even after ``setsid`` and a double fork; every process carries the run's mark
in its environment; the child kills what is left of its own tree before it reports,
and after a child that died abruptly the parent kills what carries the mark. If the
engine itself dies (``kill -9``), the child sees its socket close and tears its tree
down after the same grace.

Heartbeats: the engine's lease keeper renews the run's lease from the parent,
so the child needs none; ``context.heartbeat()`` in the child still works (it
asks the parent). Log records of the child are forwarded to the parent's
loggers of the same name.

Not ``multiprocessing.Process``: its spawn and forkserver start methods
re-import the application's ``__main__`` in the child, which re-runs an
unguarded script (and its ``start_polling()``). The child here is started with
``subprocess`` and talks through ``multiprocessing.connection`` framing, and
is told which script the engine runs as ``__main__``: a python job naming a
function of that script is refused there rather than importing it
(mjsched/drivers/callables.py).
"""
from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing import spawn as _mp_spawn
from multiprocessing.connection import Connection, wait
from typing import Any

from . import proctree, tracing
from .drivers import callables
from .drivers.base import BaseScheduledJob, ExecutionContext, JobResult
from .errors import ConfigurationError
from .forking import ProcessLock
from .signal_relay import SignalRelay

log = logging.getLogger(__name__)

GRACE = 3.0              # seconds between SIGTERM and SIGKILL (above the shell driver's own 2 s)
POLL_INTERVAL = 0.05     # how often the parent looks at cancel_event while waiting
EXIT_WAIT = 5.0          # how long a child that reported may take to exit before it is killed
HEARTBEAT_REPLY_TIMEOUT = 30.0
TRACEBACK_TAIL = 2000

_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BOOTSTRAP = ("import sys; sys.path.insert(0, sys.argv[2]); "
              "from mjsched.isolation import _child_main; _child_main(int(sys.argv[1]))")
_STANDARD_RECORD_KEYS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

_live_lock = ProcessLock()
_live: dict[int, str] = {}


def live_children() -> dict[int, str]:
    """Child pid -> run id of every isolated run this process is supervising now."""
    with _live_lock:
        return dict(_live)


def driver_path(driver_cls: type) -> str:
    """``"pkg.module:Qualified.Name"`` of a driver class, checked importable."""
    path = f"{driver_cls.__module__}:{driver_cls.__qualname__}"
    if "<locals>" in driver_cls.__qualname__:
        raise ConfigurationError("isolation", path, "a driver run in process isolation must be a module-level "
                                 "class (the child imports it by path)")
    return path


def load_driver(path: str) -> type[BaseScheduledJob]:
    module_name, _, qualname = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    if not (isinstance(target, type) and issubclass(target, BaseScheduledJob)):
        raise ConfigurationError("isolation", path, "does not name a BaseScheduledJob subclass")
    return target


def run_in_process(driver_cls: type[BaseScheduledJob], context: ExecutionContext, *,
                   grace: float = GRACE) -> JobResult:
    """Run ``driver_cls().execute(context)`` in a child process; see the module docstring."""
    path = driver_path(driver_cls)
    mark = proctree.new_mark()
    parent_sock, child_sock = socket.socketpair()
    try:
        # -X, -W, -O ... of this interpreter, passed on as multiprocessing does
        flags = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]
        proc = subprocess.Popen([_mp_spawn.get_executable(), *flags, "-c", _BOOTSTRAP, str(child_sock.fileno()),
                                 _PKG_ROOT],
                                pass_fds=(child_sock.fileno(),), stdin=subprocess.DEVNULL, start_new_session=True,
                                env=proctree.marked_environment({**os.environ, **tracing.environment()}, mark))
    except BaseException:
        parent_sock.close()
        raise
    finally:
        child_sock.close()
    conn = Connection(parent_sock.detach())
    with _live_lock:
        _live[proc.pid] = context.run.id
    supervisor = _Supervisor(proc, conn, context, grace, mark)
    log.debug("run %s of job %r: driver %s in child process %d", context.run.id, context.job.name, path, proc.pid,
              extra={"action": "isolated_start", "child_pid": proc.pid})
    try:
        try:
            conn.send(list(sys.path))
            context.fencing_token   # read here: the child has no database connection to read it with
            conn.send({"driver": path, "job": context.job, "run": context.run, "grace": grace, "mark": mark,
                       "log_level": context.logger.getEffectiveLevel(), "script": callables.running_script()})
        except OSError:
            pass  # the child died at once; its exit status tells why
        return supervisor.supervise()
    finally:
        supervisor.reap()
        conn.close()
        with _live_lock:
            _live.pop(proc.pid, None)


class _Supervisor:
    """The parent's side of one child: relays messages, cancels, kills, reaps."""

    def __init__(self, proc: subprocess.Popen[bytes], conn: Connection, context: ExecutionContext,
                 grace: float, mark: str) -> None:
        self.proc = proc
        self.mark = mark
        self.processes = proctree.RunProcesses(proc.pid, mark, group=proc.pid)
        self.conn = conn
        self.context = context
        self.grace = grace
        self.cancelled_at: float | None = None
        self.killed = False
        self.known: dict[int, int] = {}   # descendants seen: pid -> start time (guards against pid reuse)

    def supervise(self) -> JobResult:
        outcome: tuple[str, dict[str, Any]] | None = None
        connected = True
        reported_at: float | None = None
        while True:
            self._enforce_cancel()
            if connected:
                try:
                    exited = False
                    if not wait([self.conn], POLL_INTERVAL):
                        # gone, though something it forked may hold the line open: read what is left
                        exited = proctree.exited(self.proc)
                    while self.conn.poll(0):
                        message = self.conn.recv()
                        if message[0] in ("result", "error"):
                            outcome, reported_at = message, time.monotonic()
                        else:
                            self._handle(message)
                    connected = not exited
                except (EOFError, OSError):
                    connected = False
                continue
            if proctree.exited(self.proc):
                break
            if reported_at is not None and time.monotonic() - reported_at > EXIT_WAIT and not self.killed:
                self._kill_tree()
            time.sleep(POLL_INTERVAL)
        return self._result(outcome)

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "log":
            record = logging.makeLogRecord(message[1])
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(record.levelno):
                logger.handle(record)
        elif kind == "heartbeat":
            try:
                ok = bool(self.context.heartbeat()) and not self.context.cancel_event.is_set()
            except Exception:  # noqa: BLE001 - a failed renewal is a "no", never a crash
                ok = False
            try:
                self.conn.send(("heartbeat", ok))
            except OSError:
                pass

    def _grace(self) -> float:
        """An operator's cancel gives the engine's cancel grace (context.cancel_grace); a
        timeout, a lost lease or a shutdown gives this run's own."""
        operator = getattr(self.context, "cancel_grace", None)
        return self.grace if operator is None else float(operator)

    def _enforce_cancel(self) -> None:
        if self.cancelled_at is None and self.context.cancel_event.is_set():
            self.cancelled_at = time.monotonic()
            log.warning("run %s of job %r cancelled: terminating child process %d (SIGKILL in %gs)",
                        self.context.run.id, self.context.job.name, self.proc.pid, self._grace(),
                        extra={"action": "isolated_terminate", "child_pid": self.proc.pid})
            try:
                self.conn.send(("cancel",))
            except OSError:
                pass
            self._signal_tree(signal.SIGTERM)
        elif (self.cancelled_at is not None and not self.killed
              and time.monotonic() - self.cancelled_at >= self._grace()):
            log.warning("child process %d of run %s ignored SIGTERM for %gs: killing its process tree",
                        self.proc.pid, self.context.run.id, self._grace(),
                        extra={"action": "isolated_kill", "child_pid": self.proc.pid})
            self._kill_tree()

    def _signal_tree(self, sig: int) -> None:
        self.known.update(self.processes.members())
        self.processes.signal(self.known, sig)

    def _kill_tree(self) -> None:
        """Stop and kill the child with its tree at once: while the child (a subreaper) lives,
        nothing of its tree is reparented out of reach."""
        self.killed = True
        self.processes.kill()
        self.processes.signal(self.known, signal.SIGKILL)

    def reap(self) -> None:
        """Make sure the child and its tree are gone, and reap the child (no zombie)."""
        if self.proc.returncode is None:
            if not proctree.exited(self.proc):   # supervise() was interrupted: abandon the child for sure
                self._kill_tree()
            # leftovers of the group and every process seen, while the child's pid is not reused yet
            self.processes.signal(self.known, signal.SIGKILL)
            self.proc.wait()
        # A child that died abruptly (os._exit, the OOM killer) left its orphans to init: the mark
        # finds them. Not the group: with the child reaped, its id may be another's.
        proctree.RunProcesses(None, self.mark, since=self.processes.since).kill()

    def _result(self, outcome: tuple[str, dict[str, Any]] | None) -> JobResult:
        pid = self.proc.pid
        code = proctree.exit_code(self.proc)
        if outcome is not None and outcome[0] == "result":
            return JobResult(**outcome[1])
        if outcome is not None:
            error = outcome[1]
            return JobResult(success=False, error_message=f"{error['type']}: {error['message']}",
                             details={"exception_type": error["type"], "traceback_tail": error["traceback"]})
        details: dict[str, Any] = {"child_pid": pid, "exit_code": code}
        if self.cancelled_at is not None:
            details["cancelled"] = True
            details["killed"] = self.killed
            how = "killed after ignoring SIGTERM" if self.killed else "terminated"
            return JobResult(success=False, error_message=f"cancelled; child process {pid} {how}", details=details)
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return JobResult(success=False, error_message=f"child process {pid} was killed by {name} before it "
                             "reported a result", details=details)
        return JobResult(success=False, error_message=f"child process {pid} exited with code {code} before it "
                         "reported a result", details=details)


# -- the child ------------------------------------------------------------------------------
class _PipeLogHandler(logging.Handler):
    def __init__(self, send: Any) -> None:
        super().__init__()
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = {k: v for k, v in vars(record).items() if k in _STANDARD_RECORD_KEYS}
            data["msg"], data["args"] = record.getMessage(), None
            if record.exc_info:
                data["exc_text"] = self.formatter.formatException(record.exc_info) if self.formatter \
                    else "".join(traceback.format_exception(*record.exc_info))
            data["exc_info"] = None
            for key, value in vars(record).items():
                if key not in _STANDARD_RECORD_KEYS:
                    data[key] = value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
            data["child_pid"] = os.getpid()
            self._send(("log", data))
        except Exception:  # noqa: BLE001 - logging must never break the job
            pass


def _kill_own_tree(mark: str | None) -> None:
    """Kill every process of this run but this one: descendants (orphans included, this
    process being their subreaper) and whatever carries the run's mark."""
    proctree.RunProcesses(os.getpid(), mark, exclude=(os.getpid(),)).kill()


class _ParentLine:
    """The child's end of the socket to the parent: sends are serialised (the driver's threads log
    too), a reader thread takes the parent's cancel and heartbeat replies, and a closed line means
    the parent died."""

    def __init__(self, conn: Connection, grace: float, mark: str | None) -> None:
        self.conn = conn
        self.grace = grace
        self.mark = mark
        self.cancel = threading.Event()
        self._send_lock = threading.Lock()
        self._replies: queue.Queue[bool] = queue.Queue()

    def send(self, message: Any) -> None:
        with self._send_lock:
            self.conn.send(message)

    def heartbeat(self) -> bool:
        """Ask the parent whether the run still holds its lease; no answer counts as no."""
        try:
            self.send(("heartbeat",))
            return self._replies.get(timeout=HEARTBEAT_REPLY_TIMEOUT)
        except (OSError, queue.Empty):
            return False

    def read(self) -> None:
        try:
            while True:
                message = self.conn.recv()
                if message[0] == "cancel":
                    self.cancel.set()
                elif message[0] == "heartbeat":
                    self._replies.put(bool(message[1]))
        except (EOFError, OSError):
            self._parent_gone()

    def _parent_gone(self) -> None:
        """The engine died: cancel, give the driver the grace period, then kill the whole tree."""
        self.cancel.set()
        time.sleep(self.grace)
        _kill_own_tree(self.mark)
        os._exit(137)


def _child_main(fd: int) -> None:
    """Entry point of the child interpreter (see ``_BOOTSTRAP``)."""
    os.set_inheritable(fd, False)   # grandchildren must not keep the parent's line open
    proctree.become_subreaper()     # orphans of the driver's processes stay in this tree
    conn = Connection(fd)
    sys.path[:] = conn.recv()
    payload = conn.recv()
    callables.enter_isolated_child(payload["script"])   # the engine's script is not imported here
    line = _ParentLine(conn, float(payload["grace"]), payload.get("mark"))
    # not in the handler itself: a second SIGTERM inside Event.set() deadlocked the main thread
    # (mjsched/signal_relay.py); no wakeup fd: an asyncio job may take it for itself
    SignalRelay(lambda _signum: line.cancel.set(), name="mjsched-isolation-signals").install(signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=line.read, name="mjsched-isolation-reader", daemon=True).start()
    root = logging.getLogger()
    root.handlers[:] = [_PipeLogHandler(line.send)]
    root.setLevel(payload["log_level"])
    tracing.attach_from_environment(os.environ)   # the driver's spans continue the run's trace
    message = _run_driver(payload, line)
    try:
        line.send(message)      # first: the parent's kill grace is running if it cancelled us
    except OSError:
        pass
    _kill_own_tree(line.mark)   # nothing the driver started outlives the run (the parent waits for our exit)
    try:
        conn.close()
    except OSError:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(0)   # do not wait for non-daemon threads the driver left behind


def _run_driver(payload: dict[str, Any], line: _ParentLine) -> tuple[str, dict[str, Any]]:
    """The driver's result, or its exception as a message: everything goes back to the parent."""
    job, run = payload["job"], payload["run"]
    context = ExecutionContext(job=job, run=run, cancel_event=line.cancel, heartbeat=line.heartbeat,
                               logger=logging.getLogger(f"mjsched.job.{job.driver}"))
    try:
        from .results import normalise

        result = normalise(load_driver(payload["driver"])().execute(context))
        return ("result", dataclasses.asdict(result))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as a failure
        tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-TRACEBACK_TAIL:]
        return ("error", {"type": type(exc).__name__, "message": str(exc), "traceback": tail})
