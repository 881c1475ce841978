"""Notifiers against real local servers: an HTTP server for webhooks and a
minimal SMTP sink for e-mail."""
from __future__ import annotations

import email
import email.policy
import http.server
import json
import logging
import socketserver
import threading
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest

from mjsched.drivers.base import Notification
from mjsched.errors import ConfigurationError
from mjsched.models import ConcurrencyMode, Job, JobRun, JobStatus, MissedRunPolicy, RunStatus
from mjsched.notify import (
    CompositeNotifier, LoggingNotifier, Notifier, SmtpNotifier, WebhookNotifier, safe_notify, split_addresses,
)

NOW = datetime(2024, 1, 1, tzinfo=timezone.utc)


def make_job(**overrides: Any) -> Job:
    values: dict[str, Any] = dict(
        id=str(uuid.uuid4()), job_type_id=str(uuid.uuid4()), driver="shell", name="nightly-report",
        description=None, cron_expression="0 2 * * *", timezone="UTC", start_at=None, end_at=None,
        status=JobStatus.ACTIVE, configuration={"command": ["true"]}, owner=None,
        concurrency_mode=ConcurrencyMode.SKIP, missed_run_policy=MissedRunPolicy.RUN_ONCE,
        run_immediately_if_never_run=False, max_runtime_seconds=None, isolation=None, max_queued_runs=10,
        notify_on_success=True, notify_on_failure=True, notify_to=None, next_run_at=None, last_run_at=None,
        run_count=0, success_count=0, failure_count=0, last_duration_ms=None, total_duration_ms=0,
        lock_token=None, locked_at=None, locked_by_instance=None, expected_completion_at=None,
        created_at=NOW, updated_at=NOW,
    )
    values.update(overrides)
    return Job(**values)


def make_run(job: Job, success: bool) -> JobRun:
    return JobRun(
        id=str(uuid.uuid4()), scheduled_job_id=job.id, scheduled_for=NOW,
        status=RunStatus.COMPLETED if success else RunStatus.FAILED, success=success,
        error_message=None if success else "boom", details=None, queued_at=NOW, started_at=NOW,
        completed_at=NOW, duration_ms=12, executed_by_instance="test", lock_token=None, lease_expires_at=None,
    )


NOTE = Notification(subject="[mjsched] nightly-report failed", body="Job failed.\nError: boom",
                    priority="High", metadata={"driver": "shell", "attempt": 1})


# --------------------------------------------------------------------------- local servers

class _WebhookHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.received.append({"path": self.path, "headers": dict(self.headers), "body": body})  # type: ignore[attr-defined]
        status = 503 if self.path == "/down" else 204
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def webhook_server(monkeypatch: pytest.MonkeyPatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WebhookHandler)
    server.daemon_threads = True
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class _SmtpHandler(socketserver.StreamRequestHandler):
    """Just enough SMTP (RFC 5321) for smtplib: EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP, QUIT."""

    def reply(self, line: str) -> None:
        self.wfile.write(line.encode() + b"\r\n")

    def handle(self) -> None:
        self.reply("220 sink ESMTP")
        sender, rcpts = None, []
        while True:
            raw = self.rfile.readline()
            if not raw:
                return
            line = raw.decode().rstrip("\r\n")
            verb = line[:4].upper()
            if verb in ("EHLO", "HELO"):
                self.reply("250 sink")
            elif verb == "MAIL":
                sender, rcpts = line.split(":", 1)[1].strip(), []
                self.reply("250 OK")
            elif verb == "RCPT":
                rcpts.append(line.split(":", 1)[1].strip())
                self.reply("250 OK")
            elif verb == "DATA":
                self.reply("354 end with <CRLF>.<CRLF>")
                lines = []
                while (data := self.rfile.readline()) not in (b".\r\n", b""):
                    lines.append(data[1:] if data.startswith(b"..") else data)
                self.server.messages.append({"from": sender, "to": rcpts, "data": b"".join(lines)})  # type: ignore[attr-defined]
                self.reply("250 queued")
            elif verb in ("RSET", "NOOP"):
                self.reply("250 OK")
            elif verb == "QUIT":
                self.reply("221 bye")
                return
            else:
                self.reply("502 not implemented")


