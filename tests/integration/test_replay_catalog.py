"""Every state-changing routine installed is replay-safe on record: the list is read from the
catalog, so a new procedure cannot be forgotten (issue 32).

A call whose reply is lost may have committed, and the backend retries it. So every routine
of the mjsched schema that changes state must have a row in docs/guide/protocol.md's replay
table (why a replay is safe, how the backend retries it) and a lost-reply test of its own
(tests/integration/test_lost_replies.py LOST_REPLY_TESTS), unless it is an internal building
block that only the public procedures call (INTERNAL, each with its reason).

"State-changing" is decided from the catalog, by a rule a new routine cannot dodge by its
declaration: a VOLATILE routine (PostgreSQL refuses INSERT, UPDATE and DELETE in a STABLE or
IMMUTABLE one), or one whose body calls a state-changing mjsched routine (a STABLE wrapper
around a writer). The T-SQL twins are held to the same list statically: sql/mssql creates the
same routines, and a T-SQL procedure that writes a table (or EXECs one that does) must be one
that the catalog calls state-changing.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.test_lost_replies import LOST_REPLY_TESTS
from tests.support import pg, sqlparity

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "docs" / "guide" / "protocol.md"

# Building blocks the public procedures call as their owner (mjsched.internal_routines(), plus
# trigger functions): no caller reaches them over a connection, so a lost reply is always the
# reply of the public procedure that called them, whose row and test cover them.
INTERNAL: dict[str, str] = {
    "test_pause": "the interleaving harness's parking point; returns at once for anyone but the schema owner",
    "claimable": "IMMUTABLE predicate of the claims",
    "claim_token": "derives a claim's lock token from its claim id (so a replay finds it); called by the claims",
    "abandon_runs": "ends a lapsed holder's runs Abandoned inside the procedure that frees or takes its lock",
    "take_over": "abandon_runs for the tokens a claim, manual start or acquire takes over",
    "take_jobs": "the takeover of claim_queued and claim_ticks: locks the lapsed runs, abandons them, takes the locks",
    "lease_until": "STABLE: when a lease taken now ends (take_jobs, acquire_job_lock, start_manual_run)",
    "due": "IMMUTABLE predicate of the claims: claimable and its next run has come",
    "renew_tokens": "the body of renew_leases and extend_job_leases",
    "complete_items": "the body of complete_runs, complete_job_runs and complete_job_run",
    "runs_of_tokens": "read-only helper of the renewals",
    "expire_ended_jobs": "part of claim_due_jobs and sweep_expired_leases (idempotent: only Active jobs past end_at)",
    "claim_replay": "step 0 of claim_due_jobs: the replay itself",
    "claim_queued": "step 1 of claim_due_jobs",
    "claim_ticks": "step 2 of claim_due_jobs",
    "next_due_at": "read-only tail of claim_due_jobs",
    "claim_counters": "read-only tail of claim_due_jobs",
    "purge_candidates": "read-only page of purge_runs",
    "json_nesting_exceeds": "IMMUTABLE depth check of the JSON limits (check_job_fields, start_manual_run, complete_items)",
    "claim_at": "IMMUTABLE order key of claim_ticks and its index (015_priorities.sql)",
    "note_engine_seen": "the liveness write of renew_tokens and claim_due_jobs (skipped when the row is held)",
    "tg_scheduled_job_changed": "trigger function: runs inside the statement that changed a job row",
    "resume_paused_jobs": "part of claim_due_jobs: ends the maintenance windows that have passed (idempotent: "
                          "only Paused jobs whose window ended change, and then their record is gone)",
    "tag_problem": "IMMUTABLE rule of a tag (check_job_fields, check_tag)",
    "check_tag": "IMMUTABLE check of a procedure's tag parameter (pause_jobs, resume_jobs, set_tag_limit)",
    "tags_at_limit": "read-only: the tags at their limit, which claim_queued and claim_ticks leave out",
    "admit_by_tag_limits": "part of claim_queued and claim_ticks: locks the tag limits and admits candidates "
                           "(writes nothing)",
    "alerts_of_call": "what evaluate_alerts answers, read-only (a replay answers the same rows: "
                      "test_lost_reply_evaluate_alerts)",
    "tg_scheduled_job_audited": "trigger function: writes the audit trail inside the statement that changed a "
                                "job row (a replay that changes nothing writes nothing: test_lost_reply_"
                                "purge_job_changes)",
    "tg_job_tag_audited": "trigger function: audits a job's tag set inside the statement that changed it "
                          "(insert_job, update_job: a replay that changes no tag writes nothing)",
}
# Names in the table's first column that are not routines.
NOT_ROUTINES = {"execute_job"}
_WRITE = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|DELETE|MERGE\s+INTO|MERGE|TRUNCATE\s+TABLE)\s+"
                    r"(?!@|#)(?:\w+\.)?\w+", re.IGNORECASE)


def catalog(dsn: str) -> dict[str, dict[str, object]]:
    """The mjsched schema's routines: volatility, body, and whether it is a trigger function."""
    sql = pg.Sql(dsn)
    try:
        rows = sql.rows("""SELECT p.proname, p.provolatile, p.prosrc, p.prorettype = 'trigger'::regtype AS trigger
                             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                            WHERE n.nspname = 'mjsched'""")
        internal = set(sql.one("SELECT mjsched.internal_routines()"))
    finally:
        sql.close()
    found: dict[str, dict[str, object]] = {}
    for r in rows:   # overloads: a name is state-changing if any of its signatures is
        entry = found.setdefault(r["proname"], {"volatile": False, "bodies": [], "trigger": r["trigger"]})
        entry["volatile"] = bool(entry["volatile"]) or r["provolatile"] == "v"
        entry["bodies"].append(r["prosrc"])   # type: ignore[union-attr]
        entry["internal"] = r["proname"] in internal or r["trigger"]
    return found


