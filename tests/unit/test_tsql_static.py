"""Static check of the T-SQL (no SQL Server can run on this project's machines).

Every file in ``sql/mssql`` must parse with two independent T-SQL parsers:

* **sqlfluff** (dialect ``tsql``), over the whole file, GO separators included. Any
  unparsable section is an error, and so is an *implicit procedure call*: T-SQL lets a
  batch call a procedure without EXEC, so sqlfluff reads a misspelled keyword
  (``WHRE j.id = 1``) as a call to a procedure named ``WHRE``. mjsched never calls a
  procedure without EXEC, so such a node is a defect.
* **sqlglot** (``read="tsql"``, ``error_level=RAISE``), batch by batch: ``GO`` is a client
  separator, not T-SQL, and sqlglot fed a whole script swallows each batch into one
  opaque command. sqlglot does not model TRY/CATCH, THROW, triggers or GRANT; it falls
  back to an opaque command for those, and a fallback anywhere else is an error.

Then broken copies of the real batches (a missing END, a misspelled keyword, a missing
comma, an unclosed parenthesis) must each be rejected by at least one of the two, so
the check is shown to be able to fail. A missing comma that leaves valid SQL behind
(``SELECT a b`` -- b is then an alias) is no syntax error; the parity test catches it in
result columns. Blind spots of BOTH parsers, measured with sqlfluff 4.x / sqlglot 30.x:
a missing comma between two assignments of an UPDATE's SET list, between two function
arguments inside an UPDATE TOP statement (sqlglot silently drops the rest of an UPDATE
TOP it cannot model inside a procedure body), and before a @variable in a SELECT list
(both read it as an alias, which SQL Server rejects).
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import sqlfluff
import sqlglot
from sqlfluff.api.simple import APIParsingError
from sqlfluff.core import FluffConfig

from mjsched import sqlfiles
from mjsched.backends import queries as read_queries
from tests.support import sqlparity
from tests.support.sqlparity import Tok, split_batches, tokenize

SQL_DIR = Path(__file__).resolve().parents[2] / "sql" / "mssql"
FILES = sorted(SQL_DIR.rglob("*.sql"))      # every file as written, the parts of a split script too
VERSIONED = sqlfiles.scripts_in(SQL_DIR)     # the versioned scripts as install() applies them
PROCEDURES = sqlfiles.versioned("mssql", "002_procedures").text
PG_PROCEDURES = sqlfiles.versioned("postgres", "002_procedures").text


def _id(path: Path) -> str:
    return path.relative_to(SQL_DIR).as_posix()
_FLUFF = FluffConfig(overrides={"dialect": "tsql", "large_file_skip_byte_limit": 0})

# Statements sqlglot does not model and parses as an opaque Command (checked by sqlfluff).
_SQLGLOT_OPAQUE = re.compile(
    r"^\s*(BEGIN\s+TRY|END\s+TRY|BEGIN\s+CATCH|END\s+CATCH|BEGIN\s+THROW|THROW"
    r"|CREATE\s+OR\s+ALTER\s+TRIGGER|GRANT|REVOKE|DENY|IF\s+DATABASE_PRINCIPAL_ID"
    r"|ALTER\s+TABLE\s+[\w.\[\]]+\s+WITH\s+NOCHECK\s+ADD)\b", re.I)


# -- the two checks -----------------------------------------------------------------------------

def _implicit_calls(node: Any, found: list[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "execute_script_statement":
                first = value[0] if isinstance(value, list) else value
                if not (isinstance(first, dict) and str(first.get("keyword", "")).upper() in ("EXEC", "EXECUTE")):
                    found.append(f"implicit procedure call (misspelled keyword?): {str(value)[:160]}")
            _implicit_calls(value, found)
    elif isinstance(node, list):
        for item in node:
            _implicit_calls(item, found)


def sqlfluff_errors(text: str) -> list[str]:
    try:
        tree = sqlfluff.parse(text, config=_FLUFF)
    except APIParsingError as exc:
        return [f"line {v.line_no}: {v.desc()}" for v in exc.violations] or [str(exc)]
    found: list[str] = []
    _implicit_calls(tree, found)
    return found


class _Fallbacks(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Falling back to parsing as a 'Command'" in message:
            self.texts.append(message.split("' contains unsupported syntax")[0].lstrip("'"))


_TRIGGER_UPDATE = re.compile(r"\bUPDATE\((\w+)\)")


def sqlglot_errors(text: str) -> list[str]:
    errors: list[str] = []
    handler = _Fallbacks()
    logger = logging.getLogger("sqlglot")
    logger.addHandler(handler)
    try:
        for batch in split_batches(text):
            # A trigger's UPDATE(column) (Microsoft's CREATE TRIGGER: "IF UPDATE (column)") is
            # a function sqlglot does not know: it reads an UPDATE statement. Parsed as a call.
            batch = _TRIGGER_UPDATE.sub(r"UPDATE_OF(\1)", batch)
            try:
                sqlglot.parse(batch, read="tsql", error_level=sqlglot.ErrorLevel.RAISE)
            except sqlglot.errors.ParseError as exc:
                errors.append(str(exc).splitlines()[0])
    finally:
        logger.removeHandler(handler)
    errors += [f"unexpected opaque command: {t[:120]!r}" for t in handler.texts if not _SQLGLOT_OPAQUE.match(t)]
    return errors


# -- the real files -------------------------------------------------------------------------------

def test_there_are_tsql_files() -> None:
    names = {_id(p) for p in FILES}
    assert {"001_schema.sql", "002_procedures/10_foundations.sql", "002_procedures/50_claims.sql",
            "grants.sql"} <= names


def as_sent(path: Path) -> str:
    """The file's T-SQL as the server gets it: queries.sql's named reads are sent one at a time,
    with their ODBC markers bound (here NULL) and their column lists filled in."""
    if path.name != read_queries.FILE:
        return path.read_text(encoding="utf-8")
    return "\nGO\n".join(
        read_queries.query("mssql", name, job_columns="j.*", run_columns="*").replace("?", "NULL")
        for name in read_queries.named("mssql"))


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_file_parses_with_sqlfluff(path: Path) -> None:
    assert sqlfluff_errors(as_sent(path)) == []


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_file_parses_with_sqlglot(path: Path) -> None:
    assert sqlglot_errors(as_sent(path)) == []


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_batches_are_separated_by_go_lines_only(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    # a GO that is not alone on its line would be sent to the server as T-SQL
    assert not re.search(r"(?im)^[ \t]*GO\b[ \t]*[^\s-]", text)
    assert not re.search(r"(?im);[ \t]*GO[ \t]*$", text)


def test_every_routine_batch_sets_nocount_and_xact_abort() -> None:
    for batch in split_batches(PROCEDURES):
        head = re.search(r"(?i)CREATE\s+OR\s+ALTER\s+PROCEDURE\s+(\S+)", batch)
        if head:
            assert re.search(r"(?i)SET\s+NOCOUNT\s+ON", batch), head.group(1)
            assert re.search(r"(?i)SET\s+XACT_ABORT\s+ON", batch), head.group(1)
        if re.search(r"(?i)BEGIN\s+TRANSACTION", batch):
            assert re.search(r"(?i)BEGIN\s+CATCH.*ROLLBACK\s+TRANSACTION.*THROW;", batch, re.S), batch[:80]


def test_the_only_clock_is_sysdatetimeoffset() -> None:
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
        for other in ("GETDATE", "GETUTCDATE", "SYSDATETIME(", "SYSUTCDATETIME", "CURRENT_TIMESTAMP"):
            assert other not in code.upper(), f"{path.name} uses {other}"


def test_character_lengths_are_within_what_sql_server_accepts() -> None:
    """nvarchar(n) takes n <= 4000 and varchar(n) n <= 8000 (beyond: max); neither parser knows,
    and SQL Server rejects the whole procedure (004 once declared nvarchar(4200))."""
    found = []
    for path in FILES:
        code = _code(path.read_text(encoding="utf-8"))
        for kind, n in re.findall(r"(?i)\b(n?varchar|n?char)\s*\(\s*(\d+)\s*\)", code):
            if int(n) > (4000 if kind.lower().startswith("n") else 8000) or int(n) < 1:
                found.append(f"{path.name}: {kind}({n})")
    assert found == []


# -- the stated minimum: SQL Server 2016 SP1 -----------------------------------------------------------

MINIMUM = "SQL Server 2016 SP1"
# T-SQL that SQL Server has only from a later version than MINIMUM, whatever the database's
# compatibility level (each from Microsoft's documentation of it: "Applies to: SQL Server
# 2017 (14.x) and later", ...). Neither parser knows versions: sqlglot and sqlfluff parse
# STRING_AGG, and SQL Server 2016 answers it with error 195 (issue 35 item 11).
NEWER_SYNTAX: list[tuple[str, str, str]] = [
    (r"\bSTRING_AGG\s*\(", "STRING_AGG", "2017"),
    (r"\bTRIM\s*\(", "TRIM", "2017"),
    (r"\bCONCAT_WS\s*\(", "CONCAT_WS", "2017"),
    (r"\bTRANSLATE\s*\(", "TRANSLATE", "2017"),
    (r"\bAS\s+(?:NODE|EDGE)\b|\bMATCH\s*\(", "graph tables (AS NODE / AS EDGE, MATCH)", "2017"),
    (r"\bRESUMABLE\s*=", "resumable index operations (RESUMABLE =)", "2017"),
    (r"\bAPPROX_COUNT_DISTINCT\s*\(", "APPROX_COUNT_DISTINCT", "2019"),
    (r"\bOPTIMIZE_FOR_SEQUENTIAL_KEY\b", "OPTIMIZE_FOR_SEQUENTIAL_KEY", "2019"),
    (r"\b\w+_UTF8\b", "a UTF-8 collation (_UTF8)", "2019"),
    (r"\bGREATEST\s*\(", "GREATEST", "2022"),
    (r"\bLEAST\s*\(", "LEAST", "2022"),
    (r"\bDATE_BUCKET\s*\(", "DATE_BUCKET", "2022"),
    (r"\bDATETRUNC\s*\(", "DATETRUNC", "2022"),
    (r"\bGENERATE_SERIES\s*\(", "GENERATE_SERIES", "2022"),
    (r"\bAPPROX_PERCENTILE_(?:CONT|DISC)\s*\(", "APPROX_PERCENTILE_CONT / _DISC", "2022"),
    (r"\bJSON_(?:OBJECT|ARRAY|OBJECTAGG|ARRAYAGG|PATH_EXISTS)\s*\(", "JSON_OBJECT / JSON_ARRAY / "
     "JSON_OBJECTAGG / JSON_ARRAYAGG / JSON_PATH_EXISTS", "2022"),
    (r"\b(?:LEFT_SHIFT|RIGHT_SHIFT|BIT_COUNT|GET_BIT|SET_BIT)\s*\(", "the bit manipulation functions", "2022"),
    (r"\bIS\s+(?:NOT\s+)?DISTINCT\s+FROM\b", "IS [NOT] DISTINCT FROM", "2022"),
    (r"\b(?:IGNORE|RESPECT)\s+NULLS\b", "IGNORE NULLS / RESPECT NULLS", "2022"),
    (r"\bWINDOW\s+\w+\s+AS\s*\(", "the WINDOW clause", "2022"),
]
# Functions 2016 has whose extra argument came later: name -> (arguments 2016 takes at most, what, version).
NEWER_ARGUMENTS: dict[str, tuple[int, str, str]] = {
    "STRING_SPLIT": (2, "STRING_SPLIT's enable_ordinal argument", "2022"),
    "LTRIM": (1, "LTRIM's characters argument", "2022"),
    "RTRIM": (1, "RTRIM's characters argument", "2022"),
    "ISJSON": (1, "ISJSON's json_type_constraint argument", "2022"),
}


def _without_comments_and_literals(text: str) -> str:
    """Comments first: an apostrophe in one ("the job's") would open a string."""
    text = _code(re.sub(r"/\*.*?\*/", " ", text, flags=re.S))
    return re.sub(r"N?'(?:[^']|'')*'", "''", text)          # a string may hold anything


def _arguments(code: str, open_paren: int) -> int:
    """How many arguments the call whose "(" is at ``open_paren`` has (top-level commas + 1)."""
    depth, commas, empty = 0, 0, True
    for ch in code[open_paren:]:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return 0 if empty else commas + 1
        elif ch == "," and depth == 1:
            commas += 1
        elif not ch.isspace() and depth >= 1:
            empty = False
    return commas + 1


def newer_than_minimum(text: str) -> list[str]:
    """What ``text`` (T-SQL) uses that SQL Server has only after MINIMUM, one line each."""
    code = _without_comments_and_literals(text)
    found = []
    for pattern, what, version in NEWER_SYNTAX:
        for m in re.finditer(pattern, code, re.I):
            line = code.count("\n", 0, m.start()) + 1
            found.append(f"line {line}: {what} (SQL Server {version})")
    for name, (most, what, version) in NEWER_ARGUMENTS.items():
        for m in re.finditer(rf"\b{name}\s*\(", code, re.I):
            if _arguments(code, m.end() - 1) > most:
                line = code.count("\n", 0, m.start()) + 1
                found.append(f"line {line}: {what} (SQL Server {version})")
    return found


def test_the_documented_minimum_is_the_one_checked() -> None:
    """The list above is for MINIMUM: a change of the documented minimum revisits it."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "sqlserver.md").read_text(encoding="utf-8")
    assert f"{MINIMUM} or later" in docs
    assert f"Requires {MINIMUM} or later" in PROCEDURES


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_nothing_newer_than_the_documented_minimum(path: Path) -> None:
    assert newer_than_minimum(path.read_text(encoding="utf-8")) == [], f"{path.name} needs more than {MINIMUM}"


