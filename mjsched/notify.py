"""Notifications: where the engine sends "job succeeded / failed" messages.

A :class:`Notifier` turns a :class:`Notification` (built by the driver's
``format_notification``) into a log line, an e-mail or a webhook call. The
engine calls only :func:`safe_notify`, which never raises: a broken mail server
must never fail a run.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import re
import smtplib
import ssl
import urllib.request
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, Iterable
from urllib.parse import urlsplit, urlunsplit

from .drivers.base import Notification
from .errors import ConfigurationError
from .models import Job, JobRun, RunStatus
from .redaction import redact, redact_text, secret_values

log = logging.getLogger(__name__)

_X_PRIORITY = {"High": "1 (Highest)", "Normal": "3 (Normal)", "Low": "5 (Lowest)"}


def _run_succeeded(run: JobRun) -> bool:
    if run.success is not None:
        return bool(run.success)
    return run.status == RunStatus.COMPLETED


def _status(run: JobRun) -> str:
    return getattr(run.status, "value", str(run.status))


def split_addresses(value: str | Iterable[str] | None) -> list[str]:
    """``"a@x, b@y; c@z"`` (or a list of such strings) as a clean list of addresses."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        out.extend(part.strip() for part in re.split(r"[,;]", item) if part.strip())
    return out


class Notifier:
    """Base class: deliver one notification about one finished run.

    ``notify`` may raise; the engine wraps every call in :func:`safe_notify`.
    """

    def notify(self, job: Job, run: JobRun, notification: Notification) -> None:
        raise NotImplementedError


