"""Burst: 100,000 jobs due at the same second, 4 engines: how long until every one ran.

The throughput round of ``bench.throughput`` with a backlog five times larger: all jobs due
at one instant T0, four engine processes (cap 50 each), no-op driver. Printed beside the
SQL-only ceiling of the same server in the same run (the pgbench "procedures" workload of
``bench.ceiling``: one engine poll's SQL without Python), as the time that ceiling would
need for the same backlog. Exactly-once is checked on every job.

    python -m bench.burst [--dsn DSN] [--quick] [--jobs 100000] [--engines 4]
"""
from __future__ import annotations

from typing import Any, Sequence

from . import ceiling, common, throughput


def run(server_dsn: str, jobs: int, engines: int, pgbench_seconds: int) -> dict[str, Any]:
    tpl = common.BenchDatabase(server_dsn, "bursttpl")
    try:
        common.log_progress(f"burst: {engines} engines x {jobs} jobs due at once")
        ours = throughput.run_round(tpl.name, server_dsn, engines, jobs, cap=50, window=0.002, timeout=900.0)
    finally:
        tpl.drop()
    common.log_progress("burst: the pgbench 'procedures' ceiling")
    ceilings = ceiling.measure_ceiling(server_dsn, seconds=pgbench_seconds, jobs=20000,
                                       clients={"per-job": 8, "batched": 4, "procedures": 4})
    procedures = next((c for c in ceilings if c.get("name") == "procedures" and "rate" in c), None)
    return {"ours": ours, "ceiling_rate": procedures["rate"] if procedures else None}


def report(result: dict[str, Any]) -> None:
    ours, ceiling_rate = result["ours"], result["ceiling_rate"]
    drain = ours["elapsed_s"]
    ceiling_s = ours["jobs"] / ceiling_rate if ceiling_rate else None
    common.print_table(
        "burst: jobs due at the same second",
        ["engines", "jobs", "drained in s", "exec/s", "first run started ms after T0", "procedures ceiling s",
         "ceiling / mjsched", "exactly once"],
        [[ours["engines"], ours["jobs"], drain, ours["rate"], ours["first_start_ms"], ceiling_s,
          f"{common.ratio(ceiling_s, drain):.2f}" if ceiling_s and drain else "-",
          "yes" if ours["exactly_once"] else "NO"]],
        ["drained = last completed_at - T0 on the database clock. Ceiling = the same backlog at the rate of "
         "pgbench's 'procedures' script (one engine poll's SQL, 4 clients, batches of 50) measured on the same "
         "server in this run; 'ceiling / mjsched' is the fraction of that SQL-only rate the engines reach."])


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=None)
    p.add_argument("--engines", type=int, default=4)
    args = p.parse_args(argv)
    jobs = args.jobs or (5_000 if args.quick else 100_000)
    result = run(args.dsn, jobs, args.engines, 1 if args.quick else 10)
    report(result)
    return 0 if result["ours"]["exactly_once"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
