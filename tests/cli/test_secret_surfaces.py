"""The redaction corpus through every surface that prints run data.

Two jobs carry every probe of tests/support/secret_corpus.py three ways: in their
configuration, in what their run prints (a shell job's stdout, with its own ``env``
secret echoed bare) and in their error (a python job raising with the probes). Each
surface — the rows stored, the notification, log records (JSON and text formatters, on
handlers with no filter of their own), the dashboard's pages, the CLI in text and
``--json`` — must show no secret, and where it shows a run's output, the rest of each
probe's line and the ordinary lines unchanged.
"""
from __future__ import annotations

import html
import io
import json
import logging
import threading
from typing import Any, Iterator

import pytest

import mjsched
from mjsched.logfmt import JsonLinesFormatter
from mjsched.notify import Notifier
from tests.cli.conftest import Cli
from tests.support.secret_corpus import KNOWN_SECRET, ORDINARY, PROBES

SECRETS = [p.secret for p in PROBES] + [KNOWN_SECRET]
PRINTED = "\n".join([p.text for p in PROBES] + list(ORDINARY))


def shout(lines: list[str]) -> None:
    """The python job: fails with every probe in its error."""
    raise RuntimeError("\n".join(lines))


class Recording(Notifier):
    """A notifier that keeps what it was given (a real one would mail or post it)."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.changed = threading.Condition()

    def notify(self, job: Any, run: Any, notification: Any) -> None:
        with self.changed:
            self.sent.append("\n".join([notification.subject, notification.body, json.dumps(notification.metadata),
                                        str(run.error_message), json.dumps(run.details, default=str)]))
            self.changed.notify_all()

    def wait_for(self, count: int, timeout: float = 30.0) -> list[str]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.sent) >= count, timeout), self.sent
            return list(self.sent)


@pytest.fixture
def captured_logs() -> Iterator[dict[str, io.StringIO]]:
    """What handlers without a RedactingFilter of their own receive from mjsched."""
    streams = {"json": io.StringIO(), "text": io.StringIO()}
    handlers = [logging.StreamHandler(streams["json"]), logging.StreamHandler(streams["text"])]
    handlers[0].setFormatter(JsonLinesFormatter())
    handlers[1].setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("mjsched")
    old_level = root.level
    root.setLevel(logging.DEBUG)
    for handler in handlers:
        root.addHandler(handler)
    yield streams
    for handler in handlers:
        root.removeHandler(handler)
    root.setLevel(old_level)


def _make_jobs(engine: mjsched.SchedulingEngine) -> tuple[str, str]:
    script = "cat <<'PROBES'\n" + PRINTED + "\nPROBES\necho \"connecting with $DB_PASS\"\nexit 3\n"
    shell_id = engine.create_job("probe-shell", "shell", "0 3 * * *", notify_on_failure=True,
                                 configuration={"command": ["sh", "-c", script], "env": {"DB_PASS": KNOWN_SECRET}})
    python_id = engine.create_job("probe-python", "python", "0 3 * * *", notify_on_failure=True,
                                  configuration={"callable": "tests.cli.test_secret_surfaces:shout",
                                                 "kwargs": {"lines": [p.text for p in PROBES]}})
    return shell_id, python_id


def _strings(value: Any) -> str:
    """Every string of a JSON document, one a line (what a reader of the JSON sees)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(_strings(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(_strings(v) for v in value)
    return str(value)


def _assert_no_secret(surfaces: dict[str, str]) -> None:
    leaks = {name: [s for s in SECRETS if s in text] for name, text in surfaces.items()}
    assert not any(leaks.values()), {k: f"{len(v)} of {len(SECRETS)} secrets shown" for k, v in leaks.items() if v}
    assert all("***" in text for text in surfaces.values()), [k for k, v in surfaces.items() if "***" not in v]


def _assert_rest_kept(name: str, text: str) -> None:
    missing = [(p.name, k) for p in PROBES for k in p.kept if k not in text]
    assert not missing, (name, missing)


def test_no_surface_of_the_engine_shows_a_secret(make_engine: Any, captured_logs: dict[str, io.StringIO],
                                                  sql: Any) -> None:
    from mjsched.web import create_app
    from tests.web.conftest import local_peer
    from werkzeug.test import Client

    notifier = Recording()
    engine = make_engine(notifier=notifier)
    shell_id, python_id = _make_jobs(engine)
    shell_run = engine.execute_job(shell_id)
    python_run = engine.execute_job(python_id)
    assert shell_run.status.value == python_run.status.value == "Failed"
    sent = notifier.wait_for(2)

    stored = sql.rows("SELECT error_message, details::text AS details FROM mjsched.scheduled_job_run")
    stdout = json.loads(next(r["details"] for r in stored if "stdout_tail" in r["details"]))["stdout_tail"]
    error = next(r["error_message"] for r in stored if r["error_message"].startswith("RuntimeError"))
    surfaces = {"stored rows": json.dumps(stored), "notifications": "\n".join(sent),
                "log records (JSON formatter)": captured_logs["json"].getvalue(),
                "log records (text formatter)": captured_logs["text"].getvalue()}

    dashboard = create_app(engine)
    try:
        client = Client(local_peer(dashboard))
        for url in ("/jobs", f"/jobs/{shell_id}", f"/jobs/{python_id}", "/runs", "/runs?status=Failed"):
            response = client.get(url)
            assert response.status_code == 200, url
            surfaces[f"dashboard {url}"] = html.unescape(response.get_data(as_text=True))
    finally:
        dashboard.close()

    _assert_no_secret(surfaces)
    # the rest of each line is still there: in the output and the error as stored and notified
    for name, text in (("stdout_tail", stdout), ("error_message", error), ("notification", sent[0] + sent[1]),
                       ("dashboard error", surfaces["dashboard /runs?status=Failed"])):
        _assert_rest_kept(name, text)
    assert "connecting with ***" in stdout
    for line in ORDINARY:
        assert line in stdout, line
        assert line in surfaces["notifications"].replace("\\n", "\n"), line


def test_no_cli_command_shows_a_secret(cli: Cli, pg_dsn: str, make_engine: Any) -> None:
    engine = make_engine()
    _make_jobs(engine)
    outputs: dict[str, str] = {}
    for job in ("probe-shell", "probe-python"):
        result = cli("execute", "--dsn", pg_dsn, job, "-v", expect=1)
        outputs[f"execute {job} -v"] = result.stdout + result.stderr
    commands = [["jobs", "show", "probe-shell"], ["jobs", "show", "probe-python"], ["runs"],
                ["runs", "--job", "probe-shell"], ["jobs", "list"]]
    for command in commands:
        for extra in ([], ["--json"]):
            result = cli(*command, "--dsn", pg_dsn, *extra, expect=0)
            outputs[" ".join(command + extra)] = result.stdout + result.stderr
    leaks = {name: [s for s in SECRETS if s in text] for name, text in outputs.items()}
    assert not any(leaks.values()), {k: f"{len(v)} of {len(SECRETS)} secrets shown" for k, v in leaks.items() if v}

    runs = json.loads(outputs["runs --json"])
    shown = _strings(runs)
    _assert_rest_kept("runs --json", shown)
    for line in ORDINARY:
        assert line in shown, line
    assert "***" in outputs["jobs show probe-shell"] and "***" in outputs["jobs show probe-shell --json"]
