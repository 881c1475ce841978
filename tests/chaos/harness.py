"""Engine processes, job sets and the invariant checks shared by the chaos tests."""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from mjsched.cron import CronSchedule
from tests.support.pg import Sql, wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EVERY_SECOND = "* * * * * *"
TICK_TOLERANCE = timedelta(milliseconds=250)   # engine's estimate of the db clock vs the db clock


class Worker:
    """``python -m tests.chaos.worker`` (one SchedulingEngine) as a child process."""

    def __init__(self, dsn: str, instance: str, workdir: str, env: dict[str, str] | None = None,
                 **options: Any) -> None:
        """``env``: the process's environment (default: this one's); the repository is put on its path."""
        self.instance = instance
        self.workdir = workdir
        args = [sys.executable, "-m", "tests.chaos.worker", "--dsn", dsn, "--instance", instance,
                "--workdir", workdir]
        for key, value in options.items():
            if value is not None:
                args += [f"--{key.replace('_', '-')}", str(value)]
        env = dict(os.environ if env is None else env)
        env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                     stdout=open(os.path.join(workdir, f"{instance}.out"), "wb"),
                                     stderr=subprocess.STDOUT)
        self.stats: dict[str, Any] | None = None
        self._terminated = False

    def terminate(self) -> None:
        """Ask for a graceful stop, once (a second SIGTERM during interpreter exit would kill it)."""
        if not self._terminated and self.proc.poll() is None:
            self._terminated = True
            self.proc.send_signal(signal.SIGTERM)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 30.0) -> "Worker":
        path = os.path.join(self.workdir, f"{self.instance}.ready")
        wait_for(lambda: os.path.exists(path) or self.proc.poll() is not None, timeout=timeout,
                 message=f"engine {self.instance} to start")
        if self.proc.poll() is not None:
            raise AssertionError(f"engine {self.instance} exited with {self.proc.returncode}: {self.tail()}")
        return self

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        """SIGTERM (graceful drain), wait, return the worker's stats."""
        self.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                stacks = self.stacks() if self.proc.poll() is None else "(it exited meanwhile)"
            finally:
                self.proc.kill()
                self.proc.wait()
            raise AssertionError(f"engine {self.instance} did not stop within {timeout}s; its threads:\n{stacks}\n"
                                 f"its output:\n{self.tail()}") from None
        assert self.proc.returncode == 0, f"engine {self.instance} exited {self.proc.returncode}: {self.tail()}"
        with open(os.path.join(self.workdir, f"{self.instance}.stats.json")) as fh:
            self.stats = json.load(fh)
        return self.stats

    def stacks(self, timeout: float = 5.0) -> str:
        """Every thread's stack of the running process (tests.chaos.worker dumps them on SIGUSR1)."""
        out = os.path.join(self.workdir, f"{self.instance}.out")
        size = os.path.getsize(out)
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        grown = 0
        while time.monotonic() < deadline:   # the dump is written at once; wait until it stops growing
            time.sleep(0.2)
            now = os.path.getsize(out)
            if now > size and now == grown:
                break
            grown = now
        with open(out, errors="replace") as fh:
            fh.seek(size)
            return fh.read()

    def kill9(self) -> float:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        return time.time()

    def tail(self, lines: int = 30) -> str:
        text = ""
        for suffix in (".out", ".log"):
            try:
                with open(os.path.join(self.workdir, self.instance + suffix), errors="replace") as fh:
                    text += "".join(fh.readlines()[-lines:])
            except OSError:
                pass
        return text


def start_workers(dsn: str, workdir: str, count: int, prefix: str = "engine", **options: Any) -> list[Worker]:
    workers = [Worker(dsn, f"{prefix}-{i}", workdir, **options) for i in range(count)]
    for worker in workers:
        worker.wait_ready()
    return workers


def stop_all(workers: list[Worker], timeout: float = 30.0) -> list[dict[str, Any]]:
    for worker in workers:
        worker.terminate()
    return [w.stop(timeout) for w in workers if w.proc.returncode in (None, 0)]


