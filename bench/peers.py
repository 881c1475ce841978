"""Peers: the same number of no-op jobs through APScheduler 3.11 and procrastinate, next to mjsched.

* APScheduler 3.11: ``BackgroundScheduler`` with ``SQLAlchemyJobStore`` on the same
  PostgreSQL server (its own database) and its ``ThreadPoolExecutor`` (20 threads);
  M ``date``-trigger jobs due in the past (``misfire_grace_time=None``), stored
  before the clock starts; measured from ``start()`` until every job's
  EVENT_JOB_EXECUTED arrived and the job store is empty (APScheduler deletes a
  finished date job from the store: one transaction per job).
* procrastinate: a sync task, M jobs deferred with ``batch_defer`` before the clock
  starts, then ``app.run_worker(concurrency=20, wait=False)`` (the sync task runs in
  threads); measured from the first ``started`` to the last ``succeeded`` event in
  ``procrastinate_events``. In the full run also 4 worker processes at once.
* pgqueuer: M jobs enqueued in one batch (``Queries.enqueue`` with lists, durable
  schema, the default) before the clock starts, then one worker process running
  ``QueueManager.run(mode=drain, batch_size=10)`` on asyncpg; measured from ``run()``
  (its start-up included) to the last job's end, and also from the first job's end
  (the steady rate). In the full run also 4 worker processes at once.
* mjsched: the throughput bench's round (1 engine, and 4 engines), same M.

Each peer runs in its own subprocess (``python -m bench.peers --worker NAME``) and
in its own database; the exactly-once check counts executions per job.

    python -m bench.peers [--dsn DSN] [--quick] [--jobs M]
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

from . import common, throughput

_EXECUTED: collections.Counter[str] = collections.Counter()


def noop() -> None:
    return None


def missing_packages() -> list[str]:
    missing = []
    for module, package in (("apscheduler", "APScheduler>=3.11,<4"), ("sqlalchemy", "SQLAlchemy"),
                            ("procrastinate", "procrastinate"), ("pgqueuer", "pgqueuer"), ("asyncpg", "asyncpg")):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    if not missing:
        import apscheduler

        if not apscheduler.__version__.startswith("3."):
            missing.append(f"APScheduler 3.x (found {apscheduler.__version__})")
    return missing


# -- APScheduler ---------------------------------------------------------------------------------
def _sqlalchemy_url(dsn: str) -> str:
    return "postgresql+psycopg2://" + dsn.split("://", 1)[1]


def apscheduler_worker(dsn: str, jobs: int, threads: int) -> dict[str, Any]:
    import apscheduler
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    url = _sqlalchemy_url(dsn)
    defaults = {"misfire_grace_time": None, "coalesce": False, "max_instances": 1}
    # Setup (not timed): store the jobs through APScheduler itself, on a store whose
    # connections skip the commit flush, so the setup does not take minutes.
    setup_store = SQLAlchemyJobStore(url=url, engine_options={
        "connect_args": {"options": "-c synchronous_commit=off"}})
    setup = BackgroundScheduler(jobstores={"default": setup_store}, job_defaults=defaults, timezone="UTC")
    setup.start(paused=True)
    due = datetime.now(timezone.utc) - timedelta(seconds=5)
    for i in range(jobs):
        setup.add_job("bench.peers:noop", "date", run_date=due, id=f"job-{i}")
    setup.shutdown(wait=False)

    events: list[float] = []
    failures = collections.Counter()
    lock = threading.Lock()

    def listener(event: Any) -> None:
        with lock:
            if event.code == EVENT_JOB_EXECUTED:
                _EXECUTED[event.job_id] += 1
                events.append(time.perf_counter())
            else:
                failures[str(event.code)] += 1

    scheduler = BackgroundScheduler(jobstores={"default": SQLAlchemyJobStore(url=url)},
                                    executors={"default": ThreadPoolExecutor(threads)},
                                    job_defaults=defaults, timezone="UTC")
    scheduler.add_listener(listener, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED)
    conn = common.connect(dsn)
    cpu0 = time.process_time()
    start = time.perf_counter()
    scheduler.start()
    deadline = time.monotonic() + 600
    left = jobs
    with conn.cursor() as cur:
        while time.monotonic() < deadline:
            with lock:
                executed = len(events)
            if executed >= jobs:
                cur.execute("SELECT count(*) FROM apscheduler_jobs")
                left = cur.fetchone()[0]
                if left == 0:
                    break
            time.sleep(0.02)
    end = max(events[-1] if events else time.perf_counter(), time.perf_counter() if left == 0 else 0)
    cpu1 = time.process_time()
    scheduler.shutdown(wait=True)
    conn.close()
    counts = collections.Counter(_EXECUTED.values())
    return {"peer": f"APScheduler {apscheduler.__version__}", "config": f"SQLAlchemyJobStore, {threads} threads",
            "jobs": jobs, "elapsed_s": end - start, "executed": len(events),
            "exactly_once": len(_EXECUTED) == jobs and set(counts) == {1} and not failures,
            "failures": dict(failures), "cpu_s": cpu1 - cpu0, **common.proc_status()}


# -- procrastinate ----------------------------------------------------------------------------------
def _procrastinate_app(dsn: str) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="bench_noop", queue="bench")
    def bench_noop() -> None:
        return None

    app.bench_noop = bench_noop  # type: ignore[attr-defined]
    return app


def procrastinate_setup(dsn: str, jobs: int) -> None:
    app = _procrastinate_app(dsn)
    with app.open():
        app.schema_manager.apply_schema()
        chunk = 5000
        for lo in range(0, jobs, chunk):
            app.bench_noop.batch_defer(*[{} for _ in range(min(chunk, jobs - lo))])


def procrastinate_worker(dsn: str, concurrency: int) -> dict[str, Any]:
    import logging

    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    app = _procrastinate_app(dsn)
    cpu0 = time.process_time()
    start = time.perf_counter()
    app.run_worker(queues=["bench"], concurrency=concurrency, wait=False, install_signal_handlers=False,
                   listen_notify=False, delete_jobs="never")
    return {"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu0, **common.proc_status()}


def procrastinate_result(dsn: str, jobs: int, processes: int, concurrency: int,
                         workers: list[dict[str, Any]]) -> dict[str, Any]:
    import procrastinate

    conn = common.connect(dsn)
    with conn.cursor() as cur:
        cur.execute("""SELECT min(at) FILTER (WHERE type = 'started'), max(at) FILTER (WHERE type = 'succeeded'),
                              count(*) FILTER (WHERE type = 'started'), count(*) FILTER (WHERE type = 'succeeded')
                         FROM procrastinate_events""")
        first, last, started, succeeded = cur.fetchone()
        cur.execute("SELECT count(*) FILTER (WHERE status = 'succeeded' AND attempts = 1), count(*) "
                    "FROM procrastinate_jobs")
        once, total = cur.fetchone()
    conn.close()
    return {"peer": f"procrastinate {procrastinate.__version__}",
            "config": f"{processes} worker process{'es' if processes > 1 else ''}, concurrency {concurrency}",
            "jobs": jobs, "elapsed_s": (last - first).total_seconds() if first and last else float("nan"),
            "executed": succeeded, "exactly_once": once == jobs == total == started == succeeded,
            "cpu_s": sum(w.get("cpu_s", 0.0) for w in workers),
            "VmHWM": max((w.get("VmHWM", 0) for w in workers), default=0)}


# -- pgqueuer ---------------------------------------------------------------------------------------
PGQ_ENTRYPOINT = "bench_noop"


def pgqueuer_setup(dsn: str, jobs: int) -> None:
    import asyncio

    async def go() -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries

        conn = await asyncpg.connect(dsn)
        try:
            queries = Queries(AsyncpgDriver(conn))
            await queries.install()
            await queries.enqueue([PGQ_ENTRYPOINT] * jobs, [None] * jobs, [0] * jobs)
        finally:
            await conn.close()
    asyncio.run(go())


def pgqueuer_worker(dsn: str, batch: int) -> dict[str, Any]:
    import asyncio
    import logging

    logging.getLogger("pgqueuer").setLevel(logging.WARNING)
    ends: list[float] = []
    executed: collections.Counter[str] = collections.Counter()

    async def go() -> tuple[float, float]:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries, QueueManager
        from pgqueuer.types import QueueExecutionMode

        conn = await asyncpg.connect(dsn)
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint(PGQ_ENTRYPOINT)
        async def bench_noop(job: Any) -> None:
            executed[str(job.id)] += 1
            ends.append(time.perf_counter())

        start = time.perf_counter()
        await qm.run(batch_size=batch, mode=QueueExecutionMode.drain, dequeue_timeout=timedelta(seconds=1))
        await conn.close()
        return start, time.perf_counter()

    cpu0 = time.process_time()
    start, stopped = asyncio.run(go())
    return {"start": start, "first_end": ends[0] if ends else None, "last_end": ends[-1] if ends else None,
            "stopped": stopped, "executed": len(ends), "ids": dict(executed),
            "cpu_s": time.process_time() - cpu0, **common.proc_status()}


def pgqueuer_result(dsn: str, jobs: int, processes: int, batch: int, workers: list[dict[str, Any]]) -> dict[str, Any]:
    import pgqueuer

    ids: collections.Counter[str] = collections.Counter()
    for w in workers:
        ids.update(w["ids"])
    conn = common.connect(dsn)
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pgqueuer")
        left = cur.fetchone()[0]
    conn.close()
    # Each worker has its own perf_counter origin; one process: its start-up is counted.
    one = workers[0] if processes == 1 else None
    elapsed = (one["last_end"] - one["start"]) if one else max(w["last_end"] - w["start"] for w in workers
                                                              if w["last_end"] is not None)
    steady = (one["last_end"] - one["first_end"]) if one and one["executed"] > 1 else None
    return {"peer": f"pgqueuer {pgqueuer.__version__}",
            "config": f"{processes} worker process{'es' if processes > 1 else ''}, batch {batch}, asyncpg",
            "jobs": jobs, "elapsed_s": elapsed, "executed": sum(ids.values()),
            "steady_rate": (one["executed"] - 1) / steady if steady else None,
            "exactly_once": len(ids) == jobs and set(ids.values()) == {1} and left == 0,
            "cpu_s": sum(w.get("cpu_s", 0.0) for w in workers),
            "VmHWM": max((w.get("VmHWM", 0) for w in workers), default=0)}


def measure_pgqueuer(server_dsn: str, jobs: int, processes: int = 1, batch: int = 10) -> dict[str, Any]:
    with common.BenchDatabase(server_dsn, "pgq", schema=False) as db:
        common.log_progress(f"peers: pgqueuer, {processes} worker process(es), {jobs} jobs")
        _child(["--worker", "pgqueuer-setup", "--dsn", db.dsn, "--jobs", str(jobs)])
        procs = [_spawn(["--worker", "pgqueuer", "--dsn", db.dsn, "--batch", str(batch)]) for _ in range(processes)]
        return pgqueuer_result(db.dsn, jobs, processes, batch, _results("pgqueuer", procs))


# -- driver -------------------------------------------------------------------------------------
def _child(args: Sequence[str], timeout: float = 900) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = common.REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, "-m", "bench.peers", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=common.REPO_ROOT, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"peer worker {args[:2]} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def _spawn(args: Sequence[str]) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = common.REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen([sys.executable, "-m", "bench.peers", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=common.REPO_ROOT, env=env)


def _results(peer: str, procs: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    """The RESULT line of each worker process (bounded wait); a worker without one is an error."""
    workers = []
    for p in procs:
        out, err = p.communicate(timeout=900)
        found = [json.loads(x[len("RESULT "):]) for x in out.splitlines() if x.startswith("RESULT ")]
        if not found:
            raise RuntimeError(f"{peer} worker failed (exit {p.returncode}):\n{err[-3000:]}")
        workers.extend(found)
    return workers


def measure_apscheduler(server_dsn: str, jobs: int, threads: int = 20) -> dict[str, Any]:
    with common.BenchDatabase(server_dsn, "aps", schema=False) as db:
        common.log_progress(f"peers: APScheduler, {jobs} jobs")
        return _child(["--worker", "apscheduler", "--dsn", db.dsn, "--jobs", str(jobs), "--threads", str(threads)])


def measure_procrastinate(server_dsn: str, jobs: int, processes: int = 1, concurrency: int = 20) -> dict[str, Any]:
    with common.BenchDatabase(server_dsn, "pcr", schema=False) as db:
        common.log_progress(f"peers: procrastinate, {processes} worker process(es), {jobs} jobs")
        _child(["--worker", "procrastinate-setup", "--dsn", db.dsn, "--jobs", str(jobs)])
        procs = [_spawn(["--worker", "procrastinate", "--dsn", db.dsn, "--concurrency", str(concurrency)])
                 for _ in range(processes)]
        return procrastinate_result(db.dsn, jobs, processes, concurrency, _results("procrastinate", procs))


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=None, help="jobs per system (default 5000; quick 300)")
    p.add_argument("--worker", help=argparse_hidden())
    p.add_argument("--threads", type=int, default=20)
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--batch", type=int, default=10)
    args = p.parse_args(argv)
    if args.worker == "apscheduler":
        print("RESULT " + json.dumps(apscheduler_worker(args.dsn, args.jobs, args.threads)), flush=True)
        return 0
    if args.worker == "procrastinate-setup":
        procrastinate_setup(args.dsn, args.jobs)
        print("RESULT {}", flush=True)
        return 0
    if args.worker == "procrastinate":
        print("RESULT " + json.dumps(procrastinate_worker(args.dsn, args.concurrency)), flush=True)
        return 0
    if args.worker == "pgqueuer-setup":
        pgqueuer_setup(args.dsn, args.jobs)
        print("RESULT {}", flush=True)
        return 0
    if args.worker == "pgqueuer":
        print("RESULT " + json.dumps(pgqueuer_worker(args.dsn, args.batch)), flush=True)
        return 0

    missing = missing_packages()
    if missing:
        print(f"peers: skipped, not installed: {', '.join(missing)} "
              "(pip install 'APScheduler>=3.11,<4' SQLAlchemy procrastinate pgqueuer asyncpg, or the 'bench' extra)")
        return 0
    jobs = args.jobs or (300 if args.quick else 5000)
    peers = [measure_apscheduler(args.dsn, jobs), measure_procrastinate(args.dsn, jobs), measure_pgqueuer(args.dsn, jobs)]
    if not args.quick:
        peers.append(measure_procrastinate(args.dsn, jobs, processes=4))
        peers.append(measure_pgqueuer(args.dsn, jobs, processes=4))
    common.log_progress(f"peers: mjsched, 1 and 4 engines, {jobs} jobs")
    ours, _ = throughput.measure(args.dsn, [1, 4], jobs)
    one, four = ours[0], ours[1]
    rows = []
    for r in peers:
        rate = r["jobs"] / r["elapsed_s"] if r["elapsed_s"] and r["elapsed_s"] == r["elapsed_s"] else None
        r["rate"] = rate
        rows.append([r["peer"], r["config"], r["jobs"], rate, r["elapsed_s"],
                     r["cpu_s"] / r["jobs"] * 1e6, r.get("VmHWM", 0) / 1024,
                     "yes" if r["exactly_once"] else "NO",
                     f"{common.ratio(one['rate'], rate):.2f}" if rate else "-",
                     f"{common.ratio(four['rate'], rate):.2f}" if rate else "-"])
    for r, label in ((one, "1 engine process"), (four, "4 engine processes")):
        rows.append(["mjsched", f"{label}, cap 50", r["jobs"], r["rate"], r["elapsed_s"],
                     r["engine_cpu_ms_per_1k"], r["rss_mb"], "yes" if r["exactly_once"] else "NO", "-", "-"])
    common.print_table(
        "peers: the same no-op jobs on the same PostgreSQL",
        ["system", "configuration", "jobs", "exec/s", "seconds", "CPU ms/1k exec", "peak RSS MB", "exactly once",
         "mjsched 1 engine / this", "mjsched 4 engines / this"], rows,
        notes=["Target: mjsched >= 2x each peer. CPU = the scheduler processes' own CPU (not PostgreSQL's)."]
        + [f"{r['peer']} ({r['config']}): {r['steady_rate']:,.0f} jobs/s from its first finished job on "
           "(without its start-up)" for r in peers if r.get("steady_rate")])
    return 0


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    raise SystemExit(main())