@pytest.mark.parametrize("sql, flagged", [
    # queries.sql's active_schedules before issue 35 item 11
    ("SELECT STRING_AGG(CASE WHEN s.nth <= 1000 THEN CAST(CONVERT(nvarchar(36), s.id) AS nvarchar(max)) END,\n"
     "       N',') AS job_ids FROM s", "STRING_AGG (SQL Server 2017)"),
    ("SET @v = TRIM(@p_name);", "TRIM (SQL Server 2017)"),
    ("SELECT CONCAT_WS(N' | ', a, b)", "CONCAT_WS (SQL Server 2017)"),
    ("SELECT TRANSLATE(x, N'ab', N'cd')", "TRANSLATE (SQL Server 2017)"),
    ("SELECT GREATEST(a, b), 1", "GREATEST (SQL Server 2022)"),
    ("SELECT LEAST(a, b)", "LEAST (SQL Server 2022)"),
    ("SELECT DATETRUNC(day, @now)", "DATETRUNC (SQL Server 2022)"),
    ("SELECT DATE_BUCKET(minute, 5, @now)", "DATE_BUCKET (SQL Server 2022)"),
    ("SELECT value FROM GENERATE_SERIES(1, 10)", "GENERATE_SERIES (SQL Server 2022)"),
    ("SELECT APPROX_COUNT_DISTINCT(id) FROM t", "APPROX_COUNT_DISTINCT (SQL Server 2019)"),
    ("SELECT JSON_OBJECT(N'a': 1)", "JSON_OBJECT"),
    ("SELECT JSON_ARRAY(1, 2)", "JSON_ARRAY"),
    ("WHERE a.x IS DISTINCT FROM b.x", "IS [NOT] DISTINCT FROM (SQL Server 2022)"),
    ("WHERE a.x IS NOT DISTINCT FROM b.x", "IS [NOT] DISTINCT FROM (SQL Server 2022)"),
    ("SELECT value, ordinal FROM STRING_SPLIT(@p, N',', 1)", "STRING_SPLIT's enable_ordinal argument"),
    ("SELECT LTRIM(@p, N' x')", "LTRIM's characters argument"),
    ("SELECT ISJSON(@p, OBJECT)", "ISJSON's json_type_constraint argument"),
    ("CREATE INDEX ix ON t (a) WITH (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)", "OPTIMIZE_FOR_SEQUENTIAL_KEY"),
    ("SELECT FIRST_VALUE(x) IGNORE NULLS OVER (ORDER BY y) FROM t", "IGNORE NULLS"),
])
def test_the_minimum_check_flags_what_2016_lacks(sql: str, flagged: str) -> None:
    found = newer_than_minimum(sql)
    assert found and any(flagged in f for f in found), found


