"""Jobs set aside: a claimed row no engine can schedule or read (a cron, a zone or an instant
no engine can use, or a stored value that cannot be decoded, written by plain SQL) has its
next_run_at cleared, so no engine claims it again until its definition changes, and its
claimed run ends saying why. Each is logged once per job and reason (``JobReports``).

A row set aside for a value that cannot be decoded is also remembered here: the reschedule
sweep passes it over (it would be claimed and set aside again at each tick) until the row
decodes again.
"""
from __future__ import annotations

import logging

from ..backends.base import Backend, Completion
from ..errors import SchedulerError
from ..models import Job, RunStatus
from .log_once import LIMIT, JobReports

log = logging.getLogger(__name__)


class SetAside:
    """Sets claimed rows aside, and remembers those set aside as undecodable."""

    def __init__(self, backend: Backend, reports: JobReports) -> None:
        self._backend = backend
        self._reports = reports
        self._undecodable: set[str] = set()   # ids of jobs set aside for a value no engine can decode

    def unusable_schedule(self, job: Job, run_id: str | None, token: str, exc: BaseException) -> Completion | None:
        """``job``'s schedule cannot be computed (``exc`` says why): cleared; its claimed run,
        returned for the caller to record, ends Skipped with the reason."""
        reason = f"{type(exc).__name__}: {exc}"
        done, completion = self._clear_schedule(
            job, run_id, token, RunStatus.SKIPPED,
            f"set aside: its schedule cannot be computed ({reason}); fix the job's definition")
        if done and self._reports.first_unusable(job):
            log.error("job %r (%s) set aside: its schedule cannot be computed (%s); it will not run until its "
                      "definition is fixed", job.name, job.id, reason,
                      extra={"action": "job_set_aside", "job_id": job.id})
        return completion

    def undecodable(self, job: Job, run_id: str | None, token: str) -> Completion | None:
        """A stored value of ``job`` cannot be decoded (mjsched/decoding.py: JSON nested deeper
        than the limit, a number Python will not read, an instant past year 9999): cleared as
        ``unusable_schedule`` does, its run (returned) ends Failed naming the field, and the
        sweep passes the job over until its row decodes (``still_undecodable``)."""
        reason = "; ".join(f"{name}: {getattr(job, name).reason}" for name in job.undecodable)
        if len(self._undecodable) > LIMIT:
            self._undecodable.clear()
        self._undecodable.add(job.id)
        done, completion = self._clear_schedule(
            job, run_id, token, RunStatus.FAILED,
            f"set aside: its row cannot be decoded ({reason}); fix the job's definition")
        if done and self._reports.first_refusal(job, f"undecodable: {reason}"):
            log.error("job %r (%s) set aside: its row cannot be decoded (%s); it will not run until its "
                      "definition is fixed", job.name, job.id, reason,
                      extra={"action": "job_set_aside", "job_id": job.id})
        return completion

    def _clear_schedule(self, job: Job, run_id: str | None, token: str, status: RunStatus,
                        message: str) -> tuple[bool, Completion | None]:
        """The set-aside itself: next_run_at cleared (which also releases a run-less claim's
        lock); then the claimed run's end with ``status`` and ``message`` (which releases the
        lock) is returned. (False, None) when the database refused the write."""
        try:
            # guarded: an edit since the claim (a fix, say) keeps its next run
            self._backend.advance_job(job.id, token, None, release=run_id is None, guard=True,
                                      expected_next_run_at=job.next_run_at)
        except SchedulerError as db_exc:
            log.warning("job %r: could not set it aside (%s); its lease will lapse", job.name, db_exc)
            return False, None
        if run_id is None:
            return True, None
        return True, Completion(run_id, token, status.value, message, None, None)

    def still_undecodable(self, ids: list[str]) -> set[str]:
        """Of ``ids``, the jobs set aside as undecodable whose row still cannot be decoded, for the
        sweep to pass over; the others (fixed or deleted) are forgotten, so it schedules them again."""
        held = [i for i in ids if i in self._undecodable] if self._undecodable else []
        if not held:
            return set()
        try:
            still = {j.id for j in self._backend.get_jobs(held) if j.undecodable}
        except SchedulerError as exc:
            log.debug("could not read %d set-aside job(s) again: %s", len(held), exc)
            return set(held)
        self._undecodable.difference_update(set(held) - still)
        return still
