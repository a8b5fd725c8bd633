"""The ledger's sink connectors: configurations kept as data (connectors/*.json), rendered for one
deployment (topic prefix, database) and created or updated through Connect's REST API.

Idempotent: a connector whose running config already equals ours is left alone, one that differs
is reported with the keys that drifted and updated (or only reported, with `check_only`)."""
from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from scheduler.audit.tables import KAFKA_COORDINATES, TABLES, LedgerTable, schema_name
from scheduler.connect.rest import ConnectRest, ConnectRestError
from scheduler.wire.topology import Topology

_TEMPLATES = resources.files(__package__) / "connectors"
_TENANT_PART = "[A-Za-z0-9._-]+"


class ConnectorError(Exception):
    """A connector that cannot be configured or would not run; the message says why."""


@dataclass(frozen=True)
class Database:
    jdbc_url: str
    user: str
    password: str

    @classmethod
    def from_url(cls, url: str) -> Database:
        """A libpq URL or key=value DSN as the JDBC URL the sink needs (TCP only: JDBC has no sockets)."""
        params = conninfo_to_dict(url)
        host = str(params.get("host") or "127.0.0.1")
        if host.startswith("/"):
            raise ConnectorError(f"the audit database {url!r} is a Unix socket; the JDBC sink needs a TCP host")
        port = params.get("port") or "5432"
        # reWriteBatchedInserts: the driver sends a batch of upserts as multi-row statements.
        return cls(f"jdbc:postgresql://{host}:{port}/{params.get('dbname') or 'postgres'}?reWriteBatchedInserts=true",
                   str(params.get("user") or "postgres"), str(params.get("password") or ""))


def connector_name(prefix: str, table: LedgerTable) -> str:
    return f"{prefix}.audit.{table.name}"


def dead_letter_topic(prefix: str) -> str:
    """Where Connect puts records the converter could not decode, the reason in their headers."""
    return f"{prefix}.audit-rejects"


def topic_regex(topology: Topology, key: str, prefix: str) -> str:
    """A Java regex matching every tenant's (and priority's) topic of a per-tenant family."""
    spec = topology.topics[key]
    parts = re.split(r"(\{prefix\}|\{tenant\}|\{priority\})", spec.name_template)
    values = {"{prefix}": re.escape(prefix), "{tenant}": _TENANT_PART,
              "{priority}": "(" + "|".join(map(re.escape, topology.priorities)) + ")"}
    return "".join(values.get(part, re.escape(part)) for part in parts)


def render(prefix: str, database: Database, topology: Topology, replication_factor: int = 1,
           unpartitioned: frozenset[str] = frozenset()) -> dict[str, dict[str, str]]:
    """The connectors' configs. `replication_factor` is the reject topic's, should Connect create it: `audit ensure`
    creates that topic first, with the decided replication and min.insync.replicas, and passes its factor.
    `unpartitioned`: tables of an older ledger still keyed by the Kafka coordinates alone, whose sink must
    upsert on that key (ON CONFLICT names a unique constraint the table has)."""
    common = _template("_common")
    configs: dict[str, dict[str, str]] = {}
    for table in TABLES:
        spec = topology.topics[table.topic_key]
        values = {
            "{prefix}": prefix, "{schema}": schema_name(prefix), "{table}": table.name,
            "{jdbc_url}": database.jdbc_url, "{jdbc_user}": database.user, "{jdbc_password}": database.password,
            "{replication_factor}": str(replication_factor),
            "{topic}": "" if spec.per_tenant else topology.topic_name(table.topic_key, prefix),
            "{topic_regex}": topic_regex(topology, table.topic_key, prefix) if spec.per_tenant else "",
        }
        merged = {**common, **_template(table.name)}
        if table.name in unpartitioned:
            merged["primary.key.fields"] = ",".join(KAFKA_COORDINATES)
        name = connector_name(prefix, table)
        configs[name] = {"name": name, **{key: _fill(value, values) for key, value in merged.items()}}
    return configs


def _template(name: str) -> dict[str, str]:
    data = json.loads((_TEMPLATES / f"{name}.json").read_text())
    return {key: str(value) for key, value in data.items() if not key.startswith("_")}


def _fill(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\{[a-z_]+\}", lambda match: values.get(match.group(0), match.group(0)), text)


@dataclass
class ConnectorsReport:
    created: list[str] = field(default_factory=list)
    ok: list[str] = field(default_factory=list)
    drifted: dict[str, list[str]] = field(default_factory=dict)


def ensure_connectors(rest: ConnectRest, configs: dict[str, dict[str, str]], check_only: bool = False,
                      timeout: float = 60.0) -> ConnectorsReport:
    report = ConnectorsReport()
    for name, wanted in configs.items():
        current = _retry(timeout, rest.config, name)
        if current is None:
            if not check_only:
                _retry(timeout, rest.put_config, name, wanted)
            report.created.append(name)
        elif current == wanted:
            report.ok.append(name)
        else:
            report.drifted[name] = sorted(key for key in set(current) | set(wanted)
                                          if current.get(key) != wanted.get(key))
            if not check_only:
                _retry(timeout, rest.put_config, name, wanted)
    return report


def _retry(timeout: float, call: Callable[..., Any], *args: Any) -> Any:
    """A worker mid-rebalance answers 409 (or not at all for a moment): try again until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call(*args)
        except ConnectRestError as error:
            if error.status not in (0, 409, 500, 503) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def wait_running(rest: ConnectRest, names: list[str], timeout: float) -> None:
    """Until every connector and task is RUNNING; a FAILED one raises with its trace's first lines."""
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending:
        name = pending[0]
        status = _retry(timeout, rest.status, name)
        states = [status["connector"], *status.get("tasks", [])] if status else []
        failed = [state for state in states if state["state"] == "FAILED"]
        if failed:
            trace = "\n".join(failed[0].get("trace", "").splitlines()[:8])
            raise ConnectorError(f"connector {name} FAILED:\n{trace}")
        if status and status.get("tasks") and all(state["state"] == "RUNNING" for state in states):
            pending.pop(0)
            continue
        if time.monotonic() > deadline:
            raise ConnectorError(f"connector {name} not RUNNING after {timeout:.0f}s: "
                                 f"{json.dumps(status) if status else 'no status reported'}")
        time.sleep(0.3)


def delete_connectors(rest: ConnectRest, prefix: str) -> list[str]:
    """Remove this deployment's ledger connectors (tests and `audit teardown`); returns their names."""
    names = [name for name in rest.connectors() if name.startswith(f"{prefix}.audit.")]
    for name in names:
        _retry(30.0, rest.call, "DELETE", f"/connectors/{name}")
    return names
