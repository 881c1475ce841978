"""A per-call deadline for database calls, enforced from another thread.

A connection can go half-open: a NAT, a proxy or a dead route keeps ACKing at the
TCP level (and answers keepalives) but forwards nothing. The driver then blocks in
``recv`` for ever: ``statement_timeout`` never sees the query and ``tcp_user_timeout``
never fires, since every segment is acknowledged. The only bound that holds is one
the client enforces itself: when a call outlives its deadline the watchdog abandons
its connection (``abandon(conn)``, e.g. shutting the socket down), the blocked call
raises at once, and the backend drops that connection and retries on a fresh one.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..forking import ProcessGuard, track
from ..lease_budget import CALL_OVER_STATEMENT, DEFAULT_STATEMENT_TIMEOUT, LeaseBudget

log = logging.getLogger(__name__)

# A backend made without a lease in mind: its default statement_timeout + 5 s (65 s).
DEFAULT_CALL_TIMEOUT = DEFAULT_STATEMENT_TIMEOUT + CALL_OVER_STATEMENT
IDLE_SECONDS = 30.0            # a watchdog with no call for this long ends its thread


# The two rules below are LeaseBudget's; these names stay for callers that have only a lease.
def call_timeout_for_lease(lease_seconds: float, statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT) -> float:
    """The engine's per-call bound for this lease (``LeaseBudget.call_timeout``: the rule and its why)."""
    return LeaseBudget.of(lease_seconds, statement_timeout=statement_timeout).call_timeout


def lock_timeout_for_lease(lease_seconds: float) -> float:
    """How long the engine's statements wait for a lock someone else holds (``LeaseBudget.lock_timeout``)."""
    return LeaseBudget.of(lease_seconds).lock_timeout


def shutdown_socket(fileno: int) -> None:
    """Shut a connected socket down in both directions, given its descriptor: a ``recv``
    blocked on it (in any thread) returns at once. The descriptor itself stays open;
    its owner closes it."""
    sock = socket.socket(fileno=socket.dup(fileno))   # a second handle on the same socket
    try:
        sock.shutdown(socket.SHUT_RDWR)
    finally:
        sock.close()


@dataclass(eq=False)
class _Call:
    what: str
    conn: Any
    abandon: Callable[[Any], None]
    deadline: float
    bound: float
    abandoned: bool = False


class CallAbandoned(Exception):
    """Raised in place of the driver's error when the watchdog abandoned the call."""


class CallWatchdog:
    """One thread per backend, sleeping until the earliest deadline of the calls under way."""

    def __init__(self, name: str = "mjsched-db-watchdog") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._calls: dict[int, _Call] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        # When the watchdog thread wakes next at the latest (monotonic; 0: it is not waiting).
        # A new call wakes it only when its deadline comes before that: with one bound for
        # every call, a later call's deadline never does, so most calls cost no thread switch.
        self._wake_at = 0.0
        self.abandoned = 0
        self._process = ProcessGuard()
        track(self)

    def after_fork_in_child(self) -> None:
        """In a forked child: no thread (it did not survive the fork), no calls, a new lock."""
        self._cond = threading.Condition()
        self._calls, self._thread, self._wake_at = {}, None, 0.0
        self._process.adopt()

    @contextlib.contextmanager
    def bounded(self, what: str, conn: Any, seconds: float | None,
                abandon: Callable[[Any], None]) -> Iterator[_Call]:
        """Run the body as one call on ``conn`` bounded by ``seconds`` (None: unbounded).
        When the watchdog abandoned it, whatever the body raised becomes CallAbandoned."""
        call = _Call(what, conn, abandon, time.monotonic() + seconds if seconds else float("inf"),
                     seconds or 0.0)
        if seconds is None:
            yield call
            return
        self._process.settle(self.after_fork_in_child)   # a fork Python's at-fork hooks did not see
        key = next(self._ids)
        with self._cond:
            self._calls[key] = call
            self._ensure_thread()
            if call.deadline < self._wake_at:
                self._cond.notify()
        try:
            yield call
        except BaseException as exc:
            if call.abandoned:
                raise CallAbandoned(f"no reply within {seconds:g}s; the connection was abandoned "
                                    "(half-open or stalled?)") from exc
            raise
        finally:
            with self._cond:
                self._calls.pop(key, None)
        if call.abandoned:    # it returned just as it was abandoned: the connection is gone anyway
            raise CallAbandoned(f"no reply within {seconds:g}s; the connection was abandoned")

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                if not self._calls:
                    if self._wake_at > now:   # keep the wake-up promised to the calls made meanwhile
                        self._cond.wait(self._wake_at - now)
                        continue
                    self._wake_at = now + IDLE_SECONDS
                    if not self._cond.wait(IDLE_SECONDS) and not self._calls:
                        self._wake_at = 0.0
                        self._thread = None   # idle: a later call starts a new thread
                        return
                    continue
                due = min(c.deadline for c in self._calls.values())
                if due > now:
                    self._wake_at = due
                    self._cond.wait(due - now)
                    continue
                for key, call in list(self._calls.items()):
                    if call.deadline <= now and not call.abandoned:
                        call.abandoned = True
                        del self._calls[key]
                        self.abandoned += 1
                        log.warning("database call %s got no reply within %.1fs; abandoning its connection "
                                    "(half-open or stalled?) and retrying on a fresh one", call.what, call.bound,
                                    extra={"action": "db_call_abandoned"})
                        try:
                            call.abandon(call.conn)
                        except Exception as exc:  # noqa: BLE001 - the watchdog must never die
                            log.debug("abandoning the connection of %s failed: %s", call.what, exc)
