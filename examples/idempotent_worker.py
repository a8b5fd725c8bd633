"""An idempotent worker: each occurrence charges a customer at most once, however often it is delivered.

Run it against a scheduler (tenant `billing`, SQLite file `billing.db` by default):

    PYTHONPATH=examples scheduler worker --tenant billing --handler idempotent_worker:charge

Delivery is at-least-once: a worker can die after its side effect and before its outcome is
recorded, and the occurrence then comes again (same occurrence_id, maybe on another worker).
`once` stores the occurrence_id in the same transaction as the charge, so the second delivery
finds it and does nothing, and a failed attempt leaves no marker, so its retry charges.
"""
from __future__ import annotations

import json
import os
import sqlite3

from scheduler.worker import AttemptContext, Occurrence, PermanentError, RetryableError, ensure_table, once

DATABASE = os.environ.get("BILLING_DB", "billing.db")


def connect() -> sqlite3.Connection:
    conn = sqlite3.connect(DATABASE, timeout=30)
    ensure_table(conn)
    conn.execute("CREATE TABLE IF NOT EXISTS charges ("
                 "occurrence_id TEXT NOT NULL, customer TEXT NOT NULL, cents INTEGER NOT NULL)")
    conn.commit()
    return conn


def charge(occurrence: Occurrence, ctx: AttemptContext) -> None:
    """The schedule's payload is JSON: {"customer": "...", "cents": 1234}."""
    try:
        order = json.loads(occurrence.payload)
        customer, cents = str(order["customer"]), int(order["cents"])
    except (ValueError, KeyError, TypeError) as error:
        raise PermanentError(f"bad payload: {error}") from error  # no retry can fix it
    if ctx.cancelled.is_set():
        raise RetryableError("worker is stopping; the scheduler retries later")
    conn = connect()
    try:
        with conn:  # one transaction: the marker and the charge commit together
            with once(conn, occurrence.occurrence_id) as fresh:
                if fresh:
                    conn.execute("INSERT INTO charges VALUES (?, ?, ?)",
                                 (occurrence.occurrence_id, customer, cents))
    except sqlite3.OperationalError as error:  # e.g. the database is locked for too long
        raise RetryableError(str(error)) from error
    finally:
        conn.close()
