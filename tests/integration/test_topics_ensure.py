"""`scheduler topics ensure` against a real broker: idempotent, and drift is reported, never repaired."""
from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourceType,
)

from helpers.waiting import wait_until
from scheduler.cli_support import EXIT_UNAVAILABLE
from scheduler.control import topology_cli
from scheduler.kafka.admin import ensure_tenant_topics, ensure_topics
from scheduler.kafka.replication import REPLICATION_ENV
from scheduler.wire.topology import Topology

pytestmark = pytest.mark.integration

ONE_DAY_MS = str(24 * 3600 * 1000)


@pytest.fixture(scope="module")
def topology() -> Topology:
    return Topology.load()


@pytest.fixture
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap, "log_level": 5})


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scheduler")
    topology_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


def topic_config(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource], request_timeout=10)[resource].result()
    return {name: entry.value for name, entry in entries.items()}


def partition_count(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=10).topics[topic].partitions)


def visible(condition: Callable[[], bool], what: str) -> None:
    """Admin changes reach the broker through the metadata log; give them a moment to be visible."""
    wait_until(condition, 15.0, what, interval=0.2, ignoring=(KafkaException,))


def test_second_ensure_changes_nothing(
    kafka_bootstrap: str, unique_prefix: str, topology: Topology, admin: AdminClient
) -> None:
    expected = {t.name: t for t in topology.rendered_topics(unique_prefix, ["acme"])}

    first = ensure_topics(kafka_bootstrap, topology, unique_prefix, tenants=["acme"])
    assert set(first.created) == set(expected)
    assert first.ok == () and first.clean

    second = ensure_topics(kafka_bootstrap, topology, unique_prefix, tenants=["acme"])
    assert second.created == ()
    assert set(second.ok) == set(expected)
    assert second.clean

    for name, topic in expected.items():
        assert partition_count(admin, name) == topic.partitions, name
    schedules = topic_config(admin, topology.topic_name("schedules", unique_prefix))
    assert schedules["cleanup.policy"] == "compact"
    assert schedules["min.insync.replicas"] == "1"
    status = topic_config(admin, topology.topic_name("occurrence-status-changelog", unique_prefix))
    assert set(status["cleanup.policy"].split(",")) == {"compact", "delete"}
    assert status["retention.ms"] == "604800000"


def test_tenant_topics_are_added_to_an_existing_deployment(
    kafka_bootstrap: str, unique_prefix: str, topology: Topology
) -> None:
    ensure_topics(kafka_bootstrap, topology, unique_prefix)
    report = ensure_tenant_topics(kafka_bootstrap, topology, unique_prefix, "globex")
    assert set(report.created) == {t.name for t in topology.tenant_topics(unique_prefix, "globex")}
    again = ensure_topics(kafka_bootstrap, topology, unique_prefix, tenants=["globex"])
    assert again.created == () and again.clean


