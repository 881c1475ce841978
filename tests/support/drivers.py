"""Drivers the engine tests schedule: they block, sleep, count or fail on purpose."""
from __future__ import annotations

import threading
from typing import Any

import mjsched

GATES: dict[str, threading.Event] = {}
STARTED: dict[str, threading.Event] = {}
_lock = threading.Lock()


def forget_set_events() -> None:
    """Before each test (tests/conftest.py): a gate or start event an earlier test set is
    dropped, so a job of the same name here blocks (and has not started) until this test says
    so. One left set let test_tag_limits' "free" job finish before the test could see it run."""
    with _lock:
        for events in (GATES, STARTED):
            for name in [name for name, event in events.items() if event.is_set()]:
                del events[name]


def gate(name: str) -> threading.Event:
    with _lock:
        return GATES.setdefault(name, threading.Event())


def started(name: str) -> threading.Event:
    with _lock:
        return STARTED.setdefault(name, threading.Event())


@mjsched.register_driver("test-block")
class BlockUntilGate(mjsched.BaseScheduledJob):
    """Blocks until its gate opens; with ``ignore_cancel`` it even ignores cancellation (a hung job)."""

    def execute(self, context: mjsched.ExecutionContext) -> mjsched.JobResult:
        conf = context.job.configuration
        name = conf.get("gate", context.job.name)
        started(name).set()
        g = gate(name)
        while not g.wait(0.01):
            if context.cancel_event.is_set() and not conf.get("ignore_cancel"):
                return mjsched.JobResult(False, "cancelled")
        return mjsched.JobResult(True, details={"gate": name})


@mjsched.register_driver("test-ok")
class Succeed(mjsched.BaseScheduledJob):
    high_frequency_by_design = True

    def execute(self, context: mjsched.ExecutionContext) -> mjsched.JobResult:
        return mjsched.JobResult(True, details={"job": context.job.name})


@mjsched.register_driver("test-raise")
class Raise(mjsched.BaseScheduledJob):
    def execute(self, context: mjsched.ExecutionContext) -> mjsched.JobResult:
        raise RuntimeError("driver exploded")


@mjsched.register_driver("test-broken-init")
class BrokenInit(mjsched.BaseScheduledJob):
    def __init__(self) -> None:
        raise RuntimeError("cannot construct this driver")


KEPT_CONTEXTS: list[mjsched.ExecutionContext] = []


@mjsched.register_driver("test-keeps-context")
class KeepsContext(mjsched.BaseScheduledJob):
    """Keeps its context past the run (as a leaked thread would) and reports its heartbeat."""

    def execute(self, context: mjsched.ExecutionContext) -> mjsched.JobResult:
        KEPT_CONTEXTS.append(context)
        return mjsched.JobResult(True, details={"heartbeat": context.heartbeat()})


@mjsched.register_driver("test-heartbeat")
class Heartbeats(mjsched.BaseScheduledJob):
    """Calls context.heartbeat() and reports what it returned."""

    def execute(self, context: mjsched.ExecutionContext) -> mjsched.JobResult:
        name = context.job.configuration.get("gate", context.job.name)
        first = context.heartbeat()
        started(name).set()
        gate(name).wait(10)
        return mjsched.JobResult(True, details={"first": first, "second": context.heartbeat()})


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("this exception cannot be printed")


@mjsched.register_driver("test-raise-unprintable")
class RaiseUnprintable(mjsched.BaseScheduledJob):
    def execute(self, context: mjsched.ExecutionContext) -> mjsched.JobResult:
        raise _Unprintable()


@mjsched.register_driver("test-raise-interrupt")
class RaiseInterrupt(mjsched.BaseScheduledJob):
    def execute(self, context: mjsched.ExecutionContext) -> mjsched.JobResult:
        raise KeyboardInterrupt("a driver that raises KeyboardInterrupt on a worker thread")


@mjsched.register_driver("test-nul")
class ReturnNul(mjsched.BaseScheduledJob):
    """Fails with NUL characters in its message, its details and a details key."""

    def execute(self, context: mjsched.ExecutionContext) -> mjsched.JobResult:
        return mjsched.JobResult(False, "bad\x00byte", details={"out": "a\x00b", "k\x00": ["\x00"]})


class RecordingNotifier(mjsched.Notifier):
    def __init__(self) -> None:
        self.sent: list[tuple[Any, Any, Any]] = []
        self.event = threading.Event()

    def notify(self, job: Any, run: Any, notification: Any) -> None:
        self.sent.append((job, run, notification))
        self.event.set()


class ExplodingNotifier(mjsched.Notifier):
    def notify(self, job: Any, run: Any, notification: Any) -> None:
        raise OSError("smtp down")


class BlockingNotifier(mjsched.Notifier):
    """Blocks every notification until ``release`` is set (a mail server that hangs)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def notify(self, job: Any, run: Any, notification: Any) -> None:
        self.entered.set()
        self.release.wait(30)
