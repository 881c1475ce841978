"""Optional Prometheus exporter for one engine (the ``metrics`` extra).

``mjsched run --metrics-port 9464`` serves, on ``/metrics``:

=====================================  =========  ==================================================
``mjsched_runs_total{status}``         counter    runs this engine finished, by final status
``mjsched_run_duration_seconds``       histogram  wall time of those runs
``mjsched_runs_in_flight``             gauge      runs executing in this engine now
``mjsched_max_concurrent_jobs``        gauge      the engine's hard cap
``mjsched_lock_contention_total``      counter    due jobs found locked by another engine (locked_out)
``mjsched_skipped_at_capacity_total``  counter    due jobs left waiting because every slot was busy
                                                  (``DispatchResult.due_left_waiting``)
``mjsched_polls_total``                counter    polls (each one sweeps, then claims)
``mjsched_poll_failures_total``        counter    polls that raised (logged; the poller keeps going)
``mjsched_swept_runs_total``           counter    runs whose lease lapsed, marked Abandoned by our sweeps
``mjsched_dispatched_total``           counter    runs handed to the worker pool
``mjsched_timeouts_total``             counter    runs cancelled past their max_runtime
``mjsched_default_max_runtime_timeouts_total``  counter  of those, runs without a max_runtime of their
                                                         own, stopped by the engine's default_max_runtime
``mjsched_leases_lost_total``          counter    runs whose lease was taken over while running
``mjsched_fenced_completions_total``   counter    completions refused because the lease had moved on
``mjsched_runs_purged_total``          counter    finished runs deleted by this engine's retention purge
``mjsched_engine_info``                info       instance name and version
``mjsched_job_last_success_timestamp_seconds{job}``  gauge  when each job last completed (any engine)
``mjsched_alerts_open{kind}``          gauge      open deadline alerts by kind (the job_alert table: any engine)
``mjsched_alerts_opened_total``        counter    deadline alerts this engine opened (and so delivered)
``mjsched_alerts_resolved_total``      counter    deadline alerts this engine resolved (and so delivered)
=====================================  =========  ==================================================

Counters come from the engine's own events, not from scanning the run table: this module
subscribes with ``engine.add_listener(self)``. The per-job gauge reads the jobs table (its
``last_success_at`` column, kept by every completion, whichever engine ran it) at most once
every ``JOB_METRICS_TTL`` seconds, so "nightly-report has not succeeded in 26 h" is
``time() - mjsched_job_last_success_timestamp_seconds{job="nightly-report"} > 26*3600``
(take ``max by (job)`` across engines). It is one series per job: with many thousands of
jobs pass ``job_metrics=False`` and export it from one place only.

An application that embeds the engine serves the same metrics with
``mjsched.metrics.start_http_server(engine, 9464)`` (a thread of its own) or mounts
``mjsched.metrics.make_wsgi_app(engine)`` in its WSGI stack.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable, Iterator

from .errors import ConfigurationError, EngineForked
from .extras import install_command
from .forking import ProcessGuard, ProcessLock
from .version import __version__

log = logging.getLogger(__name__)

JOB_METRICS_TTL = 15.0   # seconds between two reads of the jobs table for the per-job gauge
DURATION_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, float("inf"))


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise ConfigurationError("metrics.port", None, "needs the prometheus-client package: "
                                 f"{install_command('metrics')}") from None
    return prometheus_client


class EngineMetrics:
    """Prometheus metrics of one ``SchedulingEngine``; ``serve(port)`` exposes them.

    In a process forked from the one that made them (an app mounted under gunicorn --preload)
    they are the copy's, which never runs: a scrape there is refused (EngineForked, a 503 from
    ``wsgi_app``) rather than answered with the parent's numbers as of the fork. It would
    also take prometheus_client's locks, which a parent's thread may have held at the fork."""

    def __init__(self, engine: Any, registry: Any = None, *, job_metrics: bool = True) -> None:
        pc = _client()
        self._pc = pc
        self._process = ProcessGuard()
        self.engine = engine
        self.registry = registry if registry is not None else pc.CollectorRegistry(auto_describe=True)
        r = self.registry
        self.runs = pc.Counter("mjsched_runs", "Runs this engine finished, by final status", ["status"], registry=r)
        for status in ("Completed", "Failed", "Timeout"):
            self.runs.labels(status)
        self.duration = pc.Histogram("mjsched_run_duration_seconds", "Wall time of runs this engine finished",
                                     buckets=DURATION_BUCKETS, registry=r)
        self.in_flight = pc.Gauge("mjsched_runs_in_flight", "Runs executing in this engine now", registry=r)
        self.in_flight.set_function(self._in_flight)
        pc.Gauge("mjsched_max_concurrent_jobs", "The engine's hard cap on runs at once",
                 registry=r).set(engine.max_concurrent_jobs)
        self.locked_out = pc.Counter("mjsched_lock_contention", "Due jobs found locked by another engine",
                                     registry=r)
        # the metric keeps its first name (dashboards read it); the poll's field is due_left_waiting
        self.due_left_waiting = pc.Counter("mjsched_skipped_at_capacity",
                                           "Due jobs left waiting: every slot was busy", registry=r)
        self.swept = pc.Counter("mjsched_swept_runs", "Runs whose lease lapsed, marked Abandoned by our sweeps",
                                registry=r)
        self.polls = pc.Counter("mjsched_polls", "Polls (each sweeps, then claims)", registry=r)
        self.poll_failures = pc.Counter("mjsched_poll_failures", "Polls that raised", registry=r)
        pc.Info("mjsched_engine", "The engine", registry=r).info({"instance": str(engine.instance_name),
                                                                    "version": __version__})
        r.register(_StatsCollector(engine, pc))
        if job_metrics:
            r.register(_JobCollector(engine.list_jobs))
        r.register(_AlertCollector(engine.backend.open_alert_counts))
        self._server: Any = None
        self._thread: Any = None
        self._attach()

    # -- events --------------------------------------------------------------------------------
    def on_poll(self, result: Any) -> None:
        self.polls.inc()
        self.locked_out.inc(getattr(result, "locked_out", 0) or 0)
        self.due_left_waiting.inc(getattr(result, "due_left_waiting", 0) or 0)
        self.swept.inc(getattr(result, "swept", 0) or 0)

    def on_poll_failed(self) -> None:
        self.polls.inc()
        self.poll_failures.inc()

    def on_run_finished(self, status: str, seconds: float) -> None:
        self.runs.labels(status).inc()
        self.duration.observe(max(0.0, seconds))

    def _in_flight(self) -> float:
        return float(self.engine.inflight)

    def _attach(self) -> None:
        self.engine.add_listener(self)

    # -- the endpoint -----------------------------------------------------------------------------
    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        try:
            started = self._pc.start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigurationError("metrics.port", port, f"cannot listen on {host}:{port}: {exc.strerror}") \
                from None
        if isinstance(started, tuple):
            self._server, self._thread = started

    def _same_process(self, method: str) -> None:
        if self._process.moved():
            raise EngineForked(method, self._process.pid)

    def render(self) -> bytes:
        self._same_process("metrics.render")
        return bytes(self._pc.generate_latest(self.registry))

    def wsgi_app(self) -> Callable[..., Iterable[bytes]]:
        """A WSGI application answering Prometheus scrapes (mount it under /metrics); 503 in a
        forked process, naming the fix."""
        scrape = self._pc.make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            try:
                self._same_process("metrics.wsgi_app")
            except EngineForked as exc:
                start_response("503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")])
                return [f"{exc}\n".encode()]
            return scrape(environ, start_response)   # type: ignore[no-any-return]
        return app

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _StatsCollector:
    """Exports ``engine.stats`` (dispatched, timeouts, leases lost, fenced completions) at scrape time."""

    NAMES = {"dispatched": "Runs handed to the worker pool",
             "timeouts": "Runs cancelled past their max_runtime",
             "default_max_runtime_timeouts": "Runs without a max_runtime of their own, cancelled past the "
                                             "engine's default_max_runtime",
             "leases_lost": "Runs whose lease was taken over while running",
             "leases_fenced": "Runs stopped by this engine because their lease could not be renewed in time",
             "fenced_completions": "Completions refused because the lease had moved on",
             "runs_purged": "Finished runs deleted by this engine's run-history purge",
             "alerts_opened": "Deadline alerts this engine opened (and delivered)",
             "alerts_resolved": "Deadline alerts this engine resolved (and delivered)"}

    def __init__(self, engine: Any, pc: Any) -> None:
        self._engine = engine
        self._pc = pc

    def describe(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        for key, doc in self.NAMES.items():
            yield CounterMetricFamily(f"mjsched_{key}", doc)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        stats = dict(getattr(self._engine, "stats", {}) or {})
        for key, doc in self.NAMES.items():
            yield CounterMetricFamily(f"mjsched_{key}", doc, value=float(stats.get(key, 0) or 0))


class _JobCollector:
    """``mjsched_job_last_success_timestamp_seconds{job}`` from the jobs table, cached for
    ``JOB_METRICS_TTL`` seconds (a scrape every few seconds must not read 10,000 rows each time)."""

    def __init__(self, list_jobs: Callable[[], list[Any]], ttl: float | None = None) -> None:
        self._list_jobs = list_jobs
        self._ttl = ttl
        self._lock = ProcessLock()
        self._read_at = float("-inf")
        self._values: list[tuple[str, float]] = []

    def describe(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        yield GaugeMetricFamily("mjsched_job_last_success_timestamp_seconds",
                                "When the job's newest Completed run ended (Unix time)", labels=["job"])

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily("mjsched_job_last_success_timestamp_seconds",
                                   "When the job's newest Completed run ended (Unix time)", labels=["job"])
        for name, value in self._current():
            family.add_metric([name], value)
        yield family

    def _current(self) -> list[tuple[str, float]]:
        with self._lock:
            ttl = JOB_METRICS_TTL if self._ttl is None else self._ttl
            if time.monotonic() - self._read_at >= ttl:
                try:
                    jobs = self._list_jobs()
                except Exception as exc:  # noqa: BLE001 - a scrape must answer; the last values stand
                    log.warning("metrics: could not read the jobs for the per-job gauge: %s", exc,
                                extra={"action": "metrics_jobs_failed"})
                else:
                    self._values = [(j.name, j.last_success_at.timestamp()) for j in jobs
                                    if getattr(j, "last_success_at", None) is not None]
                    self._read_at = time.monotonic()
            return list(self._values)


class _AlertCollector:
    """``mjsched_alerts_open{kind}`` from the job_alert table (its index of open alerts), cached
    for ``JOB_METRICS_TTL`` seconds; every kind is reported, 0 when none is open."""

    KINDS = ("late_start", "silent", "too_long", "failing_streak")

    def __init__(self, counts: Callable[[], dict[str, int]], ttl: float | None = None) -> None:
        self._counts = counts
        self._ttl = ttl
        self._lock = ProcessLock()
        self._read_at = float("-inf")
        self._values: dict[str, int] = {}

    def describe(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        yield GaugeMetricFamily("mjsched_alerts_open", "Open deadline alerts, by kind", labels=["kind"])

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily("mjsched_alerts_open", "Open deadline alerts, by kind", labels=["kind"])
        values = self._current()
        for kind in self.KINDS:
            family.add_metric([kind], float(values.get(kind, 0)))
        yield family

    def _current(self) -> dict[str, int]:
        with self._lock:
            ttl = JOB_METRICS_TTL if self._ttl is None else self._ttl
            if time.monotonic() - self._read_at >= ttl:
                try:
                    self._values = dict(self._counts())
                    self._read_at = time.monotonic()
                except Exception as exc:  # noqa: BLE001 - a scrape must answer; the last values stand
                    log.warning("metrics: could not read the open alerts: %s", exc,
                                extra={"action": "metrics_alerts_failed"})
            return dict(self._values)


def start_http_server(engine: Any, port: int, host: str = "127.0.0.1", *, job_metrics: bool = True) -> EngineMetrics:
    """Serve the engine's metrics on ``http://host:port/metrics`` from a daemon thread; the
    supported way for an application that embeds the engine. ``close()`` the result to stop."""
    metrics = EngineMetrics(engine, job_metrics=job_metrics)
    metrics.serve(port, host)
    return metrics


def make_wsgi_app(engine: Any, *, job_metrics: bool = True) -> Callable[..., Iterable[bytes]]:
    """The engine's metrics as a WSGI application, to mount in an existing WSGI app."""
    return EngineMetrics(engine, job_metrics=job_metrics).wsgi_app()
