"""Throughput: N engine processes x M no-op jobs, all due at the same instant.

For each N (1, 2, 4): a fresh database, N engines started and polling, then M
Active jobs inserted in one statement (cron ``0 0 1 1 *``, so each runs exactly
once), all due at one instant T0 = now + 1 s. Measured until every job ran once:

* executions/s = M / (last completed_at - T0), from the run rows (database clock);
* round trips per execution, counted in the engines (every cursor execute() is one
  round trip; autocommit, so one transaction each), with the top procedures;
* commits per execution from pg_stat_database.xact_commit deltas (pg_stat_statements
  when the server preloads it), minus the bench's own queries;
* CPU: engine processes' CPU seconds per 1,000 executions, and the whole machine's;
* the exactly-once check: every job has exactly one run, and it Completed.

    python -m bench.throughput [--dsn DSN] [--quick] [--jobs M] [--engines 1,2,4]
"""
from __future__ import annotations

import os
import time
from typing import Any, Sequence

from . import common

TARGET_EXECUTIONS_PER_S = 5000


def run_round(template: str, server_dsn: str, n_engines: int, jobs: int, *, cap: int, window: float,
              driver: str = common.NOOP_DRIVER, timeout: float = 300.0,
              profile: str | None = None) -> dict[str, Any]:
    db = common.BenchDatabase(server_dsn, "tp", template=template)
    try:
        conn = common.connect(db.dsn)
        configuration = {"callable": "bench.common:noop"} if driver == "python" else None
        with common.engines(db.dsn, n_engines, f"tp{n_engines}", cap=cap, window=window, max_poll=0.5) as procs:
            # The engines are up (start-up, which loads every Active job, is not timed: see
            # bench.scaling). Now M jobs, all due at one instant T0 = now + 1 s (> max_poll,
            # so every engine sees T0 and sleeps until exactly then). One INSERT, triggers off.
            with conn.cursor() as cur:
                cur.execute("SELECT now() + make_interval(secs => 1.0 + %s * 0.0001)", (jobs,))
                t0 = cur.fetchone()[0]
            common.insert_jobs(conn, jobs, next_run_at=f"'{t0.isoformat()}'::timestamptz", driver=driver,
                               configuration=configuration)
            with conn.cursor() as cur:
                cur.execute("SELECT now() < %s", (t0,))
                if not cur.fetchone()[0]:
                    common.log_progress("throughput: WARNING the jobs were committed after T0")
            conn.close()
            time.sleep(0.2)          # let our own statistics flush before the baseline
            commits0 = common.db_commits(server_dsn, db.name)
            conn = common.connect(db.dsn)
            own = 0
            deadline = time.monotonic() + timeout
            spy = None
            with conn.cursor() as cur:
                cur.execute("SELECT extract(epoch FROM %s - now())", (t0,))
                own += 1
                wait = max(0.0, float(cur.fetchone()[0]))
                if profile:
                    spy = common.start_py_spy(procs[0].ready_info["pid"], profile)
                time.sleep(wait)
                meter = common.CpuMeter(server_dsn, db.name)
                wall0 = time.perf_counter()
                while time.monotonic() < deadline:
                    # A job's next_run_at leaves T0 (for next year) only when its completion is
                    # written, so "none left at T0" is the end of the round. One probe of the due
                    # index's head: a count of the runs here read the whole run table every 50 ms
                    # (a parallel seq scan over bench.history's 20 M old runs), which slowed the
                    # engines it measured and was counted in PostgreSQL's CPU.
                    cur.execute("SELECT NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job WHERE status = 'Active' "
                                "AND next_run_at <= %s)", (t0,))
                    own += 1
                    if cur.fetchone()[0]:
                        break
                    time.sleep(0.05)
            wall1 = time.perf_counter()
            cpu = meter.stop()
            conn.close()
            if spy is not None:
                common.stop_py_spy(spy)
            stats = [ep.stop() for ep in procs]
        time.sleep(0.6)
        commits1 = common.db_commits(server_dsn, db.name)
        conn = common.connect(db.dsn)
        with conn.cursor() as cur:
            # only this round's jobs and runs (bench.history adds old jobs and runs of its own)
            cur.execute("""SELECT min(started_at), max(completed_at), count(*),
                                  count(*) FILTER (WHERE status = 'Completed')
                             FROM mjsched.scheduled_job_run WHERE started_at > %s - interval '1 hour'""", (t0,))
            first_start, last_done, runs, completed = cur.fetchone()
            cur.execute("""SELECT count(*) FILTER (WHERE n <> 1), count(*) FILTER (WHERE n = 0),
                                  count(*) FILTER (WHERE n > 1)
                             FROM (SELECT j.id, count(r.id) AS n FROM mjsched.scheduled_job j
                                     LEFT JOIN mjsched.scheduled_job_run r ON r.scheduled_job_id = j.id
                                    WHERE j.name LIKE 'bench-%%'
                                    GROUP BY j.id) s""")
            wrong, never, twice = cur.fetchone()
            cur.execute("""SELECT executed_by_instance, count(*) FROM mjsched.scheduled_job_run
                            WHERE started_at > %s - interval '1 hour' GROUP BY 1 ORDER BY 1""", (t0,))
            share = [int(c) for _, c in cur.fetchall()]
        conn.close()
    finally:
        db.drop()

    elapsed = (last_done - t0).total_seconds() if last_done else float("nan")
    statements: dict[str, int] = {}
    for s in stats:
        for k, v in s.get("statements", {}).items():
            statements[k] = statements.get(k, 0) + v
    round_trips = sum(statements.values())
    engine_cpu = sum(s.get("cpu_s", 0.0) for s in stats)
    busy = cpu["machine"] / max(1e-9, cpu["wall"] * (os.cpu_count() or 1))
    # Engines' CPU over the same window ~ their READY..STOP CPU (idle outside the window).
    others = max(0.0, cpu["machine"] - cpu["pg"] - engine_cpu)
    return {
        "engines": n_engines, "jobs": jobs, "cap": cap, "driver": driver,
        "elapsed_s": elapsed, "rate": jobs / elapsed if elapsed and elapsed > 0 else None,
        "first_start_ms": (first_start - t0).total_seconds() * 1000 if first_start else None,
        "runs": runs, "completed": completed, "wrong": wrong, "never": never, "twice": twice,
        "exactly_once": wrong == 0 and completed == jobs and runs == jobs,
        "round_trips": round_trips, "rt_per_exec": round_trips / jobs,
        "commits": commits1 - commits0 - own, "commits_per_exec": (commits1 - commits0 - own) / jobs,
        "statements": statements, "share": share,
        "engine_cpu_ms_per_1k": engine_cpu / jobs * 1e6,
        "engine_sys_ms_per_1k": sum(s.get("sys_s", 0.0) for s in stats) / jobs * 1e6,
        "machine_busy": busy, "wall_s": wall1 - wall0,
        "pg_cpu_ms_per_1k": cpu["pg"] / jobs * 1e6,
        "others_cpu": others / max(1e-9, cpu["wall"]),
        "rss_mb": max((s.get("VmHWM", 0) for s in stats), default=0) / 1024,
    }