def create_counter_jobs(engine: Any, workdir: str, count: int, *, prefix: str = "job", cron: str = EVERY_SECOND,
                        **fields: Any) -> dict[str, str]:
    """``count`` Skip-mode jobs running ``jobs.bump``; returns key -> job id."""
    out = {}
    for i in range(count):
        key = f"{prefix}{i:03d}"
        out[key] = engine.create_job(name=key, driver="python", cron=cron,
                                     configuration={"callable": "tests.chaos.jobs:bump",
                                                    "kwargs": {"dir": workdir, "key": key}}, **fields)
    return out


@dataclass
class Execution:
    run_id: str
    start: float
    end: float
    pid: int
    instance: str


def executions(workdir: str, key: str) -> list[Execution]:
    try:
        with open(os.path.join(workdir, f"{key}.log")) as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        run_id, start, end, pid, instance = line.split()[:5]
        out.append(Execution(run_id, float(start), float(end), int(pid), instance))
    return out


def counter(workdir: str, key: str) -> int:
    try:
        with open(os.path.join(workdir, f"{key}.count")) as fh:
            return int(fh.read() or 0)
    except FileNotFoundError:
        return 0


@dataclass
class Figures:
    jobs: int = 0
    runs: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    executions: int = 0
    counter_total: int = 0
    ticks_skipped_explained: int = 0
    ticks_held_by_lost_claims: int = 0
    lateness_ms: dict[str, float] = field(default_factory=dict)
    unfinished_allowed: int = 0
    abandoned: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"jobs={self.jobs} runs={self.runs} statuses={self.by_status} executions={self.executions} "
                f"counter={self.counter_total} skipped_ticks_explained={self.ticks_skipped_explained} "
                f"(held_by_lost_claims={self.ticks_held_by_lost_claims}) "
                f"lateness_ms={self.lateness_ms} unfinished_allowed={self.unfinished_allowed}"
                + (f" abandoned(first 3)={self.abandoned[:3]}" if self.abandoned else ""))


