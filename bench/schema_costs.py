"""Schema costs: what each of the schema's rules costs an execution, priced by removing it.

The pgbench "procedures" script of ``bench.ceiling`` (one engine poll's SQL: sweep, claim 50,
complete 50) runs with one client against fresh databases that differ by one thing: the schema
as installed, and copies without the CHECK constraints of ``scheduled_job``, without every CHECK
constraint, without three history indexes of ``scheduled_job_run``, without the run -> job
foreign key, or with ``synchronous_commit`` off. Rounds alternate the variants (the machine
drifts); the median per variant is printed with the microseconds it saves. None of these is a
proposal to drop the rule: it says what a cheaper form of it could win.

Not in ``bench/run.sh`` (about 4 minutes); figures in docs/guide/performance.md.

    python -m bench.schema_costs [--dsn DSN] [--rounds 3] [--seconds 8] [--jobs 20000]
"""
from __future__ import annotations

import statistics
from typing import Sequence

from . import ceiling, common

_DROP_CONSTRAINTS = """DO $$
DECLARE c record;
BEGIN
    FOR c IN SELECT conrelid::regclass AS tbl, conname FROM pg_constraint
              WHERE connamespace = 'mjsched'::regnamespace AND contype = '{kind}' {only} LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.tbl, c.conname);
    END LOOP;
END $$"""

VARIANTS: dict[str, list[str]] = {
    "as installed": [],
    "without the CHECK constraints of scheduled_job": [
        _DROP_CONSTRAINTS.format(kind="c", only="AND conrelid = 'mjsched.scheduled_job'::regclass")],
    "without every CHECK constraint": [_DROP_CONSTRAINTS.format(kind="c", only="")],
    "without 3 history indexes (status_started, job_started, job_completed)": [
        "DROP INDEX mjsched.ix_scheduled_job_run_status_started",
        "DROP INDEX mjsched.ix_scheduled_job_run_job_started",
        "DROP INDEX mjsched.ix_scheduled_job_run_job_completed"],
    "without the run -> job foreign key": [
        _DROP_CONSTRAINTS.format(kind="f", only="AND conrelid = 'mjsched.scheduled_job_run'::regclass")],
    "synchronous_commit off (for scale only)": [
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET synchronous_commit = off', current_database()); END $$"],
}


def price(server_dsn: str, template: str, statements: list[str], *, jobs: int, seconds: int) -> float:
    """Executions/s of the procedures script, one client, on a fresh copy changed by ``statements``."""
    exe = ceiling.pgbench_path()
    if exe is None:
        raise SystemExit("bench.schema_costs: pgbench not found")
    script, per_run = ceiling.scripts()["procedures"]
    with common.BenchDatabase(server_dsn, "cost", template=template) as db:
        conn = common.connect(db.dsn)
        try:
            common.insert_jobs(conn, jobs, next_run_at="now() - interval '1 day' + g * interval '1 microsecond'")
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
                cur.execute("VACUUM ANALYZE mjsched.scheduled_job")
        finally:
            conn.close()
        r = ceiling.run_pgbench(exe, db.dsn, script, clients=1, seconds=seconds)
    if "tps" not in r:
        raise SystemExit(f"bench.schema_costs: pgbench failed: {r.get('error')}")
    return float(r["tps"]) * per_run


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 3; quick 1)")
    p.add_argument("--seconds", type=int, default=None, help="pgbench seconds per variant (default 8; quick 1)")
    p.add_argument("--jobs", type=int, default=None, help="due jobs per database (default 20000; quick 2000)")
    args = p.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    seconds = args.seconds or (1 if args.quick else 8)
    jobs = args.jobs or (2000 if args.quick else 20000)
    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with common.BenchDatabase(args.dsn, "costtpl") as template:
        for n in range(rounds):
            for name, statements in VARIANTS.items():
                rate = price(args.dsn, template.name, statements, jobs=jobs, seconds=seconds)
                rates[name].append(rate)
                common.log_progress(f"schema_costs: round {n + 1}, {name}: {1e6 / rate:.1f} us an execution")
    base = 1e6 / statistics.median(rates["as installed"])
    rows = []
    for name, values in rates.items():
        us = [1e6 / v for v in values]
        cost = statistics.median(us)
        rows.append([name, f"{cost:.1f}", f"{min(us):.1f}-{max(us):.1f}",
                     "-" if name == "as installed" else f"{base - cost:.1f}"])
    common.print_table(
        f"schema_costs: the procedures script, 1 client, {seconds}s, {rounds} alternating round(s)",
        ["schema variant", "us an execution (median)", "range", "saved us"], rows,
        notes=["Wall time per execution of one engine poll's SQL (sweep, claim 50, complete 50) with one "
               "pgbench client on an otherwise idle server, each variant on a fresh copy of the schema. "
               "Each removed rule is kept in the schema on purpose: this prices it, it does not drop it."])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
