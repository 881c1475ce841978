"""ODBC plumbing for the SQL Server gateway: DSN parsing, error classification,
value converters and a small connection pool. Only this module and mssql.py import pyodbc."""
from __future__ import annotations

import ctypes
import json
import logging
import re
import struct
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Any, Callable
from urllib.parse import parse_qsl, unquote, urlsplit

import pyodbc

from ..decoding import Undecodable, safe_caster
from ..errors import ConfigurationError
from ..redaction import redact_dsn
from .pool import ConnectionPool

log = logging.getLogger(__name__)

INSTALL_LOCK = "mjsched.install"      # sp_getapplock resource serialising install()
DEFAULT_DRIVER = "ODBC Driver 18 for SQL Server"
DEFAULT_PORT = 1433
INVALID_PARAMETER = 50022             # THROW number of the procedures (SQLSTATE 22023 in PostgreSQL)

JOB_COLUMNS = (
    "job_type_id", "name", "description", "cron_expression", "timezone", "start_at", "end_at",
    "status", "configuration", "owner", "concurrency_mode", "missed_run_policy",
    "run_immediately_if_never_run", "max_runtime_seconds", "isolation", "max_queued_runs",
    "notify_on_success", "notify_on_failure", "notify_to", "next_run_at", "high_frequency_ok",
    "keep_runs_days", "keep_runs_count",
    "interval_seconds", "run_at",
    "retry_max_attempts", "retry_initial_delay", "retry_factor", "retry_max_delay", "retry_jitter",
    "notify_final_attempt_only", "tags", "jitter_seconds", "priority",
)
# Session options the filtered indexes need for every write, and the procedures' defaults.
_SESSION_SETUP = ("SET NOCOUNT ON; SET XACT_ABORT ON; SET ANSI_NULLS ON; SET ANSI_PADDING ON; "
                  "SET ANSI_WARNINGS ON; SET ARITHABORT ON; SET CONCAT_NULL_YIELDS_NULL ON; "
                  "SET QUOTED_IDENTIFIER ON; SET NUMERIC_ROUNDABORT OFF;")

# SQLSTATEs of a lost or refused connection, and of a login/query timeout.
_CONNECTION_SQLSTATES = {"08S01", "08001", "08003", "08004", "08007", "08S02", "HYT00", "HYT01"}
# Native errors worth another attempt: deadlock victim, lock request timed out (SET LOCK_TIMEOUT),
# Azure SQL transient faults, broken pipes.
_TRANSIENT_NATIVE = {1205, 1222, 4060, 4221, 10053, 10054, 10060, 10928, 10929, 40143, 40197, 40501,
                     40540, 40613, 49918, 49919, 49920, 233, -2}
_SCHEMA_MISSING_NATIVE = {208, 2812}   # invalid object name; could not find stored procedure
_SQL_SS_TIMESTAMPOFFSET = -155
_BATCH_SPLIT = re.compile(r"(?im)^[ \t]*GO[ \t]*(?:--[^\n]*)?$")


# -- DSNs ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OdbcTarget:
    connection_string: str
    host: str
    port: str
    database: str | None
    driver: str
    password: str | None

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


def _odbc_value(value: str) -> str:
    """An ODBC attribute value, braced when it could be misread (``}`` doubled inside)."""
    if value and not re.search(r"[;{}=\s]", value) and value == value.strip():
        return value
    return "{" + value.replace("}", "}}") + "}"


def _odbc_pairs(connection_string: str) -> list[tuple[str, str]]:
    """``key=value`` pairs of an ODBC connection string (braced values may hold ``;``)."""
    pairs: list[tuple[str, str]] = []
    i, text = 0, connection_string
    while i < len(text):
        eq = text.find("=", i)
        if eq < 0:
            break
        key = text[i:eq].strip().strip(";").strip()
        j = eq + 1
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            k, value = j + 1, ""
            while k < len(text):
                if text[k] == "}":
                    if text[k + 1:k + 2] == "}":
                        value += "}"
                        k += 2
                        continue
                    break
                value += text[k]
                k += 1
            end = text.find(";", k)
        else:
            end = text.find(";", j)
            value = text[j:end if end >= 0 else len(text)].strip()
        if key:
            pairs.append((key, value))
        if end < 0:
            break
        i = end + 1
    return pairs


def _split_server(server: str) -> tuple[str, str | None]:
    """``tcp:host,1433`` / ``host\\instance`` / ``host`` -> (host, port or None)."""
    server = re.sub(r"(?i)^(tcp|np|lpc|admin):", "", server.strip())
    host, _, port = server.partition(",")
    return host.strip() or "localhost", (port.strip() or None)


