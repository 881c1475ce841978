"""The ``http`` driver: one HTTP request; a 2xx answer is success.

Configuration:

``url``
    ``http://`` or ``https://`` URL. Required.
``method``
    Default ``GET``.
``headers``
    ``{name: value}`` strings. Optional. A header given here wins over the ones the
    driver adds (names compared without regard to case).
``body``
    A string (sent as is, ``text/plain; charset=utf-8`` unless a Content-Type
    header is given) or any JSON value (sent as JSON with
    ``application/json``). Optional.
``timeout``
    Seconds (> 0) for connecting and for each read; default 30.

Every request carries the run's fencing token (docs/guide/reliability.md, "Fencing
tokens"): ``X-Mjsched-Fencing-Token: <token>`` and ``Idempotency-Key: <job id>:<token>``.
The token is taken by each start of the job (a tick's run, a retry, a manual run, the run
that took over a lapsed one) and is the same for everything one run sends, so a request
repeated within the run keeps its key and the next run's differs. (A run with no token --
one started outside an engine -- sends ``<job id>:run:<run id>`` and no token header.)

``details`` holds ``status`` and ``body_tail`` (the last :data:`TAIL_BYTES`
bytes of the response body, decoded with ``errors="replace"``). A non-2xx
answer is a failed result carrying its status; network errors are failed
results too. Redirects are followed for GET and HEAD (urllib's rules).
"""
from __future__ import annotations

import http.client
import json
import re
import socket
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .. import tracing
from ..errors import ConfigurationError
from .base import BaseScheduledJob, ExecutionContext, JobResult
from .base import driver_named

TAIL_BYTES = 4096
MAX_READ_BYTES = 16 * 1024 * 1024   # stop reading a runaway body; the tail is what we keep
DEFAULT_TIMEOUT = 30.0
_TOKEN_RE = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def display_url(url: str) -> str:
    """``url`` without user info and query string (they may hold secrets), for logs."""
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        return "<unparseable url>"


def _read_tail(response: Any, cancel: Any = None) -> bytes:
    tail = bytearray()
    total = 0
    while total < MAX_READ_BYTES:
        if cancel is not None and cancel.is_set():
            break
        chunk = response.read(65536)
        if not chunk:
            break
        total += len(chunk)
        tail += chunk
        if len(tail) > TAIL_BYTES:
            del tail[:-TAIL_BYTES]
    return bytes(tail)


FENCING_HEADER = "X-Mjsched-Fencing-Token"
IDEMPOTENCY_HEADER = "Idempotency-Key"


def fencing_headers(job_id: str, run_id: str, fencing_token: int | None) -> dict[str, str]:
    """The headers naming the run to the service: its fencing token and an idempotency key
    that one run keeps and the next run of the job changes (the module docstring's rule)."""
    if fencing_token is None:
        return {IDEMPOTENCY_HEADER: f"{job_id}:run:{run_id}"}
    return {FENCING_HEADER: str(fencing_token), IDEMPOTENCY_HEADER: f"{job_id}:{fencing_token}"}


def build_request(configuration: dict[str, Any], added: dict[str, str] | None = None) -> urllib.request.Request:
    """The ``urllib`` request a validated configuration describes; ``added`` headers go in
    unless the configuration names them (in any case)."""
    headers = dict(configuration.get("headers") or {})
    given = {name.lower() for name in headers}
    headers.update({name: value for name, value in (added or {}).items() if name.lower() not in given})
    has_content_type = any(name.lower() == "content-type" for name in headers)
    data: bytes | None = None
    if "body" in configuration and configuration["body"] is not None:
        body = configuration["body"]
        if isinstance(body, str):
            data = body.encode("utf-8")
            if not has_content_type:
                headers["Content-Type"] = "text/plain; charset=utf-8"
        else:
            data = json.dumps(body).encode("utf-8")
            if not has_content_type:
                headers["Content-Type"] = "application/json"
    headers.setdefault("User-Agent", "mjsched-http-driver")
    tracing.inject(headers)   # the run's trace continues in the service (a header the job set is kept)
    method = str(configuration.get("method") or "GET").upper()
    return urllib.request.Request(configuration["url"], data=data, headers=headers, method=method)


