"""Rolling upgrade: an engine of the previous release keeps working while this release installs.

The previous release (``PREVIOUS``) is extracted with ``git archive`` and run in its own
process next to an engine of this checkout, on one fresh PostgreSQL database, for 30 s
of per-second jobs. The old engine installs its schema, creates the jobs and polls; 8 s
in, the new engine runs ``install()`` (the new schema, re-applied while the old engine
polls) and polls too. Every execution is recorded in a side table by a tiny driver
target (upgrade_probe.py), so ticks and overlaps are checked independently of mjsched's
own tables. Issue 11 item 7: a DROP of the signature the old release calls broke it on
its next poll.

When this checkout's scripts equal the previous release's, ``install()`` would apply
nothing; the test then marks the installed procedures stale (FORCED_FROM) so that the new
engine still re-applies them under load, as a real upgrade does (said in the output).
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

from mjsched import sqlfiles
from tests.support import pg

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PREVIOUS = "a5c28c1"        # the previous release
TOTAL_SECONDS = 30.0        # from the old engine's first poll to the stop of both
NEW_AFTER_SECONDS = 8.0     # when the new engine starts (and installs)
MAX_GAP_SECONDS = 3.0       # two consecutive executed ticks of a per-second job around the install at most
                            # this far apart, or 1 s more than the job's worst gap elsewhere (load)
MAX_MISSING_TICKS = 2       # per job, around the install, beyond its worst elsewhere in as long
EDGE_SECONDS = 3.0          # a job's first/last executed tick within this of the window's ends
# With no script changed, the test re-applies the scripts from this one on (002_procedures:
# the upgrade path of issue 11 item 7). Not 001_schema: re-applying it while engines poll hit
# "deadlock detected" (retried) in install() on a5c28c1 itself, a defect of install() to fix
# on its own; a release that changes 001_schema gets that path tested for real here.
FORCED_FROM = "002"
ALLOWED_WARNINGS = {"high_frequency"}   # per-second python jobs: the start-up recommendation, expected
LEASE_SECONDS = 10.0
CAP = 24

SKIP_JOBS = 20


def _job_specs() -> list[dict[str, Any]]:
    """Per-second jobs of every mode. ``gaps``: whether every tick is expected to run."""
    every_second = "* * * * * *"
    jobs = [{"name": f"skip-{i:02d}", "cron": every_second, "hold": 0.2, "gaps": True, "exclusive": True,
             "fields": {"concurrency_mode": "Skip"}} for i in range(SKIP_JOBS)]
    jobs += [{"name": f"queue-{i}", "cron": every_second, "hold": 0.2, "gaps": True, "exclusive": True,
              "fields": {"concurrency_mode": "Queue", "max_queued_runs": 2}} for i in range(2)]
    # Runs take 1.5 s of a 1 s period: the queue fills and ticks are refused, so no gap check.
    jobs.append({"name": "queue-backlog", "cron": every_second, "hold": 1.5, "gaps": False, "exclusive": True,
                 "fields": {"concurrency_mode": "Queue", "max_queued_runs": 2}})
    jobs += [{"name": f"concurrent-{i}", "cron": every_second, "hold": 1.5, "gaps": True, "exclusive": False,
              "fields": {"concurrency_mode": "Concurrent"}} for i in range(2)]
    return jobs


def _previous_release(into: Path) -> Path:
    """Extract PREVIOUS into ``into``; fail in CI, skip elsewhere, when it cannot be had."""
    in_ci = os.environ.get("CI", "").lower() in ("true", "1", "yes")
    why = None
    if shutil.which("git") is None:
        why = "git is not installed"
    else:
        found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"],
                               capture_output=True, text=True, timeout=30)
        if found.returncode != 0:
            why = (f"the previous release {PREVIOUS} is not in the repository at {ROOT} "
                   f"({found.stderr.strip() or 'not a git checkout'}); a shallow clone needs "
                   "`git fetch --unshallow` (or fetch-depth: 0)")
    if why is not None:
        if in_ci:
            pytest.fail(f"rolling-upgrade test required in CI: {why}")
        pytest.skip(why)
    into.mkdir()
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", "--format=tar", PREVIOUS],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert archive.stdout is not None
    untar = subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, capture_output=True, timeout=60)
    archive.stdout.close()
    _, archive_err = archive.communicate(timeout=60)
    assert archive.returncode == 0, f"git archive {PREVIOUS} failed: {archive_err.decode(errors='replace')}"
    assert untar.returncode == 0, f"tar failed: {untar.stderr.decode(errors='replace')}"
    assert (into / "mjsched" / "__init__.py").is_file() and (into / "sql" / "postgres").is_dir()
    return into


class Child:
    """An engine process: JSON events from stdout, log lines from stderr, "stop" on stdin."""

    def __init__(self, role: str, tree: Path, shared: Path, dsn: str, spec: dict[str, Any],
                 max_life: float) -> None:
        self.role = role
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(shared)]),
               "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("MJSCHED_DSN", None)
        self.proc = subprocess.Popen(
            [sys.executable, str(shared / "upgrade_child.py"), role, dsn, json.dumps(spec), str(max_life)],
            cwd=str(shared), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1)
        self.events: "queue.Queue[dict[str, Any] | None]" = queue.Queue()
        self.seen: dict[str, dict[str, Any]] = {}
        self.stderr: list[str] = []
        self.other_stdout: list[str] = []
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                self.other_stdout.append(line.rstrip("\n"))
                continue
            if isinstance(event, dict) and "event" in event:
                self.events.put(event)
            else:
                self.other_stdout.append(line.rstrip("\n"))
        self.events.put(None)   # end of output: the process is gone

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    def output(self) -> str:
        """stderr with repeats of one message (timestamps aside) folded into a count."""
        lines = [f"--- {self.role} engine (pid {self.proc.pid}, exit {self.proc.poll()}) stderr:"]
        folded: dict[str, list[Any]] = {}
        for line in self.stderr:
            parts = line.split(" ", 3)
            key = parts[3] if len(parts) == 4 and parts[0] == self.role else line
            folded.setdefault(key, [line, 0])[1] += 1
        lines += [first + (f"   [x{n}]" if n > 1 else "") for first, n in list(folded.values())[-150:]] or ["(none)"]
        if self.other_stdout:
            lines += ["--- stdout (not events):", *self.other_stdout[-50:]]
        return "\n".join(lines)

    def wait_event(self, name: str, timeout: float, others: Sequence["Child"] = ()) -> dict[str, Any]:
        """The next event ``name`` (earlier ones are kept in ``seen``); fail fast if the process ends."""
        if name in self.seen:
            return self.seen[name]
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"{self.role} engine: no {name!r} event within {timeout:g}s\n"
                            + "\n".join(c.output() for c in [self, *others]))
            try:
                event = self.events.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if event is None:
                self.proc.wait(timeout=5)
                pytest.fail(f"{self.role} engine exited before {name!r}\n"
                            + "\n".join(c.output() for c in [self, *others]))
            self.seen[event["event"]] = event
            if event["event"] == name:
                return event

    def stop(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def finish(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=5)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def at(t: float) -> datetime:
    """A wall-clock instant of this host (both engines and the test share its clock)."""
    return datetime.fromtimestamp(t, timezone.utc)


def _pace(until: float, children: list[Child]) -> None:
    """Let the scenario's wall time pass (the engines' lifetime, not a synchronisation),
    failing at once if an engine process dies meanwhile."""
    while time.time() < until:
        for child in children:
            if child.proc.poll() is not None:
                pytest.fail(f"{child.role} engine exited early\n" + "\n".join(c.output() for c in children))
        time.sleep(min(0.2, max(0.0, until - time.time())))


def _bad_log_lines(child: Child) -> list[str]:
    """Every stderr line except a WARNING whose action is expected: ERROR/CRITICAL lines,
    tracebacks, retried database errors, refused completions, missed runs all count. (The
    one failed poll of the old engine once allowed here, an old body in flight across the
    index swap of 009_retries, is gone: install() swaps it after those calls drain, issue 32.)"""
    bad = []
    prefix = f"{child.role} "
    for line in child.stderr:
        parts = line.split(" ", 6) if line.startswith(prefix) else []
        # "<role> <date> <time,ms> <LEVEL> <logger> [<action>] <message>"
        if len(parts) >= 6 and parts[3] == "WARNING" and parts[5].strip("[]") in ALLOWED_WARNINGS:
            continue
        bad.append(line)
    return bad


def _scripts(tree: Path) -> dict[str, str]:
    """The tree's versioned scripts by name (a script split by concern in one piece, as applied)."""
    return {s.name: s.text for s in sqlfiles.scripts_in(tree / "sql" / "postgres")}


