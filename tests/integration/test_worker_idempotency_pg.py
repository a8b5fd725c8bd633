"""`once` on a real PostgreSQL server (the session's, tests/fixtures_audit.py; skipped when none is installed)."""
from __future__ import annotations

import threading

import psycopg
import pytest

from scheduler.worker import ensure_table, once

pytestmark = pytest.mark.integration


def test_postgres_marker_commits_with_the_side_effect_and_a_duplicate_is_a_no_op(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        ensure_table(conn)
        conn.execute("CREATE TABLE effects (occurrence_id TEXT NOT NULL)")
        conn.commit()
        for _ in range(2):
            with conn.transaction():
                with once(conn, "occ-1") as fresh:
                    if fresh:
                        conn.execute("INSERT INTO effects VALUES (%s)", ("occ-1",))
        with pytest.raises(RuntimeError):
            with conn.transaction():
                with once(conn, "occ-2") as fresh:
                    assert fresh
                    conn.execute("INSERT INTO effects VALUES (%s)", ("occ-2",))
                    raise RuntimeError("handler failed after its write")
        rows = conn.execute("SELECT occurrence_id FROM effects ORDER BY 1").fetchall()
        markers = conn.execute("SELECT occurrence_id FROM scheduler_processed_occurrences ORDER BY 1").fetchall()
    assert rows == [("occ-1",)]
    assert markers == [("occ-1",)]  # the failed attempt left no marker, so its retry runs


def test_postgres_concurrent_duplicate_deliveries_run_the_side_effect_once(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn) as setup:
        ensure_table(setup)
        setup.execute("CREATE TABLE IF NOT EXISTS concurrent_effects (occurrence_id TEXT NOT NULL)")
        setup.commit()
    barrier = threading.Barrier(4)
    fresh_seen: list[bool] = []

    def deliver() -> None:
        with psycopg.connect(postgres_dsn) as conn, conn.transaction():
            barrier.wait()
            with once(conn, "occ-concurrent") as fresh:
                fresh_seen.append(fresh)
                if fresh:
                    conn.execute("INSERT INTO concurrent_effects VALUES (%s)", ("occ-concurrent",))

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    with psycopg.connect(postgres_dsn) as conn:
        count = conn.execute("SELECT COUNT(*) FROM concurrent_effects").fetchone()[0]
    assert sorted(fresh_seen) == [False, False, False, True]
    assert count == 1
