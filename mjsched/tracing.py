"""A trace span per run, when OpenTelemetry's API is installed (the ``opentelemetry`` extra).

Without ``opentelemetry-api`` every function here is a no-op that costs one ``is None``
test: the engine never needs it. With it, each run gets a span named ``mjsched.run``
from its claim to its end, with the job, tick, attempt, engine and outcome as attributes
(``ATTRIBUTES``) and a ``started`` event carrying the lateness: seconds from the tick to
the claim, and from the claim to a worker thread picking the run up. While the driver
executes, the span is the current context of the worker thread, so

- spans a python job opens itself are its children;
- the http driver sends it as a W3C ``traceparent`` header, the celery driver as a task
  header, so the receiving service or worker continues the same trace;
- a child process (a shell job, a process-isolated driver) gets ``TRACEPARENT`` /
  ``TRACESTATE`` in its environment, the carrier OpenTelemetry's specification names for
  environment variables.

Which tracer provider receives the spans is the application's choice, made the usual way
(``opentelemetry.trace.set_tracer_provider``); with none set the API's no-op provider
drops them, and the engine makes no span at all unless a trace is current (a script's own
around ``execute_job``), whose context it then hands on, recording nothing it would throw
away (``is_recording``). The dispatcher asks ``wanted()`` once per claim; ``start_run`` also
gives up on the API's ``INVALID_SPAN``, which covers a manual run outside any trace.
"""
from __future__ import annotations

import contextlib
import logging
import time
from datetime import datetime
from typing import Any, Iterator, MutableMapping

try:  # optional: the `opentelemetry` extra
    from opentelemetry import context as _otel_context
    from opentelemetry import propagate as _propagate
    from opentelemetry import trace as _trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # pragma: no cover - exercised where the extra is absent
    _trace = None

log = logging.getLogger(__name__)

SPAN_NAME = "mjsched.run"
ATTRIBUTES = ("mjsched.job.id", "mjsched.job.name", "mjsched.job.driver", "mjsched.run.id", "mjsched.run.tick",
              "mjsched.run.attempt", "mjsched.run.manual", "mjsched.engine.instance", "mjsched.run.outcome")
# outcomes that are a failure of the run (the span's status is then ERROR)
FAILED = frozenset({"Failed", "Timeout", "Cancelled", "Lost", "Fenced", "Unwritten", "Refused"})

_tracer: Any = None


def _mjsched_tracer() -> Any:
    """The library's tracer, asked for once: ``get_tracer`` reads the environment at every call
    until an SDK is set up (5 % of an engine's CPU at 4,000 runs/s), and what it answers before
    then is a proxy that follows the provider once one is set (set_tracer_provider works once)."""
    global _tracer
    if _tracer is None:
        _tracer = _trace.get_tracer("mjsched")
    return _tracer


def available() -> bool:
    """Whether runs are traced at all (the API is importable)."""
    return _trace is not None


class RunSpan:
    """One run's span; ``end`` is idempotent (a run can be ended by more than one path)."""
    __slots__ = ("_span", "_claimed", "_ended")

    def __init__(self, span: Any) -> None:
        self._span = span
        self._claimed = time.monotonic()
        self._ended = False

    def started(self, tick: datetime | None, claimed_at: datetime | None) -> None:
        """The worker thread picked the run up: the lateness as an event."""
        if not self._span.is_recording():
            return
        attributes: dict[str, Any] = {"mjsched.waited_for_worker_seconds": round(time.monotonic() - self._claimed, 6)}
        if tick is not None and claimed_at is not None:
            attributes["mjsched.claimed_late_seconds"] = round((claimed_at - tick).total_seconds(), 6)
        self._span.add_event("started", attributes)

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """The span as the current context of this thread while the driver executes."""
        token = _otel_context.attach(_trace.set_span_in_context(self._span))
        try:
            yield
        finally:
            _otel_context.detach(token)

    def end(self, outcome: str, error: str | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            if self._span.is_recording():
                self._span.set_attribute("mjsched.run.outcome", outcome)
                if outcome in FAILED:
                    self._span.set_status(Status(StatusCode.ERROR, (error or outcome)[:500]))
            self._span.end()
        except Exception:  # noqa: BLE001 - a tracing fault must never reach a run
            log.exception("ending the span of a run failed")


def wanted() -> bool:
    """Whether a run begun now, in this thread, would get a span worth making: the API is
    installed, and a tracer provider is set or a trace is current. The dispatcher asks once per
    claim, not per run (the provider lookup reads the environment: about 1 µs)."""
    if _trace is None:
        return False
    try:
        return not isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider) \
            or _trace.get_current_span().get_span_context().is_valid
    except Exception:  # noqa: BLE001 - tracing is an observer: when in doubt, start_run decides
        return True


def start_run(*, job_id: str, job_name: str, driver: str, run_id: str, tick: datetime | None, attempt: int,
              manual: bool, instance: str) -> RunSpan | None:
    """A run's span, begun at its claim; None without the API, when nothing would receive it
    (no provider set and no current trace), or if the tracer fails."""
    if _trace is None:
        return None
    try:
        # the current context: none on the poller's thread (a trace begins here); a script's
        # own span around execute_job becomes the manual run's parent
        span = _mjsched_tracer().start_span(SPAN_NAME, kind=_trace.SpanKind.INTERNAL)
        if span is _trace.INVALID_SPAN:
            # no tracer provider is set and no trace is current: nothing to record or to hand
            # on, so the run carries no span (about 2 µs a run less than a no-op span's
            # event, context attach and end)
            return None
        if span.is_recording():
            span.set_attributes({"mjsched.job.id": job_id, "mjsched.job.name": job_name, "mjsched.job.driver": driver,
                                 "mjsched.run.id": run_id, "mjsched.run.attempt": attempt,
                                 "mjsched.run.manual": manual, "mjsched.engine.instance": instance,
                                 **({"mjsched.run.tick": tick.isoformat()} if tick is not None else {})})
        return RunSpan(span)
    except Exception:  # noqa: BLE001 - tracing is an observer: it never fails a claim
        log.exception("starting the span of run %s failed", run_id)
        return None


def inject(carrier: MutableMapping[str, Any]) -> None:
    """Add the current trace context (``traceparent``, ``tracestate``) to ``carrier``: HTTP
    headers, a celery task's headers. A value already there (set by the job) is kept."""
    if _trace is None:
        return
    found: dict[str, str] = {}
    _propagate.inject(found)
    present = {name.lower() for name in carrier}
    for name, value in found.items():
        if name.lower() not in present:
            carrier[name] = value


def environment() -> dict[str, str]:
    """The current trace context as environment variables for a child process."""
    found: dict[str, str] = {}
    inject(found)
    return {name.upper(): value for name, value in found.items()}


def attach_from_environment(environ: MutableMapping[str, str]) -> None:
    """In a child process (an isolated driver): continue the trace its parent handed on."""
    if _trace is None or "TRACEPARENT" not in environ:
        return
    carrier = {"traceparent": environ["TRACEPARENT"]}
    if "TRACESTATE" in environ:
        carrier["tracestate"] = environ["TRACESTATE"]
    _otel_context.attach(_propagate.extract(carrier))