def parse_dsn(dsn: str) -> OdbcTarget:
    """The ODBC connection string (and host/port for messages) for an mjsched SQL Server DSN."""
    if not isinstance(dsn, str) or not dsn.strip():
        raise ConfigurationError("dsn", dsn, "a SQL Server DSN is required (mssql://... or an ODBC string)")
    text = dsn.strip()
    if not text.lower().startswith("mssql://"):
        if "driver=" not in text.lower():
            raise ConfigurationError("dsn", redact_dsn(text), "not a SQL Server DSN: use mssql://user:pass@host:port/db"
                                     "?driver=... or an ODBC connection string with Driver=")
        pairs = {k.lower(): v for k, v in _odbc_pairs(text)}
        host, port = _split_server(pairs.get("server", pairs.get("address", pairs.get("addr", "localhost"))))
        port = pairs.get("port") or port or str(DEFAULT_PORT)
        return OdbcTarget(text, host, port, pairs.get("database"), pairs.get("driver", "?"),
                          pairs.get("pwd", pairs.get("password")))

    try:
        parts = urlsplit(text)
        port_number = parts.port
    except ValueError as exc:
        raise ConfigurationError("dsn", redact_dsn(text), f"not a valid mssql:// URL: {exc}") from None
    host = parts.hostname or "localhost"
    port = str(port_number or DEFAULT_PORT)
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    database = unquote(parts.path.lstrip("/")) or None
    options: dict[str, str] = {}
    driver = DEFAULT_DRIVER
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key.lower() == "driver":
            driver = value.strip().strip("{}")
        else:
            options[key] = value
    freetds = "freetds" in driver.lower() or driver.lower().endswith("libtdsodbc.so")
    items: list[tuple[str, str]] = [("DRIVER", driver)]
    if freetds:
        items += [("SERVER", host), ("PORT", port)]
        if not any(k.lower() == "tds_version" for k in options):
            items.append(("TDS_Version", "7.4"))
        if not any(k.lower() == "clientcharset" for k in options):
            items.append(("ClientCharset", "UTF-8"))
    else:
        items.append(("SERVER", f"tcp:{host},{port}"))
    if database:
        items.append(("DATABASE", database))
    if user:
        items += [("UID", user), ("PWD", password or "")]
    elif not freetds:
        items.append(("Trusted_Connection", "yes"))
    if not any(k.lower() in ("app", "application name") for k in options):
        items.append(("APP", "mjsched"))
    items += list(options.items())
    connection_string = ";".join(f"{k}={_odbc_value(v) if k != 'PWD' else '{' + v.replace('}', '}}') + '}'}"
                                 for k, v in items) + ";"
    return OdbcTarget(connection_string, host, port, database, driver, password)


def odbc_connection_string(dsn: str) -> str:
    """The ODBC connection string mjsched opens for ``dsn`` (contains the password)."""
    return parse_dsn(dsn).connection_string


def with_database(dsn: str, database: str) -> str:
    """``dsn`` pointing at another database on the same server (for tests and tools)."""
    text = dsn.strip()
    if text.lower().startswith("mssql://"):
        parts = urlsplit(text)
        return parts._replace(path="/" + database).geturl()
    kept = [(k, v) for k, v in _odbc_pairs(text) if k.lower() not in ("database", "initial catalog")]
    return ";".join(f"{k}={_odbc_value(v)}" for k, v in kept + [("DATABASE", database)]) + ";"


# -- errors ------------------------------------------------------------------------------------

def _sqlstate(exc: BaseException) -> str | None:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    return args[0] if args and isinstance(args[0], str) and len(args[0]) == 5 else None


def _message(exc: BaseException) -> str:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    return str(args[1] if len(args) > 1 else (args[0] if args else exc))


def native_error(exc: BaseException) -> int | None:
    """SQL Server's error number, as both drivers print it: ``... (1205) (SQLExecDirectW)``."""
    m = re.search(r"\((-?\d+)\)\s*\(SQL\w*\)", _message(exc))
    return int(m.group(1)) if m else None


def clean_message(exc: BaseException) -> str:
    """The server's own text: no ``[SQLSTATE] [driver][SQL Server]`` prefix, no ``(n) (SQLxxx)`` tail."""
    text = _message(exc).split("; [", 1)[0]
    text = re.sub(r"^(\s*\[[^\]]*\])+\s*", "", text)
    text = re.sub(r"\s*\(-?\d+\)\s*(\(SQL\w*\))?\s*$", "", text)
    return text.strip() or type(exc).__name__


def is_connection_error(exc: BaseException) -> bool:
    state = _sqlstate(exc)
    return isinstance(exc, pyodbc.OperationalError) or (state is not None and (
        state in _CONNECTION_SQLSTATES or state.startswith("08")))


def is_transient(exc: BaseException) -> bool:
    """Connection lost or refused, login/query timeout, deadlock victim, Azure transient faults."""
    if not isinstance(exc, pyodbc.Error):
        return False
    if _sqlstate(exc) == "IM002" or "can't open lib" in _message(exc).lower():
        return False                  # driver not installed: no retry will help
    return is_connection_error(exc) or _sqlstate(exc) == "40001" or native_error(exc) in _TRANSIENT_NATIVE


# -- type conversion ------------------------------------------------------------------------------

_DTO_TEXT = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s*"
                       r"(?:([+-])(\d{2}):(\d{2})|Z)?")