@pytest.mark.parametrize("sql", [
    "SELECT LTRIM(RTRIM(@p))",                        # one argument each: 2016 has them
    "SELECT value FROM STRING_SPLIT(@p, N',')",       # two: 2016
    "SELECT ISJSON(@p), CONCAT(a, N',', b)",
    "SELECT N'STRING_AGG(x) in a message', DATEADD(second, 1, @now)",   # a string literal
    "-- TRIM(x) in the job's comment\nSELECT 1",
    "/* GREATEST(a, b) */ SELECT IIF(a > b, a, b)",
    "SELECT STUFF((SELECT N',' + CONVERT(nvarchar(36), id) FROM t FOR XML PATH('')), 1, 1, N'')",
    "SELECT x FROM t WHERE x IS NOT NULL",
])
def test_the_minimum_check_passes_what_2016_has(sql: str) -> None:
    assert newer_than_minimum(sql) == []


# -- locking, session options and collation --------------------------------------------------------

def _code(text: str) -> str:
    """``text`` without its -- comments (no string literal in sql/mssql holds "--")."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _routine(name: str) -> str:
    for path in FILES:
        for batch in split_batches(path.read_text(encoding="utf-8")):
            if re.search(rf"(?i)CREATE\s+OR\s+ALTER\s+(?:PROCEDURE|FUNCTION)\s+mjsched\.{name}\b", batch):
                return _code(batch)
    raise AssertionError(f"no routine mjsched.{name}")


def _exists_subqueries(code: str) -> list[str]:
    """The text of every ``EXISTS (...)`` subquery in ``code`` (NOT EXISTS included)."""
    toks = tokenize(code)
    found = []
    for n, t in enumerate(toks[:-1]):
        if t.up == "EXISTS" and toks[n + 1].text == "(":
            depth = 0
            for close in toks[n + 1:]:
                depth += {"(": 1, ")": -1}.get(close.text, 0)
                if depth == 0:
                    found.append(code[toks[n + 1].pos:close.pos + 1])
                    break
    return found


def _hints(subquery: str, table: str) -> set[str]:
    """The table hints on ``table`` in ``subquery`` (empty when it has none)."""
    m = re.search(rf"(?is)\bFROM\s+{re.escape(table)}\s+AS\s+\w+(?:\s+WITH\s*\(([^)]*)\))?", subquery)
    assert m, subquery
    return {h.strip().upper() for h in (m.group(1) or "").split(",") if h.strip()}


def _statements(code: str) -> list[str]:
    """The statements of ``code`` in order (split at top-level semicolons), whitespace-folded."""
    out, start, depth = [], 0, 0
    for t in tokenize(code):
        depth += {"(": 1, ")": -1}.get(t.text, 0)
        if t.text == ";" and depth == 0:
            out.append(" ".join(code[start:t.pos].split()))
            start = t.pos + 1
    return [x for x in out + [" ".join(code[start:].split())] if x]


def test_every_readpast_comes_with_readcommittedlock() -> None:
    """SQL Server refuses READPAST under READ_COMMITTED_SNAPSHOT without READCOMMITTEDLOCK."""
    hint_lists = [h for path in FILES for h in re.findall(r"(?i)\bWITH\s*\(([^)]*)\)",
                                                          _code(path.read_text(encoding="utf-8")))]
    readpast = [{x.strip().upper() for x in h.split(",")} for h in hint_lists if "READPAST" in h.upper()]
    assert len(readpast) >= 12
    assert all("READCOMMITTEDLOCK" in h for h in readpast), readpast


def test_lease_renewal_reaches_jobs_through_the_runs_token_index() -> None:
    """Without a seek, the renewal (renew_tokens) scans scheduled_job, taking or waiting for a
    lock on every row. It joins the runs' filtered token index, stating its filter (SQL Server
    matches a filtered index only against predicates the query states), then the job's primary
    key, in both branches (waiting and skipping)."""
    schema = sqlparity.parse_mssql((SQL_DIR / "001_schema.sql").read_text(encoding="utf-8"))
    index = schema.indexes["ix_scheduled_job_run_token"]
    assert (index.table, index.columns, index.where) == ("scheduled_job_run", ("lock_token",), "status = 'Running'")
    renew = _statements(_routine("renew_tokens"))
    found = [s for s in renew if "INSERT INTO @v_ids" in s]
    assert len(found) == 1, renew
    assert "JOIN mjsched.scheduled_job_run AS h ON h.lock_token = t.lock_token" in found[0]
    assert re.search(r"(?i)\bWHERE\s+h\.status\s*=\s*N'Running'", found[0])
    lock = [s for s in renew if "INSERT INTO @v_jobs" in s]
    assert len(lock) == 2, renew
    assert all(re.search(r"(?i)FROM @v_ids AS i JOIN mjsched\.scheduled_job AS j WITH \((UPDLOCK, ROWLOCK|"
                         r"UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)\) ON j\.id = i\.id\b", s) for s in lock), lock


def test_every_index_is_created_only_if_it_does_not_exist() -> None:
    """001 is re-run by install() after any change to it, and may be re-run by hand."""
    batches = split_batches((SQL_DIR / "001_schema.sql").read_text(encoding="utf-8"))
    created = 0
    for batch in batches:
        for name in re.findall(r"(?i)\bCREATE\s+(?:UNIQUE\s+)?(?:NONCLUSTERED\s+)?INDEX\s+(\w+)", batch):
            created += 1
            assert re.search(rf"(?is)IF\s+NOT\s+EXISTS\s*\(\s*SELECT\s+1\s+FROM\s+sys\.indexes\s+"
                             rf"WHERE\s+name\s*=\s*N'{name}'.*?\bBEGIN\s+CREATE\b", batch), name
    assert created >= 11


def test_the_test_clock_check_fails_closed() -> None:
    """IS_MEMBER / IS_SRVROLEMEMBER may return NULL; NULL must count as "not a member"."""
    clock = _routine("check_test_clock")
    assert re.search(r"(?i)ISNULL\(\s*IS_MEMBER\(N'db_owner'\)\s*,\s*0\s*\)\s*=\s*0", clock), clock
    assert re.search(r"(?i)ISNULL\(\s*IS_SRVROLEMEMBER\(N'sysadmin'\)\s*,\s*0\s*\)\s*=\s*0", clock), clock
    for path in FILES:
        code = _code(path.read_text(encoding="utf-8"))
        calls = re.findall(r"(?i)(\w*\(?)\s*\bIS_(?:SRVROLE)?MEMBER\s*\(", code)
        assert all(c.upper() == "ISNULL(" for c in calls), f"{path.name}: a membership test without ISNULL"


@pytest.mark.parametrize("script", VERSIONED, ids=lambda s: s.name)
def test_every_versioned_script_opens_with_the_session_options_batch(script: sqlfiles.SqlScript) -> None:
    """A procedure keeps the SET options it was created with; created under QUOTED_IDENTIFIER
    OFF (sqlcmd's default when a file is applied by hand), every write it makes to
    scheduled_job, which has filtered indexes, fails with error 1934."""
    first = _code(split_batches(script.text)[0])
    statements = [" ".join(s.split()).upper() for s in first.split(";") if s.strip()]
    assert statements == ["SET ANSI_NULLS ON", "SET QUOTED_IDENTIFIER ON", "SET ANSI_PADDING ON",
                          "SET ANSI_WARNINGS ON", "SET ARITHABORT ON", "SET CONCAT_NULL_YIELDS_NULL ON",
                          "SET NUMERIC_ROUNDABORT OFF"]


@pytest.mark.parametrize("routine, rechecks, reread", [("claim_queued", 0, "READCOMMITTEDLOCK"),
                                                       ("claim_ticks", 0, "READUNCOMMITTED")])
def test_the_claims_queued_run_checks_skip_locked_runs(routine: str, rechecks: int, reread: str) -> None:
    """Under locking read committed the checks that choose the candidates would wait on (or
    deadlock with) other engines' runs; skipping is safe, as every writer of a job's Queued
    runs holds the job's row lock and the claim skips locked job rows. The re-checks, made
    under the job locks the claim took, must see every Queued run: no READPAST. claim_ticks's
    (issue 32: a lapsed holder's enqueue committed between the candidates' read and their row
    lock) reads without honouring locks: with the job rows ours, only an outsider can hold a
    Queued run, and its uncommitted one only leaves the job to a later claim, never waited for."""
    statements = _statements(_routine(routine))
    choosing = [s for s in statements if re.search(r"(?i)mjsched\.scheduled_job AS j WITH \([^)]*READPAST", s)]
    assert len(choosing) == 1, statements
    checks = [s for s in _exists_subqueries(choosing[0]) if "mjsched.scheduled_job_run" in s and "N'Queued'" in s]
    assert len(checks) == 1
    assert {"READCOMMITTEDLOCK", "READPAST"} <= _hints(checks[0], "mjsched.scheduled_job_run"), checks[0]
    later = [c for s in statements[statements.index(choosing[0]) + 1:] for c in _exists_subqueries(s)
             if "mjsched.scheduled_job_run" in c and "N'Queued'" in c]
    assert len(later) == rechecks       # the re-checks under the job locks are take_jobs's (one takeover)
    later = [c for s in _statements(_routine("take_jobs")) for c in _exists_subqueries(s)
             if "mjsched.scheduled_job_run" in c and "N'Queued'" in c]
    assert len(later) == 2
    for check in later:
        hints = _hints(check, "mjsched.scheduled_job_run")
        assert hints & {"READCOMMITTEDLOCK", "READUNCOMMITTED"} and "READPAST" not in hints, check
    later = [c for c in later if reread in _hints(c, "mjsched.scheduled_job_run")]
    assert len(later) == 1
    for check in later:
        hints = _hints(check, "mjsched.scheduled_job_run")
        assert reread in hints and "READPAST" not in hints, check


@pytest.mark.parametrize("routine", ["claim_ticks", "begin_job_run", "enqueue_job_run"])
def test_tick_checks_read_the_latest_committed_runs(routine: str) -> None:
    """Under READ_COMMITTED_SNAPSHOT the statement's snapshot may predate its wait for the
    job's row lock: a run committed meanwhile for the tick must be seen (no row), not
    missed (duplicate key 2601 where PostgreSQL's ON CONFLICT DO NOTHING returns no row).
    claim_ticks's check reads every later tick too (">="): ticks are served in increasing order."""
    checks = [s for s in _exists_subqueries(_routine(routine))
              if "mjsched.scheduled_job_run" in s and re.search(r"(?i)\.scheduled_for\s*>?=", s)]
    assert len(checks) == 1
    hints = _hints(checks[0], "mjsched.scheduled_job_run")
    assert "READCOMMITTEDLOCK" in hints and "READPAST" not in hints, checks[0]


def test_job_field_names_are_compared_case_sensitively() -> None:
    """JSON paths are case-sensitive: {"Description": ...} must be an unknown key, not a
    key that passes the check and then reads as absent."""
    admin = _code((SQL_DIR / "004_job_admin.sql").read_text(encoding="utf-8"))
    check = _routine("check_job_fields")
    assert re.search(r"(?i)WHERE\s+e\.\[key\]\s+COLLATE\s+Latin1_General_BIN2\s+NOT\s+IN\s*\(", check), check
    declared = re.findall(r"(?i)DECLARE\s+@v_keys\s+TABLE\s*\(\s*name\s+nvarchar\(4000\)\s+(COLLATE\s+\w+)?", admin)
    assert len(declared) == 2 and all(c.upper() == "COLLATE LATIN1_GENERAL_BIN2" for c in declared), declared
    filled = re.findall(r"(?i)INSERT\s+INTO\s+@v_keys\s*\(name\)\s+SELECT\s+e\.\[key\]\s+(COLLATE\s+\w+)?", admin)
    assert len(filled) == 2 and all(c.upper() == "COLLATE LATIN1_GENERAL_BIN2" for c in filled), filled


def test_the_sweep_documents_that_rowlock_does_not_prevent_escalation() -> None:
    text = PROCEDURES
    head = text[:text.index("CREATE OR ALTER PROCEDURE mjsched.sweep_expired_leases")]
    comment = head[head.rindex("\nGO\n"):]
    assert "ROWLOCK" in comment and "escalat" in comment


# -- the lock protocol (v3): jobs before runs, one takeover, no skipped second rows ---------------

_JOB_HINTS = re.compile(r"(?i)\bmjsched\.scheduled_job AS \w+ WITH \(([^)]*)\)")
_RUN_HINTS = re.compile(r"(?i)\bmjsched\.scheduled_job_run AS \w+ WITH \(([^)]*)\)")


def _locks_jobs(statement: str) -> bool:
    return any("UPDLOCK" in h.upper() for h in _JOB_HINTS.findall(statement))


def _touches_runs(statement: str) -> bool:
    """Whether the statement writes or locks run rows (or has abandon_runs / take_over do it)."""
    update = re.match(r"(?i)(?:.*\bBEGIN )?UPDATE (\w+) ", statement)
    return bool(re.search(r"(?i)\bINSERT INTO mjsched\.scheduled_job_run\b", statement)
                or (update and re.search(rf"(?i)\bmjsched\.scheduled_job_run AS {update.group(1)}\b", statement))
                or any("UPDLOCK" in h.upper() for h in _RUN_HINTS.findall(statement))
                or re.search(r"(?i)\bEXEC (?:@\w+ = )?mjsched\.(?:abandon_runs|take_over|take_jobs)\b", statement))


@pytest.mark.parametrize("routine", [
    "renew_tokens", "complete_items", "sweep_expired_leases", "release_engine_locks", "force_unlock_job",
    "start_manual_run", "acquire_job_lock", "claim_queued", "claim_ticks", "begin_job_run", "enqueue_job_run"])
def test_job_rows_are_locked_before_any_run_row(routine: str) -> None:
    """Issue 11 item 1: a renewal that locked runs before jobs, against a sweep or claim that
    locks jobs before runs, left a Running run under a freed lock (or deadlocked). Every
    procedure that touches runs takes its jobs' update locks (UPDLOCK) in an earlier statement."""
    statements = _statements(_routine(routine))
    first_job = next((n for n, st in enumerate(statements) if _locks_jobs(st)), None)
    first_run = next((n for n, st in enumerate(statements) if _touches_runs(st)), None)
    assert first_job is not None and first_run is not None, statements
    assert first_job < first_run, (statements[first_job], statements[first_run])


def test_several_job_rows_are_locked_in_id_order() -> None:
    """Lockers of several job rows that do not skip locked rows (renewal, completion, hand-back)
    must take them in one order, or two of them deadlock: the ids are collected first and the
    rows are locked by seeks driven by the id-keyed table variable."""
    ordered = 0
    for statement in _statements(_code(PROCEDURES)):
        hints = [h.upper() for h in _JOB_HINTS.findall(statement)]
        if not any("UPDLOCK" in h and "READPAST" not in h for h in hints) or "= @p_job_id" in statement:
            continue
        assert re.search(r"(?i)\bFROM @v_\w+ AS (\w+) JOIN mjsched\.scheduled_job AS \w+ WITH \(UPDLOCK, ROWLOCK\) "
                         r"ON \w+\.id = \1\.id ORDER BY \1\.id OPTION \(FORCE ORDER, LOOP JOIN\)$", statement), statement
        ordered += 1
    assert ordered == 3                                # renewal, completion, release_engine_locks


def test_no_readpast_on_a_run_row_a_procedure_locks_or_must_see() -> None:
    """READPAST only on the first rows a statement locks: a skipped run row behind a locked
    job could hide an inversion (issue 11 item 1: the sweep skipped a run the renewal held and
    freed its job anyway). Run rows are skipped only by the claims' choice of candidates
    (Queued-run checks), by next_due_at, which is advisory, and (issue 12 item 4) where a
    claim or a sweep locks the lapsed runs it takes over: there a job with a run it could
    not lock is dropped whole, before any takeover, so its lock is never freed over it."""
    # claim_queued: two candidate checks (the due Queued runs, and a Skip-mode job's attempt-1
    # runs while its own tick is due) and the lapsed runs it takes over
    allowed = {"claim_queued": 2, "claim_ticks": 1, "take_jobs": 1, "next_due_at": 2, "sweep_expired_leases": 2,
               "start_manual_run": 1}
    for batch in split_batches(PROCEDURES):
        head = re.search(r"(?i)CREATE\s+OR\s+ALTER\s+(?:PROCEDURE|FUNCTION)\s+mjsched\.(\w+)", batch)
        if not head:
            continue
        skipping = [h for h in _RUN_HINTS.findall(_code(batch)) if "READPAST" in h.upper()]
        assert len(skipping) == allowed.get(head.group(1), 0), (head.group(1), skipping)
    for name, table, takeover in (("take_jobs", "@v_candidates", "take_over"),
                                  ("sweep_expired_leases", "@v_lapsed", "abandon_runs")):
        code = " ".join(_code(_routine(name)).split())
        locked = code.index("INSERT INTO @v_run_locks (id) SELECT r.id")
        assert "WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)" in code[locked:locked + 300], name
        drop = re.compile(rf"DELETE \w+ FROM {table} AS \w+ WHERE EXISTS \(SELECT 1 FROM mjsched\.scheduled_job_run "
                          r"AS h WITH \(READUNCOMMITTED\) WHERE h\.lock_token = \w+\.lock_token AND h\.status = "
                          r"N'Running' AND NOT EXISTS \(SELECT 1 FROM @v_run_locks").search(code, locked)
        assert drop is not None, name
        assert drop.start() < code.index(f"mjsched.{takeover}", locked), name   # dropped before any takeover
    manual = " ".join(_code(_routine("start_manual_run")).split())      # a held run answers 'locked' first
    assert manual.index("NOT EXISTS (SELECT 1 FROM @v_run_locks") < manual.index("SET @v_outcome = N'locked'") \
        < manual.index("EXEC mjsched.take_over")


def test_every_takeover_goes_through_abandon_runs() -> None:
    """Issue 11 item 8: a run abandoned by a claim or acquire_job_lock was not counted in the
    job's statistics, one abandoned by the sweep was. One procedure ends runs Abandoned and
    counts them; every path that frees or takes a lapsed lock calls it (or take_over)."""
    writers = []
    for batch in split_batches(PROCEDURES):
        head = re.search(r"(?i)CREATE\s+OR\s+ALTER\s+(?:PROCEDURE|FUNCTION)\s+mjsched\.(\w+)", batch)
        if head and re.search(r"(?i)\bstatus\s*=\s*N'Abandoned'", _code(batch)):
            writers.append(head.group(1))
    assert writers == ["abandon_runs"]
    for name in ("take_jobs", "acquire_job_lock", "start_manual_run"):
        assert re.search(r"(?i)\bEXEC (?:@\w+ = )?mjsched\.take_over\b", _routine(name)), name
    for name in ("claim_queued", "claim_ticks"):         # the claims' one takeover
        assert re.search(r"(?i)\bEXEC mjsched\.take_jobs\b", _routine(name)), name
    for name in ("take_over", "sweep_expired_leases", "release_engine_locks", "force_unlock_job"):
        assert re.search(r"(?i)\bEXEC (?:@\w+ = )?mjsched\.abandon_runs\b", _routine(name)), name



def _branch(code: str, condition: str) -> list[str]:
    """The statements of each ``IF <condition> BEGIN ... END`` block of ``code`` (whitespace-folded)."""
    folded = " ".join(code.split())
    toks = tokenize(folded)
    blocks = []
    for m in re.finditer(rf"(?i)\bIF {re.escape(condition)} BEGIN\b", folded):
        depth, start = 0, m.end()
        for t in (t for t in toks if t.pos >= m.end() - len("BEGIN")):
            if t.up in ("BEGIN", "CASE"):
                depth += 1
            elif t.up == "END":
                depth -= 1
                if depth == 0:
                    blocks.append(_statements(folded[start:t.pos]))
                    break
    return [s for block in blocks for s in block]


def test_renew_leases_skips_busy_job_rows_and_answers_their_tokens() -> None:
    """Issue 11 (v3): one job row another session holds (an operator's open transaction) must
    not stall every lease an engine holds. renew_leases and extend_job_leases share one
    renewal (renew_tokens, internal); only renew_leases' branch (@p_skip_busy = 1) locks the
    job rows with READPAST -- the first rows it locks, no READPAST on runs -- and answers a
    token whose run is Running but whose job row it skipped with renewed = 0 (busy), so the
    engine does not take a busy token for a lost one. extend_job_leases waits, in id order,
    and returns only renewed tokens."""
    renew = _routine("renew_tokens")
    assert re.search(r"(?i)DECLARE @v_skip_busy bit = ISNULL\(@p_skip_busy, 0\);", renew)
    statements = _statements(renew)
    locking = [n for n, s in enumerate(statements) if _locks_jobs(s)]
    skipping = [n for n, s in enumerate(statements)
                if any("READPAST" in h.upper() for h in _JOB_HINTS.findall(s) + _RUN_HINTS.findall(s))]
    assert len(skipping) == 1 and skipping[0] == locking[0], (locking, skipping)
    assert not any(_touches_runs(s) for s in statements[:skipping[0]])
    skip, wait = _branch(renew, "@v_skip_busy = 1"), _branch(renew, "@v_skip_busy = 0")
    assert any(statements[skipping[0]].endswith(s) for s in skip)   # READPAST only in the skip-busy branch
    assert [h.upper() for s in skip for h in _JOB_HINTS.findall(s)] == ["UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK"]
    wait = [s for s in wait if _locks_jobs(s)]     # (each branch also has its own pause point)
    assert len(wait) == 1 and re.search(r"(?i)WITH \(UPDLOCK, ROWLOCK\) ON j\.id = i\.id ORDER BY i\.id "
                                        r"OPTION \(FORCE ORDER, LOOP JOIN\)$", wait[0]), wait
    # the busy answer: Running, job row not locked by this call, renewed = 0, read without READPAST
    busy = [s for s in skip if s.startswith("INSERT INTO @v_answer")]
    assert len(busy) == 1 and all("READPAST" not in h.upper() for h in _RUN_HINTS.findall(busy[0]))
    assert re.search(r"(?i)^INSERT INTO @v_answer \(lock_token, renewed\) SELECT DISTINCT h\.lock_token, 0 "
                     r"FROM @v_tokens AS t JOIN mjsched\.scheduled_job_run AS h ON h\.lock_token = t\.lock_token "
                     r"WHERE h\.status = N'Running' AND NOT EXISTS \(SELECT 1 FROM @v_jobs AS b "
                     r"WHERE b\.id = h\.scheduled_job_id\)$", busy[0]), busy[0]
    renewed = [s for s in statements if s.startswith("INSERT INTO @v_answer") and s not in busy]
    assert renewed == ["INSERT INTO @v_answer (lock_token, renewed) SELECT DISTINCT n.lock_token, 1 "
                       "FROM @v_renewable AS n"]
    assert re.search(r"(?i)SELECT a\.lock_token, a\.renewed FROM @v_answer AS a;\s*END;?\s*$", renew)
    # one definition of the renewal: both public procedures call it and lock no job row themselves
    for name, skip_busy, result in (("renew_leases", 1, "SELECT n.lock_token, n.renewed FROM #mjsched_renewed AS n"),
                                    ("extend_job_leases", 0,
                                     "SELECT n.lock_token FROM #mjsched_renewed AS n WHERE n.renewed = 1")):
        code = " ".join(_routine(name).split())
        assert re.search(rf"(?i)CREATE TABLE #mjsched_renewed \(lock_token uniqueidentifier NOT NULL, "
                         rf"renewed bit NOT NULL\);.*BEGIN TRANSACTION;.*EXEC mjsched\.renew_tokens "
                         rf"@p_tokens = @p_tokens, @p_lease_seconds = @p_lease_seconds, @p_instance = @p_instance, "
                         rf"@p_now = @v_now, @p_skip_busy = {skip_busy}; COMMIT TRANSACTION;", code), name
        assert not _JOB_HINTS.findall(code) and not _RUN_HINTS.findall(code), name
        assert code.rstrip("; ").endswith(f"{result}; END"), name
    internal = _internal_routines()
    assert "renew_tokens" in internal and "renew_leases" not in internal and "extend_job_leases" not in internal

def test_the_pause_points_are_the_postgresql_ones() -> None:
    """The interleaving harness names the same statement boundaries in both dialects."""
    pg = set(re.findall(r"test_pause\('([^']+)'\)",
                        PG_PROCEDURES))
    ms = set(re.findall(r"(?i)EXEC mjsched\.test_pause @p_point = N'([^']+)'",
                        _code(PROCEDURES)))
    assert len(pg) >= 12 and ms == pg


def test_the_pause_parks_only_the_owner_on_a_session_applock() -> None:
    pause = " ".join(_routine("test_pause").split())
    assert "SESSION_CONTEXT(N'mjsched.pause_at')" in pause and "SESSION_CONTEXT(N'mjsched.pause_key')" in pause
    assert re.search(r"(?i)ISNULL\(IS_MEMBER\(N'db_owner'\), 0\) = 0 AND ISNULL\(IS_SRVROLEMEMBER\(N'sysadmin'\), 0\) = 0 "
                     r"BEGIN RETURN", pause), pause
    assert re.search(r"(?i)EXEC @v_granted = sys\.sp_getapplock @Resource = @v_key, @LockMode = 'Exclusive', "
                     r"@LockOwner = 'Session'", pause)
    assert re.search(r"(?i)IF @v_granted >= 0 BEGIN EXEC sys\.sp_releaseapplock @Resource = @v_key, "
                     r"@LockOwner = 'Session'", pause)


def test_the_lease_is_capped_at_one_year() -> None:
    """A max_runtime of 1e13 s must not overflow DATEADD(second, CAST(... AS int), ...)."""
    lease = " ".join(_routine("lease_interval").split())
    assert "IF @v_seconds > 31536000 BEGIN SET @v_seconds = 31536000" in lease


def _inline_functions() -> set[str]:
    return {m.group(1) for path in FILES for batch in split_batches(path.read_text(encoding="utf-8"))
            for m in [re.search(r"(?is)CREATE\s+OR\s+ALTER\s+FUNCTION\s+mjsched\.(\w+)\s*\(.*?\)\s*RETURNS\s+TABLE\b",
                                batch)] if m}


def _internal_routines() -> list[str]:
    """The names mjsched.internal_routines() returns, in its order."""
    body = " ".join(_routine("internal_routines").split())
    values = re.search(r"(?i)\bFROM \(VALUES (.*)\) AS r \(internal_routines\)$", body.rstrip("; "))
    assert values, body
    return re.findall(r"\(N'(\w+)'\)", values.group(1))


def _kind(name: str) -> str:
    """sys.objects.type of the T-SQL routine ``name``: P, FN (scalar) or IF (inline table-valued)."""
    head = re.search(r"(?is)CREATE\s+OR\s+ALTER\s+(PROCEDURE|FUNCTION)\s+mjsched\.\w+\s*(\(.*?\)\s*RETURNS\s+(\w+))?",
                     _routine(name))
    assert head, name
    if head.group(1).upper() == "PROCEDURE":
        return "P"
    return "IF" if head.group(3).upper() == "TABLE" else "FN"


def test_inline_functions_are_probed_and_granted_with_select() -> None:
    """An inline table-valued function has SELECT permission, not EXECUTE: the probe asks for
    SELECT on the one an engine may read (internal_routines), and grants.sql grants it there,
    or start-up would report it missing. The others are internal: neither probed nor granted."""
    inline = _inline_functions()
    assert inline == {"claimable", "due", "claim_token", "claim_replay", "claim_counters", "internal_routines",
                      "purge_candidates", "tags_at_limit", "alerts_of_call"}
    probe = " ".join(_routine("probe_permissions").split())
    selected = re.search(r"(?i)CASE WHEN r\.name = N'(\w+)' THEN N'SELECT' ELSE N'EXECUTE' END", probe)
    assert selected and {selected.group(1)} == inline - set(_internal_routines()) == {"internal_routines"}
    grants = _code((SQL_DIR / "grants.sql").read_text(encoding="utf-8"))
    assert set(re.findall(r"(?i)GRANT SELECT ON OBJECT::mjsched\.(\w+) TO mjsched_engine", grants)) & inline == \
        {"internal_routines"}
    # each routine is granted to one role (no schema-wide EXECUTE since the engine/admin split)
    assert re.search(r"(?i)REVOKE EXECUTE ON SCHEMA::mjsched FROM mjsched_engine", grants)
    assert not re.search(r"(?i)GRANT EXECUTE ON SCHEMA::", grants)


# -- the review of v3: replayed manual runs, releases, internal routines ---------------------------

def test_a_replayed_manual_run_answers_only_a_running_run_under_its_lock() -> None:
    """A replay answers 'started' with the lost call's run only while the job is still locked by
    the derived token and that run is still Running (as PostgreSQL's start_manual_run): a run
    that already ended, or a lock since taken over, must not be reported as started."""
    code = " ".join(_routine("start_manual_run").split())
    replay = re.search(r"(?i)IF @v_found = 1 AND @p_replay = 1 AND @v_old = @v_token BEGIN (.*?) END;", code)
    assert replay, code
    assert re.search(r"(?i)FROM mjsched\.scheduled_job_run AS r WITH \(READCOMMITTEDLOCK\) "
                     r"WHERE r\.lock_token = @v_token AND r\.scheduled_job_id = @p_job_id "
                     r"AND r\.status = N'Running'", replay.group(1)), replay.group(1)
    assert re.search(r"(?i)SELECT @v_found = 1, @v_status = j\.status, @v_old = j\.lock_token", code)


def test_a_release_is_refused_while_any_run_but_a_concurrent_tick_run_holds_the_token() -> None:
    """advance_job's release: exempt is only a Concurrent job's tick run (scheduled_for set),
    which keeps its run lease alone; a manual run of a Concurrent job holds the lock to its end."""
    code = " ".join(_routine("advance_job").split())
    checks = [s for s in _exists_subqueries(code) if "mjsched.scheduled_job_run" in s]
    assert len(checks) == 1
    assert re.search(r"(?i)WHERE r\.lock_token = @p_token AND r\.status = N'Running' "
                     r"AND \(j\.concurrency_mode <> N'Concurrent' OR r\.scheduled_for IS NULL\)\)$", checks[0]), \
        checks[0]
    assert re.search(r"(?i)AND \(@p_release = 0 OR NOT EXISTS \(", code), code
    assert not re.search(r"(?i)OR j\.concurrency_mode = N'Concurrent'", code)


def test_the_internal_routines_are_the_postgresql_ones_but_its_dialect_only_helpers() -> None:
    """One list per dialect, the same names in the same order, except PostgreSQL helpers that
    have no T-SQL twin (sqlparity.DIALECT_INTERNAL, e.g. runs_of_tokens)."""
    pg_text = PG_PROCEDURES
    pg = re.search(r"(?is)FUNCTION mjsched\.internal_routines\(\)\s+RETURNS text\[\].*?ARRAY\[(.*?)\]", pg_text)
    assert pg, "no mjsched.internal_routines() in sql/postgres/002_procedures/"
    pg_names = re.findall(r"'(\w+)'", pg.group(1))
    assert len(pg_names) >= 12 and "runs_of_tokens" in pg_names
    pg_only = set(sqlparity.DIALECT_INTERNAL["postgres"])
    assert _internal_routines() == [n for n in pg_names if n not in pg_only]


def test_grants_deny_every_internal_routine_after_the_per_routine_grants() -> None:
    """grants.sql denies each routine mjsched.internal_routines() names -- EXECUTE on procedures
    and scalar functions, SELECT on inline table-valued functions (EXECUTE does not apply to
    those) -- after the per-routine grants (which skip them; a DENY overrides a GRANT). The DENYs
    are generated from the list at run time, so this checks the generator: every listed name
    is a routine of a kind it handles, mapped to the permission that kind has."""
    names = _internal_routines()
    assert len(names) == len(set(names)) >= 11
    kinds = {name: _kind(name) for name in names}          # fails for a name no file defines
    assert set(kinds.values()) == {"P", "FN", "IF"}
    grants = " ".join(_code((SQL_DIR / "grants.sql").read_text(encoding="utf-8")).split())
    routine_grants = grants.index("WHILE EXISTS (SELECT 1 FROM @v_routines)")
    generator = re.search(
        r"(?i)INSERT INTO @v_internal \(name, permission\) "
        r"SELECT o\.name, CASE WHEN o\.type = 'IF' THEN N'SELECT' ELSE N'EXECUTE' END "
        r"FROM mjsched\.internal_routines\(\) AS i "
        r"JOIN sys\.objects AS o ON o\.schema_id = SCHEMA_ID\(N'mjsched'\) AND o\.name = i\.internal_routines "
        r"WHERE o\.type IN \(([^)]*)\);", grants)
    assert generator and generator.start() > routine_grants, grants
    handled = set(re.findall(r"'(\w+)'", generator.group(1)))
    assert set(kinds.values()) <= handled == {"P", "FN", "IF"}
    permission = {k: ("SELECT" if k == "IF" else "EXECUTE") for k in handled}
    assert {n: permission[k] for n, k in kinds.items()} == \
        {n: ("SELECT" if n in _inline_functions() else "EXECUTE") for n in names}
    # every row generated is executed as a DENY to the role, and a stale name stops the script
    assert re.search(r"(?i)@v_statement = CONCAT\(N'DENY ', v\.permission, N' ON OBJECT::mjsched\.', "
                     r"QUOTENAME\(v\.name\), N' TO mjsched_engine;'\) FROM @v_internal AS v ORDER BY v\.name; "
                     r"EXEC sys\.sp_executesql @v_statement; DELETE FROM @v_internal WHERE name = @v_name;", grants)
    assert re.search(r"(?i)WHILE EXISTS \(SELECT 1 FROM @v_internal\) BEGIN SELECT TOP \(1\) @v_name = v\.name,", grants)
    assert re.search(r"(?i)IF EXISTS \(SELECT 1 FROM mjsched\.internal_routines\(\) AS i WHERE NOT EXISTS "
                     r"\(SELECT 1 FROM sys\.objects AS o WHERE o\.schema_id = SCHEMA_ID\(N'mjsched'\) "
                     r"AND o\.name = i\.internal_routines AND o\.type IN \('P', 'FN', 'IF'\)\)\) BEGIN THROW 50022,",
                     grants)
    # nothing in grants.sql grants an internal routine back
    granted = set(re.findall(r"(?i)GRANT \w+ ON OBJECT::mjsched\.(\w+) TO", grants))
    assert granted & set(names) == set()


def test_grants_revoke_the_schema_wide_execute_and_say_so() -> None:
    """No role keeps EXECUTE on the whole schema, and the comments do not say one has it (one
    said the DENYs came "after the schema-wide GRANT EXECUTE" the script revokes)."""
    text = (SQL_DIR / "grants.sql").read_text(encoding="utf-8")
    code = " ".join(_code(text).split())
    for role in ("mjsched_engine", "mjsched_admin"):
        assert f"REVOKE EXECUTE ON SCHEMA::mjsched FROM {role};" in code
    assert not re.search(r"(?i)\bGRANT\s+EXECUTE\s+ON\s+SCHEMA", code)
    assert "after the schema-wide GRANT EXECUTE" not in " ".join(text.split())


def test_the_probe_skips_the_internal_routines() -> None:
    """An engine never calls them (grants.sql denies them), so start-up must not report them."""
    probe = " ".join(_routine("probe_permissions").split())
    assert re.search(r"(?i)\) AS r \(name\) WHERE NOT EXISTS \(SELECT 1 FROM mjsched\.internal_routines\(\) AS i "
                     r"WHERE i\.internal_routines = r\.name\) ORDER BY r\.name;", probe), probe
    assert "internal_routines" not in _internal_routines()   # the list itself stays probed (and granted)


# -- broken copies ---------------------------------------------------------------------------------

def _batches() -> Iterator[tuple[str, str]]:
    for script in VERSIONED:
        for batch in split_batches(script.text):
            head = re.search(r"(?i)CREATE\s+(?:OR\s+ALTER\s+)?(?:PROCEDURE|FUNCTION|TRIGGER|TABLE)\s+([\w.]+)",
                             batch)
            if head:
                yield head.group(1), batch


def _replace(batch: str, tok: Tok, new: str) -> str:
    return batch[:tok.pos] + new + batch[tok.pos + len(tok.text):]


def _drop_last_end(batch: str, toks: list[Tok]) -> str | None:
    ends = [t for t in toks if t.up == "END"]
    return _replace(batch, ends[-1], "") if ends else None


def _misspell(word: str, wrong: str) -> Callable[[str, list[Tok]], str | None]:
    def mutate(batch: str, toks: list[Tok]) -> str | None:
        hit = next((t for t in toks if t.kind == "word" and t.up == word), None)
        return _replace(batch, hit, wrong) if hit else None
    return mutate


def _drop_first_comma_after(word: str) -> Callable[[str, list[Tok]], str | None]:
    def mutate(batch: str, toks: list[Tok]) -> str | None:
        start = next((n for n, t in enumerate(toks) if t.up == word), None)
        if start is None:
            return None
        comma = next((t for t in toks[start:] if t.text == ","), None)
        return _replace(batch, comma, " ") if comma else None
    return mutate


def _cannot_be_an_alias(toks: list[Tok], k: int) -> bool:
    """Whether the item at ``k`` would be invalid as the previous item's alias.

    ``SELECT a b`` is valid SQL (b aliases a), so dropping the comma before a bare name
    is no syntax error; before ``x.y``, a number, a call or CASE it is one.
    """
    if k + 1 >= len(toks):
        return False
    t, nxt = toks[k], toks[k + 1]
    return (t.kind == "word" and nxt.text in (".", "(")) or t.kind == "number" or t.up == "CASE"


def _drop_select_list_comma(batch: str, toks: list[Tok]) -> str | None:
    """The first comma between two SELECT-list items whose loss is a syntax error."""
    for n, t in enumerate(toks):
        if t.up != "SELECT":
            continue
        depth = 0
        for k in range(n + 1, len(toks)):
            u = toks[k]
            depth += {"(": 1, ")": -1}.get(u.text, 0)
            if depth < 0 or (depth == 0 and (u.up in ("FROM", "INTO", "WHERE") or u.text == ";")):
                break
            if depth == 0 and u.text == "," and _cannot_be_an_alias(toks, k + 1):
                return _replace(batch, u, " ")
    return None


def _drop_last_close_paren(batch: str, toks: list[Tok]) -> str | None:
    closes = [t for t in toks if t.text == ")"]
    return _replace(batch, closes[-1], " ") if closes else None


def _drop_first_close_paren(batch: str, toks: list[Tok]) -> str | None:
    closes = [t for t in toks if t.text == ")"]
    return _replace(batch, closes[0], " ") if closes else None


MUTATIONS: dict[str, Callable[[str, list[Tok]], str | None]] = {
    "missing final END": _drop_last_end,
    "misspelled SELECT": _misspell("SELECT", "SELCT"),
    "misspelled UPDATE": _misspell("UPDATE", "UPDTAE"),
    "misspelled WHERE": _misspell("WHERE", "WHRE"),
    "misspelled BEGIN": _misspell("BEGIN", "BEGN"),
    "misspelled DECLARE": _misspell("DECLARE", "DECLRAE"),
    "misspelled FROM": _misspell("FROM", "FORM"),
    "missing comma (first of the batch)": _drop_first_comma_after("CREATE"),
    "missing comma (select list)": _drop_select_list_comma,
    "unclosed parenthesis (first)": _drop_first_close_paren,
    "unclosed parenthesis (last)": _drop_last_close_paren,
}


def _broken_copies() -> Iterator[Any]:
    for name, batch in _batches():
        toks = tokenize(batch)
        for kind, mutate in MUTATIONS.items():
            broken = mutate(batch, toks)
            if broken is not None and broken != batch:
                yield pytest.param(broken, id=f"{name}: {kind}")


BROKEN = list(_broken_copies())


def test_broken_copies_cover_every_defect_class() -> None:
    ids = [p.id for p in BROKEN]
    for kind in MUTATIONS:
        assert sum(i.endswith(f": {kind}") for i in ids) >= 3, kind
    assert len(BROKEN) >= 80


@pytest.mark.parametrize("broken", BROKEN)
def test_a_broken_copy_is_rejected(broken: str) -> None:
    if sqlglot_errors(broken):
        return
    assert sqlfluff_errors(broken), "neither sqlglot nor sqlfluff rejects this broken T-SQL"


def test_both_parsers_are_needed() -> None:
    """Each parser alone misses defects the other catches (so both run in CI)."""
    claim = next(b for n, b in _batches() if n.endswith("claim_due_jobs"))
    toks = tokenize(claim)
    missing_end = _drop_last_end(claim, toks)
    assert missing_end is not None
    assert sqlfluff_errors(missing_end) and not sqlglot_errors(missing_end)
    acquire = next(b for n, b in _batches() if n.endswith("acquire_job_lock"))
    no_comma = acquire.replace("locked_at = @v_now,", "locked_at = @v_now", 1)
    assert no_comma != acquire
    assert sqlglot_errors(no_comma) and not sqlfluff_errors(no_comma)
