"""The celery allow-list: which app paths an engine may import, which brokers a job may name.

A ``celery`` job names ``"pkg.module:app"`` (imported on the engine's host, import side
effects included) or a broker URL (and a result backend URL) the engine connects to. An
engine given ``celery_allowed_apps`` / ``celery_allowed_brokers`` refuses other jobs before
anything is imported or connected: the run is Failed with the reason, and the check is pure
(this module imports neither Celery nor the job's module). docs/guide/trust.md.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable
from urllib.parse import urlsplit

from ..errors import ConfigurationError

APP_PATH_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "amqp": 5672, "amqps": 5671}
SCHEME_ALIASES = {"pyamqp": "amqp", "librabbitmq": "amqp"}


@dataclass(frozen=True)
class BrokerPlace:
    """Where a URL points, credentials left out: an allowed place with no ``path`` admits every
    database / virtual host on that host and port."""

    scheme: str
    host: str
    port: int | None
    path: str | None

    def admits(self, other: "BrokerPlace") -> bool:
        return (self.scheme, self.host, self.port) == (other.scheme, other.host, other.port) \
            and (self.path is None or self.path == other.path)

    def __str__(self) -> str:
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{self.host}{port}{self.path or ''}"


def place(url: str, field: str = "configuration.app") -> BrokerPlace:
    """The place a broker or result backend URL points at; ConfigurationError when it has none."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigurationError(field, url, f"is not a URL: {exc}") from None
    scheme = parts.scheme.split("+")[-1].lower()
    scheme = SCHEME_ALIASES.get(scheme, scheme)
    if not scheme or "://" not in url:
        raise ConfigurationError(field, url, "must be a URL such as redis://host:6379/0 or amqp://host:5672//")
    path = parts.path if parts.path not in ("", "/") else None
    return BrokerPlace(scheme, (parts.hostname or "").lower(), port or DEFAULT_PORTS.get(scheme), path)


def _entries(value: Any, field: str) -> list[str] | None:
    if value is None:
        return None
    items = [p.strip() for p in value.split(",") if p.strip()] if isinstance(value, str) else value
    try:
        entries = list(items)
    except TypeError:
        raise ConfigurationError(field, value, "must be None or a list of strings") from None
    for entry in entries:
        if not isinstance(entry, str) or not entry.strip():
            raise ConfigurationError(field, entry, "each entry must be a non-empty string")
    return [e.strip() for e in entries]


def allowed_apps(value: Any, field: str = "celery_allowed_apps") -> frozenset[str] | None:
    """None (any app path), or the ``"pkg.module:app"`` paths given (a list or a comma-separated
    string; empty: none, only broker URLs)."""
    entries = _entries(value, field)
    if entries is None:
        return None
    for entry in entries:
        if not APP_PATH_RE.match(entry):
            raise ConfigurationError(field, entry, "must be an app path 'pkg.module:app'")
    return frozenset(entries)


def allowed_brokers(value: Any, field: str = "celery_allowed_brokers") -> tuple[BrokerPlace, ...] | None:
    """None (any broker URL), or the places given as URLs (credentials are ignored; a URL
    without a path admits every database / virtual host there; empty: no broker URL)."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, BrokerPlace) for v in value):
        return tuple(value)        # already checked (an EngineOptions built again)
    entries = _entries(value, field)
    if entries is None:
        return None
    return tuple(place(entry, field) for entry in entries)


@dataclass(frozen=True)
class CeleryAllowList:
    """What a ``celery`` job may name on this engine; None in a field: anything."""

    apps: frozenset[str] | None = None
    brokers: tuple[BrokerPlace, ...] | None = None

    @classmethod
    def of(cls, apps: Any, brokers: Any) -> "CeleryAllowList | None":
        """The allow-list of the two settings (checked), or None when both are unset."""
        made = cls(allowed_apps(apps), allowed_brokers(brokers))
        return None if made.apps is None and made.brokers is None else made

    def check(self, configuration: Any) -> None:
        """ConfigurationError (naming the key) when a job of this configuration may not run
        here; nothing is imported or connected to find out."""
        if not isinstance(configuration, dict) or not isinstance(configuration.get("app"), str):
            return                 # the driver's own checks refuse it, naming the key
        app = configuration["app"]
        if "://" not in app:
            if self.apps is not None and app not in self.apps:
                shown = ",".join(sorted(self.apps)) or "none"
                raise ConfigurationError("configuration.app", app, f"celery app {app!r} is not allowed on this "
                                                                   f"engine (celery_allowed_apps={shown}); not imported")
            return
        if self.brokers is None:
            return
        for key in ("app", "backend"):
            url = configuration.get(key)
            if not isinstance(url, str):
                continue
            where = place(url, f"configuration.{key}")
            if not any(allowed.admits(where) for allowed in self.brokers):
                shown = ",".join(str(b) for b in self.brokers) or "none"
                what = "broker" if key == "app" else "result backend"
                raise ConfigurationError(f"configuration.{key}", str(where), f"celery {what} {where} is not allowed "
                                         f"on this engine (celery_allowed_brokers={shown}); not connected")

    def refusal(self, configuration: Any) -> str | None:
        """Why a job of this configuration may not run here, or None (see ``check``)."""
        try:
            self.check(configuration)
        except ConfigurationError as exc:
            return exc.reason
        return None

    def describe(self) -> str:
        apps = "any" if self.apps is None else ",".join(sorted(self.apps)) or "none"
        brokers = "any" if self.brokers is None else ",".join(str(b) for b in self.brokers) or "none"
        return f"apps={apps} brokers={brokers}"


def refusal_for(allow: CeleryAllowList | None, driver: str, configuration: Any) -> str | None:
    """``allow.refusal`` for a celery job; None for other drivers or without an allow-list."""
    if allow is None or driver != "celery":
        return None
    return allow.refusal(configuration)
