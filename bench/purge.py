"""Purge: delete millions of old runs while engines claim per-second jobs; claim latency with and without.

One bench database holds ``--jobs`` per-second jobs (``* * * * * *``) and ``--rows`` old
finished runs of theirs (two days old, one per past second, as a forgotten history would
be). Engines are started and, side by side in one run:

* **no purge**: the engines serve the ticks for ``--seconds``;
* **purge**: the same engines go on while a purger deletes every old row through
  ``purge_runs`` (batches of ``--batch`` rows, back to back, as ``mjsched runs prune
  --older-than 1d`` does; the engines' housekeeping purges the same way, but at most
  ``purge_pass_seconds`` per ``purge_interval``, so it loads claims far less).

For each window: claim latency = ``started_at - scheduled_for`` of the ticks served
(database time of the claim that started the run) p50 / p99 / max, ticks served vs
expected; for the purge, rows deleted per second. Numbers are printed, never asserted.

    python -m bench.purge [--dsn DSN] [--quick] [--rows 5000000] [--jobs 100] [--seconds 30]
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any, Sequence

from . import common


def _lateness(conn: Any, first: datetime, last: datetime) -> tuple[list[float], int]:
    with conn.cursor() as cur:
        cur.execute("""SELECT extract(epoch FROM started_at - scheduled_for) * 1000, status
                         FROM mjsched.scheduled_job_run
                        WHERE scheduled_for >= %s AND scheduled_for < %s""", (first, last))
        rows = cur.fetchall()
    return [float(r[0]) for r in rows if r[1] == "Completed" and r[0] is not None], len(rows)


def _db_now(conn: Any) -> datetime:
    with conn.cursor() as cur:
        cur.execute("SELECT now()")
        return cur.fetchone()[0]  # type: ignore[no-any-return]


def _whole_second_after(conn: Any, seconds: float) -> datetime:
    with conn.cursor() as cur:
        cur.execute("SELECT date_trunc('second', now()) + make_interval(secs => %s)", (seconds,))
        return cur.fetchone()[0]  # type: ignore[no-any-return]


def _sleep_until(conn: Any, instant: datetime) -> None:
    with conn.cursor() as cur:
        cur.execute("SELECT extract(epoch FROM %s - now())", (instant,))
        time.sleep(max(0.0, float(cur.fetchone()[0])))


def run(server_dsn: str, rows: int, jobs: int, seconds: int, *, engines: int, cap: int,
        batch: int) -> dict[str, Any]:
    from mjsched.backends.postgres import PostgresBackend

    with common.BenchDatabase(server_dsn, "purge") as db:
        conn = common.connect(db.dsn)
        common.insert_jobs(conn, jobs, cron="* * * * * *", next_run_at="NULL")
        with conn.cursor() as cur:
            cur.execute("UPDATE mjsched.scheduled_job SET status = 'Paused', high_frequency_ok = true")
            per_job = -(-rows // jobs)
            common.log_progress(f"purge: loading {per_job * jobs:,} old runs")
            t = time.perf_counter()
            cur.execute("""INSERT INTO mjsched.scheduled_job_run
                                  (scheduled_job_id, scheduled_for, status, started_at, completed_at, duration_ms,
                                   executed_by_instance)
                           SELECT j.id, s.at, 'Completed', s.at, s.at + interval '3 ms', 3, 'history'
                             FROM mjsched.scheduled_job j
                            CROSS JOIN LATERAL (SELECT now() - interval '2 days' - g * interval '1 second' AS at
                                                  FROM generate_series(1, %s) g) s""", (per_job,))
            loaded = cur.rowcount
            cur.execute("VACUUM ANALYZE mjsched.scheduled_job_run")
            cur.execute("ANALYZE mjsched.scheduled_job")
            load_s = time.perf_counter() - t
        common.log_progress(f"purge: loaded {loaded:,} runs in {load_s:.0f}s; starting {engines} engine(s)")
        with common.engines(db.dsn, engines, "purge", cap=cap, max_poll=1.0) as procs:
            first = _whole_second_after(conn, 2)
            with conn.cursor() as cur:
                cur.execute("UPDATE mjsched.scheduled_job SET status = 'Active', next_run_at = %s", (first,))
            quiet_end = first + timedelta(seconds=seconds)
            common.log_progress(f"purge: {seconds}s of claims without a purge")
            _sleep_until(conn, quiet_end)
            common.log_progress(f"purge: deleting {loaded:,} runs while the engines claim")
            backend = PostgresBackend(db.dsn, pool_size=2)
            result: dict[str, Any] = {"purged": 0, "calls": 0, "busy": 0}

            def purge() -> None:
                cursor: tuple[Any, Any, Any] = (None, None, None)
                while True:
                    b = backend.purge_runs(86_400.0, None, per_job=False, cursor=cursor, batch_size=batch)
                    result["calls"] += 1
                    if b.busy:      # an engine's housekeeping pass holds the lock for a moment
                        result["busy"] += 1
                        time.sleep(0.005)
                        continue
                    result["purged"] += b.purged
                    if b.done:
                        return
                    cursor = (b.next_job_id, b.next_completed_at, b.next_run_id)
            purge_start = _db_now(conn)
            t = time.perf_counter()
            worker = threading.Thread(target=purge, name="bench-purge")
            worker.start()
            worker.join()
            purge_s = time.perf_counter() - t
            purge_end = _db_now(conn)
            backend.close()
            _sleep_until(conn, purge_end + timedelta(seconds=2))
            stats = [ep.stop() for ep in procs]
        quiet, quiet_n = _lateness(conn, first, quiet_end)
        busy_start = purge_start.replace(microsecond=0) + timedelta(seconds=1)
        during, during_n = _lateness(conn, busy_start, purge_end.replace(microsecond=0))
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM mjsched.scheduled_job_run WHERE executed_by_instance = 'history'")
            left = cur.fetchone()[0]
        conn.close()
    quiet_s = (quiet_end - first).total_seconds()
    during_s = (purge_end.replace(microsecond=0) - busy_start).total_seconds()
    return {"loaded": loaded, "load_s": load_s, "left": left, "purged": result["purged"], "purge_s": purge_s,
            "calls": result["calls"], "busy": result["busy"],
            "quiet": quiet, "quiet_expected": int(quiet_s) * jobs, "quiet_rows": quiet_n,
            "during": during, "during_expected": int(during_s) * jobs, "during_rows": during_n,
            "cpu": [s.get("cpu_s", 0.0) for s in stats]}


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=None, help="old runs to purge (default 5,000,000; quick 100,000)")
    p.add_argument("--jobs", type=int, default=100, help="per-second jobs (default 100)")
    p.add_argument("--seconds", type=int, default=None, help="window without a purge (default 30; quick 8)")
    p.add_argument("--engines", type=int, default=2, help="engines (default 2)")
    p.add_argument("--cap", type=int, default=100, help="cap per engine (default 100)")
    p.add_argument("--batch", type=int, default=1000, help="rows per purge_runs call (default 1000)")
    args = p.parse_args(argv)
    rows = args.rows or (100_000 if args.quick else 5_000_000)
    seconds = args.seconds or (8 if args.quick else 30)
    r = run(args.dsn, rows, args.jobs, seconds, engines=args.engines, cap=args.cap, batch=args.batch)
    q, d = r["quiet"], r["during"]
    p99q, p99d = common.percentile(q, 0.99) if q else None, common.percentile(d, 0.99) if d else None
    rate = r["purged"] / r["purge_s"] if r["purge_s"] else None
    common.print_table(
        f"purge: {r['loaded']:,} old runs deleted while {args.engines} engine(s) claim {args.jobs} per-second jobs",
        ["window", "seconds", "ticks served/expected", "claim latency p50 ms", "p99 ms", "max ms",
         "rows purged", "purge rows/s", "p99 / no purge"],
        [["no purge", seconds, f"{len(q):,}/{r['quiet_expected']:,}", common.percentile(q, 0.5) if q else None,
          p99q, max(q) if q else None, 0, None, 1.0],
         ["purging", r["purge_s"], f"{len(d):,}/{r['during_expected']:,}", common.percentile(d, 0.5) if d else None,
          p99d, max(d) if d else None, r["purged"], rate, common.ratio(p99d, p99q)]],
        notes=[f"Loaded in {r['load_s']:.0f}s (one INSERT ... SELECT, every index maintained, then VACUUM ANALYZE); "
               f"{r['left']:,} old runs left after the purge; {r['calls']:,} purge_runs calls of {args.batch} rows "
               f"({r['busy']} answered busy: an engine's housekeeping pass held the lock). Claim latency = "
               "started_at - scheduled_for of the per-second ticks served in the window (database time of the "
               "claim); the purge window leaves out its first second. Cap "
               f"{args.cap} per engine."])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
