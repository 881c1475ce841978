"""bench.ab reads the throughput table it compares (no database: a table as the bench prints it)."""
from __future__ import annotations

from bench.ab import latency_row, result_row, summary

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


LATENCY = """
| engines    | jobs | runs/expected | skipped | claim p50 | claim p95 | claim p99 | claim max | driver p50 | driver p95 | driver p99 | driver max | hand-off p50 | hand-off p99 | clock offset ms | engine CPU |
|------------|------|---------------|---------|-----------|-----------|-----------|-----------|------------|------------|------------|------------|--------------|--------------|-----------------|------------|
| 1 x cap 200 | 200 | 6,000/6,000   | 0       | 10.1      | 30.2      | 39.0      | 41.0      | 20.0       | 35.0       | 44.4       | 50.0       | 5.0          | 9.0          | +0.00 +-0.02    | 3%         |
| 1 x cap 50 | 200  | 6,000/6,000   | 0       | 19.8      | 46.2      | 58.3      | 58.8      | 31.3      | 57.8       | 69.0       | 74.5       | 11.1         | 23.8         | +0.00 +-0.02    | 3%         |
"""


def test_latency_reads_the_target_row_claim_p99_and_the_driver_start() -> None:
    assert latency_row(LATENCY) == (58.3, 31.3, 69.0)
    assert latency_row(LATENCY.replace("| 1 x cap 50 |", "| 2 x cap 50 |")) is None


def test_latency_is_compared_as_differences_per_round_not_ratios() -> None:
    results = {"base": [(50.0, 30.0, 60.0), (40.0, 20.0, 70.0), (45.0, 25.0, 50.0)],
               "head": [(48.0, 31.0, 55.0), (45.0, 20.0, 90.0), (45.0, 24.0, 49.0)]}
    lines = summary(results, latency=True)
    assert lines[0].split("|")[4].strip() == "head - base"
    driver_p99 = [c.strip() for c in lines[4].split("|")]
    assert driver_p99[1:6] == ["driver start p99 ms", "60.0", "64.7", "+4.7", "-1.0 (-5.0 to +20.0)"]


def test_throughput_is_still_compared_as_ratios() -> None:
    results = {"base": [(1000.0, 80.0, 150.0), (2000.0, 80.0, 150.0)],
               "head": [(1100.0, 72.0, 150.0), (2400.0, 80.0, 150.0)]}
    rate = [c.strip() for c in summary(results, latency=False)[2].split("|")]
    assert rate[1:6] == ["executions/s", "1,500", "1,750", "1.17", "1.15 (1.10-1.20)"]
