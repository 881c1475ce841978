"""Client-side bounds on database calls (issue 12 item 3), without a server."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from mjsched.backends.watchdog import CallAbandoned, CallWatchdog, call_timeout_for_lease, shutdown_socket
from mjsched.errors import ConfigurationError
from tests.support import mssql


def test_the_call_bound_follows_the_lease_within_limits() -> None:
    assert call_timeout_for_lease(600) == 65.0          # statement_timeout + 5
    assert call_timeout_for_lease(40) == 10.0           # a quarter of the lease
    assert call_timeout_for_lease(3) == 2.0             # never below 2 s
    assert call_timeout_for_lease(600, statement_timeout=10) == 15.0


def test_sql_server_gets_login_and_query_timeouts_from_the_same_bound() -> None:
    mssql.require_pyodbc()
    from mjsched.backends.mssql import odbc_timeouts

    assert odbc_timeouts(5, 60, 2.0) == (5, 2)           # the query timeout is the call bound
    assert odbc_timeouts(5, 60, 65) == (5, 60)          # ... or statement_timeout, whichever is smaller
    assert odbc_timeouts(0.2, 60, 0.3) == (1, 1)        # never 0, which would mean no bound
    with pytest.raises(ConfigurationError, match="call_timeout"):
        odbc_timeouts(5, 60, 0)


def test_the_watchdog_unblocks_a_recv_that_gets_no_reply() -> None:
    """A socket whose peer never answers (both ends open): the watchdog shuts it down at the
    deadline and the blocked call raises CallAbandoned instead of waiting for ever."""
    ours, theirs = socket.socketpair()
    watchdog = CallWatchdog()
    started = time.monotonic()
    try:
        with pytest.raises(CallAbandoned, match="no reply within 0.3s"):
            with watchdog.bounded("test", ours, 0.3, lambda s: shutdown_socket(s.fileno())):
                data = ours.recv(10)              # returns b"" once shut down
                raise ConnectionError(f"connection closed ({data!r})")
        assert 0.25 <= time.monotonic() - started < 3.0
        assert watchdog.abandoned == 1
    finally:
        ours.close()
        theirs.close()


def test_a_call_that_returns_in_time_is_left_alone() -> None:
    ours, theirs = socket.socketpair()
    watchdog = CallWatchdog()
    try:
        threading.Timer(0.05, lambda: theirs.sendall(b"ok")).start()
        with watchdog.bounded("test", ours, 2.0, lambda s: shutdown_socket(s.fileno())):
            assert ours.recv(2) == b"ok"
        assert watchdog.abandoned == 0
        ours.sendall(b"still open")
        assert theirs.recv(20) == b"still open"
    finally:
        ours.close()
        theirs.close()


def _stalled_call(watchdog: CallWatchdog, bound: float) -> float:
    """Seconds until a call that gets no reply within ``bound`` is abandoned."""
    ours, theirs = socket.socketpair()
    started = time.monotonic()
    try:
        with pytest.raises(CallAbandoned):
            with watchdog.bounded("short", ours, bound, lambda s: shutdown_socket(s.fileno())):
                ours.recv(10)
                raise ConnectionError("connection closed")
        return time.monotonic() - started
    finally:
        ours.close()
        theirs.close()


def test_a_shorter_call_is_abandoned_on_time_while_a_longer_one_is_under_way() -> None:
    """Calls wake the watchdog only when their deadline comes before the one it waits for:
    a short call made while a long one is under way must still be cut at its own bound."""
    watchdog = CallWatchdog()
    ours, theirs = socket.socketpair()
    try:
        with watchdog.bounded("long", ours, 30.0, lambda s: None):
            time.sleep(0.1)    # not synchronisation: lets the watchdog settle on the long deadline
            assert _stalled_call(watchdog, 0.3) < 3.0
    finally:
        ours.close()
        theirs.close()


def test_a_call_after_a_finished_longer_one_is_abandoned_on_time() -> None:
    """Once a long call ended, the idle watchdog keeps waiting for that call's deadline; a
    shorter call made then must wake it, or it would be cut 30 s late."""
    watchdog = CallWatchdog()
    ours, theirs = socket.socketpair()
    try:
        with watchdog.bounded("long", ours, 30.0, lambda s: None):
            time.sleep(0.1)
        time.sleep(0.1)
        assert _stalled_call(watchdog, 0.3) < 3.0
        assert watchdog.abandoned == 1
    finally:
        ours.close()
        theirs.close()
