"""A machine without the ODBC driver manager: the suite still collects, the SQL Server half
skips with its reason, and mjsched on PostgreSQL never imports pyodbc.

``import pyodbc`` raises ImportError when ``libodbc.so.2`` is missing. Here a module named
``pyodbc`` that raises that error shadows the real one (``PYTHONPATH``); ``.ci/run`` also
proves it with the real library hidden in a mount namespace.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import REPO, clean_env

MISSING = "libodbc.so.2: cannot open shared object file: No such file or directory"


@pytest.fixture
def no_odbc(tmp_path: Path) -> dict[str, str]:
    """An environment where ``import pyodbc`` fails as it does without unixODBC."""
    shadow = tmp_path / "no-odbc"
    shadow.mkdir()
    (shadow / "pyodbc.py").write_text(f"raise ImportError({MISSING!r})\n")
    env = clean_env()
    env["PYTHONPATH"] = f"{shadow}:{env['PYTHONPATH']}"
    for key in ("MJSCHED_TEST_POSTGRES_DSN", "MJSCHED_REQUIRE_POSTGRES", "MJSCHED_PG_BIN"):
        env.pop(key, None)
    return env


def pytest_in(env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_without_libodbc_the_suite_collects_and_sql_server_skips_with_its_reason(no_odbc: dict[str, str]) -> None:
    collected = pytest_in(no_odbc, "--collect-only", "-q", "-rs")
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert "tests collected" in collected.stdout
    assert "pyodbc cannot be imported" in collected.stdout and MISSING in collected.stdout   # the module skip

    # the dialect-parametrized contract suite: its SQL Server half skips with the reason
    mssql_half = pytest_in(no_odbc, "-q", "-rs", "tests/integration/test_procedures.py", "-k", "mssql")
    assert mssql_half.returncode == 0, mssql_half.stdout[-3000:] + mssql_half.stderr[-3000:]
    assert " passed" not in mssql_half.stdout and " skipped" in mssql_half.stdout
    assert "no SQL Server tests: pyodbc cannot be imported" in mssql_half.stdout


def test_without_libodbc_the_tests_that_need_pyodbc_but_no_server_skip_with_that_reason(
        no_odbc: dict[str, str]) -> None:
    """``pytest.importorskip("pyodbc")`` skips only for a missing module: a pyodbc that cannot
    load libodbc.so.2 failed these tests (issue 35 item 1). They skip as the SQL Server half does."""
    result = pytest_in(no_odbc, "-q", "-rs", "tests/unit/test_call_bounds.py", "tests/integration/test_declared_jobs.py",
                       "-k", "sql_server")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " failed" not in result.stdout and "2 skipped" in result.stdout, result.stdout[-3000:]
    assert "no SQL Server tests: pyodbc cannot be imported" in result.stdout


PROGRAM = """
import sys
import mjsched
from mjsched.cli import main

dsn = sys.argv[1]
engine = mjsched.SchedulingEngine(dsn, lease_timeout=30)
engine.install()
job = engine.create_job(name="echo", driver="shell", cron="* * * * *", configuration={"command": ["true"]})
run = engine.execute_job(job)
assert run.status.value == "Completed", run
engine.dispatch_due_jobs()
engine.close()
assert main(["--dsn", dsn, "jobs", "list"]) == 0
print("modules:", sorted(m for m in sys.modules if "odbc" in m or "mssql" in m))
"""


def test_mjsched_on_postgresql_never_imports_pyodbc(no_odbc: dict[str, str], pg_dsn: str) -> None:
    result = subprocess.run([sys.executable, "-c", PROGRAM, pg_dsn], cwd=REPO, env=no_odbc, capture_output=True,
                            text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "modules: []" in result.stdout, result.stdout


def test_the_readme_test_command_is_what_ci_runs() -> None:
    """CI runs "the test command written in README.md": the two must not drift apart."""
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    commands = [line.split("&&", 1)[1].strip() for line in readme.splitlines()
                if line.startswith("pip install -e '.[test]' && ")]
    assert commands, "README.md has no `pip install -e '.[test]' && ...` test command"
    assert len(set(commands)) == 1, commands           # the Two commands and Tests sections agree
    assert commands[0] in ci, (commands[0], ".ci/run")
    # .ci/fresh-machine runs the command of README.md's <!-- testcommand --> block, whole
    import re
    block = re.search(r"<!-- testcommand -->\s*```sh\n(.*?)```\s*<!-- /testcommand -->", readme, re.S)
    assert block and block.group(1).strip() == f"pip install -e '.[test]' && {commands[0]}", block
    fresh = (REPO / ".ci" / "fresh-machine").read_text()
    assert "testcommand=$(readme_block testcommand)" in fresh and 'bash -c "$suite"' in fresh
