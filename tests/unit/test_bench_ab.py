"""bench.ab reads the throughput table it compares (no database: a table as the bench prints it)."""
from __future__ import annotations

from bench.ab import result_row

TABLE = """
| engines | driver     | jobs   | exec/s | seconds | round trips/exec | commits/exec | engine CPU ms/1k exec | PG CPU ms/1k exec | machine busy | other load | exactly once | top |
|---------|------------|--------|--------|---------|------------------|--------------|-----------------------|-------------------|--------------|------------|--------------|-----|
| 1       | bench.noop | 20,000 | 6,226  | 3.21    | 0.04             | 0.05         | 72.6                  | 126               | 62%          | 2%         | yes          | x   |
| 4       | bench.noop | 20,000 | 3,021  | 6.62    | 0.07             | 0.07         | 1,020                 | 355               | 96%          | 4%         | yes          | x   |
"""


def test_cpu_below_100_us_prints_with_decimals_and_is_read() -> None:
    """Before 6f6b9a4 the pattern took whole numbers only: '72.6' matched nothing, every A/B failed."""
    assert result_row(TABLE, 1) == (6226.0, 72.6, 126.0)


def test_thousands_and_the_engine_count() -> None:
    assert result_row(TABLE, 4) == (3021.0, 1020.0, 355.0)
    assert result_row(TABLE, 2) is None


def test_the_kernel_column_after_postgresql_cpu_does_not_shift_the_read() -> None:
    """The table gained "of engine CPU: kernel" after the PostgreSQL column; A/B against older
    revisions (without it) and newer ones (with it) read the same three cells."""
    row = ("| 4       | bench.noop | 20,000 | 7,739  | 2.58    | 0.05             | 0.05         "
           "| 81.2                  | 160               | 5.04                  | 95%          | 4%         "
           "| yes          | x   |")
    assert result_row(row, 4) == (7739.0, 81.2, 160.0)