@pytest.fixture
def smtp_sink():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _SmtpHandler)
    server.daemon_threads = True
    server.messages = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# --------------------------------------------------------------------------- webhook

def test_webhook_posts_the_json_payload(webhook_server) -> None:
    server, base = webhook_server
    job = make_job()
    run = make_run(job, success=False)
    WebhookNotifier(f"{base}/hook", headers={"Authorization": "Bearer t0k"}).notify(job, run, NOTE)
    [request] = server.received
    assert request["path"] == "/hook"
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["headers"]["Authorization"] == "Bearer t0k"
    assert json.loads(request["body"]) == {
        "subject": NOTE.subject, "body": NOTE.body, "priority": "High",
        "metadata": {"driver": "shell", "attempt": 1},
        "job_id": job.id, "job_name": "nightly-report", "run_id": run.id, "status": "Failed",
    }


def test_webhook_error_status_raises_and_safe_notify_swallows_it(webhook_server, caplog) -> None:
    _, base = webhook_server
    job = make_job()
    notifier = WebhookNotifier(f"{base}/down", timeout=5)
    with pytest.raises(Exception):
        notifier.notify(job, make_run(job, False), NOTE)
    with caplog.at_level(logging.WARNING, logger="mjsched.notify"):
        assert safe_notify(notifier, job, make_run(job, False), NOTE, logging.getLogger("mjsched.notify")) is False
    assert "nightly-report" in caplog.text and "503" in caplog.text


def test_webhook_rejects_non_http_urls() -> None:
    with pytest.raises(ConfigurationError) as info:
        WebhookNotifier("file:///etc/passwd")
    assert info.value.field == "url"


# --------------------------------------------------------------------------- smtp

def _parse(message: dict[str, Any]) -> email.message.EmailMessage:
    return email.message_from_bytes(message["data"], policy=email.policy.default)  # type: ignore[return-value]


def test_smtp_sends_to_job_notify_to(smtp_sink) -> None:
    server, port = smtp_sink
    job = make_job(notify_to="ops@example.com, dev@example.com ;oncall@example.com")
    run = make_run(job, success=False)
    SmtpNotifier("127.0.0.1", port, sender="mjsched@example.com", timeout=5).notify(job, run, NOTE)
    [message] = server.messages
    assert message["from"] == "<mjsched@example.com>"
    assert message["to"] == ["<ops@example.com>", "<dev@example.com>", "<oncall@example.com>"]
    parsed = _parse(message)
    assert parsed["Subject"] == NOTE.subject
    assert parsed["From"] == "mjsched@example.com"
    assert parsed["X-Priority"].startswith("1")
    assert parsed["X-Mjsched-Run-Id"] == run.id
    assert parsed.get_content().replace("\r\n", "\n").strip() == NOTE.body


def test_smtp_explicit_recipients_win(smtp_sink) -> None:
    server, port = smtp_sink
    job = make_job(notify_to="ignored@example.com")
    SmtpNotifier("127.0.0.1", port, "mjsched@example.com", recipients=["boss@example.com"], timeout=5) \
        .notify(job, make_run(job, True), NOTE)
    assert server.messages[0]["to"] == ["<boss@example.com>"]


def test_smtp_without_recipients_logs_and_sends_nothing(smtp_sink, caplog) -> None:
    server, port = smtp_sink
    job = make_job(notify_to=" , ")
    with caplog.at_level(logging.INFO, logger="mjsched.notify"):
        SmtpNotifier("127.0.0.1", port, sender="mjsched@example.com").notify(job, make_run(job, False), NOTE)
    assert server.messages == []
    assert "no recipients" in caplog.text and "nightly-report" in caplog.text