def _datetimeoffset(raw: bytes | None) -> datetime | None:
    """SQL_SS_TIMESTAMPOFFSET_STRUCT (or its text form) -> aware UTC datetime."""
    if raw is None:
        return None
    if len(raw) == 20:
        y, mo, d, h, mi, s, ns, tzh, tzm = struct.unpack("<6hI2h", raw)
        tz = timezone(timedelta(hours=tzh, minutes=tzm))
        return datetime(y, mo, d, h, mi, s, ns // 1000, tzinfo=tz).astimezone(timezone.utc)
    text = raw.decode("utf-16-le") if b"\x00" in raw else raw.decode("ascii", "replace")
    return parse_timestamp(text)


def parse_timestamp(text: str) -> datetime:
    m = _DTO_TEXT.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a datetimeoffset: {text!r}")
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or "0").ljust(6, "0")[:6])
    offset = timedelta(0)
    if m.group(8):
        offset = timedelta(hours=int(m.group(9)), minutes=int(m.group(10)))
        offset = -offset if m.group(8) == "-" else offset
    return datetime(y, mo, d, h, mi, s, micro, tzinfo=timezone(offset)).astimezone(timezone.utc)


def _guid(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    if len(raw) == 16:
        return str(uuid.UUID(bytes_le=bytes(raw)))
    return str(uuid.UUID(raw.decode("utf-16-le") if b"\x00" in raw else raw.decode("ascii")))


_SAFE_DATETIMEOFFSET = safe_caster(_datetimeoffset, "datetimeoffset")
_SAFE_GUID = safe_caster(_guid, "uniqueidentifier")

_TIME_COLUMNS = {"start_at", "end_at", "next_run_at", "last_run_at", "locked_at", "expected_completion_at",
                 "created_at", "updated_at", "scheduled_for", "queued_at", "started_at", "completed_at",
                 "lease_expires_at", "db_now", "next_due_at", "replied_at", "last_seen_at", "stopped_at", "now",
                 "applied_at"}


def _value(column: str, value: Any) -> Any:
    """Drivers that report datetimeoffset as text (old FreeTDS) still give datetimes; text
    that is no instant is an Undecodable, for its row alone (mjsched/decoding.py)."""
    if isinstance(value, str) and column in _TIME_COLUMNS and not isinstance(value, Undecodable):
        try:
            return parse_timestamp(value)
        except (ValueError, OverflowError) as exc:
            return Undecodable(column, f"{value[:100]!r} is not an instant: {exc}")
    return value


def to_param(value: Any) -> Any:
    """A Python value as pyodbc should bind it for mjsched's columns and parameters."""
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        return aware.astimezone(timezone.utc).isoformat(timespec="microseconds")
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return value


def configure_connection(conn: Any, lock_timeout_ms: int | None = None) -> None:
    """What mjsched does to every new pyodbc connection: converters and session options
    (``SET LOCK_TIMEOUT`` when given: error 1222, transient, instead of a wait on an outsider)."""
    # Each converter returns an Undecodable for a value it cannot convert, never raising: one
    # such value must fail its own row, not the fetch of the rows beside it (a claim's reply
    # arrives after its commit). JSON columns arrive as text, decoded per row (decoding.py).
    conn.add_output_converter(_SQL_SS_TIMESTAMPOFFSET, _SAFE_DATETIMEOFFSET)
    conn.add_output_converter(pyodbc.SQL_GUID, _SAFE_GUID)
    setup = _SESSION_SETUP if lock_timeout_ms is None else f"{_SESSION_SETUP} SET LOCK_TIMEOUT {int(lock_timeout_ms)};"
    conn.execute(setup).close()


# -- pool ----------------------------------------------------------------------------------------------

def abandon_inherited(conn: Any) -> None:
    """A connection inherited across a fork is the parent's session, and pyodbc shows no
    socket to point elsewhere: it is never freed in this process (one reference more than
    anyone holds, through interpreter exit), so the driver never disconnects it from here."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(conn))


def odbc_pool(connect: Callable[[], Any], max_size: int = 8) -> ConnectionPool[Any]:
    """The shared pool, with pyodbc's rules: a connection-level error drops the
    connection; after any other error an open transaction is rolled back first; in a
    forked child the inherited connections are abandoned (abandon_inherited)."""
    def broken_after(conn: Any, exc: BaseException) -> bool:
        if isinstance(exc, pyodbc.Error) and is_connection_error(exc):
            return True
        try:
            conn.execute("IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;")
            return False
        except Exception:
            return True
    return ConnectionPool(connect, broken_after, max_size=max_size, abandon=abandon_inherited)


# -- the gateway -----------------------------------------------------------------------------------------

def _rows_of(cur: Any) -> list[dict[str, Any]]:
    """The first result set of what ``cur`` executed, then drain the rest (so errors surface)."""
    while cur.description is None:
        if not cur.nextset():
            return []
    columns = [d[0] for d in cur.description]
    rows = [{c: _value(c, v) for c, v in zip(columns, row)} for row in cur.fetchall()]
    while cur.nextset():
        pass
    return rows


def _drain(cur: Any) -> None:
    while cur.nextset():
        pass
