"""Per-tenant ACLs on the local broker with SASL/SCRAM, checked with real SASL clients and real
workers: a worker user of tenant A gets what `scheduler.control.acls.worker_acls` grants and nothing of
tenant B's, and a worker refused something fails at once, naming it.

The broker is this module's own (the session broker has no authorizer); tenant B's worker is
granted too (through the CLI), so A is refused although ACLs exist on B's topics."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from worker_harness import WorkerProcess, enqueue, handled, occurrence

from scheduler.broker.local import SUPER_USER, LocalBroker, free_port
from scheduler.control.acls import SCRAM_ITERATIONS, grant_worker, scram_client_config, worker_acls
from scheduler.kafka.admin import ensure_tenant_topics, ensure_topics
from scheduler.kafka.clients import NotAuthorized
from scheduler.wire.codec import Codec
from scheduler.wire.topology import Topology
from scheduler.worker import AttemptContext, Occurrence, Worker
from scheduler.worker.worker import default_group_id, transactional_id_prefix

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TENANT_A, TENANT_B = "acme", "globex"
TIMEOUT_S = 20.0
# `scheduler worker` as tenant A's worker user (granted "secret-a" by the fixture).
WORKER_A_SASL_ARGS = ("--sasl-user", "worker-a", "--sasl-password-env", "WORKER_A_PASSWORD")
WORKER_A_PASSWORD_ENV = {"WORKER_A_PASSWORD": "secret-a"}


@dataclass(frozen=True)
class Cluster:
    broker: LocalBroker
    topology: Topology
    prefix: str
    worker_a: dict[str, str]  # client settings of tenant A's worker user
    worker_b: dict[str, str]

    def topic(self, key: str, tenant: str | None = None, priority: str | None = None) -> str:
        return self.topology.topic_name(key, self.prefix, tenant=tenant, priority=priority)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    broker = LocalBroker(tmp_path_factory.mktemp("kafka-sasl"), port=free_port(), controller_port=free_port(),
                         sasl_port=free_port())
    try:
        broker.start()
        assert broker.sasl_bootstrap is not None
        topology, prefix = Topology.load(), f"t{uuid.uuid4().hex[:8]}"
        ensure_topics(broker.bootstrap, topology, prefix, [TENANT_A])
        ensure_tenant_topics(broker.bootstrap, topology, prefix, TENANT_B)
        grant_worker(broker.bootstrap, topology, prefix, TENANT_A, "worker-a", "secret-a")
        granted = subprocess.run(
            [sys.executable, "-m", "scheduler", "tenants", "grant-worker", TENANT_B, "--user", "worker-b",
             "--password-env", "WORKER_B_PASSWORD", "--bootstrap", broker.bootstrap, "--prefix", prefix, "--json"],
            cwd=REPO, capture_output=True, text=True, timeout=60,
            env={**os.environ, "WORKER_B_PASSWORD": "secret-b"},
        )
        assert granted.returncode == 0, granted.stderr
        assert topology.topic_name("dead-letters", prefix, tenant=TENANT_B) in {
            acl["name"] for acl in json.loads(granted.stdout)["acls"]}
        yield Cluster(broker, topology, prefix, scram_client_config(broker.sasl_bootstrap, "worker-a", "secret-a"),
                      scram_client_config(broker.sasl_bootstrap, "worker-b", "secret-b"))
    finally:
        broker.stop()


def first_message(conf: dict[str, str], group: str, topic: str) -> tuple[bytes | None, KafkaError | None]:
    """The first record of `topic` read in `group`, or the first error the consumer reports."""
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                return message.value(), message.error()
    finally:
        consumer.close()
    raise AssertionError(f"neither a record nor an error from {topic} within {TIMEOUT_S}s")


def attempt_events(cluster: Cluster, schedule_id: str, count: int) -> list[dict[str, Any]]:
    """The first `count` committed attempt events of `schedule_id`, read as the (PLAINTEXT) super user."""
    topic = cluster.topic("attempts")
    consumer = Consumer({"bootstrap.servers": cluster.broker.bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(cluster.topology.schedule_partitions)])
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(events) < count and time.monotonic() < deadline:
            # Other tests write raw bytes to the topic: only this schedule's records are events.
            events.extend(Codec.default().decode("AttemptEvent", m.value()) for m in consumer.consume(100, 0.5)
                          if m.error() is None and m.key() == schedule_id.encode())
    finally:
        consumer.close()
    return sorted(events, key=lambda event: event["at_ms"])


def run_until_refused(worker: Worker) -> NotAuthorized:
    """What `worker.run()` raised; a worker still running after TIMEOUT_S is waiting silently."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as error:  # handed to the test thread
            raised.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(TIMEOUT_S)
    if thread.is_alive():
        worker.stop()
        thread.join(TIMEOUT_S)
        raise AssertionError(f"the worker neither failed nor stopped within {TIMEOUT_S}s")
    assert len(raised) == 1 and isinstance(raised[0], NotAuthorized), raised
    return raised[0]