def test_drift_is_reported_by_the_cli_and_left_unchanged(
    kafka_bootstrap: str,
    unique_prefix: str,
    topology: Topology,
    admin: AdminClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ensure_topics(kafka_bootstrap, topology, unique_prefix)
    commands = topology.topic_name("commands", unique_prefix)
    attempts = topology.topic_name("attempts", unique_prefix)

    change = ConfigResource(
        ResourceType.TOPIC,
        commands,
        incremental_configs=[ConfigEntry("retention.ms", ONE_DAY_MS, incremental_operation=AlterConfigOpType.SET)],
    )
    for future in admin.incremental_alter_configs([change]).values():
        future.result()
    for future in admin.create_partitions([NewPartitions(attempts, 10)]).values():
        future.result()
    visible(lambda: topic_config(admin, commands)["retention.ms"] == ONE_DAY_MS, "the new retention")
    visible(lambda: partition_count(admin, attempts) == 10, "the added partitions")
    capsys.readouterr()

    code = run_cli(["topics", "ensure", "--bootstrap", kafka_bootstrap, "--prefix", unique_prefix])
    out = capsys.readouterr().out

    assert code == topology_cli.EXIT_DIFFERS
    differing = sorted(line for line in out.splitlines() if line.startswith("DIFFERS"))
    assert differing == sorted(
        [
            f"DIFFERS  {commands}: retention.ms expected '604800000', actual '{ONE_DAY_MS}'",
            f"DIFFERS  {attempts}: partitions expected '8', actual '10'",
        ]
    )
    assert f"ok       {topology.topic_name('schedules', unique_prefix)}" in out
    assert "0 created" in out

    assert topic_config(admin, commands)["retention.ms"] == ONE_DAY_MS
    assert partition_count(admin, attempts) == 10


def test_a_replication_factor_the_cluster_cannot_hold_fails_clearly(
    kafka_bootstrap: str, unique_prefix: str, admin: AdminClient, capsys: pytest.CaptureFixture[str]
) -> None:
    brokers = len(admin.list_topics(timeout=10).brokers)
    code = run_cli(
        [
            "topics", "ensure", "--bootstrap", kafka_bootstrap, "--prefix", unique_prefix,
            "--replication-factor", str(brokers + 1),
        ]
    )
    assert code == topology_cli.EXIT_ERROR
    assert "cannot create topic" in capsys.readouterr().err


def test_the_environment_sets_the_factor_and_one_above_the_brokers_is_refused_before_any_topic(
    kafka_bootstrap: str, unique_prefix: str, admin: AdminClient, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    brokers = len(admin.list_topics(timeout=10).brokers)
    monkeypatch.setenv(REPLICATION_ENV, str(brokers + 1))
    code = run_cli(["topics", "ensure", "--bootstrap", kafka_bootstrap, "--prefix", unique_prefix])
    err = capsys.readouterr().err
    assert code == topology_cli.EXIT_ERROR
    assert err.startswith(f"scheduler topics ensure: cannot create topics with replication factor {brokers + 1}: "
                          f"the cluster has {brokers} live broker")
    assert REPLICATION_ENV in err and "Traceback" not in err
    assert not [name for name in admin.list_topics(timeout=10).topics if name.startswith(f"{unique_prefix}.")]


def test_existing_topics_below_the_factor_differ_and_the_default_follows_the_brokers(
    kafka_bootstrap: str, unique_prefix: str, topology: Topology, admin: AdminClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    brokers = len(admin.list_topics(timeout=10).brokers)
    default = min(3, brokers)
    first = ensure_topics(kafka_bootstrap, topology, unique_prefix, tenants=["acme"])
    assert first.replication_factor == default
    names = [t.name for t in topology.rendered_topics(unique_prefix, ["acme"])]
    for name in names:  # min.insync.replicas set on each topic, not left to the broker's default
        resource = ConfigResource(ResourceType.TOPIC, name)
        entry = admin.describe_configs([resource], request_timeout=10)[resource].result()["min.insync.replicas"]
        assert (entry.value, entry.is_default) == (str(max(1, min(2, default - 1))), False), name
    capsys.readouterr()

    code = run_cli(["topics", "ensure", "--bootstrap", kafka_bootstrap, "--prefix", unique_prefix,
                    "--tenant", "acme", "--replication-factor", str(default + 1)])
    out = capsys.readouterr().out

    assert code == topology_cli.EXIT_DIFFERS
    below = sorted(line for line in out.splitlines() if "replication.factor" in line)
    assert below == sorted(f"DIFFERS  {name}: replication.factor expected '{default + 1}', actual '{default}'"
                           for name in names)
    assert "0 created, 0 ok" in out


def test_unreachable_broker_fails_with_the_address(capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli(["topics", "ensure", "--bootstrap", "127.0.0.1:1", "--prefix", "nobroker", "--timeout", "2"])
    assert code == EXIT_UNAVAILABLE == 6  # was 2 before issue 33's one exit-code table (docs/cli.md)
    assert "127.0.0.1:1" in capsys.readouterr().err
