"""The built-in drivers, run for real: child processes, imported modules,
a local HTTP server and (when reachable) the local PostgreSQL."""
from __future__ import annotations

import http.server
import json
import logging
import os
import socket
import sys
import textwrap
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from mjsched.drivers import get_driver
from mjsched.drivers.base import ExecutionContext, JobResult
from mjsched.drivers.http import HttpJob
from mjsched.drivers.python import PythonJob
from mjsched.drivers import shell as shell_module
from mjsched.drivers.shell import ShellJob
from mjsched.drivers.sql import SqlJob, redact_dsn
from mjsched.errors import ConfigurationError
from mjsched.models import ConcurrencyMode, Job, JobRun, JobStatus, MissedRunPolicy, RunStatus

NOW = datetime(2024, 1, 1, tzinfo=timezone.utc)


# --------------------------------------------------------------------------- helpers

def make_job(driver: str, configuration: dict[str, Any], **overrides: Any) -> Job:
    values: dict[str, Any] = dict(
        id=str(uuid.uuid4()), job_type_id=str(uuid.uuid4()), driver=driver, name=f"test-{driver}",
        description=None, cron_expression="* * * * *", timezone="UTC", start_at=None, end_at=None,
        status=JobStatus.ACTIVE, configuration=configuration, owner=None,
        concurrency_mode=ConcurrencyMode.SKIP, missed_run_policy=MissedRunPolicy.RUN_ONCE,
        run_immediately_if_never_run=False, max_runtime_seconds=None, isolation=None, max_queued_runs=10,
        notify_on_success=False, notify_on_failure=True, notify_to=None, next_run_at=None, last_run_at=None,
        run_count=0, success_count=0, failure_count=0, last_duration_ms=None, total_duration_ms=0,
        lock_token=None, locked_at=None, locked_by_instance=None, expected_completion_at=None,
        created_at=NOW, updated_at=NOW,
    )
    values.update(overrides)
    return Job(**values)


def make_run(job: Job) -> JobRun:
    return JobRun(
        id=str(uuid.uuid4()), scheduled_job_id=job.id, scheduled_for=None, status=RunStatus.RUNNING,
        success=None, error_message=None, details=None, queued_at=NOW, started_at=NOW, completed_at=None,
        duration_ms=None, executed_by_instance="test", lock_token=str(uuid.uuid4()), lease_expires_at=None,
    )


def make_context(driver: str, configuration: dict[str, Any]) -> ExecutionContext:
    job = make_job(driver, configuration)
    return ExecutionContext(job=job, run=make_run(job), cancel_event=threading.Event(),
                            logger=logging.getLogger(f"mjsched.test.{driver}"))


