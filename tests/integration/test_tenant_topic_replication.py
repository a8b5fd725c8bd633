"""Every door that creates a tenant's topics applies the one replication decision (scheduler.kafka.replication):
registration through the Python registry, the CLI and the HTTP API, and the engine on a tenant's first record.
On the single test broker that is factor 1 with min.insync.replicas=1, set on the topic, not inherited."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType
from control_env import cli, control_env, hourly
from engine_harness import REPO, TOPOLOGY
from fastapi.testclient import TestClient

from helpers.waiting import wait_until
from scheduler.kafka.replication import REPLICATION_ENV, replication

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def env(kafka_bootstrap, tmp_path_factory):
    """A scheduler taking any tenant name, so the engine itself creates the topics of a tenant it first sees."""
    yield from control_env(kafka_bootstrap, tmp_path_factory.mktemp("replication"), ("--open-tenants",))


def tenant_topics(env, tenant: str) -> list[str]:
    return [t.name for t in TOPOLOGY.tenant_topics(env.prefix, tenant)]


def replication_of(admin: AdminClient, topic: str) -> tuple[int, str, bool]:
    """Replicas of the topic's least replicated partition, its min.insync.replicas, and whether that was set on
    the topic (a default of the broker's would say nothing about what the creator asked for)."""
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entry = admin.describe_configs([resource], request_timeout=10)[resource].result()["min.insync.replicas"]
    return min(len(p.replicas) for p in partitions), entry.value, entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def wait_for_topics(admin: AdminClient, names: list[str], timeout: float = 60) -> None:
    wait_until(lambda: set(names) <= set(admin.list_topics(timeout=10).topics), timeout,
               f"the topics {names}", interval=0.2)


def test_tenant_topics_from_every_door_get_the_decided_replication(env):
    admin = AdminClient({"bootstrap.servers": env.bootstrap, "log_level": 5})
    expected = replication(len(admin.list_topics(timeout=10).brokers), environ={})
    suffix = uuid.uuid4().hex[:6]
    doors = {door: f"{door}{suffix}" for door in ("registry", "cli", "http", "engine")}

    env.plane.tenants.register(doors["registry"])
    code, out = cli(env, "tenants", "register", doors["cli"])
    assert code == 0, out
    with TestClient(env.app()) as http:
        response = http.post("/v1/tenants", headers={"Authorization": f"Bearer {env.keys['admin']}"},
                             json={"tenant": doors["http"]})
    assert response.status_code == 201, response.text
    env.plane.client.create(doors["engine"], hourly(), schedule_id=f"s-{suffix}")  # unregistered: the engine makes them

    for door, tenant in doors.items():
        names = tenant_topics(env, tenant)
        wait_for_topics(admin, names)
        for name in names:
            assert replication_of(admin, name) == (expected.factor, str(expected.min_insync), True), (door, name)


def test_registration_with_a_factor_the_cluster_cannot_hold_fails_clearly_and_registers_nothing(env):
    admin = AdminClient({"bootstrap.servers": env.bootstrap, "log_level": 5})
    brokers = len(admin.list_topics(timeout=10).brokers)
    tenant = f"toohigh{uuid.uuid4().hex[:6]}"
    run = subprocess.run([sys.executable, "-m", "scheduler", "tenants", "register", tenant], cwd=REPO,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": env.bootstrap,
                              "SCHEDULER_TOPIC_PREFIX": env.prefix, REPLICATION_ENV: str(brokers + 1)})
    assert run.returncode == 6, run.stderr
    assert f"replication factor {brokers + 1}" in run.stderr and REPLICATION_ENV in run.stderr
    assert "Traceback" not in run.stderr
    assert not [n for n in admin.list_topics(timeout=10).topics if n in tenant_topics(env, tenant)]
    code, out = cli(env, "tenants", "get", tenant)
    assert code == 3, out
