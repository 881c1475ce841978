"""Fixtures of the dashboard tests: a real PostgreSQL database (``pg_dsn``), an engine on
it (not polling unless a test starts it) and a WSGI test client of the dashboard."""
from __future__ import annotations

import re
from typing import Any, Callable, Iterator

import pytest

pytest.importorskip("werkzeug", reason="the 'web' extra is not installed")

import mjsched  # noqa: E402
from mjsched.web import create_app  # noqa: E402
from werkzeug.test import Client  # noqa: E402

CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')


def local_peer(app: Any, address: str = "127.0.0.1") -> Callable[..., Any]:
    """``app`` as a server on this machine calls it: Werkzeug's test client sets no
    REMOTE_ADDR, and a dashboard without ``authorize=`` answers local peers only."""
    def call(environ: dict[str, Any], start_response: Any) -> Any:
        environ.setdefault("REMOTE_ADDR", address)
        return app(environ, start_response)
    return call


class Browserless:
    """A test client (a local peer) that keeps cookies and posts forms with the page's CSRF token."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.client = Client(local_peer(app))

    def get(self, url: str, **kw: Any) -> Any:
        return self.client.get(url, **kw)

    def html(self, url: str, status: int = 200) -> str:
        response = self.client.get(url)
        assert response.status_code == status, (url, response.status_code, response.get_data(as_text=True)[:2000])
        return response.get_data(as_text=True)

    def csrf(self, page: str = "/jobs") -> str:
        match = CSRF_INPUT.search(self.html(page)) if page else None
        if match:
            return match.group(1)
        cookie = self.client.get_cookie("mjsched_csrf")
        assert cookie is not None, "the dashboard set no CSRF cookie"
        return cookie.value

    def post(self, url: str, data: dict[str, str] | None = None, *, csrf: bool = True, **kw: Any) -> Any:
        form = dict(data or {})
        if csrf and "csrf_token" not in form:
            form["csrf_token"] = self.csrf("")
        return self.client.post(url, data=form, **kw)

    def follow(self, response: Any) -> str:
        assert response.status_code == 303, (response.status_code, response.get_data(as_text=True)[:2000])
        return self.html(response.headers["Location"])


@pytest.fixture
def engine(make_engine: Callable[..., mjsched.SchedulingEngine]) -> mjsched.SchedulingEngine:
    return make_engine(max_poll_interval=0.5)


@pytest.fixture
def app(engine: mjsched.SchedulingEngine) -> Iterator[Any]:
    dashboard = create_app(engine)
    yield dashboard
    dashboard.close()


@pytest.fixture
def client(app: Any) -> Browserless:
    web = Browserless(app)
    web.html("/jobs")       # the first page sets the CSRF cookie, as a browser's first visit does
    return web


def shell_job(engine: mjsched.SchedulingEngine, name: str, command: list[str] | None = None, **fields: Any) -> str:
    fields.setdefault("cron", "*/5 * * * *")
    return engine.create_job(name, "shell", configuration={"command": command or ["true"]}, **fields)
