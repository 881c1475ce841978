"""The database's side of a no-op execution, statement by statement (pg_stat_statements).

The shared server cannot load pg_stat_statements (it must be in shared_preload_libraries),
so this starts a private cluster configured like it (fsync and synchronous_commit on,
shared_buffers 128MB) plus ``pg_stat_statements.track = all``, which also records the
statements that run inside the procedures. It runs the ``bench.throughput`` round there and
prints, per execution: the top-level statements the engines sent (calls and server time) and
the statements inside the procedures that cost the most. Read it to see where PostgreSQL's
CPU per execution goes; the server time here is wall time inside the executor, not CPU.

    python -m bench.pgstat [--engines 1] [--jobs 20000] [--cap 50] [--top 12]
"""
from __future__ import annotations

import os
import re
from typing import Any, Sequence

from . import common, throughput

SETTINGS = """
fsync = on
synchronous_commit = on
full_page_writes = on
shared_buffers = 128MB
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.max = 5000
"""


def start_cluster() -> Any:
    from tests.chaos import cluster    # the chaos suite's private cluster (initdb as the postgres user)

    why = cluster.available()
    if why is not None:
        raise SystemExit(f"bench.pgstat: cannot start a private cluster: {why}")
    pc = cluster.PrivateCluster().start()
    with open(os.path.join(pc.data, "postgresql.conf"), "a") as fh:
        fh.write(SETTINGS)
    pc.restart()
    pc.admin("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return pc


def statements(dsn: str) -> list[dict[str, Any]]:
    """Every statement since the reset: the cluster runs only this round (its database is
    dropped by then, so they are not filtered by database; the bench's own few are listed too)."""
    conn = common.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("""
                SELECT s.toplevel, s.query, s.calls, s.total_exec_time, s.rows
                  FROM pg_stat_statements s
                 WHERE s.calls > 0 AND s.query NOT LIKE '%%pg_stat_statements%%'""")
            cols = [c.name for c in cur.description]
            return [dict(zip(cols, row)) for row in cur.fetchall()]
    finally:
        conn.close()


def short(query: str, width: int = 90) -> str:
    text = re.sub(r"\s+", " ", query).strip()
    return text if len(text) <= width else text[:width - 1] + "…"


def report(round_: dict[str, Any], rows: list[dict[str, Any]], top: int) -> None:
    jobs = round_["jobs"]
    top_level = sorted((r for r in rows if r["toplevel"]), key=lambda r: -r["total_exec_time"])
    nested = sorted((r for r in rows if not r["toplevel"]), key=lambda r: -r["total_exec_time"])
    total_top = sum(r["total_exec_time"] for r in top_level)
    common.print_table(
        f"pgstat: {round_['engines']} engine(s) x {jobs:,} no-op jobs, {round_['rate']:,.0f} exec/s; "
        f"server time of top-level statements {total_top * 1000 / jobs:,.0f} µs per execution; "
        f"PostgreSQL CPU {round_['pg_cpu_ms_per_1k']:.0f} µs, engine CPU {round_['engine_cpu_ms_per_1k']:.0f} µs "
        f"per execution",
        ["top-level statement", "calls/exec", "µs/exec", "µs/call", "rows/call"],
        [[short(r["query"]), f"{r['calls'] / jobs:.3f}", f"{r['total_exec_time'] * 1000 / jobs:.1f}",
          f"{r['total_exec_time'] * 1000 / r['calls']:.0f}", f"{r['rows'] / r['calls']:.1f}"]
         for r in top_level[:top]])
    common.print_table(
        "pgstat: statements inside the procedures, by server time per execution",
        ["nested statement", "calls/exec", "µs/exec", "µs/call", "rows/call"],
        [[short(r["query"]), f"{r['calls'] / jobs:.3f}", f"{r['total_exec_time'] * 1000 / jobs:.1f}",
          f"{r['total_exec_time'] * 1000 / r['calls']:.0f}", f"{r['rows'] / r['calls']:.1f}"]
         for r in nested[:top]],
        notes=["Server time = pg_stat_statements total_exec_time (wall time in the executor, locks and "
               "WAL flushes included), divided by the executions of the round. A procedure's own time "
               "includes its nested statements."])


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--engines", type=int, default=1)
    p.add_argument("--jobs", type=int, default=None, help="default 20000; quick 2000")
    p.add_argument("--cap", type=int, default=50)
    p.add_argument("--window", type=float, default=0.002)
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args(argv)
    jobs = args.jobs or (2000 if args.quick else 20000)
    pc = start_cluster()
    try:
        server = pc.dsn()
        tpl = common.BenchDatabase(server, "pgstpl")
        try:
            pc.admin("SELECT pg_stat_statements_reset()")
            round_ = throughput.run_round(tpl.name, server, args.engines, jobs, cap=args.cap, window=args.window)
            rows = statements(server)
        finally:
            tpl.drop()
    finally:
        pc.stop()
    report(round_, rows, args.top)
    return 0 if round_["exactly_once"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
