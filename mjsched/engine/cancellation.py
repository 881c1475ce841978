"""Cancelling a run from any process: the request, and its delivery by the engine holding the run.

``engine.cancel_run(run_id)`` records the request on the run row (procedure ``cancel_run``,
sql/*/008_run_requests.sql); any process with the admin role may call it. A Queued run ends
Cancelled there and then. A Running run is held by one engine, maybe in another process: its
lease keeper asks ``cancel_requests`` for its held tokens as often as it renews them and at
least every 5 s (leases.CANCEL_CHECK_SECONDS), so the engine learns of the request within one
heartbeat interval, or 5 s if that is shorter (at once when the request was made through the
engine that holds the run). Delivery sets the run's
``cancel_event`` (a process-isolated run's child is sent SIGTERM) and gives the run
``cancel_grace`` seconds: a run that returns in time ends Cancelled with what its driver
said; a process-isolated child still alive then is killed (SIGKILL, its whole tree), and a
thread still running is left behind (counted as leaked, its slot freed) while the run is
recorded Cancelled. A run whose driver returned before the request reached its engine keeps
its own outcome; the request stays on the row (``JobRun.cancel_requested_at``).
"""
from __future__ import annotations

import getpass
import logging
import socket
import time
from datetime import datetime, timezone
from typing import Callable, Protocol, Sequence

from .. import validation
from ..backends.base import Backend, CancelOutcome, CancelRequest
from ..drivers.registry import get_driver
from ..errors import RunNotCancellable, RunNotFound, SchedulerError
from ..execution import effective_isolation
from ..models import Isolation, Job

log = logging.getLogger(__name__)

DEFAULT_CANCEL_GRACE = 30.0   # seconds between an operator's cancel and the kill (engine option cancel_grace)
ISOLATED_BACKSTOP = 10.0      # a killed child is reaped and reported well within this after the grace


def default_requester(instance: str | None = None) -> str:
    """Who asks, for the run's error_message: ``user@host`` (and the engine that relayed it)."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container): the host still says where
        user = "?"
    who = f"{user}@{socket.gethostname()}"
    return f"{who} (engine {instance})" if instance else who


def run_uuid(value: object) -> str:
    """A canonical UUID string; anything else names no run (RunNotFound)."""
    found = validation.canonical_uuid(value)
    if found is None:
        raise RunNotFound(value)
    return found


def cancel_message(request: CancelRequest, detail: str | None = None) -> str:
    """``Cancelled: requested by X at T`` (and what the driver or the engine said)."""
    at = request.requested_at
    when = at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if isinstance(at, datetime) else str(at)
    text = f"Cancelled: requested by {request.requested_by or '?'} at {when}"
    return f"{text}; {detail}" if detail else text


class CancellableRun(Protocol):
    """What delivery needs of a run (``engine.run.Run``): which one it is, and to be asked
    to stop (the run notes the request and sets its own cancel event)."""
    @property
    def run_id(self) -> str: ...
    @property
    def token(self) -> str: ...
    @property
    def job(self) -> Job: ...
    @property
    def cancel_request(self) -> CancelRequest | None: ...

    def request_cancel(self, request: CancelRequest, deadline: float, grace: float) -> bool: ...


class CancellableRuns(Protocol):
    """The runs this engine holds (``engine.run.RunRegistry``), looked up as requests name them."""
    def by_run_ids(self, run_ids: set[str]) -> Sequence[CancellableRun]: ...
    def by_tokens(self, tokens: set[str]) -> Sequence[CancellableRun]: ...


class Cancellation:
    """Requests (any run) and deliveries (this engine's runs); a run past its grace ends itself
    (``Run.cancel_overdue``, called by the lease keeper)."""

    def __init__(self, backend: Backend, registry: CancellableRuns, *, grace: float,
                 on_overdue_soon: Callable[[], None]) -> None:
        self._backend = backend
        self._registry = registry
        self.grace = grace
        self._poke = on_overdue_soon    # the keeper re-reads deadlines (a cancel deadline was set)
        self.delivered = 0

    def request(self, run_id: str, requested_by: str) -> CancelOutcome:
        """Record the request (RunNotFound / RunNotCancellable when there is nothing to cancel);
        a run this engine holds gets it at once."""
        rid = run_uuid(run_id)
        who = str(validation.text("requested_by", requested_by, required=True, limit=255))
        outcome = self._backend.cancel_run(rid, who)
        if outcome.outcome == "not_found":
            raise RunNotFound(run_id)
        if outcome.outcome == "not_cancellable":
            raise RunNotCancellable(rid, outcome.status or "?")
        log.info("cancel of run %s %s by %s", rid, outcome.outcome.replace("_", " "), outcome.requested_by,
                 extra={"action": "run_cancel_requested", "outcome": outcome.outcome})
        if outcome.outcome in ("requested", "already_requested") and outcome.requested_at is not None:
            for run in self._registry.by_run_ids({rid.lower()}):
                self.deliver(run, CancelRequest(run.run_id, run.token, outcome.requested_at, outcome.requested_by))
        return outcome

    def check(self, tokens: list[str]) -> None:
        """The keeper's pass: deliver the requests made for these (held) tokens. Errors are
        logged; the next pass asks again."""
        pending = [run for run in self._registry.by_tokens(set(tokens)) if run.cancel_request is None]
        if not pending:
            return
        try:
            requests = self._backend.cancel_requests(sorted({run.token for run in pending}))
        except SchedulerError as exc:
            log.error("reading cancel requests failed (retried at the next beat): %s", exc,
                      extra={"action": "cancel_check_failed"})
            return
        by_run = {r.run_id: r for r in requests}
        for run in pending:
            request = by_run.get(run.run_id.lower())
            if request is not None:
                self.deliver(run, request)

    def deliver(self, run: CancellableRun, request: CancelRequest) -> bool:
        """Ask the run to stop within the grace (``Run.request_cancel``): once, while it is
        still RUNNING; True when it took the request."""
        deadline = time.monotonic() + self.grace + (ISOLATED_BACKSTOP if self._isolated(run) else 0.0)
        if not run.request_cancel(request, deadline, self.grace):
            return False
        self.delivered += 1
        log.warning("run %s of job %r: cancel requested by %s; cancel_event set, %gs to stop", run.run_id,
                    run.job.name, request.requested_by, self.grace, extra={"action": "run_cancel_delivered"})
        self._poke()
        return True

    @staticmethod
    def _isolated(run: CancellableRun) -> bool:
        try:
            driver_cls = get_driver(run.job.driver)
        except SchedulerError:
            driver_cls = None
        return effective_isolation(run.job, driver_cls) is Isolation.PROCESS
