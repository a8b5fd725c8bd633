"""Schedule history from the audit ledger (PostgreSQL, the ledger's table contract), for the console's
schedule page and `scheduler occurrences list`.

Optional: without AUDIT_DATABASE_URL both read versions and occurrences from the views instead (the
current version only; the occurrences the status changelog still holds). A configured ledger that cannot
be reached is reported (on the page, on stderr), never a failure.
"""
from __future__ import annotations

import os
import re
from typing import Any

import psycopg
from psycopg.rows import dict_row

Record = dict[str, Any]

LEDGER_ENV = "AUDIT_DATABASE_URL"

VERSIONS_SQL = """SELECT version, state, spec, fired_count, next_fire_ms, updated_at_ms
FROM {schema}.schedule_versions WHERE tenant = %s AND schedule_id = %s ORDER BY version DESC LIMIT %s"""

# One row per occurrence: its first dispatch gives the lag (kafka_timestamp is enqueued_at), its
# attempts the count and the last outcome, a dead letter the final word. An attempt row carries its
# occurrence's tenant and instant: matching them prunes the attempts to that day's partition and finds
# them by its (tenant, scheduled_for_ms) index, where the id alone scanned every partition.
_ATTEMPTS_OF = "a.tenant = d.tenant AND a.scheduled_for_ms = d.scheduled_for_ms AND a.occurrence_id = d.occurrence_id"
OCCURRENCES_SQL = f"""SELECT d.occurrence_id, d.scheduled_for_ms, d.available_at_ms,
  (EXTRACT(EPOCH FROM MIN(d.kafka_timestamp)) * 1000)::bigint AS enqueued_at_ms,
  COUNT(*) AS dispatches,
  (SELECT COUNT(*) FROM {{schema}}.attempts a WHERE {_ATTEMPTS_OF} AND a.kind = 'STARTED') AS attempts,
  (SELECT a.kind FROM {{schema}}.attempts a WHERE {_ATTEMPTS_OF}
     ORDER BY a.at_ms DESC, a.kafka_offset DESC LIMIT 1) AS last_kind,
  EXISTS (SELECT 1 FROM {{schema}}.dead_letters x WHERE x.occurrence_id = d.occurrence_id) AS dead
FROM {{schema}}.dispatches d WHERE d.tenant = %s AND d.schedule_id = %s AND d.scheduled_for_ms >= %s
GROUP BY d.tenant, d.occurrence_id, d.scheduled_for_ms, d.available_at_ms
ORDER BY d.scheduled_for_ms DESC LIMIT %s"""


# An occurrence's status from its last attempt event (no event yet: it waits in its topic).
LAST_ATTEMPT_STATUS = {"STARTED": "RUNNING", "HEARTBEAT": "RUNNING", "SUCCEEDED": "SUCCEEDED", "FAILED": "FAILED"}


def schema_name(prefix: str) -> str:
    """The ledger's PostgreSQL schema: the topic prefix lower-cased, other characters as '_'."""
    return re.sub(r"[^a-z0-9_]", "_", prefix.lower())


def status_of(row: Record) -> str:
    if row["dead"]:
        return "DEAD"
    return LAST_ATTEMPT_STATUS.get(row["last_kind"] or "", "ENQUEUED")


class Ledger:
    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.schema = schema_name(prefix)

    @classmethod
    def from_env(cls, prefix: str) -> Ledger | None:
        url = os.environ.get(LEDGER_ENV)
        return cls(url, prefix) if url else None

    def _rows(self, sql: str, *params: Any) -> list[Record]:
        with psycopg.connect(self.url, connect_timeout=3, row_factory=dict_row) as conn:
            return list(conn.execute(sql.format(schema=self.schema), params).fetchall())

    def versions(self, tenant: str, schedule_id: str, limit: int = 50) -> list[Record]:
        return self._rows(VERSIONS_SQL, tenant, schedule_id, limit)

    def occurrences(self, tenant: str, schedule_id: str, limit: int = 50, since_ms: int | None = None) -> list[Record]:
        """The schedule's most recent occurrences (scheduled at `since_ms` or later), newest first."""
        rows = self._rows(OCCURRENCES_SQL, tenant, schedule_id, -2**63 if since_ms is None else since_ms, limit)
        return [{**row, "status": status_of(row),
                 "lag_ms": None if row["enqueued_at_ms"] is None
                 else max(0, row["enqueued_at_ms"] - (row["available_at_ms"] or row["scheduled_for_ms"]))}
                for row in rows]
