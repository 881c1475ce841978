"""Latency: 200 jobs with per-second crons (``* * * * * *``) for 30 s; how late each run started.

Engines are started first, then the jobs inserted with their first tick two whole
seconds ahead. After the window the engines drain and stop, and the run rows of
the window's ticks give:

* lateness = ``started_at - scheduled_for`` (started_at is the database time of the
  claim that started the run), p50 / p95 / p99 / max;
* driver lateness = when the driver itself began (wall clock in the engine, stored
  by the ``bench.stamp`` driver in the run's details) minus ``scheduled_for``: this
  adds the time the run waited in the engine between claim and thread start;
* ticks served vs expected (jobs x seconds), and Skipped (missed) runs.

    python -m bench.latency [--dsn DSN] [--quick] [--jobs 200] [--seconds 30]
"""
from __future__ import annotations

import time
from typing import Any, Sequence

from . import common

TARGET_P99_MS = 100.0


def run(server_dsn: str, jobs: int, seconds: int, *, engines: int, cap: int) -> dict[str, Any]:
    with common.BenchDatabase(server_dsn, "lat") as db:
        conn = common.connect(db.dsn)
        with common.engines(db.dsn, engines, f"lat{engines}x{cap}", cap=cap, max_poll=1.0) as procs:
            with conn.cursor() as cur:
                cur.execute("SELECT date_trunc('second', now()) + interval '2 seconds'")
                first = cur.fetchone()[0]
            common.insert_jobs(conn, jobs, cron="* * * * * *", driver=common.STAMP_DRIVER,
                               next_run_at=f"'{first.isoformat()}'::timestamptz")
            with conn.cursor() as cur:
                cur.execute("SELECT extract(epoch FROM %s - now())", (first,))
                time.sleep(max(0.0, float(cur.fetchone()[0])) + seconds)
            stats = [ep.stop() for ep in procs]
        with conn.cursor() as cur:
            cur.execute("""
                SELECT extract(epoch FROM started_at - scheduled_for) * 1000,
                       (details->>'start_lag_ms')::float8, status
                  FROM mjsched.scheduled_job_run
                 WHERE scheduled_for >= %s AND scheduled_for < %s + make_interval(secs => %s)""",
                        (first, first, seconds))
            rows = cur.fetchall()
        conn.close()
    completed = [r for r in rows if r[2] == "Completed"]
    lateness = [float(r[0]) for r in completed if r[0] is not None]
    driver = [float(r[1]) for r in completed if r[1] is not None]
    return {"engines": engines, "cap": cap, "jobs": jobs, "seconds": seconds, "expected": jobs * seconds,
            "completed": len(completed), "skipped": sum(1 for r in rows if r[2] == "Skipped"),
            "other": sum(1 for r in rows if r[2] not in ("Completed", "Skipped")),
            "lateness": lateness, "driver": driver,
            "cpu_per_s": sum(s.get("cpu_s", 0.0) for s in stats) / max(1e-9, max(s.get("wall_s", 1) for s in stats)),
            "statements": sum(sum(s.get("statements", {}).values()) for s in stats)}


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=None, help="per-second jobs (default 200; quick 50)")
    p.add_argument("--seconds", type=int, default=None, help="window (default 30; quick 8)")
    p.add_argument("--configs", default=None,
                   help="engines x cap, comma separated (default '1x50,1x200'; quick '1x50')")
    args = p.parse_args(argv)
    jobs = args.jobs or (50 if args.quick else 200)
    seconds = args.seconds or (8 if args.quick else 30)
    configs = [tuple(int(x) for x in c.split("x")) for c in (args.configs or ("1x50" if args.quick else
                                                                               "1x50,1x200")).split(",")]
    rows = []
    for n, cap in configs:
        common.log_progress(f"latency: {jobs} per-second jobs for {seconds}s, {n} engine(s), cap {cap}")
        r = run(args.dsn, jobs, seconds, engines=n, cap=cap)
        lat, drv = r["lateness"], r["driver"]
        rows.append([f"{n} x cap {cap}", jobs, f"{r['completed']:,}/{r['expected']:,}", r["skipped"],
                     common.percentile(lat, 0.5), common.percentile(lat, 0.95), common.percentile(lat, 0.99),
                     max(lat) if lat else None,
                     common.percentile(drv, 0.5), common.percentile(drv, 0.99), max(drv) if drv else None,
                     f"{r['cpu_per_s'] * 100:.0f}%",
                     "yes" if lat and common.percentile(lat, 0.99) < TARGET_P99_MS else "no"])
    common.print_table(
        "latency: per-second crons, lateness in ms",
        ["engines", "jobs", "runs/expected", "skipped", "p50", "p95", "p99", "max", "driver p50", "driver p99",
         "driver max", "engine CPU", f"p99 < {TARGET_P99_MS:.0f} ms"], rows,
        notes=["lateness = started_at - scheduled_for (database time of the claim); driver = wall clock when the "
               "driver began - scheduled_for. Engine CPU = engine process CPU time / wall time (100% = one core)."])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
