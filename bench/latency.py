"""Latency: 200 jobs with per-second crons (``* * * * * *``) for 30 s; how late each run started.

Engines are started first, then the jobs inserted with their first tick two whole
seconds ahead. After the window the engines drain and stop, and the run rows of
the window's ticks give, on the database's clock, p50 / p95 / p99 / max of:

* claim lateness = ``started_at - scheduled_for`` (started_at is ``now()`` of the claim
  transaction that started the run);
* driver-start lateness = when the driver itself began - ``scheduled_for``: the
  ``bench.stamp`` driver stores the engine host's wall clock in the run's details, and
  the bench converts it to the database clock with the offset between the wall clock and
  ``clock_timestamp()`` measured before and after the window (printed, with its
  uncertainty: half the shortest round trip). This is the lateness the job feels;
* hand-off = driver start - claim (the time a claimed run waited in the engine);
* ticks served vs expected (jobs x seconds), and Skipped (missed) runs.

Target (issue 18): driver-start p99 < 50 ms with 200 per-second jobs, one engine, cap 50.

    python -m bench.latency [--dsn DSN] [--quick] [--jobs 200] [--seconds 30] [--configs 1x50,1x200]
"""
from __future__ import annotations

import time
from typing import Any, Sequence

from . import common

TARGET_DRIVER_P99_MS = 50.0
TARGET_CONFIG = (200, 1, 50)      # jobs, engines, cap
TARGET_LINE = "driver start p99 < 50 ms (200 per-second jobs, one engine, cap 50)"


def run(server_dsn: str, jobs: int, seconds: int, *, engines: int, cap: int) -> dict[str, Any]:
    with common.BenchDatabase(server_dsn, "lat") as db:
        conn = common.connect(db.dsn)
        offset_before = common.clock_offset(conn)
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
        offset_after = common.clock_offset(conn)
        with conn.cursor() as cur:
            cur.execute("""
                SELECT extract(epoch FROM started_at - scheduled_for) * 1000,
                       extract(epoch FROM scheduled_for)::float8, extract(epoch FROM started_at)::float8,
                       (details->>'started_wall')::float8, status
                  FROM mjsched.scheduled_job_run
                 WHERE scheduled_for >= %s AND scheduled_for < %s + make_interval(secs => %s)""",
                        (first, first, seconds))
            rows = cur.fetchall()
        conn.close()
    # the wall clock may have been stepped or slewed during the window: the mean of both readings
    offset = (offset_before[0] + offset_after[0]) / 2
    uncertainty = max(offset_before[1], offset_after[1]) + abs(offset_before[0] - offset_after[0]) / 2
    completed = [r for r in rows if r[4] == "Completed"]
    lateness = [float(r[0]) for r in completed if r[0] is not None]
    driver = [(r[3] + offset - r[1]) * 1000 for r in completed if r[3] is not None]
    handoff = [(r[3] + offset - r[2]) * 1000 for r in completed if r[3] is not None]
    return {"engines": engines, "cap": cap, "jobs": jobs, "seconds": seconds, "expected": jobs * seconds,
            "completed": len(completed), "skipped": sum(1 for r in rows if r[4] == "Skipped"),
            "other": sum(1 for r in rows if r[4] not in ("Completed", "Skipped")),
            "lateness": lateness, "driver": driver, "handoff": handoff,
            "offset_ms": offset * 1000, "uncertainty_ms": uncertainty * 1000,
            "offsets_ms": (offset_before[0] * 1000, offset_after[0] * 1000),
            "cpu_per_s": sum(s.get("cpu_s", 0.0) for s in stats) / max(1e-9, max(s.get("wall_s", 1) for s in stats)),
            "statements": sum(sum(s.get("statements", {}).values()) for s in stats)}


def _quantiles(values: list[float]) -> list[float | None]:
    return [common.percentile(values, 0.5), common.percentile(values, 0.95), common.percentile(values, 0.99),
            max(values) if values else None]


def target_line(results: Sequence[dict[str, Any]]) -> str:
    """The issue's target, with the measured value and met yes/no (n/a when not run as specified)."""
    jobs, engines, cap = TARGET_CONFIG
    for r in results:
        if (r["jobs"], r["engines"], r["cap"]) == TARGET_CONFIG and r["driver"]:
            p99 = common.percentile(r["driver"], 0.99)
            return (f"Target: {TARGET_LINE}: measured {p99:.1f} ms (offset uncertainty +-{r['uncertainty_ms']:.2f} ms)"
                    f", met: {'yes' if p99 < TARGET_DRIVER_P99_MS else 'no'}")
    for r in results:
        if (r["engines"], r["cap"]) == (engines, cap) and r["driver"]:
            p99 = common.percentile(r["driver"], 0.99)
            return (f"Target: {TARGET_LINE}: measured {p99:.1f} ms with {r['jobs']} jobs, not the target's "
                    f"{jobs}, met: n/a")
    return f"Target: {TARGET_LINE}: not run (configuration {engines}x{cap} not measured), met: n/a"


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
    rows, results = [], []
    for n, cap in configs:
        common.log_progress(f"latency: {jobs} per-second jobs for {seconds}s, {n} engine(s), cap {cap}")
        r = run(args.dsn, jobs, seconds, engines=n, cap=cap)
        results.append(r)
        rows.append([f"{n} x cap {cap}", jobs, f"{r['completed']:,}/{r['expected']:,}", r["skipped"],
                     *_quantiles(r["lateness"]), *_quantiles(r["driver"]),
                     common.percentile(r["handoff"], 0.5), common.percentile(r["handoff"], 0.99),
                     f"{r['offset_ms']:+.2f} +-{r['uncertainty_ms']:.2f}", f"{r['cpu_per_s'] * 100:.0f}%"])
    common.print_table(
        "latency: per-second crons, lateness in ms (database clock)",
        ["engines", "jobs", "runs/expected", "skipped", "claim p50", "claim p95", "claim p99", "claim max",
         "driver p50", "driver p95", "driver p99", "driver max", "hand-off p50", "hand-off p99",
         "clock offset ms", "engine CPU"], rows,
        notes=["claim = started_at - scheduled_for (now() of the claim transaction); driver = the driver's start "
               "(engine host wall clock, + the measured offset) - scheduled_for; hand-off = driver start - claim. "
               "Clock offset = clock_timestamp() - wall clock, measured before and after the window (mean; "
               "+- half the shortest round trip plus half the drift between the two). Engine CPU = engine process "
               "CPU time / wall time (100% = one core).",
               target_line(results)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
