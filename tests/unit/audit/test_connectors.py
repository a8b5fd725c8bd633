"""The ledger's connector configurations, rendered from connectors/*.json (no Connect needed)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from scheduler.audit import tables
from scheduler.audit.connectors import ConnectorError, Database, render, topic_regex
from scheduler.audit.tables import TABLES, column_type, expected_columns, schema_name
from scheduler.wire.topology import Topology

TOPOLOGY = Topology.load()
DB = Database("jdbc:postgresql://127.0.0.1:5432/postgres", "postgres", "")


def test_one_sink_per_table_reading_committed_records_into_the_prefix_schema() -> None:
    configs = render("Team-A", DB, TOPOLOGY)
    assert sorted(configs) == sorted(f"Team-A.audit.{table.name}" for table in TABLES)
    for name, config in configs.items():
        assert config["name"] == name
        assert config["consumer.override.isolation.level"] == "read_committed"
        assert config["value.converter"] == "scheduler.connect.SingleObjectAvroConverter"
        assert config["insert.mode"] == "upsert" and config["schema.evolution"] == "none"
        assert config["errors.tolerance"] == "all"
        assert config["errors.deadletterqueue.topic.name"] == "Team-A.audit-rejects"
        assert config["collection.name.format"] == f"team_a.{name.rsplit('.', 1)[1]}"
        assert not [value for value in config.values() if re.search(r"\{[a-z_]+\}", value)], config
        assert not [key for key in config if key.startswith("_")]
    versions = configs["Team-A.audit.schedule_versions"]
    assert versions["topics"] == "Team-A.schedules"
    assert versions["primary.key.fields"] == "schedule_id,version"
    assert versions["transforms"] == "tombstones,coordinates"
    partitioned = "kafka_topic,kafka_partition,kafka_offset,scheduled_for_ms"
    assert configs["Team-A.audit.attempts"]["primary.key.fields"] == partitioned
    assert configs["Team-A.audit.dispatches"]["primary.key.fields"] == partitioned
    assert configs["Team-A.audit.occurrence_events"]["primary.key.fields"] == "kafka_topic,kafka_partition,kafka_offset"
    for table in TABLES:
        assert configs[f"Team-A.audit.{table.name}"]["primary.key.fields"] == ",".join(table.primary_key), table.name


def test_an_unpartitioned_table_of_an_older_ledger_keeps_the_key_it_has() -> None:
    """Its primary key is the Kafka coordinates alone: an upsert naming scheduled_for_ms too would find no
    unique constraint to conflict on, and every batch would fail."""
    configs = render("Team-A", DB, TOPOLOGY, unpartitioned=frozenset({"dispatches"}))
    assert configs["Team-A.audit.dispatches"]["primary.key.fields"] == "kafka_topic,kafka_partition,kafka_offset"
    assert configs["Team-A.audit.attempts"]["primary.key.fields"].endswith(",scheduled_for_ms")


@pytest.mark.parametrize("tenant", ["acme", "a.b-c_1"])
def test_the_dispatch_regex_matches_every_occurrence_topic_and_nothing_else(tenant: str) -> None:
    pattern = re.compile(topic_regex(TOPOLOGY, "occurrences", "p-1"))
    for priority in TOPOLOGY.priorities:
        assert pattern.fullmatch(TOPOLOGY.topic_name("occurrences", "p-1", tenant=tenant, priority=priority))
    assert not pattern.fullmatch(TOPOLOGY.topic_name("occurrences", "p-2", tenant=tenant, priority="high"))
    assert not pattern.fullmatch(TOPOLOGY.topic_name("schedule-view", "p-1", tenant=tenant))
    assert not pattern.fullmatch(f"p-1.occurrences.{tenant}.urgent")
    dead = re.compile(topic_regex(TOPOLOGY, "dead-letters", "p-1"))
    assert dead.fullmatch(TOPOLOGY.topic_name("dead-letters", "p-1", tenant=tenant))
    assert not dead.fullmatch(TOPOLOGY.topic_name("dead-letters", "p-10", tenant=tenant))


def test_the_database_url_becomes_a_jdbc_url() -> None:
    assert Database.from_url("postgresql://audit:s3cret@db.internal:6543/ledger") == Database(
        "jdbc:postgresql://db.internal:6543/ledger?reWriteBatchedInserts=true", "audit", "s3cret")
    assert Database.from_url("host=127.0.0.1 port=5555 user=postgres dbname=postgres") == Database(
        "jdbc:postgresql://127.0.0.1:5555/postgres?reWriteBatchedInserts=true", "postgres", "")
    with pytest.raises(ConnectorError, match="Unix socket"):
        Database.from_url("postgresql://postgres@/postgres?host=/tmp/pg&port=5432")


def test_columns_follow_the_ledger_contract() -> None:
    assert column_type(["null", "string"]) == "text"
    assert column_type(["null", "long"]) == "bigint"
    assert column_type({"type": "enum", "name": "K", "symbols": ["A"]}) == "text"
    assert column_type({"type": "array", "items": "long"}) == "text"
    assert column_type("bytes") == "bytea" and column_type("int") == "integer"
    dispatches = expected_columns(next(t for t in TABLES if t.name == "dispatches"))
    assert dispatches["kafka_timestamp"] == "timestamp with time zone"
    assert dispatches["payload"] == "bytea" and dispatches["scheduled_for_ms"] == "bigint"
    assert expected_columns(next(t for t in TABLES if t.name == "dead_letters"))["occurrence_id"] == "text"
    assert schema_name("T-1.x") == "t_1_x"


def test_the_ddl_has_a_column_of_the_right_type_for_every_field_of_every_sunk_record() -> None:
    """A field added to a schema needs its column in ledger.sql (created, and added to older ledgers), or the
    sink of that table fails on every record."""
    ddl = (Path(tables.__file__).parent / "ledger.sql").read_text()
    spelled = {"timestamptz": "timestamp with time zone"}
    for table in TABLES:
        created = re.search(rf"CREATE TABLE IF NOT EXISTS \{{schema\}}\.{table.name} \((.*?)\n\)( PARTITION BY RANGE \(scheduled_for_ms\))?;", ddl, re.S)
        assert created, table.name
        columns = dict(re.findall(r"(?:^|,)\s*([a-z_]+) (text|integer|bigint|boolean|bytea|timestamptz)\b",
                                  " ".join(created.group(1).split())))
        columns.update(re.findall(rf"ALTER TABLE \{{schema\}}\.{table.name} ADD COLUMN IF NOT EXISTS ([a-z_]+) ([a-z]+);",
                                  ddl))
        got = {name: spelled.get(kind, kind) for name, kind in columns.items()}
        assert got == expected_columns(table), table.name
