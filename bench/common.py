"""Shared pieces of the benchmarks: databases, fast job inserts, engine subprocesses, tables.

Nothing here asserts a number. Every database this module creates is named
``mjsched_bench_<tag>_<pid>_<n>`` and dropped when its ``BenchDatabase`` closes.

Run as a module it is the engine subprocess used by the other scripts::

    python -m bench.common engine --dsn DSN [--cap 50] [--window 0.002] ...

which builds a ``SchedulingEngine``, starts polling, prints ``READY {json}``,
waits for a ``STOP`` line on stdin, drains, and prints ``STATS {json}`` (statement
counts per procedure, CPU seconds, RSS) for the window between the two.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from mjsched import BaseScheduledJob, JobResult, register_driver

DEFAULT_DSN = os.environ.get("MJSCHED_BENCH_DSN") or "postgresql://postgres@127.0.0.1:5432/postgres"
NOOP_DRIVER = "bench.noop"
FAR_CRON = "0 0 1 1 *"          # once a year: a job due now runs exactly once in a bench
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_db_counter = itertools.count(1)


# -- the no-op job --------------------------------------------------------------------------
@register_driver(NOOP_DRIVER)
class NoopJob(BaseScheduledJob):
    """Does nothing, successfully: what is measured is the scheduler, not the job."""

    def execute(self, context: Any) -> JobResult:
        return JobResult(True)


STAMP_DRIVER = "bench.stamp"


@register_driver(STAMP_DRIVER)
class StampJob(BaseScheduledJob):
    """Records when the driver itself started, in the run's details: ``started_wall`` (the
    engine host's wall clock, epoch seconds; the bench converts it to the database clock with
    a measured offset) and ``start_lag_ms`` (that wall clock - scheduled_for, unconverted)."""

    high_frequency_by_design = True

    def execute(self, context: Any) -> JobResult:
        now = time.time()
        scheduled = context.run.scheduled_for
        lag = (now - scheduled.timestamp()) * 1000 if scheduled is not None else None
        return JobResult(True, None, {"start_lag_ms": lag, "started_wall": now})


def noop() -> None:
    """Target for the built-in ``python`` driver (``bench.common:noop``)."""
    return None


# -- arguments and output ---------------------------------------------------------------------
def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--dsn", default=DEFAULT_DSN,
                   help="server to create the bench databases on (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="small sizes, for CI (numbers are not asserted)")
    return p


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]],
                notes: Sequence[str] = ()) -> None:
    """A GitHub-style pipe table, so the output can be pasted into RESULTS.md as is."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    out = [f"\n### {title}\n", "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    for r in cells:
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    for note in notes:
        out.append(f"\n{note}")
    print("\n".join(out), flush=True)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def ratio(a: float | None, b: float | None) -> float | None:
    if not a or not b:
        return None
    return a / b


