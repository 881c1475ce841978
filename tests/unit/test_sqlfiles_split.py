"""A versioned script may be a directory of files by concern (``002_procedures/10_foundations.sql``,
``50_claims.sql``, ...): install() applies, checksums and records it as ONE script, named after
the directory, exactly as a single file holding the parts one after the other (issue 38 item 5)."""
from __future__ import annotations

from pathlib import Path

from mjsched import sqlfiles
from mjsched.sqlfiles import SqlScript

SQL = Path(__file__).resolve().parents[2] / "sql"


def test_a_directory_is_one_script_of_its_parts_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "001_schema.sql").write_text("CREATE TABLE t (a int);\n")
    split = tmp_path / "002_procedures"
    split.mkdir()
    (split / "20_b.sql").write_text("-- b\nSELECT 2;\n")
    (split / "10_a.sql").write_text("-- a\nSELECT 1;\n")
    (split / "notes.txt").write_text("not SQL")
    (tmp_path / "grants.sql").write_text("GRANT ...;\n")          # not a version
    found = sqlfiles.scripts_in(tmp_path)
    assert [s.name for s in found] == ["001_schema", "002_procedures"]
    assert found[1] == SqlScript("002_procedures", "-- a\nSELECT 1;\n-- b\nSELECT 2;\n")
    # the version recorded is the whole script's: the same checksum as one file of that text
    assert found[1].checksum == SqlScript("002_procedures", "-- a\nSELECT 1;\n-- b\nSELECT 2;\n").checksum


def test_both_dialects_split_the_procedures_the_same_way() -> None:
    """A reader finds a rule in the file of the same name in either dialect."""
    pg = [p.name for p in sqlfiles.parts_of(SQL / "postgres" / "002_procedures")]
    ms = [p.name for p in sqlfiles.parts_of(SQL / "mssql" / "002_procedures")]
    assert pg == ms and len(pg) >= 8, (pg, ms)
    assert not (SQL / "postgres" / "002_procedures.sql").exists()
    assert not (SQL / "mssql" / "002_procedures.sql").exists()


def test_the_versions_keep_their_names() -> None:
    """schema_version records the same names as before the split: an upgrade compares like with like."""
    for dialect in ("postgres", "mssql"):
        names = [s.name for s in sqlfiles.scripts(dialect)]
        assert "002_procedures" in names and names == sorted(names)


def test_every_tsql_part_ends_its_last_batch() -> None:
    """Parts are concatenated: a T-SQL part must end on a GO line, or its last batch would run
    on into the next part's first."""
    for part in sqlfiles.parts_of(SQL / "mssql" / "002_procedures"):
        assert part.read_text(encoding="utf-8").rstrip().endswith("\nGO"), part.name
