"""Shared fixtures: one real Kafka broker per test session, started only if an integration test asks.

Where the broker comes from, in order: `KAFKA_BOOTSTRAP_SERVERS`; a testcontainers container when a
Docker engine answers; otherwise the project's own `LocalBroker` on free ports with a temporary data dir."""
from __future__ import annotations

import gc
import os
import shutil
import subprocess
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from scheduler.broker.cluster import LocalCluster, NodePorts
from scheduler.broker.local import KAFKA_VERSION, LocalBroker, free_port, single_node_settings
from scheduler.kafka.admin import delete_prefixed_topics

pytest_plugins = ["fixtures_audit", "fixtures_browser", "fixtures_prometheus"]

BROKER_FIXTURES = frozenset({"kafka_bootstrap", "local_broker", "kafka_cluster"})
UNIT_DIR = Path(__file__).parent / "unit"


@dataclass(frozen=True)
class SessionBroker:
    bootstrap: str
    local: LocalBroker | None  # None when the cluster is not ours to kill and restart


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that use the broker are integration tests, so `-m "not integration"` never starts one;
    a unit test asking for the broker is a mistake reported at collection time."""
    for item in items:
        if not BROKER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            continue
        if UNIT_DIR in Path(str(item.path)).parents:
            raise pytest.UsageError(f"{item.nodeid}: unit tests must not use a Kafka broker; move it to tests/integration")
        item.add_marker(pytest.mark.integration)


def _docker_answers() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        return subprocess.run([docker, "info"], capture_output=True, timeout=5).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _container_env(port: int) -> dict[str, str]:
    """The official image is configured through KAFKA_* variables (dots become underscores)."""
    settings = {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "controller.quorum.voters": "1@localhost:9093",
        **single_node_settings(),
    }
    return {"KAFKA_" + key.upper().replace(".", "_"): value for key, value in settings.items()}


def _wait_for_metadata(bootstrap: str, timeout: float = 60.0) -> None:
    AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=timeout)


@pytest.fixture(scope="session")
def session_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionBroker]:
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield SessionBroker(external, None)
        return
    if _docker_answers():
        from testcontainers.core.container import DockerContainer

        port = free_port()
        container = DockerContainer(f"apache/kafka:{KAFKA_VERSION}").with_bind_ports(9092, port)
        for name, value in _container_env(port).items():
            container.with_env(name, value)
        with container:
            bootstrap = f"127.0.0.1:{port}"
            _wait_for_metadata(bootstrap)
            yield SessionBroker(bootstrap, None)
        return
    broker = LocalBroker(tmp_path_factory.mktemp("kafka"), port=free_port(), controller_port=free_port())
    broker.start()
    try:
        yield SessionBroker(broker.bootstrap, broker)
    finally:
        # Kafka clients the tests dropped without closing would otherwise outlive the broker and print
        # librdkafka's "Connection refused" to stderr until the interpreter exits.
        gc.collect()
        broker.stop()


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local three-node cluster (scheduler.broker.cluster), started once per session and only when a test
    asks for it: tests kill and restart its nodes, so it is always the project's own, never an external one."""
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"), [NodePorts(free_port(), free_port()) for _ in range(3)])
    cluster.start()
    try:
        yield cluster
    finally:
        gc.collect()
        cluster.stop(timeout=10)


@pytest.fixture(scope="session")
def kafka_bootstrap(session_broker: SessionBroker) -> str:
    """Bootstrap address of the session's real Kafka broker."""
    return session_broker.bootstrap


@pytest.fixture
def local_broker(session_broker: SessionBroker) -> Iterator[LocalBroker]:
    """The session broker as a process that crash tests may kill and restart; it runs again afterwards."""
    if session_broker.local is None:
        pytest.skip("the session uses an external Kafka (KAFKA_BOOTSTRAP_SERVERS or a container), which tests cannot kill")
    yield session_broker.local
    if not session_broker.local.is_running():
        session_broker.local.start()


@pytest.fixture
def unique_prefix(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh topic-name prefix per test, so tests sharing the session broker never collide; its topics
    are deleted afterwards, so a long session does not run the broker out of file descriptors."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    yield prefix
    if "kafka_bootstrap" in request.fixturenames:
        delete_topics(request.getfixturevalue("kafka_bootstrap"), prefix)


def delete_topics(bootstrap: str, prefix: str) -> None:
    """Best effort: a broker a test left stopped or unreachable keeps the topics."""
    try:
        delete_prefixed_topics(bootstrap, prefix, timeout=10)
    except KafkaException as exc:
        warnings.warn(f"topics of {prefix} not deleted: {exc}", stacklevel=2)
