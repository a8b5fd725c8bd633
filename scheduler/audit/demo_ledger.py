"""The audit ledger for `scheduler demo`: PostgreSQL, the Connect worker and the sinks started
beside the scheduler, and a reconcile summary of the demo tenant when the demo ends."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import psycopg

from scheduler.audit import tables
from scheduler.audit.connectors import ConnectorError, Database, ensure_connectors, render, wait_running
from scheduler.audit.postgres import LocalPostgres, PostgresError, default_data_dir
from scheduler.connect.cli import URL_ENV
from scheduler.connect.local import ConnectError, LocalConnect
from scheduler.connect.local import default_data_dir as default_connect_dir
from scheduler.connect.rest import ConnectRest, ConnectRestError
from scheduler.wire.topology import Topology


@dataclass(frozen=True)
class DemoLedger:
    database_url: str
    prefix: str
    started_ms: int


def start(bootstrap: str, prefix: str) -> DemoLedger | None:
    """None (with the reason on stderr) when a part cannot start: the demo runs on without a ledger."""
    try:
        url = os.environ.get(tables.DATABASE_URL_ENV) or LocalPostgres(default_data_dir()).start()
        connect = os.environ.get(URL_ENV) or LocalConnect(default_connect_dir(), bootstrap, prefix).start()
        rest = ConnectRest(connect)
        with psycopg.connect(url) as conn:
            tables.ensure_tables(conn, prefix)
        configs = render(prefix, Database.from_url(url), Topology.load())
        ensure_connectors(rest, configs)
        wait_running(rest, list(configs), 120)
    except (PostgresError, ConnectError, ConnectorError, ConnectRestError, psycopg.Error) as error:
        print(f"audit ledger not started, the demo runs without it: {error}", file=sys.stderr)
        return None
    print(f"audit ledger: {url} schema {tables.schema_name(prefix)!r}, Connect at {connect}", file=sys.stderr)
    return DemoLedger(url, prefix, int(time.time() * 1000))


def print_summary(ledger: DemoLedger, tenant: str, settle_s: float = 5.0) -> int:
    """Reconcile what was due up to `settle_s` ago, once the sinks have caught up (no new rows for 3 s)."""
    to_ms = int(time.time() * 1000 - settle_s * 1000)
    _wait_quiet(ledger)
    window = [datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat().replace("+00:00", "Z")
              for ms in (ledger.started_ms, to_ms)]
    if ledger.started_ms >= to_ms:
        print("audit ledger: the demo ran too briefly to reconcile", file=sys.stderr)
        return 0
    env = {**os.environ, tables.DATABASE_URL_ENV: ledger.database_url, "SCHEDULER_TOPIC_PREFIX": ledger.prefix}
    print(f"\nreconcile of tenant {tenant!r} from {window[0]} to {window[1]}:", flush=True)
    return subprocess.run([sys.executable, "-m", "scheduler", "reconcile", "--tenant", tenant, "--from", window[0],
                           "--to", window[1]], env=env).returncode


def _wait_quiet(ledger: DemoLedger, quiet_s: float = 3.0, timeout_s: float = 60.0) -> None:
    schema = tables.schema_name(ledger.prefix)
    deadline, last, quiet_since = time.monotonic() + timeout_s, None, time.monotonic()
    with psycopg.connect(ledger.database_url, autocommit=True) as conn:
        while time.monotonic() < deadline and time.monotonic() - quiet_since < quiet_s:
            count = sum((conn.execute(f"SELECT count(*) FROM {schema}.{table.name}").fetchone() or (0,))[0]
                        for table in tables.TABLES)
            if count != last:
                last, quiet_since = count, time.monotonic()
            time.sleep(0.5)
