"""Idle cost: engines with nothing due. Statements per second and CPU, engines and PostgreSQL.

Ten engines (the default poll bound of 10 s) over 100,000 Active jobs whose next run is an
hour away: nothing is due for the whole window, so whatever the engines and the database do
is the price of being ready. Measured over 60 s, after start-up (each engine counts its own
statements from the moment ``start_polling()`` returned; PostgreSQL's CPU is that of the
bench database's backends):

* statements per second per engine (target <= 1), by statement;
* CPU of all the engines together and of their PostgreSQL backends, in % of one core
  (target < 1 % for the ten engines together).

    python -m bench.idle [--dsn DSN] [--quick] [--engines 10] [--jobs 100000] [--seconds 60]
"""
from __future__ import annotations

import time
from typing import Any, Sequence

from . import common

TARGET_STATEMENTS_PER_ENGINE_S = 1.0
TARGET_ENGINES_CPU_PCT = 1.0


def run(server_dsn: str, engines: int, jobs: int, seconds: float, max_poll: float) -> dict[str, Any]:
    with common.BenchDatabase(server_dsn, "idle") as db:
        conn = common.connect(db.dsn)
        common.insert_jobs(conn, jobs, next_run_at="now() + interval '1 hour'")
        with common.engines(db.dsn, engines, f"idle{engines}", max_poll=max_poll) as procs:
            meter = common.CpuMeter(server_dsn, db.name)
            time.sleep(seconds)
            used = meter.stop()
            stats = [ep.stop() for ep in procs]
        conn.close()
    by_statement: dict[str, int] = {}
    for s in stats:
        for key, n in s.get("statements", {}).items():
            by_statement[key] = by_statement.get(key, 0) + n
    wall = max(s.get("wall_s", seconds) for s in stats)
    return {"engines": engines, "jobs": jobs, "seconds": wall, "max_poll": max_poll,
            "statements_per_engine_s": sum(by_statement.values()) / engines / wall,
            "by_statement": {k: n / engines / wall for k, n in sorted(by_statement.items(), key=lambda kv: -kv[1])},
            "engines_cpu_pct": sum(s.get("cpu_s", 0.0) for s in stats) / wall * 100,
            "pg_cpu_pct": used["pg"] / used["wall"] * 100}


def report(result: dict[str, Any]) -> None:
    top = ", ".join(f"{k} {v:.2f}" for k, v in list(result["by_statement"].items())[:5])
    common.print_table(
        "idle: engines with nothing due",
        ["engines", "jobs", "poll bound s", "seconds", "statements/s per engine", "target", "engines CPU % of a core",
         "target", "PostgreSQL CPU % of a core", "statements/s per engine by statement"],
        [[result["engines"], result["jobs"], result["max_poll"], result["seconds"],
          result["statements_per_engine_s"], f"<= {TARGET_STATEMENTS_PER_ENGINE_S:g}", result["engines_cpu_pct"],
          f"< {TARGET_ENGINES_CPU_PCT:g}", result["pg_cpu_pct"], top]],
        ["Every job is due an hour after the window, so nothing runs. Statements are counted in the engines "
         "(each execute() is one round trip), from the end of start_polling() to the stop; CPU is the engines' "
         "process time and the bench database's PostgreSQL backends over the same window."])


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--engines", type=int, default=None)
    p.add_argument("--jobs", type=int, default=None)
    p.add_argument("--seconds", type=float, default=None)
    p.add_argument("--max-poll", type=float, default=10.0, help="the engines' poll bound (default 10, as shipped)")
    args = p.parse_args(argv)
    engines = args.engines or (3 if args.quick else 10)
    jobs = args.jobs or (10_000 if args.quick else 100_000)
    seconds = args.seconds or (12.0 if args.quick else 60.0)
    report(run(args.dsn, engines, jobs, seconds, args.max_poll))
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main())
