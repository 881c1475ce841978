"""Serving the dashboard alone: ``mjsched dashboard`` and ``mjsched run --dashboard-port``.

Werkzeug's threaded development server is enough for a handful of operators; behind a
production WSGI server (gunicorn, uWSGI, mod_wsgi) mount ``create_app(...)`` instead.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from werkzeug.serving import BaseWSGIServer, make_server

from . import security

log = logging.getLogger("mjsched.web")


def make_dashboard_server(app: Any, host: str = "127.0.0.1", port: int = 8080) -> BaseWSGIServer:
    """A threaded server for ``app`` on host:port; beyond loopback only when the app has auth.

    Without auth (so on loopback) a request must name a loopback host in its Host header:
    a web page whose DNS name was rebound to 127.0.0.1 cannot use the dashboard.
    """
    auth = getattr(app, "auth", None)
    security.check_bind(host, auth)
    served = app if auth is not None else LoopbackHostGuard(app)
    return make_server(host, port, served, threaded=True)


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
    """The dashboard served from a daemon thread (``mjsched run --dashboard-port``, tests)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = make_dashboard_server(app, host, port)
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
