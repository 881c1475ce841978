"""Fixtures of the interleaving harness: one arena (database + connections) per test
module and dialect, a seed, and the counts every test adds to the session's summary.

MJSCHED_INTERLEAVING_SEED fixes the seed (printed at the start and in every failure).
MJSCHED_INTERLEAVING_REV=<git revision> builds the arenas from that revision's
sql/postgres/NNN_*.sql (``git show``) instead of the working tree, to measure older
procedures (e.g. a5c28c1) with the same rounds. MJSCHED_INTERLEAVING_SCALE multiplies
the number of rounds (default 1). MJSCHED_INTERLEAVING_REPORT=<path> also writes the
summary there as JSON.
"""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import psycopg2
import pytest

from tests.interleaving.rounds import Arena, Stats
from tests.support import pg

DIALECTS = [pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("mssql", marks=pytest.mark.mssql)]
REPO = Path(__file__).resolve().parents[2]
SUMMARY: dict[str, dict[str, Stats]] = {}       # mode -> test label -> counts
STARTED = time.monotonic()
SEED = int(os.environ.get("MJSCHED_INTERLEAVING_SEED") or random.SystemRandom().randrange(10**9))
REV = os.environ.get("MJSCHED_INTERLEAVING_REV") or None


def scale() -> float:
    return float(os.environ.get("MJSCHED_INTERLEAVING_SCALE") or 1)


def rng_for(name: str) -> random.Random:
    """A random stream per test, reproducible from the session seed."""
    return random.Random(f"{SEED}:{name}")


def record(mode: str, label: str, stats: Stats) -> None:
    SUMMARY.setdefault(mode, {})[label] = stats


def _revision_scripts(rev: str) -> list[tuple[str, str]]:
    names = subprocess.run(["git", "-C", str(REPO), "ls-tree", "--name-only", rev, "sql/postgres/"],
                           check=True, capture_output=True, text=True).stdout.split()
    found = sorted(n for n in names if re.fullmatch(r"sql/postgres/\d{3}_[^/]+\.sql", n))
    return [(n, subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{n}"], check=True,
                               capture_output=True, text=True).stdout) for n in found]


@pytest.fixture(scope="module", params=DIALECTS)
def arena(request: pytest.FixtureRequest) -> Iterator[Arena]:
    """A database of this module's own, and the connections that play its rounds."""
    if request.param == "mssql":
        request.getfixturevalue("mssql_server")     # skips here: no SQL Server
        pytest.skip("the SQL Server arena (states, checks, pauses in T-SQL) is not written yet; "
                    "catalogue.SQL has its calls")
    server = request.getfixturevalue("pg_server")
    name = f"mjsched_il_{uuid.uuid4().hex[:10]}"
    if REV:
        pg.create_database(server, name)
        conn = psycopg2.connect(pg.with_database(server, name))
        conn.autocommit = True
        with conn.cursor() as cur:
            for _script, text in _revision_scripts(REV):
                cur.execute(text)
        conn.close()
        label = f"sql/postgres of {REV}"
    else:
        pg.create_database(server, name, template=request.getfixturevalue("pg_template"))
        label = "sql/postgres of the working tree"
    handle = Arena("postgres", pg.with_database(server, name), label)
    try:
        yield handle
    finally:
        handle.close()
        pg.drop_database(server, name)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"interleaving: seed {SEED} (MJSCHED_INTERLEAVING_SEED), schema "
            f"{'revision ' + REV if REV else 'working tree'}"]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not SUMMARY:
        return
    write = terminalreporter.write_line
    write("")
    write(f"==== interleaving harness (seed {SEED}, schema {'revision ' + REV if REV else 'working tree'}) ====")
    grand = Stats()
    report: dict[str, Any] = {"seed": SEED, "rev": REV, "modes": {}}
    for mode, tests in SUMMARY.items():
        total = Stats()
        for label, stats in sorted(tests.items()):
            total.merge(stats)
            if stats.total_violations or stats.deadlocks or stats.errors:
                write(f"  {mode} {label}: {stats.line()}")
        write(f"{mode}: {total.line()}")
        grand.merge(total)
        report["modes"][mode] = {"total": vars(total),
                                 "tests": {k: vars(v) for k, v in tests.items()}}
    write(f"ALL: {grand.line()}  ({time.monotonic() - STARTED:.0f} s)")
    report["total"] = vars(grand)
    path = os.environ.get("MJSCHED_INTERLEAVING_REPORT")
    if path:
        Path(path).write_text(json.dumps(report, indent=1, default=str))