def log_progress(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


# -- databases ------------------------------------------------------------------------------------
def with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def connect(dsn: str) -> Any:
    conn = psycopg2.connect(dsn, options="-c TimeZone=UTC", connect_timeout=10,
                            application_name="mjsched-bench")
    conn.autocommit = True
    return conn


def _admin(dsn: str, statement: str) -> None:
    conn = connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


def install_schema(dsn: str) -> None:
    from mjsched import SchedulingEngine

    engine = SchedulingEngine(dsn, pool_size=2)
    try:
        engine.install()
    finally:
        engine.close()


class BenchDatabase:
    """A database of our own on the server, with the mjsched schema; dropped on close.

    ``template``: clone that database (fast) instead of installing the schema.
    """

    def __init__(self, server_dsn: str, tag: str, *, template: str | None = None, schema: bool = True) -> None:
        self.server_dsn = server_dsn
        self.name = f"mjsched_bench_{tag}_{os.getpid()}_{next(_db_counter)}"
        self.dsn = with_database(server_dsn, self.name)
        _admin(server_dsn, f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        if template:
            for attempt in range(40):
                try:
                    _admin(server_dsn, f'CREATE DATABASE "{self.name}" TEMPLATE "{template}"')
                    break
                except psycopg2.errors.ObjectInUse:
                    time.sleep(0.05 * (attempt + 1))
            else:
                _admin(server_dsn, f'CREATE DATABASE "{self.name}" TEMPLATE "{template}"')
        else:
            _admin(server_dsn, f'CREATE DATABASE "{self.name}"')
            if schema:
                install_schema(self.dsn)

    def drop(self) -> None:
        with contextlib.suppress(Exception):
            _admin(self.server_dsn, f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def __enter__(self) -> "BenchDatabase":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.drop()


def ensure_job_type(conn: Any, driver: str = NOOP_DRIVER) -> str:
    with conn.cursor() as cur:
        cur.execute("""INSERT INTO mjsched.scheduled_job_type (name, driver_class) VALUES (%s, %s)
                       ON CONFLICT DO NOTHING""", (driver, driver))
        cur.execute("SELECT id FROM mjsched.scheduled_job_type WHERE driver_class = %s", (driver,))
        return str(cur.fetchone()[0])


def insert_jobs(conn: Any, count: int, *, next_run_at: str, cron: str = FAR_CRON,
                driver: str = NOOP_DRIVER, configuration: dict[str, Any] | None = None,
                prefix: str = "bench", start: int = 1, analyze: bool = True) -> float:
    """Insert ``count`` Active jobs with one INSERT ... SELECT generate_series; returns seconds.

    ``next_run_at`` is an SQL expression (e.g. ``now() - interval '1 minute'``). The
    per-row trigger (NOTIFY per job) and FK checks are skipped for the bulk insert
    (session_replication_role = replica, in our own database); the rows are valid.
    """
    type_id = ensure_job_type(conn, driver)
    started = time.perf_counter()
    with conn.cursor() as cur:
        replica = True
        try:
            cur.execute("SET session_replication_role = replica")
        except psycopg2.Error:
            replica = False
        try:
            cur.execute(f"""
                INSERT INTO mjsched.scheduled_job
                       (job_type_id, name, cron_expression, timezone, status, configuration, next_run_at)
                SELECT %s::uuid, %s || '-' || g, %s, 'UTC', 'Active', %s::jsonb, {next_run_at}
                  FROM generate_series(%s::int, %s::int) AS g""",
                        (type_id, prefix, cron, json.dumps(configuration or {}), start, start + count - 1))
        finally:
            if replica:
                cur.execute("SET session_replication_role = DEFAULT")
        if analyze:
            cur.execute("ANALYZE mjsched.scheduled_job")
    return time.perf_counter() - started


def db_commits(dsn: str, dbname: str) -> int:
    """xact_commit of ``dbname`` as the statistics system has it now (flushed stats only)."""
    conn = connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_stat_clear_snapshot()")
            cur.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (dbname,))
            row = cur.fetchone()
            return int(row[0]) if row else 0
    finally:
        conn.close()


def pg_stat_statements_usable(conn: Any) -> tuple[bool, str]:
    """pg_stat_statements needs shared_preload_libraries; say why when it is not usable."""
    with conn.cursor() as cur:
        try:
            cur.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            cur.execute("SELECT count(*) FROM pg_stat_statements")
            return True, "pg_stat_statements"
        except psycopg2.Error as exc:
            return False, str(exc).strip().splitlines()[0]


def server_version(dsn: str) -> str:
    conn = connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW server_version")
            version = cur.fetchone()[0]
            settings = {}
            for name in ("synchronous_commit", "fsync", "shared_buffers", "max_connections"):
                cur.execute(f"SHOW {name}")
                settings[name] = cur.fetchone()[0]
        return f"PostgreSQL {version} ({', '.join(f'{k}={v}' for k, v in settings.items())})"
    finally:
        conn.close()


def machine_summary(dsn: str) -> str:
    mem_kb = 0
    with contextlib.suppress(OSError):
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kb = int(line.split()[1])
    model = ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    return (f"{os.cpu_count()} CPUs ({model or '?'}), {mem_kb / 1024 / 1024:.1f} GiB RAM, "
            f"Python {sys.version.split()[0]}, {server_version(dsn)}")


def git_state() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=REPO_ROOT, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "mjsched", "sql"], capture_output=True,
                               text=True, cwd=REPO_ROOT, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    return f"commit {head or '?'}" + (" + uncommitted changes in mjsched/ or sql/" if dirty else "")


# -- process facts ------------------------------------------------------------------------------
def proc_status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS / VmHWM (kB) from /proc/<pid>/status."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0])
    return out


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def backend_pids(dsn: str, dbname: str) -> list[int]:
    """PostgreSQL backends connected to ``dbname`` (the server must be on this machine)."""
    conn = connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,))
            return [int(r[0]) for r in cur.fetchall()]
    finally:
        conn.close()


