"""One redaction rule, applied to everything the CLI prints, logs, stores as an outcome or notifies.

Every secret below is a distinct marker; the test runs each command that prints data (text
and --json) and greps everything it wrote, stdout and stderr, for every marker.
"""
from __future__ import annotations

import json
from typing import Any

import pytest

from mjsched.redaction import is_secret_key, redact, redact_text
from tests.cli.conftest import Cli

SECRETS = [f"S3CRET{n}x" for n in range(1, 10)]


def leak(context: Any = None) -> None:
    """A python job whose error names a DSN with its password (as a driver's error might)."""
    raise RuntimeError(f"could not reach postgresql://app:{SECRETS[6]}@db.internal:5432/app")


def _jobs(cli: Cli, dsn: str) -> None:
    sql = {"dsn": f"postgresql://app:{SECRETS[0]}@127.0.0.1:1/app?sslpassword={SECRETS[1]}",
           "statement": "SELECT 1"}
    http = {"url": f"https://hooks.example/x?token={SECRETS[2]}",
            "headers": {"Authorization": f"Bearer {SECRETS[3]}", "X-Api-Key": SECRETS[4]}}
    shell = {"command": ["sh", "-c", f"echo postgresql://u:{SECRETS[5]}@h/d; echo password={SECRETS[7]} >&2; exit 3"]}
    python = {"callable": "tests.cli.test_secrets:leak", "kwargs": {}, "api_token": SECRETS[8]}
    for name, driver, config in (("sql-job", "sql", sql), ("http-job", "http", http),
                                 ("shell-job", "shell", shell), ("python-job", "python", python)):
        cli("jobs", "add", "--dsn", dsn, "--name", name, "--driver", driver, "--cron", "0 3 * * *",
            "--config", json.dumps(config), expect=0)


def test_no_command_prints_a_secret(cli: Cli, pg_dsn: str) -> None:
    _jobs(cli, pg_dsn)
    outputs: list[str] = []
    for job in ("shell-job", "python-job"):
        result = cli("execute", "--dsn", pg_dsn, job, "-v", expect=1)
        outputs.append(result.stdout + result.stderr)
    commands = [["jobs", "list"], ["jobs", "list", "--all"], ["runs"], ["status"], ["config"]]
    commands += [["jobs", "show", name] for name in ("sql-job", "http-job", "shell-job", "python-job")]
    for command in commands:
        for extra in ([], ["--json"]):
            result = cli(*command, "--dsn", pg_dsn, *extra, expect=0)
            outputs.append(result.stdout + result.stderr)
    printed = "\n".join(outputs)
    assert "***" in printed                       # the commands did print the redacted fields
    assert "127.0.0.1:1/app" in printed           # and still say where a job connects
    leaked = [s for s in SECRETS if s in printed]
    assert not leaked, f"printed: {leaked}"


def test_outcomes_are_stored_redacted(cli: Cli, pg_dsn: str, sql: Any) -> None:
    _jobs(cli, pg_dsn)
    cli("execute", "--dsn", pg_dsn, "shell-job", expect=1)
    cli("execute", "--dsn", pg_dsn, "python-job", expect=1)
    rows = sql.rows("SELECT error_message, details::text AS details FROM mjsched.scheduled_job_run")
    assert len(rows) == 2
    stored = json.dumps(rows)
    assert "***" in stored
    assert not [s for s in SECRETS if s in stored]


@pytest.mark.parametrize("key", ["password", "db_password", "PWD", "apiKey", "X-Api-Key", "secret", "client_secret",
                                 "authToken", "token", "private_key", "Authorization", "sslpassword"])
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)
    assert redact({key: "v", "host": "h"}) == {key: "***", "host": "h"}


@pytest.mark.parametrize("key", ["host", "command", "statement", "url", "monkey", "tokenizer_name", "cwd", "key"])
def test_ordinary_keys(key: str) -> None:
    assert not is_secret_key(key)


@pytest.mark.parametrize("text, expected", [
    ("postgresql://app:pw@db:5432/x", "postgresql://app:***@db:5432/x"),
    ("mssql://sa:p@ss@host/db", "mssql://sa:***@host/db"),
    ("Driver={ODBC};Server=x;UID=sa;PWD={p;w};Database=y", "Driver={ODBC};Server=x;UID=sa;PWD=***;Database=y"),
    ("host=x password=abc dbname=y", "host=x password=*** dbname=y"),
    ("https://h/x?token=abc&x=1", "https://h/x?token=***&x=1"),
    ("postgresql://app@db/x and mailto:a@b", "postgresql://app@db/x and mailto:a@b"),
    ("token mismatch: the slot was handed off", "token mismatch: the slot was handed off"),
])
def test_redact_text(text: str, expected: str) -> None:
    assert redact_text(text) == expected
