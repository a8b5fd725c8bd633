"""Idempotent side effects: record the occurrence_id in the handler's own database transaction.

    with conn:                                        # sqlite3: one transaction, committed on success
        with once(conn, occurrence.occurrence_id) as fresh:
            if fresh:
                conn.execute("INSERT INTO payments ...")

The marker row and the handler's writes commit (or roll back) together, so a duplicate delivery
(a redelivered record, a retry of an attempt whose outcome was lost) finds the marker and does
nothing. `once` never commits: the caller's transaction does (sqlite3 `with conn:`, psycopg
`with conn.transaction():`). Works with any DB-API driver whose SQL has
`INSERT ... ON CONFLICT DO NOTHING` (SQLite >= 3.24, PostgreSQL).

Under concurrency the unique key decides: PostgreSQL makes a second inserter wait for the first
transaction and then see the conflict; SQLite serialises writers on its database lock.
"""
from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

DEFAULT_TABLE = "scheduler_processed_occurrences"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")
_PLACEHOLDERS = {"qmark": "?", "format": "%s", "pyformat": "%s", "numeric": ":1", "named": ":occurrence_id"}


def ensure_table(connection: Any, table: str = DEFAULT_TABLE) -> None:
    """Create the marker table if needed (once at start-up, in its own transaction)."""
    cursor = connection.cursor()
    cursor.execute(
        f"CREATE TABLE IF NOT EXISTS {_checked(table)} ("
        "occurrence_id TEXT PRIMARY KEY, "
        "processed_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)"
    )
    connection.commit()


@contextmanager
def once(connection: Any, occurrence_id: str, table: str = DEFAULT_TABLE) -> Iterator[bool]:
    """Yield True the first time `occurrence_id` is seen in this database, False on a duplicate.

    Must run inside the caller's transaction: the marker is inserted at once, so it holds the
    unique key until that transaction ends.
    """
    placeholder = _PLACEHOLDERS[_paramstyle(connection)]
    cursor = connection.cursor()
    cursor.execute(
        f"INSERT INTO {_checked(table)} (occurrence_id) VALUES ({placeholder}) "
        "ON CONFLICT (occurrence_id) DO NOTHING",
        {"occurrence_id": occurrence_id} if placeholder.startswith(":o") else (occurrence_id,),
    )
    yield cursor.rowcount == 1


def _paramstyle(connection: Any) -> str:
    """The DB-API module's paramstyle (sqlite3: qmark, psycopg: pyformat)."""
    if isinstance(connection, sqlite3.Connection):
        return sqlite3.paramstyle
    module = sys.modules.get(type(connection).__module__.split(".")[0])
    style = getattr(module, "paramstyle", None)
    if style not in _PLACEHOLDERS:
        raise TypeError(f"cannot tell the DB-API paramstyle of {type(connection).__module__} connections")
    return str(style)


def _checked(table: str) -> str:
    """Table names are interpolated into SQL, so only plain (optionally schema-qualified) identifiers."""
    if not _IDENTIFIER.fullmatch(table):
        raise ValueError(f"table name {table!r} is not a plain SQL identifier")
    return table