class CpuMeter:
    """Machine CPU split into: the PostgreSQL backends of one database, and everything else."""

    def __init__(self, dsn: str, dbname: str) -> None:
        self._dsn, self._db = dsn, dbname
        self._pg0 = {pid: proc_cpu_seconds(pid) for pid in backend_pids(dsn, dbname)}
        self._jiffies0 = cpu_jiffies()
        self._t0 = time.perf_counter()

    def stop(self) -> dict[str, float]:
        """{'wall', 'machine', 'pg'}: seconds of wall time, busy CPU (all cores), our backends' CPU."""
        busy1, total1 = cpu_jiffies()
        wall = time.perf_counter() - self._t0
        pids = set(self._pg0) | set(backend_pids(self._dsn, self._db))
        pg = sum(max(0.0, proc_cpu_seconds(pid) - self._pg0.get(pid, 0.0)) for pid in pids)
        busy0, total0 = self._jiffies0
        cores = os.cpu_count() or 1
        machine = (busy1 - busy0) / max(1, total1 - total0) * wall * cores
        return {"wall": wall, "machine": machine, "pg": pg}


def clock_offset(conn: Any, samples: int = 25) -> tuple[float, float]:
    """(offset, uncertainty) in seconds: database clock - this host's wall clock.

    Each sample reads ``clock_timestamp()`` between two readings of ``time.time()``; the
    sample of shortest round trip is kept, and the database's reading is placed at the
    middle of it, so the true offset lies within +- half that round trip (the uncertainty).
    """
    best: tuple[float, float] | None = None
    with conn.cursor() as cur:
        for _ in range(samples):
            t0 = time.time()
            cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
            db = float(cur.fetchone()[0])
            t1 = time.time()
            half = (t1 - t0) / 2
            if best is None or half < best[1]:
                best = (db - (t0 + half), half)
    assert best is not None
    return best


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    data = sorted(values)
    k = (len(data) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


# -- statement counting (client side: every execute() is one round trip) ----------------------------
STATEMENTS: collections.Counter[str] = collections.Counter()
_FN_RE = re.compile(r"mjsched\.(\w+)\s*\(")
_TABLE_RE = re.compile(r"(?:FROM|INTO|UPDATE)\s+mjsched\.(\w+)", re.IGNORECASE)
_counting_classes: dict[type, type] = {}
_count_lock = threading.Lock()


def statement_key(query: Any) -> str:
    text = query if isinstance(query, str) else getattr(query, "string", None) or repr(query)
    if not isinstance(text, str):
        text = str(text)
    m = _FN_RE.search(text)
    if m:
        return m.group(1)
    words = text.strip().split(None, 1)
    verb = words[0].lower() if words else "?"
    t = _TABLE_RE.search(text)
    if t:
        return f"{verb} {t.group(1)}"
    return f"{verb} {' '.join(text.split()[1:3])}"[:40]


def _counting_cursor(base: type) -> type:
    cls = _counting_classes.get(base)
    if cls is None:
        def execute(self: Any, query: Any, vars: Any = None) -> Any:
            key = statement_key(query)
            with _count_lock:
                STATEMENTS[key] += 1
            return base.execute(self, query, vars)
        cls = type(f"Counting{base.__name__}", (base,), {"execute": execute})
        _counting_classes[base] = cls
    return cls


class CountingConnection(psycopg2.extensions.connection):
    """A psycopg2 connection whose cursors count every execute() by procedure name."""

    def cursor(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        base = kwargs.get("cursor_factory") or self.cursor_factory or psycopg2.extensions.cursor
        kwargs["cursor_factory"] = _counting_cursor(base)
        return super().cursor(*args, **kwargs)


def statements_snapshot() -> dict[str, int]:
    with _count_lock:
        return dict(STATEMENTS)


def statements_delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    keys = set(after) | set(before)
    out = {k: after.get(k, 0) - before.get(k, 0) for k in keys}
    return {k: v for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v}


# -- profiling (py-spy, optional) ---------------------------------------------------------------
def start_py_spy(pid: int, out_path: str) -> subprocess.Popen[bytes] | None:
    """Sample ``pid`` with py-spy (raw collapsed stacks, per thread) until stop_py_spy()."""
    import shutil

    exe = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))   # a venv's, unactivated
    if exe is None:
        log_progress("py-spy not installed: no profile")
        return None
    proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--format", "raw", "--rate", "1000",
                             "--threads", "--nonblocking", "--gil", "-o", out_path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)   # let it attach
    return proc


