"""Who may use the dashboard, and where it may listen.

* ``auth``: None (loopback only), a :class:`TokenAuth` (``Authorization: Bearer T``, or HTTP
  basic with T as the password, so a browser's login prompt works) or a :class:`BasicAuth`
  (user and password). Strings ``"token:T"`` and ``"basic:USER:PASSWORD"`` and the
  environment (:func:`auth_from_env`) give the same. There is no default password.
* CSRF: a double-submit token. Every page sets a random ``mjsched_csrf`` cookie
  (SameSite=Strict, HttpOnly) and puts the same value in each form; a state-changing
  request whose form value does not match the cookie is refused with 403.
* ``authorize``: a callable on the request (the host application's login decides). Without
  it and without ``auth``, the dashboard answers local requests only (:func:`is_local_request`),
  mounted or not: Hangfire's convention, failing closed. Not read-only instead: what the
  pages show (commands, hosts, users, errors) is itself worth keeping from strangers.
* ``check_bind``: a listener beyond loopback without auth refuses to start.
"""
from __future__ import annotations

import base64
import hmac
import ipaddress
import os
import secrets
from dataclasses import dataclass
from typing import Mapping, Union
from urllib.parse import urlsplit

from ..errors import ConfigurationError

CSRF_COOKIE = "mjsched_csrf"
CSRF_FIELD = "csrf_token"
ENV_TOKEN = "MJSCHED_DASHBOARD_TOKEN"
ENV_USER = "MJSCHED_DASHBOARD_USER"
ENV_PASSWORD = "MJSCHED_DASHBOARD_PASSWORD"


@dataclass(frozen=True)
class TokenAuth:
    """A shared secret: ``Authorization: Bearer <token>``, or basic auth with it as the password."""

    token: str

    def __post_init__(self) -> None:
        if not isinstance(self.token, str) or len(self.token) < 12:
            raise ConfigurationError("auth.token", "***", "must be a string of at least 12 characters")

    def __repr__(self) -> str:
        return "TokenAuth(token='***')"

    def check(self, header: str | None) -> str | None:
        scheme, _, value = (header or "").partition(" ")
        if scheme.lower() == "bearer":
            return "token" if _same(value.strip(), self.token) else None
        basic = _basic(scheme, value)
        if basic and _same(basic[1], self.token):
            return basic[0] or "token"
        return None


@dataclass(frozen=True)
class BasicAuth:
    """HTTP basic credentials."""

    username: str
    password: str

    def __post_init__(self) -> None:
        if not isinstance(self.username, str) or not self.username:
            raise ConfigurationError("auth.username", self.username, "must be a non-empty string")
        if not isinstance(self.password, str) or len(self.password) < 8:
            raise ConfigurationError("auth.password", "***", "must be a string of at least 8 characters")

    def __repr__(self) -> str:
        return f"BasicAuth(username={self.username!r}, password='***')"

    def check(self, header: str | None) -> str | None:
        scheme, _, value = (header or "").partition(" ")
        basic = _basic(scheme, value)
        if basic and _same(basic[0], self.username) & _same(basic[1], self.password):
            return basic[0]
        return None


Auth = Union[TokenAuth, BasicAuth]


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def _basic(scheme: str, value: str) -> tuple[str, str] | None:
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


def parse_auth(auth: object) -> Auth | None:
    """None, a TokenAuth/BasicAuth, or ``"token:T"`` / ``"basic:USER:PASSWORD"``."""
    if auth is None or isinstance(auth, (TokenAuth, BasicAuth)):
        return auth
    if isinstance(auth, str):
        kind, _, rest = auth.partition(":")
        if kind == "token" and rest:
            return TokenAuth(rest)
        if kind == "basic":
            user, sep, password = rest.partition(":")
            if sep:
                return BasicAuth(user, password)
    raise ConfigurationError("auth", "***" if isinstance(auth, str) else type(auth).__name__,
                             "must be None, TokenAuth(token), BasicAuth(user, password), "
                             "'token:TOKEN' or 'basic:USER:PASSWORD'")


def auth_from_env(environ: Mapping[str, str] | None = None) -> Auth | None:
    """``MJSCHED_DASHBOARD_TOKEN``, or ``MJSCHED_DASHBOARD_USER`` and ``MJSCHED_DASHBOARD_PASSWORD``."""
    env = os.environ if environ is None else environ
    if env.get(ENV_TOKEN):
        return TokenAuth(env[ENV_TOKEN])
    if env.get(ENV_USER) or env.get(ENV_PASSWORD):
        if not (env.get(ENV_USER) and env.get(ENV_PASSWORD)):
            raise ConfigurationError(ENV_PASSWORD if env.get(ENV_USER) else ENV_USER, None,
                                     f"set both {ENV_USER} and {ENV_PASSWORD}")
        return BasicAuth(env[ENV_USER], env[ENV_PASSWORD])
    return None


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


HOST_REQUEST = "mjsched.host_request"   # environ key: the host framework's request (django_view sets it)
FORWARDING_HEADERS = ("HTTP_FORWARDED", "HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP", "HTTP_X_FORWARDED_HOST")


def is_local_request(environ: Mapping[str, object]) -> bool:
    """True for a request from this machine addressed to it: a loopback peer (``REMOTE_ADDR``;
    absent, as behind a unix socket, is not local), a loopback ``Host`` (so a web page whose
    DNS name was rebound to 127.0.0.1 is not local) and no proxy's forwarding headers (a
    reverse proxy on this machine connects from loopback on behalf of anyone)."""
    peer = str(environ.get("REMOTE_ADDR") or "")
    if peer.lower().startswith("::ffff:"):
        peer = peer[7:]
    if not peer or not is_loopback(peer):
        return False
    if any(environ.get(name) for name in FORWARDING_HEADERS):
        return False
    host = str(environ.get("HTTP_HOST") or environ.get("SERVER_NAME") or "")
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return is_loopback(name.strip("[]"))


def parse_bind(bind: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) -> (host, port)."""
    host, sep, port = (bind or "").rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535 or not host:
        raise ConfigurationError("bind", bind, "must be HOST:PORT, e.g. 127.0.0.1:8080")
    return host.strip("[]"), int(port)


def check_bind(host: str, auth: Auth | None) -> None:
    """Refuse to listen beyond loopback without auth."""
    if auth is None and not is_loopback(host):
        raise ConfigurationError(
            "bind", host, f"the dashboard listens beyond loopback only with auth: set {ENV_TOKEN} "
                          f"(or {ENV_USER} and {ENV_PASSWORD}), or pass auth=, or bind 127.0.0.1")


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_ok(cookie: str | None, submitted: str | None) -> bool:
    return bool(cookie) and bool(submitted) and _same(str(cookie), str(submitted))


def same_origin(origin: str | None, host: str) -> bool:
    """False when the browser says the request comes from another site: the Origin header names
    another host than the request's Host. Absent or ``null`` Origins are left to the CSRF token.
    (Behind a proxy that rewrites Host, forward it, e.g. Werkzeug's ProxyFix with x_host=1.)"""
    if not origin or origin == "null":
        return True
    return urlsplit(origin).netloc.lower() == (host or "").lower()
