"""Handlers run by `scheduler worker` in the integration tests (imported from PYTHONPATH).

Each call appends one JSON line to $WORKER_TEST_DIR/handled.jsonl, so the test sees what ran.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from scheduler.worker import AttemptContext, Occurrence, PermanentError, RetryableError, once


def _note(occurrence: Occurrence, ctx: AttemptContext, **extra: object) -> None:
    line = {"occurrence_id": occurrence.occurrence_id, "priority": occurrence.priority,
            "attempt": occurrence.attempt, "token": ctx.attempt_token, "pid": os.getpid(), **extra}
    with open(Path(os.environ["WORKER_TEST_DIR"]) / "handled.jsonl", "a") as out:
        out.write(json.dumps(line) + "\n")


def record(occurrence: Occurrence, ctx: AttemptContext) -> None:
    """Succeeds; a payload of b"slow" takes two seconds after noting the call."""
    _note(occurrence, ctx, scheduled_for=occurrence.scheduled_for.isoformat())
    if occurrence.payload == b"slow":
        time.sleep(2)


def by_payload(occurrence: Occurrence, ctx: AttemptContext) -> None:
    """Fails as the payload says: retryable, permanent, or an unexpected exception."""
    _note(occurrence, ctx)
    if occurrence.payload == b"retryable":
        raise RetryableError("upstream answered 503")
    if occurrence.payload == b"permanent":
        raise PermanentError("invalid account number")
    if occurrence.payload == b"unexpected":
        raise KeyError("missing")


def sqlite_effect(occurrence: Occurrence, ctx: AttemptContext) -> None:
    """One row per occurrence in $WORKER_TEST_DIR/effects.db, made idempotent by `once`.

    With WORKER_TEST_HANG_AFTER_EFFECT set, the handler commits its side effect and then hangs
    (before the worker can record the outcome and commit the offset), so the test can kill -9 it.
    """
    conn = sqlite3.connect(Path(os.environ["WORKER_TEST_DIR"]) / "effects.db", timeout=30)
    try:
        with conn:
            with once(conn, occurrence.occurrence_id) as fresh:
                if fresh:
                    conn.execute("INSERT INTO effects (occurrence_id, pid) VALUES (?, ?)",
                                 (occurrence.occurrence_id, os.getpid()))
        _note(occurrence, ctx, fresh=fresh)
    finally:
        conn.close()
    if os.environ.get("WORKER_TEST_HANG_AFTER_EFFECT"):
        time.sleep(600)


def fails_twice(occurrence: Occurrence, ctx: AttemptContext) -> None:
    """Retryable failure on attempts 1 and 2, success on the third."""
    _note(occurrence, ctx, at=time.time())
    if occurrence.attempt < 3:
        raise RetryableError(f"attempt {occurrence.attempt} failed")


def slow(occurrence: Occurrence, ctx: AttemptContext) -> None:
    """Takes 2.5 s, noting when it started and ended, so a test can check runs never overlap."""
    started = time.time()
    time.sleep(2.5)
    _note(occurrence, ctx, started=started, ended=time.time())


def long_run(occurrence: Occurrence, ctx: AttemptContext) -> None:
    """Runs for as many seconds as the payload says, relying on the worker's own heartbeats, and reports
    progress once halfway; notes its start, then its end and whether it was told its lease was lost."""
    seconds = float(occurrence.payload.decode())
    started = time.time()
    _note(occurrence, ctx, phase="started", at=started)
    reported = False
    while time.time() - started < seconds and not ctx.cancelled.wait(0.1):
        if not reported and time.time() - started >= seconds / 2:
            reported = ctx.heartbeat(progress="halfway")
    _note(occurrence, ctx, phase="ended", at=time.time(), cancelled=ctx.cancelled.is_set(),
          lease_lost=ctx.lease_lost.is_set(), progress_reported=reported)