def partial_worker_user(cluster: Cluster, user: str, refused: str) -> dict[str, str]:
    """A user granted what a worker of A needs but the ACLs on resource `refused`."""
    admin = AdminClient({"bootstrap.servers": cluster.broker.bootstrap})
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
                                          b"secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result()
    bindings = [b for b in worker_acls(cluster.topology, cluster.prefix, TENANT_A, user) if b.name != refused]
    for future in admin.create_acls(bindings).values():
        future.result()
    return scram_client_config(cluster.broker.sasl_bootstrap, user, "secret")


def test_worker_reads_its_tenants_occurrences(cluster: Cluster) -> None:
    topic = cluster.topic("occurrences", TENANT_A, "normal")
    admin = scram_client_config(cluster.broker.sasl_bootstrap, SUPER_USER, cluster.broker.admin_password())
    producer = Producer(admin)
    producer.produce(topic, b"occurrence", key=b"schedule-1")
    assert producer.flush(TIMEOUT_S) == 0

    value, error = first_message(cluster.worker_a, default_group_id(cluster.prefix, TENANT_A, share=False), topic)

    assert error is None and value == b"occurrence"


def test_worker_writes_attempts_in_its_transactions_only(cluster: Cluster) -> None:
    own_id, foreign_id = (transactional_id_prefix(cluster.prefix, tenant) + "w1" for tenant in (TENANT_A, TENANT_B))
    producer = Producer({**cluster.worker_a, "transactional.id": own_id})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(cluster.topic("attempts"), b"attempt", key=b"schedule-1")
    producer.commit_transaction(TIMEOUT_S)

    foreign = Producer({**cluster.worker_a, "transactional.id": foreign_id})
    with pytest.raises(KafkaException) as refused:
        foreign.init_transactions(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_worker_cannot_write_occurrences(cluster: Cluster) -> None:
    failures: list[KafkaError | None] = []
    producer = Producer(cluster.worker_a)
    for tenant in (TENANT_A, TENANT_B):
        producer.produce(cluster.topic("occurrences", tenant, "high"), b"forged", key=b"schedule-1",
                         on_delivery=lambda error, message: failures.append(error))
    assert producer.flush(TIMEOUT_S) == 0
    assert [error and error.code() for error in failures] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 2


@pytest.mark.parametrize("key,priority", [("occurrences", "normal"), ("dead-letters", None)])
def test_worker_cannot_read_another_tenants_topics(cluster: Cluster, key: str, priority: str | None) -> None:
    # Its own group, so only the topic's authorization can fail.
    _, error = first_message(cluster.worker_a, default_group_id(cluster.prefix, TENANT_A, share=False),
                             cluster.topic(key, TENANT_B, priority))

    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_worker_sees_only_its_tenants_topics(cluster: Cluster) -> None:
    admin = AdminClient(cluster.worker_a)
    visible = set(admin.list_topics(timeout=TIMEOUT_S).topics)
    expected = {t.name for t in cluster.topology.tenant_topics(cluster.prefix, TENANT_A)} | {cluster.topic("attempts")}
    assert visible == expected

    foreign = cluster.topic("dead-letters", TENANT_B)
    described = admin.list_topics(foreign, timeout=TIMEOUT_S).topics[foreign]
    assert described.error is not None and described.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The CLI granted B's worker alike: it sees B's topics and none of A's.
    assert set(AdminClient(cluster.worker_b).list_topics(timeout=TIMEOUT_S).topics) == (
        {t.name for t in cluster.topology.tenant_topics(cluster.prefix, TENANT_B)} | {cluster.topic("attempts")})


def test_worker_configures_only_its_own_share_group(cluster: Cluster) -> None:
    admin = AdminClient(cluster.worker_a)

    def set_reset(tenant: str) -> None:
        group = default_group_id(cluster.prefix, tenant, share=True)
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)

    set_reset(TENANT_A)
    with pytest.raises(KafkaException) as refused:
        set_reset(TENANT_B)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_wrong_password_fails_authentication(cluster: Cluster) -> None:
    errors: list[KafkaError] = []
    admin = AdminClient({**cluster.worker_a, "sasl.password": "not-the-password", "error_cb": errors.append})
    deadline = time.monotonic() + TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        admin.poll(0.5)  # serves error_cb
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=2)