def check_invariants(sql: Sql, workdir: str, jobs: dict[str, str], *, killed_instances: frozenset[str] = frozenset(),
                     cron: str = EVERY_SECOND, holds: list[dict[str, Any]] | None = None,
                     hold_seconds: float = 0.0) -> Figures:
    """The invariants of chaos test (1), after every engine has stopped.

    * no (job, tick) has two runs (the UNIQUE index; checked anyway);
    * every execution of a job body has a distinct run id and is that run's only
      execution; the set of executed runs equals the set of Completed runs, except
      runs of an engine that was killed mid-run (those must be Abandoned);
    * the unsynchronised counter equals the number of executions (no lost update:
      mutual exclusion held) and no two executions of one job overlap in time;
    * every tick that has no run is explained by the Skip rule: it came while the
      previous run of the job still held it (before that run's completion), or, under
      injected faults, while a claim whose reply was lost (or a failed lock release)
      held the job's lock for at most ``hold_seconds`` (lease + one poll): such a claim
      leaves no run row when its tick had one already.
    """
    figures = Figures(jobs=len(jobs))
    dupes = sql.rows("""SELECT scheduled_job_id, scheduled_for, count(*) AS n FROM mjsched.scheduled_job_run
                         WHERE scheduled_for IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1""")
    assert dupes == [], f"a tick has more than one run: {dupes[:5]}"
    rows = sql.rows("""SELECT id::text, scheduled_job_id::text AS job_id, scheduled_for, status, started_at,
                              completed_at, executed_by_instance, error_message
                         FROM mjsched.scheduled_job_run""")
    figures.runs = len(rows)
    for r in rows:
        figures.by_status[r["status"]] = figures.by_status.get(r["status"], 0) + 1
        if r["status"] == "Abandoned":
            figures.abandoned.append(f"{r['executed_by_instance']} {r['scheduled_for']:%H:%M:%S} "
                                     f"{r['started_at']:%H:%M:%S.%f}-{r['completed_at']:%H:%M:%S.%f}: "
                                     f"{r['error_message']}")
    assert figures.by_status.get("Running", 0) == 0 and figures.by_status.get("Queued", 0) == 0, figures.by_status
    by_job: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_job.setdefault(r["job_id"], []).append(r)
    schedule = CronSchedule.parse(cron, "UTC")
    held: dict[str, list[float]] = {}
    for hold in holds or []:
        held.setdefault(hold["job_id"], []).append(hold["at"])
    lateness: list[float] = []
    for key, job_id in jobs.items():
        runs = {r["id"]: r for r in by_job.get(job_id, [])}
        done = executions(workdir, key)
        ids = [e.run_id for e in done]
        assert len(ids) == len(set(ids)), f"{key}: a run was executed twice: {sorted(ids)}"
        completed = {i for i, r in runs.items() if r["status"] == "Completed"}
        assert completed <= set(ids), f"{key}: Completed but never executed: {completed - set(ids)}"
        unfinished = set(ids) - completed
        for run_id in unfinished:
            run = runs.get(run_id)
            assert run is not None, f"{key}: executed run {run_id} has no row"
            assert run["executed_by_instance"] in killed_instances and run["status"] == "Abandoned", \
                f"{key}: run {run_id} executed but ended {run['status']} on {run['executed_by_instance']} " \
                "(a completion was lost)"
        figures.unfinished_allowed += len(unfinished)
        figures.executions += len(ids)
        count = counter(workdir, key)
        figures.counter_total += count
        assert count == len(ids), f"{key}: unsynchronised counter {count} != {len(ids)} executions (lost update)"
        ordered = sorted(done, key=lambda e: e.start)
        for a, b in zip(ordered, ordered[1:], strict=False):
            assert b.start >= a.end, f"{key}: executions overlap: {a} and {b}"
        served = sorted((r for r in runs.values() if r["scheduled_for"] is not None), key=lambda r: r["scheduled_for"])
        for a, b in zip(served, served[1:], strict=False):
            tick = schedule.next_after(a["scheduled_for"])
            while tick < b["scheduled_for"]:
                busy = a["completed_at"] is not None and tick <= a["completed_at"] + TICK_TOLERANCE
                locked = any(at - 0.5 <= tick.timestamp() <= at + hold_seconds for at in held.get(job_id, []))
                assert busy or locked, \
                    f"{key}: tick {tick} has no run, but the run of {a['scheduled_for']} ended " \
                    f"{a['completed_at']} ({a['status']}) before it, and no lost claim held the job"
                figures.ticks_skipped_explained += 1
                figures.ticks_held_by_lost_claims += 0 if busy else 1
                tick = schedule.next_after(tick)
        lateness += [(r["started_at"] - r["scheduled_for"]).total_seconds() * 1000 for r in runs.values()
                     if r["status"] == "Completed" and r["scheduled_for"] is not None]
    if lateness:
        lateness.sort()
        figures.lateness_ms = {"p50": round(statistics.median(lateness), 1),
                               "p99": round(lateness[int(len(lateness) * 0.99) - 1], 1),
                               "max": round(lateness[-1], 1)}
    return figures


def fault_totals(stats: list[dict[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for s in stats:
        for key, value in (s.get("faults") or {}).items():
            kind = key.split(":", 1)[0]
            total[kind] = total.get(kind, 0) + value
    return total


def report(name: str, **figures: Any) -> None:
    """Print the figures (pytest -s, or the captured output of a failure) and keep them in a file."""
    line = f"[chaos] {name}: " + " ".join(f"{k}={v}" for k, v in figures.items())
    print(line)
    path = os.environ.get("MJSCHED_CHAOS_REPORT")
    if path:
        with open(path, "a") as fh:
            fh.write(line + "\n")

