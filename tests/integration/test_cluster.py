"""The production shape on the local three-node cluster (scheduler.broker.cluster): every topic the project creates
is replicated 3 times with min.insync.replicas 2, and a broker killed (-9) while a real `scheduler run` dispatches
loses no occurrence and no command result."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from engine_harness import REPO, TOPOLOGY, SchedulerProcess, TopicReader, occurrence_topics, read_until_all, rfc3339

from conftest import delete_topics
from scheduler.broker.cluster import LocalCluster
from scheduler.control.client import SchedulerClient, make_spec
from scheduler.control.errors import CommandTimeout
from scheduler.timing.occurrence_id import occurrence_id

pytestmark = pytest.mark.integration

TENANTS = ("north", "south", "east")


@dataclass
class ClusterEnv:
    cluster: LocalCluster
    prefix: str
    process: SchedulerProcess

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "scheduler", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
                                                "SCHEDULER_TOPIC_PREFIX": self.prefix})


@pytest.fixture(scope="module")
def env(kafka_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterEnv]:
    """The layout made by `topics ensure` and the tenants by `tenants register`, both through the CLI, and one
    scheduler process dispatching for them."""
    prefix = f"k{uuid.uuid4().hex[:8]}"
    process = SchedulerProcess(kafka_cluster.bootstrap, prefix, tmp_path_factory.mktemp("cluster-run") / "state",
                               "k1", ("--horizon", "5"), open_tenants=False)
    env = ClusterEnv(kafka_cluster, prefix, process)
    ensured = env.cli("topics", "ensure")
    assert ensured.returncode == 0, ensured.stdout + ensured.stderr
    process.start()
    for tenant in TENANTS:
        registered = env.cli("tenants", "register", tenant)
        assert registered.returncode == 0, registered.stdout + registered.stderr
    try:
        yield env
    finally:
        if process.alive():
            try:
                process.terminate()
            except subprocess.TimeoutExpired:
                process.kill()
        for node in kafka_cluster.nodes:
            if not node.is_running():
                node.start()
        delete_topics(kafka_cluster.bootstrap, prefix)


def replication_of(admin: AdminClient, topics: list[str]) -> dict[str, tuple[int, str]]:
    """Per topic: replicas of its least replicated partition, and its min.insync.replicas."""
    metadata = admin.list_topics(timeout=10).topics
    resources = [ConfigResource(ResourceType.TOPIC, topic) for topic in topics]
    configs = admin.describe_configs(resources, request_timeout=10)
    return {resource.name: (min(len(p.replicas) for p in metadata[resource.name].partitions.values()),
                            future.result()["min.insync.replicas"].value)
            for resource, future in configs.items()}


def test_topics_from_ensure_and_tenant_registration_are_replicated_three_times(env: ClusterEnv) -> None:
    admin = AdminClient({"bootstrap.servers": env.bootstrap, "log_level": 3})
    names = [topic.name for topic in TOPOLOGY.rendered_topics(env.prefix, TENANTS)]
    found = replication_of(admin, names)
    assert set(found) == set(names)
    assert {name: got for name, got in found.items() if got != (3, "2")} == {}
    internal = replication_of(admin, ["__consumer_offsets"])
    assert internal == {"__consumer_offsets": (3, "2")}
    # The cluster's nodes carry the dev broker's group settings, and `scheduler run` said what they imply.
    assert "failover bound: a dead scheduler's partitions are taken over within 6.5 s" in env.process.log_tail(10_000)


def leader_of_most(admin: AdminClient, topics: list[str]) -> int:
    """The node id leading the most partitions of `topics`."""
    metadata = admin.list_topics(timeout=10).topics
    leaders = Counter(partition.leader for topic in topics for partition in metadata[topic].partitions.values())
    return leaders.most_common(1)[0][0]


def one_shots(client: SchedulerClient, first_s: int, seconds: int, tag: str) -> tuple[dict[str, str], list[str]]:
    """One one-shot per tenant per second from `first_s` (epoch seconds): expected occurrence ids and command ids."""
    expected: dict[str, str] = {}
    commands = []
    for second in range(first_s, first_s + seconds):
        due = datetime.fromtimestamp(second, tz=timezone.utc)
        for tenant in TENANTS:
            sid = f"{tag}-{tenant}-{second}"
            commands.append(client.send("CREATE", sid, tenant, spec=make_spec("once", rfc3339(second * 1000))))
            expected[occurrence_id(sid, 1, due)] = tenant
    return expected, commands


def test_a_broker_killed_during_dispatch_loses_no_occurrence_and_no_command_result(env: ClusterEnv) -> None:
    admin = AdminClient({"bootstrap.servers": env.bootstrap, "log_level": 3})
    topics = occurrence_topics(env.prefix, TENANTS)
    reader = TopicReader(env.bootstrap, topics, "Occurrence")
    start_s = int(time.time()) + 6
    with SchedulerClient(env.bootstrap, env.prefix, timeout_s=90) as client:
        before, commands = one_shots(client, start_s, 30, "before")
        results = client.wait(commands, timeout_s=60)
        assert {r["status"] for r in results.values()} == {"ACCEPTED"}
        # Dispatch is under way when the broker leading most occurrence partitions dies.
        reader.until(lambda got: len(got) >= 3 * len(TENANTS), timeout=30)
        assert len(reader.received) >= 3 * len(TENANTS), env.process.log_tail()
        victim = leader_of_most(admin, topics)
        env.cluster.node(victim).kill()
        killed_at = time.time()
        # Commands sent while it is down get their results once the cluster has them, and their one-shots fire.
        during, commands = one_shots(client, int(killed_at) + 12, 10, "during")
        # Down for longer than the broker session (4 s), so its partitions' leadership moves to the others.
        env.cluster.wait_for_brokers_at_most(2, timeout=30)
        env.cluster.node(victim).start()
        env.cluster.wait_for_brokers(3, timeout=60)
        try:
            results = client.wait(commands, timeout_s=60)
        except CommandTimeout:
            pytest.fail(f"commands sent while broker {victim} was down got no result; scheduler log:\n"
                        f"{env.process.log_tail(80)}")
        assert {r["status"] for r in results.values()} == {"ACCEPTED"}, results
    expected = {**before, **during}
    counts = read_until_all(reader, expected, int((max(start_s + 30, killed_at + 22) + 30) * 1000))
    reader.close()
    assert set(expected) - set(counts) == set(), f"lost occurrences; scheduler log:\n{env.process.log_tail()}"
    assert set(counts) - set(expected) == set()
    assert env.process.alive(), env.process.log_tail()