def test_smtp_unreachable_server_is_swallowed_by_safe_notify(caplog) -> None:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    job = make_job(notify_to="ops@example.com")
    notifier = SmtpNotifier("127.0.0.1", port, sender="mjsched@example.com", password=None, timeout=2)
    with caplog.at_level(logging.WARNING, logger="mjsched.notify"):
        assert safe_notify(notifier, job, make_run(job, False), NOTE, logging.getLogger("mjsched.notify")) is False
    assert "nightly-report" in caplog.text


def test_smtp_constructor_validates() -> None:
    with pytest.raises(ConfigurationError) as info:
        SmtpNotifier("127.0.0.1")
    assert info.value.field == "sender"
    with pytest.raises(ConfigurationError) as info:
        SmtpNotifier("127.0.0.1", 70000, "a@b.c")
    assert info.value.field == "port"


def test_split_addresses() -> None:
    assert split_addresses(None) == []
    assert split_addresses("a@x, b@y;c@z ,") == ["a@x", "b@y", "c@z"]
    assert split_addresses(["a@x", "b@y, c@z"]) == ["a@x", "b@y", "c@z"]


# --------------------------------------------------------------------------- logging, composite, safe_notify

def test_logging_notifier_levels(caplog) -> None:
    job = make_job()
    with caplog.at_level(logging.INFO, logger="mjsched.notify"):
        LoggingNotifier().notify(job, make_run(job, True), Notification("ok subject", "ok body"))
        LoggingNotifier().notify(job, make_run(job, False), NOTE)
    records = [r for r in caplog.records if r.name == "mjsched.notify"]
    assert [r.levelno for r in records] == [logging.INFO, logging.WARNING]
    assert "ok subject" in records[0].getMessage() and NOTE.subject in records[1].getMessage()


class Recording(Notifier):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def notify(self, job: Job, run: JobRun, notification: Notification) -> None:
        self.seen.append((job.name, notification.subject))


class Raising(Notifier):
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def notify(self, job: Job, run: JobRun, notification: Notification) -> None:
        raise self.exc


def test_safe_notify_swallows_a_raising_notifier(caplog) -> None:
    job = make_job(name="payroll")
    logger = logging.getLogger("mjsched.test.engine")
    with caplog.at_level(logging.WARNING, logger="mjsched.test.engine"):
        assert safe_notify(Raising(RuntimeError("smtp on fire")), job, make_run(job, False), NOTE, logger) is False
        assert safe_notify(Raising(SystemExit(3)), job, make_run(job, False), NOTE, logger) is False
    assert "payroll" in caplog.text and "smtp on fire" in caplog.text
    recording = Recording()
    assert safe_notify(recording, job, make_run(job, True), NOTE, logger) is True
    assert recording.seen == [("payroll", NOTE.subject)]


def test_composite_tries_every_notifier_then_reports_failures() -> None:
    job = make_job()
    first, last = Recording(), Recording()
    composite = CompositeNotifier(first, Raising(ValueError("one")), last)
    with pytest.raises(ValueError, match="one"):
        composite.notify(job, make_run(job, False), NOTE)
    assert first.seen and last.seen

    two = CompositeNotifier(Raising(ValueError("a")), Raising(OSError("b")))
    with pytest.raises(ExceptionGroup) as info:
        two.notify(job, make_run(job, False), NOTE)
    assert len(info.value.exceptions) == 2
    assert safe_notify(two, job, make_run(job, False), NOTE, logging.getLogger("mjsched.notify")) is False
    assert safe_notify(CompositeNotifier(Recording()), job, make_run(job, True), NOTE, None) is True


@pytest.mark.parametrize("status, success, words", [
    ("Completed", True, "succeeded"), ("Failed", False, "failed"), ("Timeout", False, "timed out"),
    ("Cancelled", False, "was cancelled"), ("Cancelled", True, "was cancelled"),
    ("Abandoned", False, "was abandoned"), ("Running", False, "failed")])
def test_a_notification_words_the_run_by_its_outcome(status: str, success: bool, words: str) -> None:
    from mjsched.drivers.base import outcome_words
    assert outcome_words(status, success) == words
