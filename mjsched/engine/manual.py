"""Runs an operator or a script asks for: ``execute_job`` and ``unlock_job``.

A manual run is taken with its lock in one replay-safe call (start_manual_run), runs on a
thread of its own outside the cap, and the call waits for its completion and notification.
``SchedulingEngine`` delegates here.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from typing import Any, Mapping

from .. import parameters as run_parameters
from .. import validation
from ..drivers.celery_trust import refusal_for
from ..drivers.registry import get_driver
from ..errors import ConfigurationError, JobNotActive, JobNotFound, LockNotAcquired
from ..models import Job, JobRun
from . import refs
from .parts import EngineParts
from .run import Run

log = logging.getLogger(__name__)

MANUAL_NOTIFY_WAIT_SECONDS = 5.0    # execute_job waits at most this long for its run's notification
MANUAL_START_BUSY_SECONDS = 2.0     # execute_job asks again this long while the job's row is only busy


class ManualRuns:
    def __init__(self, parts: EngineParts) -> None:
        """``parts``: the engine's parts a manual run uses (its backend, the runs' registry and services)."""
        self._p = parts
        self._backend = parts.backend
        self._instance = parts.options.instance_name or ""

    def execute(self, job_id: str, parameters: dict[str, Any] | None, force: bool) -> JobRun:
        """See ``SchedulingEngine.execute_job``."""
        job = refs.resolve_job(self._backend, job_id)
        if not isinstance(force, bool):
            raise ConfigurationError("force", force, "must be True or False")
        if isinstance(parameters, Mapping):   # a python job's function given by itself: its path
            parameters = validation.prepared(job.driver, get_driver(job.driver), parameters, "parameters")
        params = run_parameters.check_parameters(parameters)
        for name in job.undecodable:   # a stored value no engine can read (mjsched/decoding.py)
            raise ConfigurationError(name, getattr(job, name), "cannot be decoded as stored; fix the job's "
                                                               "definition before it can run")
        if params:
            job = dataclasses.replace(job, configuration=run_parameters.merged_configuration(job, params))
        # What this process cannot run (an import path it lacks) is refused before a run is recorded;
        # a celery job outside the allow-list is not checked (that imports it): its run ends Failed.
        if refusal_for(self._p.options.celery_allow, job.driver, job.configuration) is None:
            get_driver(job.driver)().check_can_run(job.configuration)
        lease_from = time.monotonic()   # before the call that grants the run its lease (Run.lease_until)
        start = self._start(job, force, params)
        if start.outcome == "not_found":
            raise JobNotFound(job.id)
        if start.outcome == "not_active":
            raise JobNotActive(job.id, refs.resolve_job(self._backend, job.id).status.value)
        if start.outcome != "started" or not start.run_id or not start.lock_token:
            raise LockNotAcquired(job.id)
        run_id, token = start.run_id, start.lock_token
        held = Run.begin(self._p.run_services, job, run_id, token, None, manual=True, catch_up=False,
                         parameters=params, lease_from=lease_from)
        held.start_manual()
        # Done when the run's completion is written (on return, or at its timeout), and its
        # notification sent: a script that exits right after must not lose it (bounded wait:
        # a notifier that hangs only delays the return).
        self._p.registry.wait_gone(held, timeout=None)
        assert isinstance(held.notified, threading.Event)   # a manual run's is real
        if not held.notified.wait(MANUAL_NOTIFY_WAIT_SECONDS):
            log.warning("job %r: its notification is still being sent; execute_job returns without it",
                        job.name, extra={"action": "notification_pending"})
        run = self._backend.get_run(run_id)
        if run is None:
            raise JobNotFound(job.id)
        return run

    def _start(self, job: Job, force: bool, parameters: dict[str, Any] | None = None) -> Any:
        """start_manual_run, asked again for a moment while the job's row is only *busy*: it
        answers 'locked' at once, without waiting, when another session holds the row, which
        an engine's claim or completion does for milliseconds. A job a run holds (a lock with a
        holder) is refused at once."""
        request = str(uuid.uuid4())
        deadline = time.monotonic() + MANUAL_START_BUSY_SECONDS
        delay = 0.01
        while True:
            start = self._backend.start_manual_run(job.id, request, self._instance, self._p.options.lease_timeout,
                                                   force=force, parameters=parameters)
            if start.outcome != "locked" or time.monotonic() >= deadline:
                return start
            current = self._backend.get_job(job.id)
            if current is None or current.locked_by_instance is not None:
                return start
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


    def unlock(self, job_id: str) -> bool:
        """See ``SchedulingEngine.unlock_job``."""
        job = refs.resolve_job(self._backend, job_id)
        freed = self._backend.force_unlock_job(job.id, f"Abandoned: an operator unlocked the job "
                                                      f"(through engine {self._instance})")
        if freed is None:
            log.info("job %r was not locked; nothing to unlock", job.name, extra={"action": "job_unlock_noop"})
            return False
        holder, abandoned = freed
        log.warning("job %r unlocked by an operator: the lock of %s was freed, %d run(s) abandoned", job.name,
                    holder or "?", abandoned, extra={"action": "job_unlocked"})
        return True
