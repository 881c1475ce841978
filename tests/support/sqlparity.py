"""A small reader of mjsched's two SQL trees, for the parity test.

It reads ``sql/postgres`` (plpgsql) and ``sql/mssql`` (T-SQL) into the same shape --
routines (name, parameters in order, result columns), tables (columns with a
canonical type, nullability and default), named constraints, indexes and triggers --
and lists every difference. It is not a SQL parser: it tokenises (strings, quoted
identifiers, comments and dollar-quoted bodies handled), tracks parentheses, and
knows the few statement shapes the two trees use. What it cannot read it reports
as a difference rather than guessing.

T-SQL result columns are read from the procedure body: a result set is a SELECT
that starts a statement at the body's top level and assigns no variable, or an
OUTPUT clause without INTO. An inline table-valued function (``RETURNS TABLE AS
RETURN SELECT ...``) is read like a PostgreSQL function returning TABLE, with the
columns of its SELECT -- except one whose only column is named after it: that is
T-SQL's form of a scalar function the optimizer inlines into the calling statement
(a scalar UDF runs once per row and may not call NEWID()), and it is read as a
scalar function, as PostgreSQL names a scalar function's result column after it.
internal_routines is read the same way: PostgreSQL returns its names as one text[],
T-SQL (no arrays) as one row per name in a column named after the function, so the two
are twins, not a DIALECT_INTERNAL entry.

A few PostgreSQL helpers have no T-SQL twin for a reason the dialects impose; they
are listed in DIALECT_INTERNAL with that reason and left out of the comparison.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from mjsched.sqlfiles import SqlScript, scripts_in

# -- tokens -------------------------------------------------------------------------------

_TOKEN_PATTERN = r"""
      (?P<ws>\s+)
    | (?P<line_comment>--[^\n]*)
    | (?P<block_comment>/\*.*?\*/)
    | (?P<dollar>\$(?P<tag>[A-Za-z_]*)\$.*?\$(?P=tag)\$)
    | (?P<string>[Nn]?'(?:[^']|'')*')
    | (?P<qident>"(?:[^"]|"")*"|\[(?:[^\]]|\]\])*\])
    | (?P<var>@@?[A-Za-z_][A-Za-z0-9_]*)
    | (?P<word>\#{0,2}[A-Za-z_][A-Za-z0-9_$]*)
    | (?P<number>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    | (?P<op>::|<>|<=|>=|!=|\|\||[-+*/%=<>(),.;\[\]{}:&|^~!])
"""
_TOKEN = {  # [bracketed] identifiers are T-SQL's; in PostgreSQL "[" is an array bracket
    "mssql": re.compile(_TOKEN_PATTERN, re.VERBOSE | re.DOTALL),
    "postgres": re.compile(_TOKEN_PATTERN.replace(r'|\[(?:[^\]]|\]\])*\]', ""), re.VERBOSE | re.DOTALL),
}


@dataclass(frozen=True)
class Tok:
    kind: str      # word | var | string | qident | number | op | dollar
    text: str
    line: int
    pos: int = 0   # offset in the text it was read from

    @property
    def up(self) -> str:
        return self.text.upper()

    @property
    def ident(self) -> str:
        """The identifier this token names, unquoted and lower-cased."""
        if self.kind == "qident":
            return self.text[1:-1].lower()
        return self.text.lower()


def tokenize(text: str, dialect: str = "mssql") -> list[Tok]:
    pattern = _TOKEN[dialect]
    out: list[Tok] = []
    pos, line = 0, 1
    while pos < len(text):
        m = pattern.match(text, pos)
        if m is None:
            raise ValueError(f"line {line}: cannot tokenise {text[pos:pos + 30]!r}")
        kind = m.lastgroup if m.lastgroup != "tag" else "dollar"
        if m.group("dollar") is not None:
            kind = "dollar"
        chunk = m.group(0)
        if kind not in ("ws", "line_comment", "block_comment"):
            out.append(Tok(kind, chunk, line, pos))
        line += chunk.count("\n")
        pos = m.end()
    return out


def _close(tokens: Sequence[Tok], i: int) -> int:
    """Index of the ')' matching the '(' at ``i``."""
    depth = 0
    for j in range(i, len(tokens)):
        if tokens[j].text == "(":
            depth += 1
        elif tokens[j].text == ")":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError(f"line {tokens[i].line}: unbalanced parenthesis")


def _split_commas(tokens: Sequence[Tok]) -> list[list[Tok]]:
    parts: list[list[Tok]] = [[]]
    depth = 0
    for t in tokens:
        if t.text == "(":
            depth += 1
        elif t.text == ")":
            depth -= 1
        if t.text == "," and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    return [p for p in parts if p]


def _name(tokens: Sequence[Tok], i: int) -> tuple[str, int]:
    """A possibly schema-qualified name at ``i``: (bare lower-case name, index after it)."""
    name = tokens[i].ident
    i += 1
    while i + 1 < len(tokens) and tokens[i].text == "." and tokens[i + 1].kind in ("word", "qident"):
        name = tokens[i + 1].ident
        i += 2
    return name, i


def _is(tokens: Sequence[Tok], i: int, *words: str) -> bool:
    return all(i + k < len(tokens) and tokens[i + k].up == w for k, w in enumerate(words))


# -- the model --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Param:
    name: str           # without "@", e.g. "p_job_id"
    type: str           # canonical type, see canonical_type()
    has_default: bool


@dataclass(frozen=True)
class Routine:
    name: str
    kind: str                                  # function | procedure
    params: tuple[Param, ...]
    result_sets: tuple[tuple[str, ...], ...]   # column names of each result set
    line: int


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool
    has_default: bool


@dataclass(frozen=True)
class Index:
    name: str
    table: str
    unique: bool
    columns: tuple[str, ...]
    where: str | None


@dataclass
class SqlTree:
    dialect: str
    routines: dict[str, Routine] = field(default_factory=dict)
    tables: dict[str, tuple[Column, ...]] = field(default_factory=dict)
    constraints: dict[str, str] = field(default_factory=dict)    # name -> "table KIND" (CHECK, UNIQUE)
    indexes: dict[str, Index] = field(default_factory=dict)
    triggers: dict[str, str] = field(default_factory=dict)       # name -> table
    problems: list[str] = field(default_factory=list)            # what the reader could not read


def types_match(a: str, b: str) -> bool:
    """Whether a PostgreSQL type and a T-SQL type may hold the same values.

    A length-less ``varchar`` (a plpgsql parameter) matches any (n)varchar.
    """
    ca, cb = canonical_type(a), canonical_type(b)
    if "varchar" in ca | cb:
        return any(x.startswith("varchar") for x in ca) and any(x.startswith("varchar") for x in cb)
    return bool(ca & cb)


# Types, reduced to what both dialects can mean by them. nvarchar(max) carries text or JSON.
_CANONICAL = {
    "uuid": {"uuid"}, "uniqueidentifier": {"uuid"},
    "timestamptz": {"timestamptz"}, "datetimeoffset": {"timestamptz"},
    "boolean": {"bool"}, "bit": {"bool"},
    "integer": {"int"}, "int": {"int"},
    "bigint": {"bigint"},
    "double precision": {"float"}, "float": {"float"},
    "text": {"text"}, "jsonb": {"json"},
    "uuid[]": {"json"},                    # a uuid array is a JSON array of strings in T-SQL
    "interval": {"interval"},
    "void": {"void"},
}


def canonical_type(raw: str) -> frozenset[str]:
    """``varchar(255)`` and ``nvarchar(255)`` -> {"varchar(255)"}; ``nvarchar(max)`` -> {"text", "json"}."""
    t = re.sub(r"\s+", " ", raw.strip().lower())
    t = re.sub(r"\s*\(\s*", "(", t).replace(" )", ")")
    m = re.fullmatch(r"n?varchar\((\d+)\)", t)
    if m:
        return frozenset({f"varchar({m.group(1)})"})
    if t in ("nvarchar(max)", "varchar(max)"):
        return frozenset({"text", "json"})
    if t in ("varchar", "nvarchar"):
        return frozenset({"varchar"})
    if re.fullmatch(r"datetimeoffset\(\d\)", t):
        return frozenset({"timestamptz"})
    return frozenset(_CANONICAL.get(t, {t}))


def _type_text(tokens: Sequence[Tok]) -> str:
    out = ""
    for t in tokens:
        if t.text in ("(", ")", ",", "[", "]") or not out or out.endswith("("):
            out += t.text
        else:
            out += " " + t.text
    return out.strip()


# -- PostgreSQL ----------------------------------------------------------------------------------

_PG_TYPE_END = {"DEFAULT", "NOT", "NULL", "PRIMARY", "REFERENCES", "UNIQUE", "CHECK", "CONSTRAINT",
                "GENERATED", "COLLATE"}


def parse_postgres(text: str, tree: SqlTree | None = None) -> SqlTree:
    tree = tree or SqlTree("postgres")
    toks = tokenize(text, "postgres")
    i = 0
    while i < len(toks):
        if toks[i].up == "ALTER" and _is(toks, i + 1, "TABLE"):
            i = _alter_table(toks, i + 2, tree)
            continue
        if toks[i].up != "CREATE":
            i += 1
            continue
        j = i + 1
        if _is(toks, j, "OR", "REPLACE"):
            j += 2
        if _is(toks, j, "FUNCTION") or _is(toks, j, "PROCEDURE"):
            i = _pg_routine(toks, i, j, tree)
        elif _is(toks, j, "TABLE"):
            i = _table(toks, j + 1, tree, _pg_column)
        elif _is(toks, j, "INDEX") or _is(toks, j, "UNIQUE", "INDEX"):
            i = _index(toks, j, tree)
        elif _is(toks, j, "TRIGGER"):
            name, k = _name(toks, j + 1)
            while k < len(toks) and toks[k].up != "ON":
                k += 1
            table, k = _name(toks, k + 1)
            tree.triggers[name] = table
            i = k
        else:
            i = j
    return tree


def _pg_routine(toks: list[Tok], start: int, j: int, tree: SqlTree) -> int:
    kind = toks[j].text.lower()
    name, k = _name(toks, j + 1)
    close = _close(toks, k)
    params = []
    for part in _split_commas(toks[k + 1:close]):
        default = next((n for n, t in enumerate(part) if t.up == "DEFAULT" or t.text == "="), None)
        type_tokens = part[1:default] if default is not None else part[1:]
        params.append(Param(part[0].ident, _type_text(type_tokens), default is not None))
    k = close + 1
    result_sets: tuple[tuple[str, ...], ...] = ()
    returns = ""
    if _is(toks, k, "RETURNS", "TABLE"):
        end = _close(toks, k + 2)
        result_sets = (tuple(p[0].ident for p in _split_commas(toks[k + 3:end])),)
        k = end + 1
    elif _is(toks, k, "RETURNS"):
        returns = toks[k + 1].text.lower()
    if returns == "trigger":       # trigger functions are compared as triggers
        return k
    while k < len(toks) and toks[k].kind != "dollar" and toks[k].text != ";":
        k += 1
    tree.routines[name] = Routine(name, kind, tuple(params), result_sets, toks[start].line)
    return k + 1


def _pg_column(part: list[Tok]) -> Column:
    end = next((n for n, t in enumerate(part) if n > 0 and t.up in _PG_TYPE_END), len(part))
    rest = [t.up for t in part[end:]]
    nullable = not (("NOT" in rest and "NULL" in rest[rest.index("NOT"):rest.index("NOT") + 2])
                    or "PRIMARY" in rest)
    return Column(part[0].ident, _type_text(part[1:end]), nullable, "DEFAULT" in rest)


# -- shared: tables and indexes ------------------------------------------------------------------

def _table(toks: list[Tok], k: int, tree: SqlTree, column) -> int:  # type: ignore[no-untyped-def]
    if _is(toks, k, "IF", "NOT", "EXISTS"):
        k += 3
    name, k = _name(toks, k)
    close = _close(toks, k)
    if name.startswith("#"):        # a T-SQL temporary table is a script's scratch, not schema
        return close + 1
    columns = []
    for part in _split_commas(toks[k + 1:close]):
        head = part[0].up
        if head == "CONSTRAINT":
            kind = part[2].up if len(part) > 2 else "?"
            if kind in ("CHECK", "UNIQUE"):      # keys are compared as columns, defaults as has_default
                tree.constraints[part[1].ident] = f"{name} {kind}"
        elif head in ("PRIMARY", "UNIQUE", "CHECK", "FOREIGN", "EXCLUDE"):
            tree.problems.append(f"table {name}: unnamed constraint at line {part[0].line}")
        else:
            columns.append(column(part))
    tree.tables[name] = tuple(columns)
    return close + 1


def _alter_table(toks: list[Tok], k: int, tree: SqlTree) -> int:
    """``ALTER TABLE t ... ADD CONSTRAINT c CHECK (...), ...``: the constraints it adds
    (001_schema's "What a row may hold" adds its rules this way, in both dialects)."""
    name, k = _name(toks, k)
    while k < len(toks) and toks[k].text != ";" and toks[k].up not in ("GO", "ALTER", "CREATE", "DECLARE"):
        if toks[k].up == "CONSTRAINT" and k > 0 and toks[k - 1].up in ("ADD", ",") and k + 2 < len(toks):
            kind = toks[k + 2].up
            if kind in ("CHECK", "UNIQUE"):
                tree.constraints[toks[k + 1].ident] = f"{name} {kind}"
        k += 1
    return k


def _index(toks: list[Tok], k: int, tree: SqlTree) -> int:
    unique = toks[k].up == "UNIQUE"
    k += 2 if unique else 1
    if _is(toks, k, "IF", "NOT", "EXISTS"):
        k += 3
    name, k = _name(toks, k)
    if not _is(toks, k, "ON"):
        tree.problems.append(f"index {name}: no ON at line {toks[k].line}")
        return k
    table, k = _name(toks, k + 1)
    close = _close(toks, k)
    columns = tuple(" ".join(t.ident for t in part) for part in _split_commas(toks[k + 1:close]))
    k = close + 1
    where = None
    if _is(toks, k, "WHERE"):
        end = k + 1
        while end < len(toks) and toks[end].text != ";" and toks[end].up not in ("END", "GO"):
            end += 1
        where = normalize_predicate(toks[k + 1:end])
        k = end
    tree.indexes[name] = Index(name, table, unique, columns, where)
    return k


def normalize_predicate(tokens: Sequence[Tok]) -> str:
    """A predicate as comparable text: N'x' and 'x' alike, keywords upper-cased."""
    out = []
    for t in tokens:
        if t.kind == "string":
            out.append(t.text[1:] if t.text[:1] in "Nn" else t.text)
        elif t.kind in ("word", "qident"):
            out.append(t.up if t.kind == "word" and t.up in ("AND", "OR", "NOT", "IS", "NULL", "IN")
                       else t.ident)
        else:
            out.append(t.text)
    return " ".join(out)


# -- T-SQL ------------------------------------------------------------------------------------------

_TSQL_STATEMENT_START = {";", "BEGIN", "TRY", "CATCH", "ELSE", "END"}
_SELECT_LIST_END = {"FROM", "WHERE", "GROUP", "ORDER", "INTO", "UNION", "EXCEPT", "INTERSECT", "FOR",
                    "HAVING", "OPTION", ";"}


def split_batches(text: str) -> list[str]:
    """The batches of a T-SQL script: the text between ``GO`` lines (as the backend splits)."""
    return [b for b in re.split(r"(?im)^[ \t]*GO[ \t]*(?:--[^\n]*)?$", text) if b.strip()]


def parse_mssql(text: str, tree: SqlTree | None = None) -> SqlTree:
    tree = tree or SqlTree("mssql")
    for batch in split_batches(text):
        toks = tokenize(batch)
        i = 0
        while i < len(toks):
            if toks[i].up == "ALTER" and _is(toks, i + 1, "TABLE"):
                i = _alter_table(toks, i + 2, tree)
                continue
            if toks[i].up != "CREATE":
                i += 1
                continue
            j = i + 1
            if _is(toks, j, "OR", "ALTER"):
                j += 2
            if toks[j].up in ("PROCEDURE", "PROC", "FUNCTION"):
                _tsql_routine(toks, i, j, tree)
                break                     # a routine is the whole batch
            if _is(toks, j, "TRIGGER"):
                name, k = _name(toks, j + 1)
                table, _ = _name(toks, k + 1) if _is(toks, k, "ON") else ("?", k)
                tree.triggers[name] = table
                break
            if _is(toks, j, "TABLE"):
                i = _table(toks, j + 1, tree, _tsql_column)
            elif _is(toks, j, "INDEX") or _is(toks, j, "UNIQUE", "INDEX") \
                    or _is(toks, j, "UNIQUE", "NONCLUSTERED", "INDEX") or _is(toks, j, "NONCLUSTERED", "INDEX"):
                if toks[j].up == "UNIQUE" and toks[j + 1].up == "NONCLUSTERED":
                    toks = toks[:j + 1] + toks[j + 2:]
                elif toks[j].up == "NONCLUSTERED":
                    toks = toks[:j] + toks[j + 1:]
                i = _index(toks, j, tree)
            else:
                i = j
    return tree


def _tsql_routine(toks: list[Tok], start: int, j: int, tree: SqlTree) -> None:
    kind = "function" if toks[j].up == "FUNCTION" else "procedure"
    name, k = _name(toks, j + 1)
    if kind == "function":
        close = _close(toks, k)
        param_tokens, k = toks[k + 1:close], close + 1
    else:
        end = k
        depth = 0
        while end < len(toks) and not (depth == 0 and toks[end].up == "AS"):
            depth += {"(": 1, ")": -1}.get(toks[end].text, 0)
            end += 1
        param_tokens, k = toks[k:end], end
    params = []
    for part in _split_commas(param_tokens):
        if part[0].kind != "var":
            tree.problems.append(f"{name}: parameter without @ at line {part[0].line}")
            continue
        default = next((n for n, t in enumerate(part) if t.text == "="), None)
        flags = {t.up for t in part[1:default]} & {"OUTPUT", "OUT", "READONLY"}
        type_tokens = [t for t in (part[1:default] if default is not None else part[1:]) if t.up not in flags]
        params.append(Param(part[0].text.lstrip("@").lower(), _type_text(type_tokens), default is not None))
    result_sets: tuple[tuple[str, ...], ...] = ()
    if kind == "function":
        if _is(toks, k, "RETURNS", "TABLE"):
            result_sets = _inline_function_columns(name, toks, k + 2, tree)
        elif k + 2 < len(toks) and toks[k + 1].kind == "var" and toks[k + 2].up == "TABLE":
            tree.problems.append(f"{name}: multi-statement table-valued functions are not read")
    else:
        body = toks[k + 1:]
        result_sets = tuple(_result_sets(name, body, tree))
    tree.routines[name] = Routine(name, kind, tuple(params), result_sets, toks[start].line)


def _inline_function_columns(name: str, toks: list[Tok], k: int,
                             tree: SqlTree) -> tuple[tuple[str, ...], ...]:
    """The result columns of an inline table-valued function (``k`` is after RETURNS TABLE);
    none when its only column is named after it (a scalar stand-in, see the module doc)."""
    while k < len(toks) and toks[k].up in ("WITH", "SCHEMABINDING", ","):
        k += 1
    if not (_is(toks, k, "AS", "RETURN")):
        tree.problems.append(f"{name}: RETURNS TABLE without AS RETURN at line {toks[k].line}")
        return ()
    k += 2
    while k < len(toks) and toks[k].text == "(":
        k += 1
    if not _is(toks, k, "SELECT"):
        tree.problems.append(f"{name}: inline function without RETURN SELECT at line {toks[k].line}")
        return ()
    columns = _select_list(toks, k + 1)
    if columns is None or any(c == "?" for c in columns):
        tree.problems.append(f"{name}: unnamed result column at line {toks[k].line}")
        return ()
    return () if columns == (name,) else (columns,)


def _result_sets(name: str, body: list[Tok], tree: SqlTree) -> Iterator[tuple[str, ...]]:
    depth = 0
    prev = ";"
    for i, t in enumerate(body):
        if t.text == "(":
            depth += 1
        elif t.text == ")":
            depth -= 1
        elif depth == 0 and t.up == "SELECT" and prev in _TSQL_STATEMENT_START:
            columns = _select_list(body, i + 1)
            if columns is not None:
                if any(c == "?" for c in columns):
                    tree.problems.append(f"{name}: unnamed result column at line {t.line}")
                yield columns
        elif depth == 0 and t.up == "OUTPUT" and not _output_has_into(body, i + 1):
            tree.problems.append(f"{name}: OUTPUT without INTO (a result set) at line {t.line}")
        if depth == 0:
            prev = t.up if t.kind == "word" else t.text


def _output_has_into(body: list[Tok], i: int) -> bool:
    depth = 0
    for t in body[i:]:
        depth += {"(": 1, ")": -1}.get(t.text, 0)
        if depth == 0 and t.up == "INTO":
            return True
        if depth == 0 and (t.text == ";" or t.up in ("FROM", "WHERE", "SELECT", "VALUES", "DEFAULT")):
            return False
    return False


def _select_list(body: list[Tok], i: int) -> tuple[str, ...] | None:
    """Column names of the SELECT list starting at ``i``; None for a variable assignment."""
    if i < len(body) and body[i].up in ("DISTINCT", "ALL"):
        i += 1
    if i < len(body) and body[i].up == "TOP":
        i = _close(body, i + 1) + 1 if body[i + 1].text == "(" else i + 2
    end, depth, cases = i, 0, 0
    while end < len(body):
        t = body[end]
        depth += {"(": 1, ")": -1}.get(t.text, 0)
        if depth < 0 or (depth == 0 and cases == 0 and t.up in _SELECT_LIST_END | {"END"}):
            break
        if t.up == "CASE":
            cases += 1
        elif t.up == "END":
            cases -= 1
        end += 1
    items = _split_commas(body[i:end])
    if items and items[0][0].kind == "var" and len(items[0]) > 1 and items[0][1].text == "=":
        return None
    return tuple(_column_name(item) for item in items)


def _column_name(item: list[Tok]) -> str:
    depth = 0
    for n in range(len(item) - 1, -1, -1):     # the last top-level AS names the column
        t = item[n]
        depth += {")": 1, "(": -1}.get(t.text, 0)
        if depth == 0 and t.up == "AS" and n + 1 < len(item):
            return item[n + 1].ident
    if len(item) >= 2 and item[0].kind in ("word", "qident") and item[1].text == "=":
        return item[0].ident                   # name = expression
    last = item[-1]
    if last.kind in ("word", "qident") and (len(item) == 1 or item[-2].text == "."):
        return last.ident                      # a plain (qualified) column
    return "?"


def _tsql_column(part: list[Tok]) -> Column:
    end = next((n for n, t in enumerate(part) if n > 0 and t.up in _PG_TYPE_END | {"IDENTITY"}), len(part))
    rest = [t.up for t in part[end:]]
    not_null = any(rest[n] == "NOT" and n + 1 < len(rest) and rest[n + 1] == "NULL" for n in range(len(rest)))
    return Column(part[0].ident, _type_text(part[1:end]), not not_null and "PRIMARY" not in rest,
                  "DEFAULT" in rest)


# -- loading and comparing -------------------------------------------------------------------------

def versioned_scripts(folder: Path) -> list[SqlScript]:
    """The versioned scripts as install() applies them (a script split by concern is one)."""
    return scripts_in(folder)


# Routines of one dialect that have no twin in the other, each for a reason the dialects
# impose (dialect -> routine -> reason). They are left out of the comparison; one that is
# listed but no longer defined is reported as a problem, so the list cannot go stale.
DIALECT_INTERNAL: dict[str, dict[str, str]] = {
    "postgres": {
        "runs_of_tokens": "T-SQL has no array type: take_over, sweep_expired_leases and force_unlock_job "
                          "select the Running runs of their tokens in the statement that builds "
                          "abandon_runs' JSON list of run ids",
        "claim_at": "an expression index needs an IMMUTABLE function in PostgreSQL (timestamptz minus an "
                    "interval is only STABLE); SQL Server indexes the same expression as the computed "
                    "column scheduled_job.claim_at (015_priorities.sql)",
    },
}


def load(folder: Path, dialect: str) -> SqlTree:
    tree = SqlTree(dialect)
    parse = parse_postgres if dialect == "postgres" else parse_mssql
    for script in versioned_scripts(folder):
        parse(script.text, tree)
    for name in DIALECT_INTERNAL.get(dialect, {}):
        if tree.routines.pop(name, None) is None:
            tree.problems.append(f"{name}: listed in DIALECT_INTERNAL but not defined")
    return tree


@dataclass(frozen=True)
class Allowed:
    """A known, reasoned difference between the dialects (matched exactly)."""

    difference: str
    reason: str


def compare(pg: SqlTree, ms: SqlTree) -> list[str]:
    """Every difference between the PostgreSQL reference and the T-SQL tree, as lines."""
    out: list[str] = [f"{ms.dialect}: {p}" for p in ms.problems] + [f"{pg.dialect}: {p}" for p in pg.problems]

    for name in sorted(set(pg.routines) - set(ms.routines)):
        out.append(f"routine {name}: missing in {ms.dialect}")
    for name in sorted(set(ms.routines) - set(pg.routines)):
        out.append(f"routine {name}: only in {ms.dialect}")
    for name in sorted(set(pg.routines) & set(ms.routines)):
        a, b = pg.routines[name], ms.routines[name]
        pa, pb = [p.name for p in a.params], [p.name for p in b.params]
        if pa != pb:
            out.append(f"routine {name}: parameters {pa} != {pb}")
        else:
            for x, y in zip(a.params, b.params):
                if not types_match(x.type, y.type):
                    out.append(f"routine {name}: parameter {x.name} type {x.type} != {y.type}")
                if x.has_default != y.has_default:
                    out.append(f"routine {name}: parameter {x.name} default {x.has_default} != {y.has_default}")
        if len(b.result_sets) > 1:
            out.append(f"routine {name}: {len(b.result_sets)} result sets in {ms.dialect}, expected at most one")
        ra = list(a.result_sets[0]) if a.result_sets else []
        rb = list(b.result_sets[0]) if b.result_sets else []
        if ra != rb:
            out.append(f"routine {name}: result columns {ra} != {rb}")

    for name in sorted(set(pg.tables) - set(ms.tables)):
        out.append(f"table {name}: missing in {ms.dialect}")
    for name in sorted(set(ms.tables) - set(pg.tables)):
        out.append(f"table {name}: only in {ms.dialect}")
    for name in sorted(set(pg.tables) & set(ms.tables)):
        ca, cb = pg.tables[name], ms.tables[name]
        na, nb = [c.name for c in ca], [c.name for c in cb]
        out += [f"table {name}: column {c} missing in {ms.dialect}" for c in na if c not in nb]
        out += [f"table {name}: column {c} only in {ms.dialect}" for c in nb if c not in na]
        common_a, common_b = [c for c in na if c in nb], [c for c in nb if c in na]
        if common_a != common_b:
            out.append(f"table {name}: column order {common_a} != {common_b}")
        by_name = {c.name: c for c in cb}
        for x, y in ((x, by_name[x.name]) for x in ca if x.name in by_name):
            if not types_match(x.type, y.type):
                out.append(f"table {name}: column {x.name} type {x.type} != {y.type}")
            if x.nullable != y.nullable:
                out.append(f"table {name}: column {x.name} nullable {x.nullable} != {y.nullable}")
            if x.has_default != y.has_default:
                out.append(f"table {name}: column {x.name} default {x.has_default} != {y.has_default}")

    for kind, a, b in (("constraint", pg.constraints, ms.constraints), ("trigger", pg.triggers, ms.triggers)):
        for name in sorted(set(a) - set(b)):
            out.append(f"{kind} {name}: missing in {ms.dialect}")
        for name in sorted(set(b) - set(a)):
            out.append(f"{kind} {name}: only in {ms.dialect}")
        for name in sorted(set(a) & set(b)):
            if a[name] != b[name]:
                out.append(f"{kind} {name}: on {a[name]} != {b[name]}")

    for name in sorted(set(pg.indexes) - set(ms.indexes)):
        out.append(f"index {name}: missing in {ms.dialect}")
    for name in sorted(set(ms.indexes) - set(pg.indexes)):
        out.append(f"index {name}: only in {ms.dialect}")
    for name in sorted(set(pg.indexes) & set(ms.indexes)):
        x, y = pg.indexes[name], ms.indexes[name]
        for what in ("table", "unique", "columns", "where"):
            if getattr(x, what) != getattr(y, what):
                out.append(f"index {name}: {what} {getattr(x, what)!r} != {getattr(y, what)!r}")
    return out


def unexplained(differences: Iterable[str], allowed: Iterable[Allowed]) -> list[str]:
    known = {a.difference for a in allowed}
    return [d for d in differences if d not in known]
