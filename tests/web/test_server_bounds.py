"""The dashboard's own server (``mjsched dashboard``, ``mjsched run --dashboard-port``) is
bounded: idle connections beyond its cap neither add threads nor keep a real request
waiting, a connection that stalls times out, and a request behind stalled ones is served
once they time out. Real sockets on loopback, a real dashboard on the test database."""
from __future__ import annotations

import socket
import threading
import time
import urllib.request
from typing import Any, Callable, Iterator

import pytest

import mjsched
from mjsched.web import DashboardThread, create_app
from mjsched.web.server import MAX_CONNECTIONS


@pytest.fixture
def serve(engine: mjsched.SchedulingEngine) -> Iterator[Callable[..., DashboardThread]]:
    started: list[tuple[DashboardThread, Any]] = []
    sockets: list[socket.socket] = []

    def start(**bounds: Any) -> DashboardThread:
        app = create_app(engine)
        server = DashboardThread(app, "127.0.0.1", 0, **bounds).start()
        started.append((server, app))
        return server

    start.sockets = sockets  # type: ignore[attr-defined]
    yield start
    for s in sockets:
        s.close()
    for server, app in started:
        server.stop()
        app.close()


def _connect(server: DashboardThread, sockets: list[socket.socket]) -> socket.socket:
    s = socket.create_connection(server.server.server_address[:2], timeout=5)
    sockets.append(s)
    return s


def _get(server: DashboardThread, path: str = "/jobs", timeout: float = 20.0) -> tuple[int, float]:
    started = time.monotonic()
    with urllib.request.urlopen(server.url + path, timeout=timeout) as response:
        response.read()
        return response.status, time.monotonic() - started


def _handler_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("Thread-") and "process_request_thread" in t.name)


def test_idle_connections_beyond_the_cap_add_no_threads_and_do_not_block_a_request(
        serve: Any) -> None:
    server = serve()                     # the defaults `mjsched run --dashboard-port` uses
    before = _handler_threads()
    for _ in range(3 * MAX_CONNECTIONS):
        _connect(server, serve.sockets)
    # the accept loop has taken every connection in once a real request is answered after them
    status, elapsed = _get(server)
    assert status == 200
    assert elapsed < 5.0, f"a real request waited {elapsed:.1f}s behind idle connections"
    added = _handler_threads() - before
    assert added <= MAX_CONNECTIONS + 1, f"{added} handler threads for {3 * MAX_CONNECTIONS} connections"  # +1: one ending
    # the oldest idle connections were closed by the server to make room
    oldest = serve.sockets[0]
    oldest.settimeout(10)
    assert oldest.recv(1) == b""


def test_an_idle_connection_times_out(serve: Any) -> None:
    server = serve(socket_timeout=0.5)
    s = _connect(server, serve.sockets)
    s.settimeout(10)
    started = time.monotonic()
    assert s.recv(1) == b""              # closed by the server, not by our 10 s timeout
    assert time.monotonic() - started < 5.0


def test_a_request_behind_stalled_requests_is_served_once_they_time_out(serve: Any) -> None:
    server = serve(max_connections=2, socket_timeout=1.0)
    for _ in range(2):                   # request lines sent, headers never finished: not idle
        _connect(server, serve.sockets).sendall(b"GET /jobs HTTP/1.0\r\nHost: 127.0.0.1\r\n")
    status, elapsed = _get(server)
    assert status == 200 and elapsed < 5.0, elapsed


@pytest.mark.parametrize("bounds", [{"max_connections": 0}, {"max_connections": "8"}, {"socket_timeout": 0},
                                    {"socket_timeout": True}])
def test_bounds_are_checked(engine: mjsched.SchedulingEngine, bounds: dict[str, Any]) -> None:
    app = create_app(engine)
    try:
        with pytest.raises(mjsched.ConfigurationError, match=next(iter(bounds))):
            DashboardThread(app, "127.0.0.1", 0, **bounds)
    finally:
        app.close()
