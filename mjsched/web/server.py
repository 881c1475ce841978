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
    """A threaded server for ``app`` on host:port; beyond loopback only when the app has auth."""
    security.check_bind(host, getattr(app, "auth", None))
    return make_server(host, port, app, threaded=True)


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