def calls(body: str, names: set[str]) -> set[str]:
    return {n for n in names if re.search(rf"\b(?:mjsched\.)?{n}\s*\(", body)}


def state_changing(routines: dict[str, dict[str, object]]) -> set[str]:
    """VOLATILE routines, closed over 'calls a state-changing routine'."""
    changing = {name for name, r in routines.items() if r["volatile"]}
    grew = True
    while grew:
        grew = False
        for name, r in routines.items():
            if name not in changing and any(calls(b, changing - {name}) for b in r["bodies"]):  # type: ignore[union-attr]
                changing.add(name)
                grew = True
    return changing


def replay_table() -> set[str]:
    """The routines named in the first column of protocol.md's replay table."""
    text = PROTOCOL.read_text(encoding="utf-8")
    section = text.split("## Replay safety", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([a-z_]+)`", line.split("|")[1]))
    return names


@pytest.fixture(scope="module")
def routines(pg_server: str, pg_template: str) -> dict[str, dict[str, object]]:
    """Read from a database installed by this checkout's install() (the test template)."""
    return catalog(pg.with_database(pg_server, pg_template))


def test_every_state_changing_routine_is_in_the_replay_table_with_a_lost_reply_test(
        routines: dict[str, dict[str, object]]) -> None:
    changing = state_changing(routines)
    public = sorted(changing - set(INTERNAL))
    table = replay_table()
    missing_row = [n for n in public if n not in table]
    missing_test = [n for n in public if n not in LOST_REPLY_TESTS]
    print(f"{len(routines)} routines installed, {len(changing)} state-changing: {len(public)} public "
          f"(table and test each), {len(changing & set(INTERNAL))} internal")
    assert not missing_row, f"state-changing routines without a row in {PROTOCOL.name}'s replay table: {missing_row}"
    assert not missing_test, f"state-changing routines without a lost-reply test in LOST_REPLY_TESTS: {missing_test}"
    assert len(public) >= 25, public     # the rule still finds what it found when written


def test_internal_routines_are_listed_with_a_reason(routines: dict[str, dict[str, object]]) -> None:
    """INTERNAL is exactly what the schema calls internal (internal_routines(), trigger functions)."""
    assert set(INTERNAL) == {n for n, r in routines.items() if r["internal"]}


def test_the_table_and_the_registry_name_only_installed_routines(routines: dict[str, dict[str, object]]) -> None:
    assert replay_table() - set(routines) - NOT_ROUTINES == set()
    assert set(LOST_REPLY_TESTS) - set(routines) == set()
    assert set(LOST_REPLY_TESTS) <= state_changing(routines), "a read-only routine needs no lost-reply test"


def test_every_registered_lost_reply_test_exists() -> None:
    for routine, ref in LOST_REPLY_TESTS.items():
        path, _, name = ref.partition("::")
        source = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"^def {re.escape(name)}\(", source, re.MULTILINE), f"{routine}: {ref} does not exist"


def test_the_rule_cannot_be_dodged_by_a_stable_wrapper(routines: dict[str, dict[str, object]]) -> None:
    """A STABLE routine that calls a writer is state-changing too."""
    fake = {**routines, "stable_wrapper": {"volatile": False, "bodies": ["SELECT mjsched.delete_job(p_id)"],
                                           "trigger": False, "internal": False}}
    assert "stable_wrapper" in state_changing(fake)
    assert "cancel_requests" not in state_changing(routines)     # a read stays a read


# -- the T-SQL twins ---------------------------------------------------------------------------------------

def tsql_bodies() -> dict[str, str]:
    """Each routine created in sql/mssql/*.sql: its batch, comments removed."""
    bodies: dict[str, str] = {}
    create = re.compile(r"CREATE\s+(?:OR\s+ALTER\s+)?(?:PROCEDURE|FUNCTION)\s+mjsched\.(\w+)", re.IGNORECASE)
    for script in sqlparity.versioned_scripts(ROOT / "sql" / "mssql"):
        for batch in re.split(r"(?im)^[ \t]*GO[ \t]*$", script.text):
            text = re.sub(r"--[^\n]*", "", batch)
            found = create.search(text)
            if found:
                bodies[found.group(1)] = text[found.end():]
    return bodies


def test_tsql_creates_the_same_routines(routines: dict[str, dict[str, object]]) -> None:
    tsql = tsql_bodies()
    installed = {n for n, r in routines.items() if not r["trigger"]} - set(sqlparity.DIALECT_INTERNAL["postgres"])
    assert set(tsql) == installed
    assert set(sqlparity.load(ROOT / "sql" / "mssql", "mssql").routines) == installed


def test_a_tsql_writer_is_state_changing_in_the_catalog_too(routines: dict[str, dict[str, object]]) -> None:
    """A T-SQL procedure that writes a table or EXECs a writer must be one the catalog lists
    as state-changing, so the table and the tests above cover it in both dialects."""
    tsql = tsql_bodies()
    writers = {n for n, body in tsql.items() if _WRITE.search(body)}
    grew = True
    while grew:
        grew = False
        for name, body in tsql.items():
            if name not in writers and any(re.search(rf"\bEXEC(?:UTE)?\s+(?:@\w+\s*=\s*)?mjsched\.{w}\b", body,
                                                     re.IGNORECASE) for w in writers):
                writers.add(name)
                grew = True
    assert len(writers) >= 25
    assert writers - state_changing(routines) == set()


def test_a_new_procedure_without_a_row_and_a_test_fails_the_check(pg_dsn: str) -> None:
    """The check can fail: a procedure added to the schema (even one declared STABLE that
    calls a writer) is reported until it has its row and its test."""
    sql = pg.Sql(pg_dsn)
    try:
        sql.run("CREATE FUNCTION mjsched.forget_me(p_id uuid) RETURNS void LANGUAGE sql AS "
                "$$ UPDATE mjsched.scheduled_job SET description = 'x' WHERE id = p_id $$")
        sql.run("CREATE FUNCTION mjsched.hide_me(p_id uuid) RETURNS void LANGUAGE sql STABLE AS "
                "$$ SELECT mjsched.forget_me(p_id) $$")
    finally:
        sql.close()
    public = state_changing(catalog(pg_dsn)) - set(INTERNAL)
    assert {n for n in public if n not in replay_table() or n not in LOST_REPLY_TESTS} == {"forget_me", "hide_me"}
