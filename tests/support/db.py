"""One test database of either dialect, for the backend contract suite.

The contract tests (the procedure races and the engine's reference cases) are written
once and run against every dialect a server is given for. They arrange and read rows
through this class: plain SQL with ``?`` placeholders (translated for psycopg2), plus
the few fragments the dialects spell differently -- the database clock, an instant
relative to it, a duration in seconds, a job inserted by hand, many rows at once.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

from mjsched.backends import open_backend
from mjsched.backends.base import Backend


class _Conn(Protocol):
    def rows(self, query: str, params: Sequence[Any] = ...) -> list[dict[str, Any]]: ...
    def run(self, query: str, params: Sequence[Any] = ...) -> int: ...
    def close(self) -> None: ...


class Db:
    def __init__(self, dialect: str, dsn: str, conn: _Conn) -> None:
        assert dialect in ("postgres", "mssql"), dialect
        self.dialect = dialect
        self.dsn = dsn
        self._conn = conn

    def __repr__(self) -> str:
        return f"Db({self.dialect})"

    # -- plain SQL -------------------------------------------------------------------------
    def _q(self, query: str) -> str:
        return query.replace("?", "%s") if self.dialect == "postgres" else query

    def rows(self, query: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return self._conn.rows(self._q(query), list(params))

    def one(self, query: str, params: Sequence[Any] = ()) -> Any:
        rows = self.rows(query, params)
        return next(iter(rows[0].values())) if rows else None

    def run(self, query: str, params: Sequence[Any] = ()) -> int:
        return self._conn.run(self._q(query), list(params))

    def close(self) -> None:
        self._conn.close()

    # -- what the dialects spell differently ----------------------------------------------------
    @property
    def now(self) -> str:
        """SQL for the database clock (the only clock lease math uses)."""
        return "now()" if self.dialect == "postgres" else "SYSDATETIMEOFFSET()"

    def ago(self, seconds: float) -> str:
        """SQL for the database clock minus ``seconds`` (negative: in the future)."""
        if self.dialect == "postgres":
            return f"(now() - interval '{float(seconds)} seconds')"
        return f"DATEADD(millisecond, {-int(round(seconds * 1000))}, SYSDATETIMEOFFSET())"

    def seconds(self, later: str, earlier: str) -> str:
        """SQL for ``later - earlier`` in seconds, as a number."""
        if self.dialect == "postgres":
            return f"extract(epoch FROM ({later}) - ({earlier}))"
        return f"(DATEDIFF_BIG(microsecond, {earlier}, {later}) / 1000000.0)"

    # -- arranging rows ---------------------------------------------------------------------------
    def backend(self, **options: Any) -> Backend:
        return open_backend(self.dsn, **options)

    def make_due(self, job_id: str, seconds: float = 1.0) -> None:
        """Put the job's next run ``seconds`` in the past, by the database clock."""
        self.run(f"UPDATE mjsched.scheduled_job SET next_run_at = {self.ago(seconds)} WHERE id = ?", (job_id,))

    def insert_job(self, type_id: str, name: str, cron: str, *, due: bool = False) -> str:
        """A job written by hand, as an operator's SQL would (no engine involved); its id."""
        next_run = self.ago(1) if due else "NULL"
        if self.dialect == "postgres":
            return str(self.one("INSERT INTO mjsched.scheduled_job (job_type_id, name, cron_expression, status, "
                                f"next_run_at) VALUES (?, ?, ?, 'Active', {next_run}) RETURNING id::text",
                                (type_id, name, cron)))
        # OUTPUT needs INTO here: scheduled_job has a trigger (SQL Server error 334 otherwise).
        return str(self.one("SET NOCOUNT ON; DECLARE @ids TABLE (id uniqueidentifier); "
                            "INSERT INTO mjsched.scheduled_job (job_type_id, name, cron_expression, status, "
                            f"next_run_at) OUTPUT inserted.id INTO @ids VALUES (?, ?, ?, N'Active', {next_run}); "
                            "SELECT id FROM @ids", (type_id, name, cron)))

    def insert_due_jobs(self, type_id: str, count: int) -> None:
        """``count`` Active jobs named j1..jN, due 1..N milliseconds ago."""
        if self.dialect == "postgres":
            self.run("""INSERT INTO mjsched.scheduled_job (job_type_id, name, cron_expression, status, next_run_at)
                        SELECT ?, 'j' || g, '0 0 1 1 *', 'Active', now() - g * interval '1 ms'
                          FROM generate_series(1, ?) g""", (type_id, count))
            return
        self.run("""INSERT INTO mjsched.scheduled_job (job_type_id, name, cron_expression, status, next_run_at)
                    SELECT ?, CONCAT(N'j', g.n), N'0 0 1 1 *', N'Active',
                           DATEADD(millisecond, -g.n, SYSDATETIMEOFFSET())
                      FROM (SELECT TOP (?) ROW_NUMBER() OVER (ORDER BY (SELECT NULL)) AS n
                              FROM sys.all_objects AS a CROSS JOIN sys.all_objects AS b) AS g""", (type_id, count))

    def expire_lease(self, job_id: str) -> None:
        """Force the job's lease (and its runs') past expiry by the database clock."""
        self.run(f"UPDATE mjsched.scheduled_job SET expected_completion_at = {self.ago(1)} WHERE id = ?", (job_id,))
        self.run(f"UPDATE mjsched.scheduled_job_run SET lease_expires_at = {self.ago(1)} "
                 "WHERE scheduled_job_id = ? AND status = 'Running'", (job_id,))

    def queue_tick(self, job_id: str, tick: Any) -> None:
        """A Queued run for ``tick``, written directly (set-up only: enqueue_job_run keeps
        only ticks that came due while the job ran, so it cannot build arbitrary queues)."""
        self.run(f"INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, queued_at) "
                 f"VALUES (?, ?, 'Queued', {self.now})", (job_id, tick))

    # -- reading rows -----------------------------------------------------------------------------
    def lease_lapsed(self, *job_ids: str) -> bool:
        """True when every given job's lease has expired by the database clock."""
        marks = ", ".join("?" for _ in job_ids)
        return self.one(f"SELECT count(*) FROM mjsched.scheduled_job WHERE id IN ({marks}) "
                        f"AND expected_completion_at < {self.now}", job_ids) == len(job_ids)

    def lock_token(self, job_id: str) -> str | None:
        value = self.one("SELECT lock_token FROM mjsched.scheduled_job WHERE id = ?", (job_id,))
        return None if value is None else str(value).lower()

    def run_status(self, run_id: str) -> str | None:
        return self.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = ?", (run_id,))

    def run_statuses(self, job_id: str) -> list[str]:
        """The job's run statuses, oldest start first."""
        return [r["status"] for r in self.rows(
            "SELECT status FROM mjsched.scheduled_job_run WHERE scheduled_job_id = ? ORDER BY started_at", (job_id,))]

    def count_runs(self, status: str | None = None, job_id: str | None = None) -> int:
        where, params = ["1 = 1"], []
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if job_id is not None:
            where.append("scheduled_job_id = ?")
            params.append(job_id)
        return int(self.one(f"SELECT count(*) FROM mjsched.scheduled_job_run WHERE {' AND '.join(where)}", params))

    def job_value(self, job_id: str, column: str) -> Any:
        return self.one(f"SELECT {column} FROM mjsched.scheduled_job WHERE id = ?", (job_id,))