def measure(server_dsn: str, engine_counts: Sequence[int], jobs: int, *, cap: int = 50, window: float = 0.002,
            python_driver_row: bool = False) -> tuple[list[dict[str, Any]], str]:
    tpl = common.BenchDatabase(server_dsn, "tptpl")
    results = []
    try:
        conn = common.connect(tpl.dsn)
        usable, why = common.pg_stat_statements_usable(conn)
        conn.close()
        source = "pg_stat_database.xact_commit" + ("" if usable else f" (pg_stat_statements not usable: {why})")
        for n in engine_counts:
            common.log_progress(f"throughput: {n} engine(s) x {jobs} jobs")
            results.append(run_round(tpl.name, server_dsn, n, jobs, cap=cap, window=window))
        if python_driver_row:
            common.log_progress(f"throughput: 1 engine x {jobs} jobs, built-in python driver")
            results.append(run_round(tpl.name, server_dsn, 1, jobs, cap=cap, window=window, driver="python"))
    finally:
        tpl.drop()
    return results, source


def report(results: list[dict[str, Any]], commit_source: str) -> None:
    rows = []
    for r in results:
        top = ", ".join(f"{k} {v / r['jobs']:.3f}" for k, v in list(r["statements"].items())[:4])
        rows.append([r["engines"], r["driver"], r["jobs"], r["rate"], r["elapsed_s"],
                     r["rt_per_exec"], r["commits_per_exec"], r["engine_cpu_ms_per_1k"],
                     r["pg_cpu_ms_per_1k"], r["engine_sys_ms_per_1k"],
                     f"{r['machine_busy'] * 100:.0f}%", f"{r['others_cpu'] * 100:.0f}%",
                     "yes" if r["exactly_once"] else f"NO ({r['never']} never, {r['twice']} twice)",
                     top])
    print_targets = []
    best = max((r for r in results if r["driver"] == common.NOOP_DRIVER and r["rate"]),
               key=lambda r: r["engines"], default=None)
    single = next((r for r in results if r["engines"] == 1 and r["driver"] == common.NOOP_DRIVER), None)
    if best:
        print_targets.append(
            f"{best['engines']} engines: {best['rate']:,.0f} executions/s = "
            f"{best['rate'] / TARGET_EXECUTIONS_PER_S:.2f} x the {TARGET_EXECUTIONS_PER_S:,}/s target"
            + (f"; scaling {best['engines']} vs 1 engine: {common.ratio(best['rate'], single['rate']):.2f}x"
               if single and single["rate"] else ""))
    common.print_table(
        "throughput: no-op executions, all due at T0",
        ["engines", "driver", "jobs", "exec/s", "seconds", "round trips/exec", "commits/exec",
         "engine CPU ms/1k exec", "PG CPU ms/1k exec", "of engine CPU: kernel", "machine busy", "other load", "exactly once", "round trips/exec by statement (top 4)"],
        rows,
        notes=[*print_targets,
               f"exec/s = jobs / (last completed_at - T0), database clock. Round trips counted in the engines "
               f"(each execute() is one round trip and, in autocommit, one transaction); commits from "
               f"{commit_source}, minus the bench's own queries. Cap {results[0]['cap'] if results else '?'} "
               f"runs per engine, completion window 2 ms. Machine busy = all CPUs; other load = CPU used by neither "
               f"the engines nor this database's PostgreSQL backends (other work on the machine), in cores x 100%."])


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=None, help="jobs per round (default 20000; quick 2000)")
    p.add_argument("--engines", default="1,2,4", help="engine counts to run (default %(default)s)")
    p.add_argument("--cap", type=int, default=50, help="max_concurrent_jobs per engine")
    p.add_argument("--window", type=float, default=0.002, help="completion batch window, seconds")
    p.add_argument("--profile", metavar="FILE",
                   help="py-spy the first engine of a single extra 1-engine round into FILE (raw) and print its top frames")
    p.add_argument("--python-driver", action="store_true",
                   help="add a 1-engine row with the built-in python driver (default on outside --quick)")
    args = p.parse_args(argv)
    jobs = args.jobs or (2000 if args.quick else 20000)
    counts = [int(x) for x in args.engines.split(",") if x.strip()]
    results, source = measure(args.dsn, counts, jobs, cap=args.cap, window=args.window,
                      python_driver_row=args.python_driver or not args.quick)
    report(results, source)
    if args.profile:
        tpl = common.BenchDatabase(args.dsn, "tptpl")
        try:
            common.log_progress(f"throughput: profiling 1 engine x {jobs} jobs with py-spy")
            r = run_round(tpl.name, args.dsn, 1, jobs, cap=args.cap, window=args.window, profile=args.profile)
        finally:
            tpl.drop()
        if not os.path.exists(args.profile):
            return 0 if all(r["exactly_once"] for r in results) else 1   # no py-spy: said above, no profile
        rows_self, rows_incl, samples = common.summarize_profile(args.profile)
        common.print_table(f"profile of 1 engine ({r['rate']:,.0f} exec/s while sampled), self time, "
                           f"{samples} samples", ["function (file)", "samples", "%"], rows_self)
        common.print_table("profile: inclusive time, and samples per thread", ["function (file)", "samples", "%"],
                           rows_incl)
    return 0 if all(r["exactly_once"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
