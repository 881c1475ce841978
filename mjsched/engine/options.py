"""EngineOptions: the engine's tuning, validated once, frozen afterwards.

``SchedulingEngine(...)`` builds one from its keyword arguments; the CLI's config
builds the same object from its layers (file, environment, flags), so every value is
checked here only. The intervals derived from the lease are its ``lease_budget``
(mjsched/lease_budget.py), where a rule such as "the heartbeat renews at least three times
per lease" is written.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any, Iterable

from .. import retention, validation
from ..drivers.celery_trust import CeleryAllowList, allowed_apps, allowed_brokers
from ..drivers.registry import allowed_driver_names
from ..errors import ConfigurationError
from ..lease_budget import RENEWALS_PER_LEASE, LeaseBudget  # noqa: F401 - RENEWALS_PER_LEASE: its former home

MAX_CATCH_UP_RUNS_LIMIT = 100_000
# The bound of a run whose job (max_runtime) and driver (default_max_runtime) set none: a
# backstop for hung runs, which would otherwise hold their slot, and their job, for ever (the
# engine renews a live run's lease). One day: longer than any daily job can take without
# missing its own next tick, so a long nightly job never meets it; a hung one is stopped
# the same day. None turns it off. README "Timeouts", docs/guide/reliability.md.
DEFAULT_MAX_RUNTIME = 86_400.0
MAX_RUNTIME_LIMIT = 31_536_000.0   # one year: what a job's max_runtime may be (the schema's CHECK)


@dataclass(frozen=True)
class EngineOptions:
    """``max_concurrent_jobs`` is a hard cap on runs executing in this engine;
    ``lease_timeout`` (seconds) is how long a claimed run stays ours without a heartbeat."""

    max_concurrent_jobs: int = 5
    lease_timeout: float = 600.0
    instance_name: str | None = None          # None: "<host>-<pid>"
    min_poll_interval: float = 0.005
    max_poll_interval: float = 10.0
    max_catch_up_runs: int = 100
    heartbeat_interval: float | None = None   # None: a quarter of the lease
    completion_batch_window: float = 0.002
    allowed_drivers: Iterable[str] | str | frozenset[str] | None = None   # None: every driver
    cancel_grace: float = 30.0                # seconds an operator-cancelled run has to stop before it is killed
    default_max_runtime: float | None = DEFAULT_MAX_RUNTIME   # bound of runs without max_runtime (None: none)
    # Run-history retention (README "Run-history retention"): the defaults of jobs whose own
    # keep_runs_days / keep_runs_count is None (None or 0: that rule off); this engine purges
    # at most every purge_interval seconds (None: never; up to 8x that while its sweeps find
    # nothing: engine/retention.py), purge_pass_seconds per pass.
    keep_runs_days: int | None = None
    keep_runs_count: int | None = None
    purge_interval: float | None = 10.0
    purge_pass_seconds: float = 0.2
    purge_batch_size: int = 1000
    # Deadline alerts (sql/<dialect>/014_alerts.sql): this engine asks the database to evaluate
    # them at most every alert_interval seconds (None: never; another engine still does).
    alert_interval: float | None = 15.0
    # What a celery job may name on this engine (docs/guide/trust.md): app paths it may import,
    # broker / result backend URLs it may connect to; None: any. Others end Failed, untouched.
    celery_allowed_apps: Iterable[str] | str | frozenset[str] | None = None
    celery_allowed_brokers: Iterable[str] | str | None = None

    def __post_init__(self) -> None:
        def keep(name: str, value: object) -> None:
            object.__setattr__(self, name, value)
        keep("max_concurrent_jobs", validation.positive_int("max_concurrent_jobs", self.max_concurrent_jobs))
        # Drivers this engine runs (None: all); a job of another driver ends Failed here (README "Trust model").
        keep("allowed_drivers", allowed_driver_names(self.allowed_drivers))
        keep("lease_timeout", _seconds("lease_timeout", self.lease_timeout))
        keep("max_poll_interval", _seconds("max_poll_interval", self.max_poll_interval))
        keep("min_poll_interval", _seconds("min_poll_interval", self.min_poll_interval))
        if self.min_poll_interval > self.max_poll_interval:
            raise ConfigurationError("min_poll_interval", self.min_poll_interval,
                                     f"must not exceed max_poll_interval ({self.max_poll_interval:g})")
        keep("max_catch_up_runs", validation.positive_int("max_catch_up_runs", self.max_catch_up_runs,
                                                          maximum=MAX_CATCH_UP_RUNS_LIMIT))
        if self.heartbeat_interval is not None:
            validation.positive_number("heartbeat_interval", self.heartbeat_interval, optional=False)
            bound = LeaseBudget.of(self.lease_timeout).longest_heartbeat_interval
            if self.heartbeat_interval > bound:
                raise ConfigurationError("heartbeat_interval", self.heartbeat_interval,
                                         f"must renew at least three times per lease (<= {bound:g})")
        if isinstance(self.cancel_grace, bool) or not isinstance(self.cancel_grace, (int, float)) \
                or not 0 <= self.cancel_grace <= 86_400:
            raise ConfigurationError("cancel_grace", self.cancel_grace, "must be a number of seconds in [0, 86400]")
        keep("cancel_grace", float(self.cancel_grace))
        if self.default_max_runtime is not None:
            keep("default_max_runtime", float(validation.positive_number(
                "default_max_runtime", self.default_max_runtime, optional=False, maximum=MAX_RUNTIME_LIMIT) or 0))
        keep("keep_runs_days", retention.keep_days("keep_runs_days", self.keep_runs_days))
        keep("keep_runs_count", retention.keep_count("keep_runs_count", self.keep_runs_count))
        if self.purge_interval is not None:
            keep("purge_interval", float(validation.positive_number("purge_interval", self.purge_interval,
                                                                    optional=False, maximum=86_400) or 0))
        if self.alert_interval is not None:
            keep("alert_interval", float(validation.positive_number("alert_interval", self.alert_interval,
                                                                    optional=False, maximum=3_600) or 0))
        keep("purge_pass_seconds", float(validation.positive_number("purge_pass_seconds", self.purge_pass_seconds,
                                                                    optional=False, maximum=60) or 0))
        keep("purge_batch_size", validation.positive_int("purge_batch_size", self.purge_batch_size,
                                                         maximum=retention.MAX_BATCH))
        keep("celery_allowed_apps", allowed_apps(self.celery_allowed_apps))
        keep("celery_allowed_brokers", allowed_brokers(self.celery_allowed_brokers))
        keep("instance_name", validation.text("instance_name", self.instance_name, limit=255)
             or f"{socket.gethostname()}-{os.getpid()}")

    @cached_property
    def lease_budget(self) -> LeaseBudget:
        """Every interval the engine derives from ``lease_timeout`` (and ``heartbeat_interval``).
        Its database-call bounds assume the backends' default statement_timeout; the engine's
        backend gets them from ``wiring.backend_defaults``, with the backend's own."""
        return LeaseBudget.of(self.lease_timeout, heartbeat_interval=self.heartbeat_interval)

    @property
    def celery_allow(self) -> CeleryAllowList | None:
        """The celery allow-list of this engine (None: any app, any broker)."""
        if self.celery_allowed_apps is None and self.celery_allowed_brokers is None:
            return None
        return CeleryAllowList(self.celery_allowed_apps, self.celery_allowed_brokers)  # type: ignore[arg-type]


def options_from(options: EngineOptions | None, **tuning: Any) -> EngineOptions:
    """``SchedulingEngine``'s options: ``options`` when given, else built from its tuning
    arguments. Every argument is checked either way; one given beside ``options`` (not left
    at its default) is refused, since ``options`` replaces them all and it would be ignored."""
    built = EngineOptions(**tuning)   # a bad value is named here, whichever path it came by
    if options is None:
        return built
    if not isinstance(options, EngineOptions):
        raise ConfigurationError("options", options, "must be a mjsched.engine.EngineOptions, or None")
    defaults = {f.name: f.default for f in fields(EngineOptions)}
    for name, value in tuning.items():
        if value != defaults[name]:
            raise ConfigurationError(name, value, "given beside options=EngineOptions(...), which replaces the "
                                                  "tuning arguments: set it in the options instead")
    return options


def _seconds(name: str, value: object) -> float:
    return float(validation.positive_number(name, value, optional=False) or 0)