def test_a_worker_with_its_tenants_credentials_runs_occurrences_and_records_attempts(cluster: Cluster) -> None:
    occ = occurrence("sasl-group", TENANT_A)
    enqueue(cluster.broker.bootstrap, cluster.prefix, [occ])
    ran: list[str] = []

    def handle(occurrence: Occurrence, ctx: AttemptContext) -> None:
        ran.append(occurrence.occurrence_id)

    worker = Worker(cluster.broker.sasl_bootstrap, cluster.prefix, TENANT_A, handle, client_config=cluster.worker_a)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        events = attempt_events(cluster, "sasl-group", count=2)
    finally:
        worker.stop()
        thread.join(TIMEOUT_S)

    assert not thread.is_alive()
    assert ran.count(occ["occurrence_id"]) == 1
    assert [(e["kind"], e["occurrence_id"], e["tenant"]) for e in events] == [
        ("STARTED", occ["occurrence_id"], TENANT_A), ("SUCCEEDED", occ["occurrence_id"], TENANT_A)]
    assert events[0]["attempt_token"] == events[1]["attempt_token"]


def test_a_share_mode_worker_process_authenticates_with_sasl_options(cluster: Cluster, tmp_path: Path) -> None:
    occ = occurrence("sasl-share", TENANT_A)
    enqueue(cluster.broker.bootstrap, cluster.prefix, [occ])
    worker = WorkerProcess(cluster.broker.sasl_bootstrap, cluster.prefix, TENANT_A, "worker_handlers:record", tmp_path,
                           extra_args=("--share", *WORKER_A_SASL_ARGS), env=WORKER_A_PASSWORD_ENV).start()
    try:
        events = attempt_events(cluster, "sasl-share", count=2)
        assert worker.terminate() == 0, worker.log_tail()
    finally:
        worker.stop_quietly()

    assert [e["kind"] for e in events] == ["STARTED", "SUCCEEDED"], worker.log_tail()
    assert occ["occurrence_id"] in {h["occurrence_id"] for h in handled(tmp_path)}


def test_a_worker_with_another_tenants_topics_fails_at_once_naming_the_topic(cluster: Cluster) -> None:
    worker = Worker(cluster.broker.sasl_bootstrap, cluster.prefix, TENANT_B, lambda occurrence, ctx: None,
                    client_config=cluster.worker_a)

    refused = run_until_refused(worker)

    assert refused.code == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert cluster.topic("schedule-view", TENANT_B) in str(refused)


@pytest.mark.parametrize("missing", ["occurrence topic", "group", "attempts topic"])
def test_a_worker_missing_one_acl_fails_at_once_naming_it(cluster: Cluster, missing: str) -> None:
    refused_name = {"occurrence topic": cluster.topic("occurrences", TENANT_A, "high"),
                    "group": default_group_id(cluster.prefix, TENANT_A, share=False),
                    "attempts topic": cluster.topic("attempts")}[missing]
    conf = partial_worker_user(cluster, f"worker-a-no-{missing.replace(' ', '-')}", refused_name)
    # An occurrence to attempt, so that the attempts topic is written to.
    enqueue(cluster.broker.bootstrap, cluster.prefix, [occurrence(f"refused-{uuid.uuid4().hex[:6]}", TENANT_A)])
    worker = Worker(cluster.broker.sasl_bootstrap, cluster.prefix, TENANT_A, lambda occurrence, ctx: None,
                    client_config=conf)

    refused = run_until_refused(worker)

    assert refused_name in refused.resource


def test_the_worker_command_refused_access_exits_5_with_the_reason(cluster: Cluster, tmp_path: Path) -> None:
    worker = WorkerProcess(cluster.broker.sasl_bootstrap, cluster.prefix, TENANT_B, "worker_handlers:record", tmp_path,
                           extra_args=WORKER_A_SASL_ARGS, env=WORKER_A_PASSWORD_ENV).start()
    assert worker.proc is not None
    try:
        code = worker.proc.wait(TIMEOUT_S)
    finally:
        worker.stop_quietly()

    assert code == 5, worker.log_tail()  # forbidden (docs/cli.md); 1 before issue 33
    assert f"not authorized for topic {cluster.topic('schedule-view', TENANT_B)}" in worker.log_tail()
    assert "Traceback" not in worker.log_tail()


def test_users_and_acls_survive_a_restart(cluster: Cluster) -> None:
    broker = LocalBroker.from_data_dir(cluster.broker.data_dir)
    assert broker.sasl_bootstrap == cluster.broker.sasl_bootstrap
    broker.restart()

    admin = scram_client_config(broker.sasl_bootstrap, SUPER_USER, broker.admin_password())
    seen_by_admin = AdminClient(admin).list_topics(timeout=TIMEOUT_S).topics
    seen_by_worker_a = AdminClient(cluster.worker_a).list_topics(timeout=TIMEOUT_S).topics
    assert cluster.topic("dead-letters", TENANT_B) in seen_by_admin
    assert cluster.topic("dead-letters", TENANT_B) not in seen_by_worker_a
    assert cluster.topic("dead-letters", TENANT_A) in seen_by_worker_a
