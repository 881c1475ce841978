"""Functions the ``python`` driver calls in multi-process tests."""
from __future__ import annotations

import time

import psycopg2


def bump_counter(dsn: str, name: str) -> dict[str, int]:
    """Read-modify-write a counter with no lock (ShedLock's trick): two overlapping runs
    of one job would lose an increment, so the final count exposes any double execution."""
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT n FROM test_counter WHERE name = %s", (name,))
            row = cur.fetchone()
            value = (row[0] if row else 0) + 1
            time.sleep(0.005)
            cur.execute("INSERT INTO test_counter (name, n) VALUES (%s, %s) "
                        "ON CONFLICT (name) DO UPDATE SET n = EXCLUDED.n", (name, value))
        return {"n": value}
    finally:
        conn.close()


def nan_details() -> dict[str, float]:
    """Details that json.dumps writes by default but no JSON parser (jsonb, ISJSON) accepts."""
    return {"ratio": float("nan")}