class LoggingNotifier(Notifier):
    """The default: log the notification (INFO on success, WARNING on failure)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or log

    def notify(self, job: Job, run: JobRun, notification: Notification) -> None:
        level = logging.INFO if _run_succeeded(run) else logging.WARNING
        self.logger.log(
            level, "%s\n%s", notification.subject, notification.body,
            extra={"action": "notification", "job_id": job.id, "job_name": job.name, "run_id": run.id,
                   "priority": notification.priority},
        )


class SmtpNotifier(Notifier):
    """E-mail through an SMTP server.

    Recipients are ``recipients`` when given (a list, or a comma-separated
    string), else the job's ``notify_to`` split on commas. With none, the
    notification is logged and nothing is sent. ``starttls=True`` upgrades the
    connection before logging in; ``username``/``password`` enable AUTH.
    """

    def __init__(
        self,
        host: str,
        port: int = 25,
        sender: str | None = None,
        recipients: str | Iterable[str] | None = None,
        username: str | None = None,
        password: str | None = None,
        starttls: bool = False,
        timeout: float = 10,
    ) -> None:
        if not isinstance(host, str) or not host:
            raise ConfigurationError("host", host, "required: the SMTP server's host name")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise ConfigurationError("port", port, "must be a TCP port number")
        if not isinstance(sender, str) or "@" not in sender:
            raise ConfigurationError("sender", sender, "required: the From address, e.g. 'mjsched@example.com'")
        if (username is None) != (password is None):
            raise ConfigurationError("username", username, "username and password go together")
        self.host = host
        self.port = port
        self.sender = sender
        self.recipients = split_addresses(recipients) if recipients is not None else None
        self.username = username
        self._password = password
        self.starttls = starttls
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"SmtpNotifier(host={self.host!r}, port={self.port}, sender={self.sender!r})"

    def build_message(self, job: Job, run: JobRun, notification: Notification, recipients: list[str]) -> EmailMessage:
        message = EmailMessage()
        message["Subject"] = notification.subject
        message["From"] = self.sender
        message["To"] = ", ".join(recipients)
        message["Date"] = formatdate(localtime=False, usegmt=True)
        message["Message-ID"] = make_msgid(domain=self.sender.rpartition("@")[2] or None)
        message["X-Priority"] = _X_PRIORITY.get(notification.priority, _X_PRIORITY["Normal"])
        message["X-Mjsched-Job-Id"] = str(job.id)
        message["X-Mjsched-Run-Id"] = str(run.id)
        message["X-Mjsched-Status"] = _status(run)
        message.set_content(notification.body)
        return message

    def notify(self, job: Job, run: JobRun, notification: Notification) -> None:
        recipients = self.recipients if self.recipients is not None else split_addresses(job.notify_to)
        if not recipients:
            log.info("no recipients for notification of job %r (set notify_to); not sent: %s",
                     job.name, notification.subject, extra={"action": "notification_skipped", "job_id": job.id})
            return
        message = self.build_message(job, run, notification, recipients)
        with smtplib.SMTP(self.host, self.port, timeout=self.timeout) as smtp:
            if self.starttls:
                smtp.starttls(context=ssl.create_default_context())
            if self.username is not None:
                smtp.login(self.username, self._password or "")
            smtp.send_message(message, from_addr=self.sender, to_addrs=recipients)
        log.debug("mailed notification of job %r to %s", job.name, ", ".join(recipients),
                  extra={"action": "notification_sent", "job_id": job.id})


class WebhookNotifier(Notifier):
    """POST the notification as JSON to ``url``; any non-2xx answer raises.

    The payload: ``subject, body, priority, metadata, job_id, job_name, run_id,
    status``.
    """

    def __init__(self, url: str, headers: dict[str, str] | None = None, timeout: float = 10) -> None:
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
            raise ConfigurationError("url", url, "must be an http:// or https:// URL")
        if headers is not None and not (
            isinstance(headers, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
        ):
            raise ConfigurationError("headers", headers, "must be a dict of string to string")
        self.url = url
        self.headers = dict(headers or {})
        self.timeout = timeout

    def __repr__(self) -> str:
        parts = urlsplit(self.url)
        return f"WebhookNotifier(url={urlunsplit((parts.scheme, parts.netloc.rpartition('@')[2], parts.path, '', ''))!r})"

    @staticmethod
    def payload(job: Job, run: JobRun, notification: Notification) -> dict[str, Any]:
        return {
            "subject": notification.subject,
            "body": notification.body,
            "priority": notification.priority,
            "metadata": notification.metadata,
            "job_id": job.id,
            "job_name": job.name,
            "run_id": run.id,
            "status": _status(run),
        }

    def notify(self, job: Job, run: JobRun, notification: Notification) -> None:
        data = json.dumps(self.payload(job, run, notification), default=str).encode("utf-8")
        headers = {"Content-Type": "application/json", "User-Agent": "mjsched-notifier", **self.headers}
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        # urlopen raises HTTPError for 4xx/5xx; anything else non-2xx is refused here.
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            response.read(65536)
            if not 200 <= response.status < 300:
                raise OSError(f"webhook answered HTTP {response.status}")


class CompositeNotifier(Notifier):
    """Send through several notifiers; one failing does not stop the others.

    After trying all, a single failure is re-raised as is, several as an
    ``ExceptionGroup``.
    """

    def __init__(self, *notifiers: Notifier) -> None:
        self.notifiers = list(notifiers)

    def notify(self, job: Job, run: JobRun, notification: Notification) -> None:
        errors: list[Exception] = []
        for notifier in self.notifiers:
            try:
                notifier.notify(job, run, notification)
            except Exception as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup(f"{len(errors)} of {len(self.notifiers)} notifiers failed", errors)


def redacted(notification: Notification, job: Job | None = None) -> Notification:
    """``notification`` with secrets masked (mjsched.redaction), whatever the driver put in it,
    and the job's own secret values wherever they reappear."""
    known = secret_values(getattr(job, "configuration", None) or {})
    return dataclasses.replace(notification, subject=redact_text(notification.subject, known),
                               body=redact_text(notification.body, known),
                               metadata=redact(notification.metadata, known))


def redacted_run(run: JobRun, job: Job | None = None) -> JobRun:
    """``run`` as a notifier sees it: its error, details and parameters masked like the notification."""
    if not dataclasses.is_dataclass(run):
        return run
    known = secret_values(getattr(job, "configuration", None) or {})
    fields = {name: redact(getattr(run, name), known) for name in ("error_message", "details", "parameters")
              if getattr(run, name, None) is not None}
    return dataclasses.replace(run, **fields) if fields else run


def safe_notify(
    notifier: Notifier | None,
    job: Job,
    run: JobRun,
    notification: Notification,
    logger: logging.Logger | None = None,
) -> bool:
    """Deliver through ``notifier``; never raises. True when it was delivered.

    A failure is logged (with the job's name) on ``logger``, default
    ``mjsched.notify``.
    """
    logger = logger or log
    name = getattr(job, "name", "?")
    try:
        if notifier is None:
            return True
        notifier.notify(job, redacted_run(run, job), redacted(notification, job))
        return True
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - by contract nothing escapes
        try:
            logger.warning(
                "notification for job %r (run %s) failed: %s: %s", name, getattr(run, "id", "?"),
                type(exc).__name__, exc, exc_info=True,
                extra={"action": "notification_failed", "job_id": getattr(job, "id", None)},
            )
        except Exception:  # pragma: no cover - a broken logger must not break the run either
            pass
        return False
