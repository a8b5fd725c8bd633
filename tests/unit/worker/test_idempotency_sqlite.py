"""`once` with sqlite3: the marker commits or rolls back with the handler's own writes."""
from __future__ import annotations

import sqlite3

import pytest

from scheduler.worker import ensure_table, once


@pytest.fixture
def conn(tmp_path):
    connection = sqlite3.connect(tmp_path / "app.db")
    ensure_table(connection)
    connection.execute("CREATE TABLE payments (occurrence_id TEXT NOT NULL)")
    connection.commit()
    yield connection
    connection.close()


def pay(conn: sqlite3.Connection, occurrence_id: str, fail: bool = False) -> bool:
    with conn:
        with once(conn, occurrence_id) as fresh:
            if fresh:
                conn.execute("INSERT INTO payments VALUES (?)", (occurrence_id,))
            if fail:
                raise RuntimeError("handler failed after its write")
    return fresh


def count(conn: sqlite3.Connection, table: str) -> int:
    return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def test_a_duplicate_delivery_is_a_no_op(conn):
    assert [pay(conn, "o1"), pay(conn, "o1"), pay(conn, "o2")] == [True, False, True]
    assert count(conn, "payments") == 2 and count(conn, "scheduler_processed_occurrences") == 2


def test_a_failed_handler_rolls_back_its_marker_so_the_retry_runs(conn):
    with pytest.raises(RuntimeError):
        pay(conn, "o1", fail=True)
    assert count(conn, "payments") == 0 and count(conn, "scheduler_processed_occurrences") == 0
    assert pay(conn, "o1") is True
    assert count(conn, "payments") == 1


def test_a_second_connection_sees_the_committed_marker(conn, tmp_path):
    pay(conn, "o1")
    other = sqlite3.connect(tmp_path / "app.db")
    try:
        assert pay(other, "o1") is False
    finally:
        other.close()
    assert count(conn, "payments") == 1


def test_table_names_must_be_plain_identifiers(conn):
    with pytest.raises(ValueError):
        ensure_table(conn, "x; DROP TABLE payments")
    ensure_table(conn, "main.custom_markers")
    with conn:
        with once(conn, "o1", table="main.custom_markers") as fresh:
            assert fresh
