"""The per-installation roles of sql/postgres/grants.sql, for tests: apply the script (with
its settings), make login roles in a group, and drop everything a test created."""
from __future__ import annotations

import uuid
from typing import Any

import psycopg2
import psycopg2.extensions

from mjsched import sqlfiles


def dbname(dsn: str) -> str:
    return str(psycopg2.extensions.parse_dsn(dsn)["dbname"])


def engine_role(dsn: str) -> str:
    return f"mjsched_engine_{dbname(dsn)}"


def admin_role(dsn: str) -> str:
    return f"mjsched_admin_{dbname(dsn)}"


def apply_grants(dsn: str, **settings: Any) -> list[str]:
    """Run grants.sql as the owner, after ``SET mjsched.<key> = <value>`` for each setting;
    returns the notices it raised."""
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for key, value in settings.items():
                cur.execute("SELECT set_config(%s, %s, false)", (f"mjsched.{key}", str(value)))
            cur.execute(sqlfiles.script("postgres", "grants.sql"))
        return list(conn.notices)
    finally:
        conn.close()


def as_user(dsn: str, user: str, password: str | None = None) -> str:
    parsed = psycopg2.extensions.parse_dsn(dsn)
    auth = user if password is None else f"{user}:{password}"
    return f"postgresql://{auth}@{parsed.get('host', '127.0.0.1')}:{parsed.get('port', '5432')}/{parsed['dbname']}"


def run(dsn: str, statement: str) -> None:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


class Logins:
    """Login roles made by one test, in the groups of grants.sql; ``drop()`` removes them and
    the groups' privileges in the database (roles are cluster-wide: nothing must pile up)."""

    def __init__(self, owner_dsn: str) -> None:
        self.owner_dsn = owner_dsn
        self.logins: list[str] = []
        self.groups: set[str] = set()

    def login(self, group: str | None, prefix: str = "mjsched_login") -> str:
        """A fresh LOGIN role, a member of ``group`` (None: of nothing); its DSN."""
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        run(self.owner_dsn, f'CREATE ROLE "{name}" LOGIN' + (f' IN ROLE "{group}"' if group else ""))
        self.logins.append(name)
        if group:
            self.groups.add(group)
        return as_user(self.owner_dsn, name)

    def drop(self, *dsns: str) -> None:
        for name in self.logins:
            try:
                run(self.owner_dsn, f'DROP ROLE IF EXISTS "{name}"')
            except psycopg2.Error:
                pass
        for dsn in dsns or (self.owner_dsn,):
            for group in self.groups | {engine_role(dsn), admin_role(dsn)}:
                try:
                    run(dsn, f'DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = \'{group}\') THEN '
                             f'EXECUTE \'DROP OWNED BY "{group}"\'; END IF; END $$')
                except psycopg2.Error:
                    pass
        for group in self.groups | {r(d) for d in (dsns or (self.owner_dsn,)) for r in (engine_role, admin_role)}:
            try:
                run(self.owner_dsn, f'DROP ROLE IF EXISTS "{group}"')
            except psycopg2.Error:
                pass
