"""Serving the dashboard alone: ``mjsched dashboard`` and ``mjsched run --dashboard-port``.

Werkzeug's threaded development server is enough for a handful of operators; behind a
production WSGI server (gunicorn, uWSGI, mod_wsgi) mount ``create_app(...)`` instead.
Inside an engine the server must not cost the engine its threads or memory, whatever a
local process does with connections: :class:`BoundedServer`.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from collections import OrderedDict
from typing import Any

from werkzeug.serving import BaseWSGIServer, ThreadedWSGIServer, WSGIRequestHandler

from ..errors import ConfigurationError
from . import security

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 16      # handler threads at once; browsers open up to 6 a host
SOCKET_TIMEOUT = 15.0     # seconds a connection may wait on one read or write


def make_dashboard_server(app: Any, host: str = "127.0.0.1", port: int = 8080, *,
                          max_connections: int = MAX_CONNECTIONS,
                          socket_timeout: float = SOCKET_TIMEOUT) -> BaseWSGIServer:
    """A bounded threaded server for ``app`` on host:port; beyond loopback only when the app has auth.

    Without auth (so on loopback) a request must name a loopback host in its Host header:
    a web page whose DNS name was rebound to 127.0.0.1 cannot use the dashboard.
    """
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
        raise ConfigurationError("max_connections", max_connections, "must be a whole number >= 1")
    if isinstance(socket_timeout, bool) or not isinstance(socket_timeout, (int, float)) or not socket_timeout > 0:
        raise ConfigurationError("socket_timeout", socket_timeout, "must be a positive number of seconds")
    auth = getattr(app, "auth", None)
    security.check_bind(host, auth)
    served = app if auth is not None else LoopbackHostGuard(app)
    return BoundedServer(host, port, served, max_connections=max_connections, socket_timeout=float(socket_timeout))


class _BoundedHandler(WSGIRequestHandler):
    """Werkzeug's handler with a socket timeout, telling its server when a request line came."""

    server: "BoundedServer"

    def setup(self) -> None:
        self.timeout = self.server.socket_timeout
        super().setup()

    def parse_request(self) -> bool:
        self.server.request_started(self.connection)
        return super().parse_request()


class BoundedServer(ThreadedWSGIServer):
    """One thread per connection, at most ``max_connections`` of them, each socket timing out
    after ``socket_timeout``. A connection that has not sent its request line yet is idle:
    when every slot is taken, a new connection closes the oldest idle one instead of waiting,
    so idle connections can neither exhaust threads nor keep a real request waiting. Without
    an idle one to close, the new connection waits up to twice ``socket_timeout`` for a slot,
    then gets a 503: a stalled connection ahead of it times out within ``socket_timeout``,
    and the second one is the margin for its thread to end on a loaded machine (with one
    ``socket_timeout`` the waiting request lost that race and got a 503 at a load of 15)."""

    def __init__(self, host: str, port: int, app: Any, *, max_connections: int, socket_timeout: float) -> None:
        super().__init__(host, port, app, handler=_BoundedHandler)
        self.max_connections = max_connections
        self.socket_timeout = socket_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        self._idle: OrderedDict[int, socket.socket] = OrderedDict()   # by id, oldest first
        self._idle_lock = threading.Lock()
        self._closing = threading.Event()

    def process_request(self, request: Any, client_address: Any) -> None:
        """The accept loop's step: a slot (closing an idle connection if all are taken), then a thread."""
        if not self._slots.acquire(blocking=False):
            self._close_oldest_idle()
            deadline = time.monotonic() + 2 * self.socket_timeout
            while not self._slots.acquire(timeout=0.2):
                if self._closing.is_set() or time.monotonic() >= deadline:
                    self._refuse(request, client_address)
                    return
        with self._idle_lock:
            self._idle[id(request)] = request
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)
            self._slots.release()

    def request_started(self, connection: socket.socket) -> None:
        """The handler read a request line: the connection is working, no longer idle."""
        self._forget(connection)

    def shutdown(self) -> None:
        self._closing.set()
        super().shutdown()

    def _forget(self, connection: socket.socket) -> None:
        with self._idle_lock:
            self._idle.pop(id(connection), None)

    def _close_oldest_idle(self) -> None:
        with self._idle_lock:
            oldest = self._idle.popitem(last=False)[1] if self._idle else None
        if oldest is not None:
            log.info("dashboard: all %d connections busy; closed the oldest idle one", self.max_connections,
                     extra={"action": "web_idle_closed"})
            try:
                oldest.shutdown(socket.SHUT_RDWR)    # its thread's read returns; the thread ends
            except OSError:
                pass

    def _refuse(self, request: Any, client_address: Any) -> None:
        log.warning("dashboard: all %d connections busy for %.0fs; refused %s", self.max_connections,
                    2 * self.socket_timeout, client_address, extra={"action": "web_busy"})
        try:
            request.settimeout(1.0)
            request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                            b"Content-Length: 5\r\nConnection: close\r\n\r\nbusy\n")
        except OSError:
            pass
        self.shutdown_request(request)


class LoopbackHostGuard:
    """WSGI middleware: 421 for a Host header that is not a loopback name or address."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.auth = None

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        host = environ.get("HTTP_HOST") or environ.get("SERVER_NAME") or ""
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if not security.is_loopback(name.strip("[]")):
            log.warning("refused a request for host %r (DNS rebinding?)", host[:100],
                        extra={"action": "web_bad_host"})
            body = b"421 Misdirected Request: this dashboard answers for 127.0.0.1 and localhost only\n"
            start_response("421 Misdirected Request", [("Content-Type", "text/plain"),
                                                       ("Content-Length", str(len(body)))])
            return [body]
        return self.app(environ, start_response)


class DashboardThread:
    """The dashboard served from a daemon thread (``mjsched run --dashboard-port``, tests);
    ``bounds``: ``max_connections``, ``socket_timeout`` (:func:`make_dashboard_server`)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, **bounds: Any) -> None:
        self.server = make_dashboard_server(app, host, port, **bounds)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2},
                                       name="mjsched-dashboard", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{port}"

    def start(self) -> "DashboardThread":
        self.thread.start()
        log.info("dashboard listening on %s", self.url, extra={"action": "dashboard_started"})
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout)


def serve(app: Any, bind: str = "127.0.0.1:8080") -> None:
    """Serve until interrupted."""
    host, port = security.parse_bind(bind)
    server = make_dashboard_server(app, host, port)
    log.info("dashboard listening on http://%s:%d", host, port, extra={"action": "dashboard_started"})
    try:
        server.serve_forever()
    finally:
        server.server_close()
