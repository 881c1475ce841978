"""Deadline alerts in the engine: when to ask the database, and delivering what it answers.

The database decides (``evaluate_alerts``, sql/<dialect>/014_alerts.sql): every engine's poll
asks at most every ``alert_interval`` seconds, on a thread of its own (a claim never waits for
it), and the call answers the alerts *it* opened or resolved; a row is answered to one caller
across the fleet, so each is logged and notified once. An alert fires even when the engine
that should have run the job is dead: any living engine's evaluation sees the tables.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from types import SimpleNamespace
from typing import Any, Callable

from ..alerts import Alert, notification
from ..backends.base import Backend
from ..errors import CannotConnect, SchedulerError
from ..models import JobRun, RunStatus
from ..notify import Notifier, safe_notify
from .options import EngineOptions
from .stats import EngineStats

log = logging.getLogger(__name__)

ALERTS_PER_CALL = 100     # opened (and resolved) per kind and call at most; the next call takes the rest


def stand_in_run(alert: Alert) -> JobRun:
    """What a Notifier's ``notify(job, run, notification)`` gets for an alert: no run ended,
    so a stand-in says the alert (status Failed when opened, Completed when resolved: a
    notifier's level follows it) and names the run concerned, if any."""
    opened = alert.event != "resolved"
    return JobRun(id=alert.run_id or f"alert-{alert.id}", scheduled_job_id=alert.job_id, scheduled_for=None,
                  status=RunStatus.FAILED if opened else RunStatus.COMPLETED, success=not opened,
                  error_message=alert.describe() if opened else None,
                  details={"alert": alert.kind, "event": alert.event, "alert_id": alert.id},
                  queued_at=None, started_at=alert.since, completed_at=alert.resolved_at or alert.opened_at,
                  duration_ms=None, executed_by_instance=None, lock_token=None, lease_expires_at=None)


class AlertWatcher:
    """The alert evaluation of one engine. ``maybe_start()`` is called by every poll."""

    def __init__(self, backend: Backend, options: EngineOptions, stats: EngineStats,
                 notifier: Callable[[], Notifier | None], clock: Callable[[], float] = time.monotonic) -> None:
        self._backend = backend
        self._options = options
        self._stats = stats
        self._notifier = notifier
        self._clock = clock
        self._last_start = float("-inf")
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        stats.setdefault("alerts_opened", 0)
        stats.setdefault("alerts_resolved", 0)

    def maybe_start(self) -> bool:
        """Start an evaluation in the background when the interval has passed and none is under way."""
        interval = self._options.alert_interval
        if interval is None:
            return False
        with self._lock:
            now = self._clock()
            if now - self._last_start < interval or (self._thread is not None and self._thread.is_alive()):
                return False
            self._last_start = now
            self._thread = threading.Thread(target=self.run_pass, name="mjsched-alerts", daemon=True)
            self._thread.start()
            return True

    def run_pass(self, now: Any = None) -> list[Alert]:
        """One evaluation: the alerts this call opened or resolved, logged and delivered. Never
        raises: a failure is logged and the next pass tries again (a lost reply is replayed by
        the backend with the same call token, so its alerts are still delivered once)."""
        try:
            rows = self._backend.evaluate_alerts(str(uuid.uuid4()), ALERTS_PER_CALL, now)
        except (SchedulerError, NotImplementedError) as exc:
            if isinstance(exc, SchedulerError):   # an unreachable database is the poll's line to say, once
                log.log(logging.INFO if isinstance(exc, CannotConnect) else logging.WARNING,
                        "alert evaluation failed (the next pass tries again): %s", exc,
                        extra={"action": "alerts_failed"})
            return []
        alerts = [Alert.from_row(r) for r in rows]
        if alerts:
            self._deliver(alerts)
        return alerts

    def _deliver(self, alerts: list[Alert]) -> None:
        try:
            jobs = {j.id: j for j in self._backend.get_jobs(list({a.job_id for a in alerts}))}
        except SchedulerError as exc:
            log.debug("could not read the jobs of %d alert(s): %s", len(alerts), exc)
            jobs = {}
        notifier = self._notifier()
        for alert in alerts:
            opened = alert.event == "opened"
            self._stats.bump("alerts_opened" if opened else "alerts_resolved")
            log.log(logging.WARNING if opened else logging.INFO, "alert %s %s: job %r: %s%s",
                    alert.kind, "opened" if opened else "resolved", alert.job_name, alert.describe(),
                    "; the job was paused" if alert.paused and opened else "",
                    extra={"action": "alert_opened" if opened else "alert_resolved", "job_id": alert.job_id,
                           "job_name": alert.job_name, "alert_kind": alert.kind, "alert_id": alert.id,
                           "run_id": alert.run_id})
            job: Any = jobs.get(alert.job_id) or SimpleNamespace(id=alert.job_id, name=alert.job_name,
                                                                  notify_to=None, configuration=None)
            safe_notify(notifier, job, stand_in_run(alert), notification(alert), log)

    def join(self, timeout: float | None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