def run_driver(driver_cls: type, configuration: dict[str, Any]) -> JobResult:
    return driver_cls().execute(make_context(driver_cls.driver_name, configuration))


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def pid_gone(pid: int) -> bool:
    """True when ``pid`` no longer exists or is only a zombie awaiting its reaper."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2:].split()[0] in (b"Z", b"X")


class DriverThread(threading.Thread):
    """Runs one execution in the background so the test can cancel it."""

    def __init__(self, driver_cls: type, context: ExecutionContext) -> None:
        super().__init__(daemon=True)
        self.driver_cls, self.context = driver_cls, context
        self.result: JobResult | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.driver_cls().execute(self.context)
        except BaseException as exc:  # surfaced by the test
            self.error = exc


# --------------------------------------------------------------------------- registry

def test_builtin_drivers_are_registered() -> None:
    assert get_driver("shell") is ShellJob
    assert get_driver("python") is PythonJob
    assert get_driver("sql") is SqlJob
    assert get_driver("http") is HttpJob
    assert ShellJob.isolation == "thread"


# --------------------------------------------------------------------------- shell

def test_shell_success_list_command() -> None:
    result = run_driver(ShellJob, {"command": [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"]})
    assert result.success, result
    assert result.details == {"exit_code": 0, "stdout_tail": "out\n", "stderr_tail": "err\n"}


def test_shell_string_runs_through_the_shell() -> None:
    result = run_driver(ShellJob, {"command": "echo one && echo two | tr a-z A-Z"})
    assert result.success
    assert result.details["stdout_tail"] == "one\nTWO\n"


def test_shell_failure_reports_exit_code_and_stderr() -> None:
    result = run_driver(ShellJob, {"command": ["sh", "-c", "echo broken >&2; exit 3"]})
    assert not result.success
    assert result.details["exit_code"] == 3
    assert result.details["stderr_tail"] == "broken\n"
    assert "3" in result.error_message


def test_shell_output_tail_is_bounded_and_decoded_leniently() -> None:
    script = "import sys; sys.stdout.buffer.write(b'x' * 100000 + b'\\xff' + b'END')"
    result = run_driver(ShellJob, {"command": [sys.executable, "-c", script]})
    tail = result.details["stdout_tail"]
    assert result.success
    assert tail.endswith("\ufffdEND")
    assert len(tail.encode("utf-8")) <= shell_module.TAIL_BYTES + 3


def test_shell_env_is_merged_and_cwd_is_used(tmp_path: Path) -> None:
    result = run_driver(ShellJob, {
        "command": ["sh", "-c", 'pwd; echo "$MJSCHED_TEST_VAR"; command -v sh >/dev/null && echo path-ok'],
        "cwd": str(tmp_path),
        "env": {"MJSCHED_TEST_VAR": "hello"},
    })
    assert result.success, result
    lines = result.details["stdout_tail"].splitlines()
    assert os.path.realpath(lines[0]) == os.path.realpath(tmp_path)
    assert lines[1:] == ["hello", "path-ok"]   # PATH still inherited from os.environ


def test_shell_missing_executable_is_a_failed_result() -> None:
    result = run_driver(ShellJob, {"command": ["/nonexistent/mjsched-no-such-program", "--flag"]})
    assert not result.success
    assert "executable not found" in result.error_message
    assert "/nonexistent/mjsched-no-such-program" in result.error_message


def test_shell_missing_cwd_is_a_failed_result(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    result = run_driver(ShellJob, {"command": ["true"], "cwd": str(missing)})
    assert not result.success
    assert "working directory not found" in result.error_message


def _spawn_tree_script(pidfile: Path, ignore_term: bool) -> str:
    trap = "trap '' TERM; " if ignore_term else ""
    # The shell starts a grandchild, records its pid and waits on it.
    return f"{trap}sleep 60 & echo $! > {pidfile}; wait"


@pytest.mark.parametrize("ignore_term", [False, True], ids=["sigterm", "needs-sigkill"])
def test_shell_cancel_kills_the_whole_process_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ignore_term: bool) -> None:
    monkeypatch.setattr(shell_module, "KILL_GRACE", 0.5)
    pidfile = tmp_path / "grandchild.pid"
    context = make_context("shell", {"command": _spawn_tree_script(pidfile, ignore_term)})
    worker = DriverThread(ShellJob, context)
    worker.start()
    grandchild = wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() and int(pidfile.read_text()))
    assert not pid_gone(grandchild)

    started = time.monotonic()
    context.cancel_event.set()
    worker.join(10)
    assert not worker.is_alive() and worker.error is None
    assert time.monotonic() - started < 5
    assert worker.result is not None and not worker.result.success
    assert worker.result.details["cancelled"] is True
    assert "cancelled" in worker.result.error_message
    wait_until(lambda: pid_gone(grandchild), timeout=5)


def test_shell_timeout_kills_and_fails(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    started = time.monotonic()
    result = run_driver(ShellJob, {"command": _spawn_tree_script(pidfile, False), "timeout": 0.5})
    elapsed = time.monotonic() - started
    assert not result.success
    assert result.details["timed_out"] is True
    assert "timed out" in result.error_message
    assert 0.4 < elapsed < 5
    wait_until(lambda: pid_gone(int(pidfile.read_text())), timeout=5)


@pytest.mark.parametrize("config, field", [
    ({}, "configuration.command"),
    ({"command": []}, "configuration.command"),
    ({"command": "  "}, "configuration.command"),
    ({"command": ["ls", 3]}, "configuration.command"),
    ({"command": {"a": 1}}, "configuration.command"),
    ({"command": ["ls"], "timeout": 0}, "configuration.timeout"),
    ({"command": ["ls"], "timeout": "5"}, "configuration.timeout"),
    ({"command": ["ls"], "timeout": True}, "configuration.timeout"),
    ({"command": ["ls"], "cwd": 5}, "configuration.cwd"),
    ({"command": ["ls"], "env": ["A=1"]}, "configuration.env"),
    ({"command": ["ls"], "env": {"A": 1}}, "configuration.env.A"),
])
def test_shell_validate_configuration_names_the_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        ShellJob().validate_configuration(config)
    assert info.value.field == field
    assert field in str(info.value)


# --------------------------------------------------------------------------- python

TARGETS = '''
from mjsched.drivers.base import JobResult

calls = []

def returns_none(**kwargs):
    calls.append(kwargs)

def returns_dict(a, b=2):
    return {"sum": a + b}

def returns_result():
    return JobResult(success=False, error_message="told to fail", details={"why": "test"})

def returns_other():
    return [1, 2, 3]

def wants_context(x, context):
    return {"x": x, "job_name": context.job.name, "run_id": context.run.id}

def raises():
    raise ValueError("bad value 42")

NOT_CALLABLE = 7

import asyncio

async def async_returns_dict(a, context=None):
    await asyncio.sleep(0)
    calls.append(("async", a))
    return {"async": a, "run_id": context.run.id if context else None}

async def async_raises():
    await asyncio.sleep(0)
    raise KeyError("async boom")

def returns_awaitable(n):
    async def later():
        calls.append(("later", n))
        return n * 2
    return later()

async def async_sleeps_until_cancelled(seconds):
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        calls.append("cancelled")
        raise
    calls.append("slept")

def a_generator():
    calls.append("generator ran")
    yield 1

async def an_async_generator():
    calls.append("async generator ran")
    yield 1

class Tasks:
    prefix = "p"

    def method(self, name):
        return {"hello": self.prefix + name}

    @staticmethod
    def static(n):
        return {"n": n}

    @classmethod
    def klass(cls):
        return {"cls": cls.__name__}
'''


@pytest.fixture
def targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"mjsched_test_targets_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(TARGETS))
    (tmp_path / f"{name}_broken.py").write_text("raise RuntimeError('import-time boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for mod in (name, f"{name}_broken"):
        sys.modules.pop(mod, None)


def test_python_none_is_success(targets: str) -> None:
    result = run_driver(PythonJob, {"callable": f"{targets}:returns_none", "kwargs": {"k": "v"}})
    assert result == JobResult(True, None, None)
    assert sys.modules[targets].calls == [{"k": "v"}]


def test_python_dict_becomes_details(targets: str) -> None:
    assert run_driver(PythonJob, {"callable": f"{targets}:returns_dict", "kwargs": {"a": 40}}) == \
        JobResult(True, None, {"sum": 42})


def test_python_jobresult_is_taken_as_is(targets: str) -> None:
    assert run_driver(PythonJob, {"callable": f"{targets}:returns_result"}) == \
        JobResult(False, "told to fail", {"why": "test"})


def test_python_other_return_value_is_recorded(targets: str) -> None:
    assert run_driver(PythonJob, {"callable": f"{targets}:returns_other"}) == JobResult(True, None, {"result": [1, 2, 3]})


def test_python_context_is_injected_when_asked_for(targets: str) -> None:
    context = make_context("python", {"callable": f"{targets}:wants_context", "kwargs": {"x": 1}})
    result = PythonJob().execute(context)
    assert result == JobResult(True, None, {"x": 1, "job_name": context.job.name, "run_id": context.run.id})


def test_python_class_methods(targets: str) -> None:
    assert run_driver(PythonJob, {"callable": f"{targets}:Tasks.method", "kwargs": {"name": "x"}}).details == {"hello": "px"}
    assert run_driver(PythonJob, {"callable": f"{targets}:Tasks.static", "kwargs": {"n": 5}}).details == {"n": 5}
    assert run_driver(PythonJob, {"callable": f"{targets}:Tasks.klass"}).details == {"cls": "Tasks"}


def test_python_raising_is_failure_with_traceback_tail(targets: str) -> None:
    result = run_driver(PythonJob, {"callable": f"{targets}:raises"})
    assert not result.success
    assert result.error_message == "ValueError: bad value 42"
    assert result.details["exception_type"] == "ValueError"
    assert "raise ValueError" in result.details["traceback_tail"]
    assert len(result.details["traceback_tail"]) <= 2000


def test_python_async_def_runs_and_records_its_return_value(targets: str) -> None:
    context = make_context("python", {"callable": f"{targets}:async_returns_dict", "kwargs": {"a": 7}})
    assert PythonJob().execute(context) == JobResult(True, None, {"async": 7, "run_id": context.run.id})
    assert sys.modules[targets].calls == [("async", 7)]    # its body ran, once


def test_python_async_def_that_raises_is_failure_with_the_exception(targets: str) -> None:
    result = run_driver(PythonJob, {"callable": f"{targets}:async_raises"})
    assert not result.success and result.error_message == "KeyError: 'async boom'"
    assert result.details["exception_type"] == "KeyError" and "async boom" in result.details["traceback_tail"]


def test_python_function_returning_an_awaitable_has_it_awaited(targets: str) -> None:
    assert run_driver(PythonJob, {"callable": f"{targets}:returns_awaitable", "kwargs": {"n": 21}}) == \
        JobResult(True, None, {"result": 42})
    assert sys.modules[targets].calls == [("later", 21)]


def test_python_async_job_is_cancelled_by_the_cancel_event(targets: str) -> None:
    context = make_context("python", {"callable": f"{targets}:async_sleeps_until_cancelled", "kwargs": {"seconds": 30}})
    timer = threading.Timer(0.3, context.cancel_event.set)
    timer.start()
    started = time.monotonic()
    result = PythonJob().execute(context)
    assert time.monotonic() - started < 5.0
    assert not result.success and "cancelled" in result.error_message and result.details == {"cancelled": True}
    assert sys.modules[targets].calls == ["cancelled"]   # the coroutine saw the cancel, it did not finish


@pytest.mark.parametrize("name", ["a_generator", "an_async_generator"])
def test_python_generator_functions_are_refused_not_recorded_as_success(targets: str, name: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        PythonJob().check_can_run({"callable": f"{targets}:{name}"})
    assert info.value.field == "configuration.callable" and "generator function" in str(info.value)
    result = run_driver(PythonJob, {"callable": f"{targets}:{name}"})
    assert not result.success and "generator function" in result.error_message
    assert sys.modules[targets].calls == []


def test_python_wrong_kwargs_is_failure_not_exception(targets: str) -> None:
    result = run_driver(PythonJob, {"callable": f"{targets}:returns_dict", "kwargs": {"nope": 1}})
    assert not result.success
    assert result.error_message.startswith("TypeError:")


@pytest.mark.parametrize("spec, fragment", [
    ("no_colon_here", "must look like"),
    ("pkg.mod:", "must look like"),
    (":func", "must look like"),
    ("pkg mod:func", "must look like"),
    ("mjsched_definitely_missing_module:func", "cannot import module"),
    ("{targets}_broken:anything", "import-time boom"),
    ("{targets}:missing_function", "has no attribute 'missing_function'"),
    ("{targets}:NOT_CALLABLE", "not callable"),
    ("{targets}:Tasks.nothing", "has no attribute 'nothing'"),
])
def test_python_bad_callable_strings(targets: str, spec: str, fragment: str) -> None:
    spec = spec.format(targets=targets)
    if fragment != "must look like":   # a well-formed name is only imported where the job runs
        PythonJob().validate_configuration({"callable": spec})
    with pytest.raises(ConfigurationError) as info:
        PythonJob().check_can_run({"callable": spec})
    assert info.value.field == "configuration.callable"
    assert fragment in str(info.value)
    # at run time the same problem is a failed result, not an exception
    result = run_driver(PythonJob, {"callable": spec})
    assert not result.success and "configuration.callable" in result.error_message


@pytest.mark.parametrize("config, field", [
    ({}, "configuration.callable"),
    ({"callable": 5}, "configuration.callable"),
    ({"callable": "os.path:join", "kwargs": [1]}, "configuration.kwargs"),
])
def test_python_validate_configuration_names_the_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        PythonJob().validate_configuration(config)
    assert info.value.field == field


def test_python_context_in_kwargs_is_refused(targets: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        PythonJob().check_can_run({"callable": f"{targets}:wants_context", "kwargs": {"x": 1, "context": 2}})
    assert info.value.field == "configuration.kwargs"


# --------------------------------------------------------------------------- http

class _Handler(http.server.BaseHTTPRequestHandler):
    requests: list[dict[str, Any]]
    release: threading.Event

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append({"method": self.command, "path": self.path,  # type: ignore[attr-defined]
                                     "headers": dict(self.headers), "body": body})
        if self.path == "/slow":
            self.server.release.wait(10)  # type: ignore[attr-defined]
        status = 500 if self.path == "/fail" else 201 if self.path == "/created" else 200
        payload = b"server exploded" if status == 500 else b"x" * 10000 + b"hello" if self.path == "/big" else b"ok:" + body
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _answer


@pytest.fixture
def http_server(monkeypatch: pytest.MonkeyPatch):
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.requests = []  # type: ignore[attr-defined]
    server.release = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.release.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_http_get_2xx_is_success(http_server) -> None:
    server, base = http_server
    result = run_driver(HttpJob, {"url": f"{base}/hello"})
    assert result == JobResult(True, None, {"status": 200, "body_tail": "ok:"})
    assert server.requests[0]["method"] == "GET"


def test_http_post_json_body(http_server) -> None:
    server, base = http_server
    result = run_driver(HttpJob, {"url": f"{base}/created", "method": "post", "headers": {"X-Token": "abc"},
                                  "body": {"a": [1, 2]}})
    assert result.success and result.details["status"] == 201
    request = server.requests[0]
    assert request["method"] == "POST"
    assert json.loads(request["body"]) == {"a": [1, 2]}
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["headers"]["X-Token"] == "abc"


def test_http_string_body_is_sent_verbatim(http_server) -> None:
    server, base = http_server
    result = run_driver(HttpJob, {"url": f"{base}/x", "method": "PUT", "body": "plain text ü"})
    assert result.success
    assert server.requests[0]["body"] == "plain text ü".encode()
    assert server.requests[0]["headers"]["Content-Type"].startswith("text/plain")


def test_http_body_tail_is_bounded(http_server) -> None:
    _, base = http_server
    result = run_driver(HttpJob, {"url": f"{base}/big"})
    assert result.success
    assert result.details["body_tail"].endswith("hello")
    assert len(result.details["body_tail"]) == 4096


def test_http_500_is_failed_result_with_status(http_server) -> None:
    _, base = http_server
    result = run_driver(HttpJob, {"url": f"{base}/fail"})
    assert not result.success
    assert result.details == {"status": 500, "body_tail": "server exploded"}
    assert "500" in result.error_message


def test_http_connection_refused_is_failed_result(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here any more
    result = run_driver(HttpJob, {"url": f"http://127.0.0.1:{port}/", "timeout": 5})
    assert not result.success
    assert result.details["status"] is None
    assert "refused" in result.error_message.lower()


def test_http_timeout_is_failed_result(http_server) -> None:
    _, base = http_server
    started = time.monotonic()
    result = run_driver(HttpJob, {"url": f"{base}/slow", "timeout": 0.3})
    assert not result.success
    assert "timed out" in result.error_message
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("config, field", [
    ({}, "configuration.url"),
    ({"url": "ftp://example.com/x"}, "configuration.url"),
    ({"url": "http://"}, "configuration.url"),
    ({"url": "http://example.com:notaport/"}, "configuration.url"),
    ({"url": "http://example.com", "method": "GE T"}, "configuration.method"),
    ({"url": "http://example.com", "headers": ["a"]}, "configuration.headers"),
    ({"url": "http://example.com", "headers": {"A": 1}}, "configuration.headers.A"),
    ({"url": "http://example.com", "body": {1, 2}}, "configuration.body"),
    ({"url": "http://example.com", "timeout": -1}, "configuration.timeout"),
])
def test_http_validate_configuration_names_the_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        HttpJob().validate_configuration(config)
    assert info.value.field == field


# --------------------------------------------------------------------------- sql

@pytest.fixture(scope="module")
def pg_dsn(pg_server: str) -> str:
    """The tests' PostgreSQL server (MJSCHED_TEST_POSTGRES_DSN, else the one they start
    themselves): its ``postgres`` database, where each test makes a table of its own."""
    return pg_server


@pytest.fixture
def pg_table(pg_dsn: str):
    import psycopg2

    table = f"mjsched_sql_driver_{uuid.uuid4().hex[:10]}"
    conn = psycopg2.connect(pg_dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, name text, at timestamptz)")
        cur.execute(f"INSERT INTO {table} SELECT g, 'n' || g, now() FROM generate_series(1, 30) g")
    try:
        yield table, conn
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}")
        conn.close()


def test_sql_select_returns_first_rows(pg_dsn: str, pg_table) -> None:
    table, _ = pg_table
    result = run_driver(SqlJob, {"dsn": pg_dsn, "statement": f"SELECT id, name, at FROM {table} ORDER BY id"})
    assert result.success, result
    assert result.details["rowcount"] == 30
    assert result.details["columns"] == ["id", "name", "at"]
    rows = result.details["rows"]
    assert len(rows) == 20
    assert rows[0][:2] == [1, "n1"] and isinstance(rows[0][2], str)
    json.dumps(result.details)


def test_sql_parameters_list_and_dict(pg_dsn: str, pg_table) -> None:
    table, _ = pg_table
    by_list = run_driver(SqlJob, {"dsn": pg_dsn, "statement": f"SELECT name FROM {table} WHERE id = %s", "parameters": [7]})
    by_dict = run_driver(SqlJob, {"dsn": pg_dsn, "statement": f"SELECT name FROM {table} WHERE id = %(id)s",
                                  "parameters": {"id": 8}})
    assert by_list.details["rows"] == [["n7"]]
    assert by_dict.details["rows"] == [["n8"]]


def test_sql_write_is_committed(pg_dsn: str, pg_table) -> None:
    table, conn = pg_table
    result = run_driver(SqlJob, {"dsn": pg_dsn, "statement": f"DELETE FROM {table} WHERE id > %s", "parameters": [25]})
    assert result == JobResult(True, None, {"rowcount": 5})
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table}")
        assert cur.fetchone()[0] == 25


def test_sql_error_is_failed_result_and_rolled_back(pg_dsn: str, pg_table) -> None:
    table, conn = pg_table
    statement = f"WITH d AS (DELETE FROM {table} RETURNING id) SELECT 1 / (count(*) - count(*)) FROM d"
    result = run_driver(SqlJob, {"dsn": pg_dsn, "statement": statement})
    assert not result.success
    assert "division by zero" in result.error_message
    assert result.details == {"sqlstate": "22012"}
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table}")
        assert cur.fetchone()[0] == 30


def test_sql_connection_failure_never_shows_the_password() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    dsn = f"postgresql://someone:S3cretPassw0rd@127.0.0.1:{port}/db"
    result = run_driver(SqlJob, {"dsn": dsn, "statement": "SELECT 1"})
    assert not result.success
    assert "could not connect" in result.error_message
    assert "S3cretPassw0rd" not in result.error_message
    assert redact_dsn(dsn) == f"postgresql://someone:***@127.0.0.1:{port}/db"
    with pytest.raises(ConfigurationError) as info:
        SqlJob().validate_configuration({"dsn": "mysql://u:S3cretPassw0rd@h/db", "statement": "SELECT 1"})
    assert "S3cretPassw0rd" not in str(info.value)


def test_sql_cancel_event_cancels_the_statement(pg_dsn: str) -> None:
    import psycopg2

    marker = f"mjsched-cancel-{uuid.uuid4().hex[:8]}"
    context = make_context("sql", {"dsn": pg_dsn, "statement": f"SELECT pg_sleep(30) /* {marker} */"})
    worker = DriverThread(SqlJob, context)
    worker.start()
    probe = psycopg2.connect(pg_dsn)
    probe.autocommit = True
    try:
        def running() -> bool:
            with probe.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s",
                            (f"%{marker}%",))
                return cur.fetchone()[0] > 1  # the statement itself, besides this probe's own query text
        wait_until(running)
    finally:
        probe.close()
    started = time.monotonic()
    context.cancel_event.set()
    worker.join(10)
    assert not worker.is_alive()
    assert time.monotonic() - started < 5
    assert worker.result is not None and not worker.result.success
    assert worker.result.error_message.startswith("cancelled")


@pytest.mark.parametrize("config, field", [
    ({"statement": "SELECT 1"}, "configuration.dsn"),
    ({"dsn": "mysql://h/db", "statement": "SELECT 1"}, "configuration.dsn"),
    ({"dsn": "postgresql://h/db"}, "configuration.statement"),
    ({"dsn": "postgresql://h/db", "statement": " "}, "configuration.statement"),
    ({"dsn": "postgresql://h/db", "statement": "SELECT %s", "parameters": 5}, "configuration.parameters"),
])
def test_sql_validate_configuration_names_the_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        SqlJob().validate_configuration(config)
    assert info.value.field == field
