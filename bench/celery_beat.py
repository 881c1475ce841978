"""Celery beat (one process, then two) vs three mjsched engines on the same beat_schedule.

    python -m bench.celery_beat [--seconds 30] [--entries 10] [--interval 2] [--quick]

Needs Redis (127.0.0.1:6379, the broker and the counters) and PostgreSQL (--dsn). One Celery
worker executes everything; each execution is recorded in Redis (entry, wall time, task id).
Three scenarios, each for --seconds:

* ``beat``: one ``celery beat`` process; killed with SIGKILL half-way (its ticks stop).
* ``two beats``: what running a second beat for failover does (half the time only).
* ``mjsched``: the same schedule imported with ``import_beat_schedule`` into three
  ``mjsched run`` engines; one is killed with SIGKILL half-way (the others go on).

Printed: ticks delivered before and after the kill against the schedule's ticks, duplicates
(two executions of one entry closer than half an interval; for mjsched also task ids seen
twice) and the longest gap of an entry after the kill. Nothing is asserted.

This module is also the Celery app the beat, the worker and the engines import
(``bench.celery_beat:app``); the scenario and the Redis key prefix come from the environment.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from celery import Celery

BROKER = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/12")
COUNTERS = os.environ.get("BENCH_CELERY_COUNTERS", "redis://127.0.0.1:6379/11")
QUEUE = os.environ.get("BENCH_CELERY_QUEUE", "mjsched-bench")
TAG = os.environ.get("BENCH_CELERY_TAG", "mjsched-bench")
SCENARIO = os.environ.get("BENCH_CELERY_SCENARIO", "beat")
ENTRIES = int(os.environ.get("BENCH_CELERY_ENTRIES", "10"))
INTERVAL = int(os.environ.get("BENCH_CELERY_INTERVAL", "2"))
ROOT = Path(__file__).resolve().parents[1]


def beat_schedule(scenario: str) -> dict[str, Any]:
    return {f"tick-{i:02d}": {"task": "bench.tick", "schedule": timedelta(seconds=INTERVAL),
                              "args": [f"tick-{i:02d}", scenario]} for i in range(ENTRIES)}


app = Celery("mjsched_bench_beat", broker=BROKER)
app.conf.update(task_default_queue=QUEUE, timezone="UTC", beat_schedule=beat_schedule(SCENARIO),
                worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)
_redis: Any = None


@app.task(bind=True, name="bench.tick")
def tick(self: Any, entry: str, scenario: str) -> None:
    global _redis
    if _redis is None:
        import redis

        _redis = redis.Redis.from_url(COUNTERS, socket_connect_timeout=5, socket_timeout=5)
    _redis.rpush(f"{TAG}:{scenario}", json.dumps([entry, time.time(), self.request.id]))


# -- the bench ------------------------------------------------------------------------------------
def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update({"BENCH_CELERY_BROKER": BROKER, "BENCH_CELERY_COUNTERS": COUNTERS, "BENCH_CELERY_QUEUE": QUEUE,
                "BENCH_CELERY_TAG": TAG, "BENCH_CELERY_ENTRIES": str(ENTRIES),
                "BENCH_CELERY_INTERVAL": str(INTERVAL)})
    env.update(extra)
    return env


def _spawn(cmd: list[str], log: Path, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, cwd=ROOT, env=_env(**env), stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def _kill(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _wait_for_text(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise SystemExit(f"{path.name}: no {text!r} within {timeout:g}s")


def _beat(workdir: Path, name: str, scenario: str) -> subprocess.Popen[bytes]:
    return _spawn([sys.executable, "-m", "celery", "-A", "bench.celery_beat", "beat", "--max-interval", "1",
                   "--schedule", str(workdir / f"{name}.schedule"), "--loglevel=INFO"], workdir / f"{name}.log",
                  BENCH_CELERY_SCENARIO=scenario)


def _analyse(records: list[list[Any]], start: float, kill_at: float, end: float, ids: bool) -> dict[str, Any]:
    before = [r for r in records if start <= r[1] < kill_at]
    after = [r for r in records if kill_at <= r[1] < end]
    by_entry: dict[str, list[float]] = {}
    for entry, at, _ in records:
        by_entry.setdefault(entry, []).append(at)
    close = 0
    longest_gap_after = 0.0
    for times in by_entry.values():
        times.sort()
        close += sum(1 for a, b in zip(times, times[1:]) if b - a < INTERVAL / 2)
        later = [kill_at] + [t for t in times if t >= kill_at] + [end]
        longest_gap_after = max(longest_gap_after, max(b - a for a, b in zip(later, later[1:])))
    row = {"before": len(before), "after": len(after), "close": close, "gap_after": longest_gap_after}
    if ids:
        seen = [r[2] for r in records]
        row["same_id_twice"] = len(seen) - len(set(seen))
    return row


def main(argv: list[str] | None = None) -> int:
    from bench.common import BenchDatabase, log_progress, parser, print_table

    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0, help="length of each scenario (default 30)")
    args = p.parse_args(argv)
    seconds = 16.0 if args.quick else args.seconds
    import redis

    counters = redis.Redis.from_url(COUNTERS, socket_connect_timeout=5, socket_timeout=5)
    counters.ping()
    workdir = Path(tempfile.mkdtemp(prefix="mjsched-bench-celery-"))
    worker = _spawn([sys.executable, "-m", "celery", "-A", "bench.celery_beat", "worker", "-Q", QUEUE, "-c", "4",
                     "--pool=threads", "--without-gossip", "--without-mingle", "--loglevel=INFO"],
                    workdir / "worker.log")
    results: dict[str, dict[str, Any]] = {}
    try:
        _wait_for_text(workdir / "worker.log", " ready.", 60)

        # 1. one beat, killed half-way
        log_progress(f"celery beat: one process for {seconds:g}s, SIGKILL at {seconds / 2:g}s")
        beat = _beat(workdir, "beat", "beat1")
        _wait_for_text(workdir / "beat.log", "beat: Starting", 60)
        start = time.time()
        time.sleep(seconds / 2)
        kill_at = time.time()
        _kill(beat)
        time.sleep(seconds / 2)
        end = time.time()
        time.sleep(2)
        results["celery beat (1 process)"] = _analyse(_records(counters, "beat1"), start, kill_at, end, False)

        # 2. two beats (a failover attempt): every tick twice
        log_progress(f"celery beat: two processes for {seconds / 2:g}s")
        beats = [_beat(workdir, f"beat2-{i}", "beat2") for i in (1, 2)]
        for i in (1, 2):
            _wait_for_text(workdir / f"beat2-{i}.log", "beat: Starting", 60)
        start = time.time()
        time.sleep(seconds / 2)
        end = time.time()
        for b in beats:
            _kill(b)
        time.sleep(2)
        results["celery beat (2 processes)"] = _analyse(_records(counters, "beat2"), start, end, end, False)

        # 3. three mjsched engines, one killed half-way
        log_progress(f"mjsched: three engines for {seconds:g}s, SIGKILL of one at {seconds / 2:g}s")
        import mjsched
        from mjsched.contrib.celery import import_beat_schedule

        with BenchDatabase(args.dsn, "celery") as db:
            app.conf.beat_schedule = beat_schedule("mjsched")
            admin = mjsched.SchedulingEngine(db.dsn)
            imported = import_beat_schedule(app, admin, app_path="bench.celery_beat:app", status="Paused")
            log_progress(f"imported: {len(imported.created)} created, refused {imported.refused}")
            engines = [_spawn([sys.executable, "-m", "mjsched", "--dsn", db.dsn, "run", "--lease", "5",
                               "--max-poll-interval", "0.5", "--instance-name", f"e{i}"], workdir / f"e{i}.log")
                       for i in (1, 2, 3)]
            time.sleep(3)
            for job in admin.list_jobs():
                admin.resume_job(job.id)
            start = time.time()
            time.sleep(seconds / 2)
            kill_at = time.time()
            _kill(engines[0])
            time.sleep(seconds / 2)
            end = time.time()
            for job in admin.list_jobs():
                admin.pause_job(job.id)
            for e in engines[1:]:
                _kill(e, signal.SIGTERM)
            admin.close()
            time.sleep(2)
            results["mjsched (3 engines)"] = _analyse(_records(counters, "mjsched"), start, kill_at, end, True)
    finally:
        _kill(worker)

    half = ENTRIES * (seconds / 2) / INTERVAL
    rows = []
    for name, r in results.items():
        two = name.startswith("celery beat (2")
        rows.append([name, f"{r['before']} / {half:.0f}", "-" if two else f"{r['after']} / {half:.0f}",
                     r["close"], r.get("same_id_twice", "-"), "-" if two else f"{r['gap_after']:.1f}"])
    print_table(f"celery beat vs mjsched: {ENTRIES} entries every {INTERVAL}s, {seconds:g}s per scenario "
                f"(kill -9 at {seconds / 2:g}s)",
                ["scheduler", "ticks delivered before kill / scheduled", "after kill / scheduled",
                 f"duplicates (<{INTERVAL / 2:g}s apart)", "same task id twice", "longest gap after kill (s)"],
                rows,
                notes=["'two beats' ran for the first half only and was not killed: its row shows what a second "
                       "beat for failover does (every tick sent twice).",
                       "A killed mjsched engine's jobs are taken over when their lease (5 s here) runs out only if "
                       "it held them at that moment; the others go on at once."])
    print(json.dumps({"results": results, "seconds": seconds, "entries": ENTRIES, "interval": INTERVAL}))
    for key in counters.scan_iter(f"{TAG}:*"):
        counters.delete(key)
    return 0


def _records(counters: Any, scenario: str) -> list[list[Any]]:
    return [json.loads(r) for r in counters.lrange(f"{TAG}:{scenario}", 0, -1)]


if __name__ == "__main__":
    TAG = f"mjsched-bench-{uuid.uuid4().hex[:8]}"
    os.environ["BENCH_CELERY_TAG"] = TAG
    sys.exit(main())
