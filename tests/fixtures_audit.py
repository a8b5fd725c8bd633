"""Session fixtures of the audit ledger: one PostgreSQL and one Kafka Connect worker per test
session (started only if a test asks); per test module that asks, a database of its own on that
PostgreSQL (`postgres_dsn`); per test a ledger (schema, tables, sink connectors) for that test's
topic prefix, removed afterwards.

Where they come from: AUDIT_DATABASE_URL / KAFKA_CONNECT_URL when set, else the project's own
LocalPostgres and LocalConnect, started against the session broker."""
from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from scheduler.audit import tables
from scheduler.audit.connectors import Database, delete_connectors, ensure_connectors, render, wait_running
from scheduler.audit.postgres import LocalPostgres, PostgresError
from scheduler.broker.local import free_port
from scheduler.connect.cli import URL_ENV
from scheduler.connect.local import LocalConnect
from scheduler.connect.rest import ConnectRest
from scheduler.wire.topology import Topology

WORKER_PREFIX = "kjsaudit"


@dataclass
class SessionConnect:
    url: str
    local: LocalConnect | None  # None when the worker is not ours to kill and restart
    start_seconds: float | None = None


@dataclass(frozen=True)
class Ledger:
    prefix: str
    schema: str
    database_url: str
    rest: ConnectRest
    connectors: tuple[str, ...]

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """`sql` with `{s}` standing for this ledger's schema."""
        with psycopg.connect(self.database_url) as conn:
            return conn.execute(sql.replace("{s}", self.schema), params).fetchall()

    def wait_for(self, sql: str, done: Callable[[list[tuple[Any, ...]]], bool], timeout: float,
                 params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Poll `sql` until `done(rows)`, failing with the last rows at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            rows = self.query(sql, params)
            if done(rows):
                return rows
            if time.monotonic() > deadline:
                raise AssertionError(f"after {timeout:.0f}s {sql!r} still gives {rows[:20]}")
            time.sleep(0.5)


@pytest.fixture(scope="session")
def audit_postgres() -> Iterator[str]:
    external = os.environ.get(tables.DATABASE_URL_ENV)
    if external:
        yield external
        return
    try:
        server = LocalPostgres()
    except PostgresError as error:
        pytest.skip(str(error))
    began = time.monotonic()
    url = server.start()
    print(f"\nPostgreSQL started in {time.monotonic() - began:.2f}s")
    try:
        yield url
    finally:
        server.destroy()


@pytest.fixture(scope="module")
def postgres_dsn(audit_postgres: str) -> Iterator[str]:
    """A database of the module's own on the session's PostgreSQL, for tests whose tables have fixed
    names: no other module, and no earlier run on an external server, has left tables in it."""
    name = f"kjs_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(audit_postgres, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield make_conninfo(audit_postgres, dbname=name)
    finally:
        with psycopg.connect(audit_postgres, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def audit_connect(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionConnect]:
    external = os.environ.get(URL_ENV)
    if external:
        yield SessionConnect(external, None)
        return
    worker = LocalConnect(tmp_path_factory.mktemp("connect"), kafka_bootstrap, WORKER_PREFIX, free_port())
    began = time.monotonic()
    url = worker.start()
    session = SessionConnect(url, worker, time.monotonic() - began)
    print(f"\nConnect worker started in {session.start_seconds:.2f}s (Maven cache warm or not)")
    try:
        yield session
    finally:
        worker.stop()


@pytest.fixture
def audit_ledger(audit_connect: SessionConnect, audit_postgres: str, kafka_bootstrap: str,
                 unique_prefix: str) -> Iterator[Ledger]:
    """Tables and running sinks for this test's prefix; the test creates the topics it needs first
    or after (the sinks subscribe by name and by regex)."""
    rest = ConnectRest(audit_connect.url)
    with psycopg.connect(audit_postgres) as conn:
        tables.ensure_tables(conn, unique_prefix)
    configs = render(unique_prefix, Database.from_url(audit_postgres), Topology.load())
    ensure_connectors(rest, configs)
    wait_running(rest, list(configs), 90)
    schema = tables.schema_name(unique_prefix)
    yield Ledger(unique_prefix, schema, audit_postgres, rest, tuple(configs))
    delete_connectors(rest, unique_prefix)
    with psycopg.connect(audit_postgres) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
