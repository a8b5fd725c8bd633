"""The database sessions one reconcile classifies its buckets on: the caller's, plus helpers that take every
n-th bucket so that PostgreSQL classifies on several cores (`scheduler reconcile --jobs`).

A temporary table is its session's alone, so each session holds the expected rows of its own buckets and
writes its own answers; once every bucket is done, the helpers' answers are copied (binary COPY, block by
block) into the caller's session, where the report reads them all. A helper is a second connection with
the caller's parameters and password; it only reads the ledger, and its tables go when it closes.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import psycopg

from scheduler.audit import reconcile_queries as q

WORK_MEM = "64MB"  # per sort or hash of one query: PostgreSQL's share of the memory bound
TEMP_BUFFERS = "128MB"  # the temporary tables' pages kept in the backend before they go to temp files


def sibling(conn: psycopg.Connection) -> psycopg.Connection:
    """A new connection to the same server as the same user (the DSN psycopg reports omits the password)."""
    return psycopg.connect(conn.info.dsn, password=conn.info.password or None, connect_timeout=10)


def set_up(conn: psycopg.Connection) -> None:
    """The session's settings and the range's tables."""
    conn.execute(f"SET work_mem = '{WORK_MEM}'")
    conn.execute(f"SET temp_buffers = '{TEMP_BUFFERS}'")
    # JIT compiles the classification's many expressions for each run: it cost more CPU than it saved
    # (1.5-2.5 s per million occurrences measured) on queries that scan each row once.
    conn.execute("SET jit = off")
    conn.execute(q.RANGE_DDL)


@contextmanager
def helper_sessions(conn: psycopg.Connection, count: int,
                    connect: Callable[[psycopg.Connection], psycopg.Connection] = sibling
                    ) -> Iterator[list[psycopg.Connection]]:
    """`count` helpers set up like `conn`, closed (their tables with them) however the block ends."""
    helpers: list[psycopg.Connection] = []
    try:
        for _ in range(count):
            helpers.append(connect(conn))
            set_up(helpers[-1])
        yield helpers
    finally:
        for helper in helpers:
            helper.close()


def run_on_each(sessions: list[psycopg.Connection], work: Callable[[int, psycopg.Connection], None]) -> None:
    """`work(n, session)` for every session at once, the first on this thread; the first failure is raised
    once all have ended (a session is never used by two threads)."""
    if len(sessions) == 1:
        work(0, sessions[0])
        return
    with ThreadPoolExecutor(max_workers=len(sessions) - 1, thread_name_prefix="reconcile") as pool:
        others = [pool.submit(work, n, session) for n, session in enumerate(sessions) if n]
        try:
            work(0, sessions[0])
        finally:
            for done in others:
                done.exception()
    for done in others:
        done.result()


def gather_answers(into: psycopg.Connection, helpers: list[psycopg.Connection]) -> None:
    """Each helper's answers appended to `into`'s tables of the same name."""
    for helper in helpers:
        for table in q.ANSWER_TABLES:
            with helper.cursor() as source, into.cursor() as target, \
                    source.copy(f"COPY {table} TO STDOUT (FORMAT binary)") as out, \
                    target.copy(f"COPY {table} FROM STDIN (FORMAT binary)") as copy:
                for block in out:
                    copy.write(block)