@pytest.fixture
def previous_release(tmp_path: Path) -> Path:
    """The previous release's tree (asked for before the database, so a skip costs nothing)."""
    return _previous_release(tmp_path / "previous")


@pytest.fixture
def children() -> Iterator[list[Child]]:
    """The engine processes started by the test; any still alive at teardown is killed."""
    started: list[Child] = []
    yield started
    for child in started:
        child.kill()


@pytest.mark.timeout(120)
def test_old_and_new_engine_share_one_database_across_install(
        previous_release: Path, empty_pg_dsn: str, tmp_path: Path, children: list[Child]) -> None:
    """Issue 11, "Rolling upgrades": no error in either engine, no tick twice, no stall."""
    old_tree = previous_release
    shared = tmp_path / "shared"
    shared.mkdir()
    for name in ("upgrade_child.py", "upgrade_probe.py"):
        shutil.copy(HERE / name, shared / name)
    dsn = empty_pg_dsn
    sql = pg.Sql(dsn)
    try:
        _run_scenario(dsn, sql, old_tree, shared, children)
    finally:
        sql.close()


def _run_scenario(dsn: str, sql: pg.Sql, old_tree: Path, shared: Path, children: list[Child]) -> None:
    sql.run("""CREATE TABLE public.upgrade_exec (
                   job_id uuid NOT NULL, job_name text NOT NULL, run_id uuid NOT NULL, tick timestamptz,
                   pid integer NOT NULL, started_at timestamptz NOT NULL, ended_at timestamptz NOT NULL)""")
    jobs = _job_specs()
    spec = {"cap": CAP, "lease": LEASE_SECONDS, "jobs": jobs}
    life = TOTAL_SECONDS + 30   # bound of a child the test never stops

    # 1. The previous release installs its schema, creates the jobs through its API and polls.
    old = Child("old", old_tree, shared, dsn, spec, life)
    children.append(old)
    ready = old.wait_event("ready", 30)
    assert Path(ready["mjsched_file"]).resolve().is_relative_to(old_tree.resolve()), \
        f"the old engine imported mjsched from {ready['mjsched_file']}, not from {old_tree}"
    old_installed = old.wait_event("installed", 30)
    assert old_installed["applied"], "the old engine's install() applied nothing on an empty database"
    job_ids = old.wait_event("jobs", 30)["ids"]
    t_begin = old.wait_event("polling", 30)["t"]
    pg.wait_for(lambda: sql.one("SELECT count(*) FROM public.upgrade_exec"), timeout=5,
                message="a first execution by the old engine")

    old_scripts, new_scripts = _scripts(old_tree), _scripts(ROOT)
    changed = [name for name in new_scripts if new_scripts[name] != old_scripts.get(name)]
    if not changed:   # nothing differs: make the new install re-apply the procedures anyway
        changed = [name for name in new_scripts if name >= FORCED_FROM]
        sql.run("UPDATE mjsched.schema_version SET checksum = 'rolling-upgrade-test' WHERE name >= %s",
                (FORCED_FROM,))
        print(f"scripts changed since {PREVIOUS}: none; re-application of {changed} forced")
    else:
        print(f"scripts changed since {PREVIOUS}: {changed}")

    # 2. The new release starts, installs while the old engine polls, and polls too.
    _pace(t_begin + NEW_AFTER_SECONDS, children)
    new = Child("new", ROOT, shared, dsn, spec, life)
    children.append(new)
    ready = new.wait_event("ready", 30, [old])
    assert Path(ready["mjsched_file"]).resolve().is_relative_to(ROOT), \
        f"the new engine imported mjsched from {ready['mjsched_file']}, not from {ROOT}"
    new_installed = new.wait_event("installed", 60, [old])
    t_install_start, t_install_end = new_installed["started"], new_installed["t"]
    print(f"new install() applied {new_installed['applied']} in {t_install_end - t_install_start:.2f}s "
          f"at t+{t_install_start - t_begin:.1f}s")
    assert set(changed) <= set(new_installed["applied"]), \
        f"the new install() applied {new_installed['applied']}, expected at least {changed}"
    new.wait_event("polling", 30, [old])

    # 3. Both run until TOTAL_SECONDS, then stop gracefully together.
    _pace(t_begin + TOTAL_SECONDS, children)
    t_stop = time.time()
    for child in (old, new):
        child.stop()
    stopped = {child.role: child.wait_event("stopped", 30, [c for c in children if c is not child])
               for child in (old, new)}
    codes = {child.role: child.finish(30) for child in (old, new)}
    logs = "\n".join(child.output() for child in (old, new))

    _check(sql, jobs, job_ids, old, new, stopped, codes, logs, t_begin, t_install_start, t_install_end, t_stop)