@driver_named("http")
class HttpJob(BaseScheduledJob):
    """Send one HTTP request; see the module docstring for the configuration."""

    isolation = "thread"
    configuration_keys = frozenset({"url", "method", "headers", "body", "timeout"})

    def validate_configuration(self, configuration: dict[str, Any]) -> None:
        if not isinstance(configuration, dict):
            raise ConfigurationError("configuration", configuration, "must be an object")
        url = configuration.get("url")
        if not isinstance(url, str) or not url:
            raise ConfigurationError("configuration.url", url, "required: an http:// or https:// URL")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018  (raises on a bad port)
        except ValueError as exc:
            raise ConfigurationError("configuration.url", url, f"not a valid URL: {exc}") from exc
        if parts.scheme not in ("http", "https"):
            raise ConfigurationError("configuration.url", url, "scheme must be http or https")
        if not parts.hostname:
            raise ConfigurationError("configuration.url", url, "has no host")

        method = configuration.get("method")
        if method is not None and (not isinstance(method, str) or not _TOKEN_RE.match(method)):
            raise ConfigurationError("configuration.method", method, "must be an HTTP method name such as GET or POST")

        headers = configuration.get("headers")
        if headers is not None:
            if not isinstance(headers, dict):
                raise ConfigurationError("configuration.headers", headers, "must be an object of string to string")
            for name, value in headers.items():
                if not isinstance(name, str) or not _TOKEN_RE.match(name):
                    raise ConfigurationError("configuration.headers", name, "header names must be HTTP tokens")
                if not isinstance(value, str) or "\n" in value or "\r" in value:
                    raise ConfigurationError(f"configuration.headers.{name}", value, "must be a single-line string")

        if "body" in configuration and configuration["body"] is not None and not isinstance(configuration["body"], str):
            try:
                json.dumps(configuration["body"])
            except (TypeError, ValueError) as exc:
                raise ConfigurationError("configuration.body", configuration["body"], f"must be a string or JSON-serialisable: {exc}") from exc

        timeout = configuration.get("timeout")
        if timeout is not None and (not _number(timeout) or timeout <= 0):
            raise ConfigurationError("configuration.timeout", timeout, "must be a number of seconds > 0")

    def execute(self, context: ExecutionContext) -> JobResult:
        configuration = context.job.configuration
        self.validate_configuration(configuration)
        request = build_request(configuration, fencing_headers(context.job.id, context.run.id,
                                                               context.fencing_token))
        timeout = configuration.get("timeout") or DEFAULT_TIMEOUT
        shown = f"{request.get_method()} {display_url(request.full_url)}"
        context.logger.info("http job %s", shown, extra={"action": "http_request"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status = response.status
                body = _read_tail(response, context.cancel_event)
        except urllib.error.HTTPError as exc:
            try:
                body = _read_tail(exc)
            except (OSError, ValueError):
                body = b""
            finally:
                exc.close()
            details = {"status": exc.code, "body_tail": body.decode("utf-8", errors="replace")}
            return JobResult(False, f"{shown} answered HTTP {exc.code} {exc.reason}", details)
        except urllib.error.URLError as exc:
            reason = exc.reason
            text = f"{type(reason).__name__}: {reason}" if isinstance(reason, BaseException) else str(reason)
            return JobResult(False, f"{shown} failed: {text}", {"status": None, "body_tail": ""})
        except (socket.timeout, TimeoutError) as exc:
            return JobResult(False, f"{shown} timed out after {timeout:g}s: {exc}", {"status": None, "body_tail": ""})
        except (OSError, ValueError, http.client.HTTPException) as exc:  # connection reset mid-body, bad status line, ...
            return JobResult(False, f"{shown} failed: {type(exc).__name__}: {exc}", {"status": None, "body_tail": ""})

        details = {"status": status, "body_tail": body.decode("utf-8", errors="replace")}
        if context.cancel_event.is_set():
            return JobResult(False, f"{shown} cancelled while reading the body", details)
        if 200 <= status < 300:
            return JobResult(True, None, details)
        return JobResult(False, f"{shown} answered HTTP {status}", details)