def stop_py_spy(proc: subprocess.Popen[bytes]) -> None:
    import signal

    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _frame_name(frame: str) -> str:
    """'func (path/to/file.py:123)' -> 'func (to/file.py)': aggregate over lines."""
    name, sep, where = frame.partition(" (")
    if not sep:
        return frame
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(path.split('/')[-2:])})"


def summarize_profile(path: str, top: int = 25) -> tuple[list[list[Any]], list[list[Any]], int]:
    """(self-time rows, inclusive rows, samples) from a py-spy raw file."""
    self_counts: collections.Counter[str] = collections.Counter()
    incl_counts: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            if not stack or not n.isdigit():
                continue
            count = int(n)
            frames = stack.split(";")
            total += count
            thread = frames[0]
            threads[thread] += count
            funcs = [_frame_name(fr) for fr in frames[1:]]
            if funcs:
                self_counts[funcs[-1]] += count
            for fn in set(funcs):
                incl_counts[fn] += count
    rows_self = [[fn, c, c / total * 100 if total else 0.0] for fn, c in self_counts.most_common(top)]
    rows_incl = [[fn, c, c / total * 100 if total else 0.0] for fn, c in incl_counts.most_common(top)]
    rows_threads = [[t, c, c / total * 100 if total else 0.0] for t, c in threads.most_common()]
    return rows_self, rows_incl + [["-- threads --", "", ""]] + rows_threads, total