def _check(sql: pg.Sql, jobs: list[dict[str, Any]], job_ids: dict[str, str], old: Child, new: Child,
           stopped: dict[str, dict[str, Any]], codes: dict[str, int], logs: str, t_begin: float,
           t_install_start: float, t_install_end: float, t_stop: float) -> None:
    rows = sql.rows("SELECT job_name, run_id, tick, pid, started_at, ended_at FROM public.upgrade_exec "
                    "ORDER BY job_name, started_at")
    runs = {r["status"]: r["n"] for r in sql.rows(
        "SELECT status, count(*) AS n FROM mjsched.scheduled_job_run GROUP BY status")}
    by_pid = {r["pid"]: r["n"] for r in sql.rows(
        "SELECT pid, count(*) AS n FROM public.upgrade_exec WHERE started_at > %s GROUP BY pid",
        (at(t_install_end),))}
    old_pid, new_pid = old.proc.pid, new.proc.pid
    print(f"executions: {len(rows)} ({len(rows) / (t_stop - t_begin):.1f}/s); after the install: "
          f"old {by_pid.get(old_pid, 0)}, new {by_pid.get(new_pid, 0)}; runs by status {runs}")
    print(f"stopped: {stopped}")

    problems: list[str] = []
    for child in (old, new):
        bad = _bad_log_lines(child)
        if bad:
            problems.append(f"{child.role} engine logged {len(bad)} unexpected line(s), first: {bad[:2]}")
        if codes[child.role] != 0:
            problems.append(f"{child.role} engine exited {codes[child.role]}")
        info = stopped[child.role]
        if info.get("poll_failures"):
            problems.append(f"{child.role} engine: {info['poll_failures']} failed poll(s)")
        lost = {k: v for k, v in info["stats"].items() if k in ("timeouts", "leases_lost", "fenced_completions") and v}
        if lost:
            problems.append(f"{child.role} engine: {lost}")
    if not by_pid.get(old_pid):
        problems.append("the old engine executed nothing after the new engine's install()")
    if not by_pid.get(new_pid):
        problems.append("the new engine executed nothing after its install()")
    unexpected = sql.rows("""SELECT j.name, r.status, count(*) AS n FROM mjsched.scheduled_job_run r
                               JOIN mjsched.scheduled_job j ON j.id = r.scheduled_job_id
                              WHERE r.status NOT IN ('Completed', 'Skipped')
                                AND NOT (r.status = 'Queued' AND j.name = 'queue-backlog')
                              GROUP BY 1, 2 ORDER BY 1, 2""")
    if unexpected:   # the backlogged Queue job may leave queued ticks for a later engine
        problems.append(f"runs neither Completed nor Skipped after the stop: {unexpected}")
    not_completed = sql.one("""SELECT count(*) FROM public.upgrade_exec e
                                 LEFT JOIN mjsched.scheduled_job_run r ON r.id = e.run_id
                                WHERE r.status IS DISTINCT FROM 'Completed'""")
    if not_completed:
        problems.append(f"{not_completed} execution(s) whose run is not recorded Completed")

    duplicates = sql.rows("""SELECT job_name, tick, count(*) AS n, array_agg(pid) AS pids
                               FROM public.upgrade_exec GROUP BY job_name, tick HAVING count(*) > 1
                              ORDER BY tick LIMIT 10""")
    if duplicates:
        problems.append(f"ticks executed more than once: {duplicates}")
    exclusive = [j["name"] for j in jobs if j["exclusive"]]
    overlaps = sql.rows("""SELECT a.job_name, a.tick AS tick_a, a.pid AS pid_a, b.tick AS tick_b, b.pid AS pid_b
                             FROM public.upgrade_exec a JOIN public.upgrade_exec b
                               ON b.job_name = a.job_name AND b.run_id <> a.run_id
                              AND b.started_at < a.ended_at AND a.started_at < b.ended_at
                              AND a.started_at <= b.started_at
                            WHERE a.job_name = ANY(%s) ORDER BY a.started_at LIMIT 10""", (exclusive,))
    if overlaps:
        problems.append(f"overlapping executions of a Skip/Queue job: {overlaps}")

    ticks: dict[str, list[datetime]] = defaultdict(list)
    for r in rows:
        if r["tick"] is not None:
            ticks[r["job_name"]].append(r["tick"])
    begin, end = at(t_begin), at(t_stop)
    near_install = (at(t_install_start) - timedelta(seconds=2), at(t_install_end) + timedelta(seconds=5))
    near = ((near_install[0] - begin).total_seconds(), (near_install[1] - begin).total_seconds())
    worst_gap, worst_gap_near_install, missing_total = 0.0, 0.0, 0
    missed_at: dict[int, int] = defaultdict(int)   # second of the window -> jobs that missed that tick
    for job in jobs:
        name = job["name"]
        seen = sorted(set(ticks[name]))
        if not seen:
            problems.append(f"job {name} ({job_ids[name]}) never executed")
            continue
        if not job["gaps"]:
            continue
        # Per-second jobs on a loaded machine (the test command runs four workers on two
        # cores, beside whatever else runs) miss ticks and leave gaps whatever the upgrade
        # does: their polls come late (in CI, 142 missed ticks at t+0..27 s, most before the
        # install). What the install must not do is make that worse, so the misses and gaps
        # around it are bounded by the same job's worst elsewhere in the window, plus the
        # absolute bounds (on an idle machine, nothing elsewhere: the absolute bounds alone).
        missed = [round((a - begin).total_seconds()) + k
                  for a, b in zip(seen, seen[1:]) for k in range(1, int(round((b - a).total_seconds())))]
        missing_total += len(missed)
        for second in missed:
            missed_at[second] += 1
        gaps = [(a, b, (b - a).total_seconds()) for a, b in zip(seen, seen[1:])]
        touching = [g for a, b, g in gaps if near_install[0] <= b and a <= near_install[1]]
        elsewhere = [g for a, b, g in gaps if not (near_install[0] <= b and a <= near_install[1])]
        worst_gap = max([worst_gap, *(g for _, _, g in gaps)])
        worst_gap_near_install = max([worst_gap_near_install, *touching])
        gap_bound = max([MAX_GAP_SECONDS, *(g + 1 for g in elsewhere)])
        for a, b, gap in gaps:
            if near_install[0] <= b and a <= near_install[1] and gap > gap_bound:
                problems.append(f"job {name}: no tick executed between {a:%T.%f} and {b:%T.%f} around the "
                                f"install (elsewhere at most {gap_bound - 1:.0f}s)")
        edge = max(EDGE_SECONDS, gap_bound)
        if seen[0] > begin + timedelta(seconds=edge) or seen[-1] < end - timedelta(seconds=edge):
            problems.append(f"job {name}: executed ticks {seen[0]:%T}..{seen[-1]:%T}, window {begin:%T}..{end:%T}")
        width = near[1] - near[0]
        near_missed = sum(1 for m in missed if near[0] <= m <= near[1])
        elsewhere_missed = max([0, *(sum(1 for m in missed if w <= m <= w + width)
                                     for w in range(0, int((end - begin).total_seconds() - width) + 1)
                                     if w + width < near[0] or w > near[1])])
        if near_missed > MAX_MISSING_TICKS + elsewhere_missed:
            problems.append(f"job {name}: {near_missed} tick(s) missed around the install "
                            f"({near_install[0]:%T}..{near_install[1]:%T}), at most {elsewhere_missed} in as long "
                            f"elsewhere")
    print(f"ticks: worst gap {worst_gap:.0f}s (around the install {worst_gap_near_install:.0f}s), "
          f"{missing_total} missed tick(s) over {sum(1 for j in jobs if j['gaps'])} gap-checked jobs"
          + (f" (at t+s: jobs {dict(sorted(missed_at.items()))}; install at t+{t_install_start - t_begin:.1f}s)"
             if missed_at else ""))

    assert not problems, "\n".join(problems[:30]) + "\n" + logs