# -- engine subprocess ------------------------------------------------------------------------------
@dataclass
class EngineProc:
    """A ``python -m bench.common engine`` child; talk to it with ready() and stop()."""

    proc: subprocess.Popen[str]
    instance: str
    ready_info: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    stderr_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=40))

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_tail.append(line.rstrip())

    def wait_ready(self, timeout: float = 60.0) -> dict[str, Any]:
        self.ready_info = self._expect("READY", timeout)
        return self.ready_info

    def stop(self, timeout: float = 60.0) -> dict[str, Any]:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.proc.stdin.write("STOP\n")
            self.proc.stdin.flush()
        try:
            self.stats = self._expect("STATS", timeout)
        finally:
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=10)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        return self.stats

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def _expect(self, tag: str, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        result: dict[str, Any] = {}
        done = threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if line.startswith(tag + " "):
                    result.update(json.loads(line[len(tag) + 1:]))
                    break
            done.set()
        t = threading.Thread(target=read, daemon=True)
        t.start()
        if not done.wait(timeout) or not result:
            self.kill()
            raise RuntimeError(f"engine {self.instance}: no {tag} within {timeout:.0f}s; stderr tail:\n"
                               + "\n".join(self.stderr_tail))
        return result


def spawn_engine(dsn: str, instance: str, *, cap: int = 50, window: float = 0.002, lease: float = 60.0,
                 max_poll: float = 0.5, count: bool = True, extra: Sequence[str] = ()) -> EngineProc:
    cmd = [sys.executable, "-m", "bench.common", "engine", "--dsn", dsn, "--instance", instance,
           "--cap", str(cap), "--window", str(window), "--lease", str(lease), "--max-poll", str(max_poll),
           *(() if count else ("--no-count",)), *extra]
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, bufsize=1, cwd=REPO_ROOT, env=env)
    ep = EngineProc(proc, instance)
    threading.Thread(target=ep._drain_stderr, daemon=True).start()
    return ep


def _engine_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.common engine")
    p.add_argument("--dsn", required=True)
    p.add_argument("--instance", required=True)
    p.add_argument("--cap", type=int, default=50)
    p.add_argument("--window", type=float, default=0.002)
    p.add_argument("--lease", type=float, default=60.0)
    p.add_argument("--max-poll", type=float, default=0.5)
    p.add_argument("--no-count", action="store_true")
    p.add_argument("--log-level", default="ERROR")
    args = p.parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from mjsched import SchedulingEngine

    options: dict[str, Any] = {}
    if not args.no_count:
        options["connection_factory"] = CountingConnection
    engine = SchedulingEngine(args.dsn, max_concurrent_jobs=args.cap, lease_timeout=args.lease,
                              instance_name=args.instance, completion_batch_window=args.window,
                              max_poll_interval=args.max_poll, **options)
    engine.start_polling()
    before = statements_snapshot()
    cpu0 = time.process_time()
    times0 = os.times()
    wall0 = time.perf_counter()
    print("READY " + json.dumps({"pid": os.getpid(), **proc_status()}), flush=True)
    for line in sys.stdin:
        if line.strip() == "STOP":
            break
    after = statements_snapshot()
    cpu1 = time.process_time()
    times1 = os.times()
    wall1 = time.perf_counter()
    rss = proc_status()
    engine.stop_polling(wait=True, max_wait=30.0)
    engine.close()
    print("STATS " + json.dumps({
        "statements": statements_delta(after, before),
        "cpu_s": cpu1 - cpu0, "sys_s": times1.system - times0.system,
        "wall_s": wall1 - wall0, "dispatched": engine.stats.get("dispatched", 0),
        "fenced": engine.stats.get("fenced_completions", 0), **rss,
    }), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["engine"]:
        return _engine_main(argv[1:])
    if argv[:1] == ["machine"]:
        dsn = argv[argv.index("--dsn") + 1] if "--dsn" in argv else DEFAULT_DSN
        print(f"machine: {machine_summary(dsn)}")
        print(f"mjsched tree: {git_state()}", flush=True)
        return 0
    print(__doc__)
    return 2


@contextlib.contextmanager
def engines(dsn: str, count: int, prefix: str, **kwargs: Any) -> Iterator[list[EngineProc]]:
    """Start ``count`` engine subprocesses and wait until each polls; kill leftovers on exit."""
    procs = [spawn_engine(dsn, f"{prefix}-{i + 1}", **kwargs) for i in range(count)]
    try:
        for ep in procs:
            ep.wait_ready()
        yield procs
    finally:
        for ep in procs:
            ep.kill()


if __name__ == "__main__":
    sys.exit(main())
