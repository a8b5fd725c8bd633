"""Share-group mode (Kafka share groups, KIP-932, through confluent-kafka's preview ShareConsumer).

The broker's acquisition lock on a record is the visibility lease: a worker that dies or
overruns it (the group's `share.record.lock.duration.ms`, 30 s by default) loses the record to
another worker. Acknowledgements follow the recorded outcome, written first:
ACCEPT for SUCCEEDED, SKIPPED_STALE and a retryable FAILED, REJECT for a permanent FAILED and for
records that are not Occurrences; RELEASE (the broker redelivers, at most the group's delivery
count limit times) for a record whose outcome could not be written. A retryable failure is
ACCEPTed because the scheduler already retries it from the FAILED event, with backoff and the
tenant's retry budget: a RELEASE too would run every failed occurrence twice.

Priorities: a share consumer cannot pause partitions, so each polled batch is processed highest
priority first; priority holds within a batch, not across batches.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from confluent_kafka import (
    AcknowledgeType,
    KafkaError,
    KafkaException,
    Message,
    ShareConsumer,
)
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from scheduler.kafka.admin import admin_client
from scheduler.kafka.clients import (
    AUTHORIZATION_FAILURES,
    NotAuthorized,
    client_settings,
    refused_as,
)
from scheduler.wire.codec import DecodeError
from scheduler.worker.consuming import ConsumingWorker, position
from scheduler.worker.occurrence import Occurrence
from scheduler.worker.writer import NotRecorded

log = logging.getLogger(__name__)

# Share groups start at the latest offset and read uncommitted records by default: a new group of
# workers must see occurrences enqueued before it joined, and never those of aborted transactions.
SHARE_GROUP_CONFIG = {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"}

ACK_FOR_KIND: dict[str, AcknowledgeType] = {"SUCCEEDED": AcknowledgeType.ACCEPT,
                                            "SKIPPED_STALE": AcknowledgeType.ACCEPT}


def configure_share_group(client_config: Mapping[str, str], group_id: str) -> None:
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in SHARE_GROUP_CONFIG.items()
    ])
    admin = admin_client(client_config)  # must outlive the request, or the future fails as destroyed
    with refused_as(f"share group {group_id} (ALTER_CONFIGS)"):
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def acknowledgement(outcome: Mapping[str, object]) -> AcknowledgeType:
    """How the broker should treat a record whose outcome event is `outcome`."""
    if outcome["kind"] == "FAILED":
        return AcknowledgeType.ACCEPT if outcome["retryable"] else AcknowledgeType.REJECT
    return ACK_FOR_KIND[str(outcome["kind"])]


def run_share(worker: ConsumingWorker) -> None:
    configure_share_group(worker.client_config, worker.group_id)
    consumer = ShareConsumer(client_settings(worker.client_config, {
        "group.id": worker.group_id,
        "client.id": worker.worker_id,
        "share.acknowledgement.mode": "explicit",
    }))
    rank = {priority: i for i, priority in enumerate(worker.priorities)}
    consumer.subscribe(list(worker.topics))
    worker.metrics.assigned = None  # records, not partitions, are handed out: /readyz asks only for the loop
    try:
        while not worker.stopping():
            worker.metrics.heartbeat.beat()
            batch = [m for m in _poll(worker, consumer) if _usable(m)]
            batch.sort(key=lambda m: rank[worker.topics[position(m)[0]]])
            for message in batch:
                if worker.stopping():
                    consumer.acknowledge(message, AcknowledgeType.RELEASE)
                else:
                    consumer.acknowledge(message, _process(worker, message))
            if batch:
                consumer.commit_async()
    finally:
        consumer.close()


def _poll(worker: ConsumingWorker, consumer: ShareConsumer) -> Iterable[Message]:
    """The next batch; a refusal by the broker's ACLs names what the worker needs, as the error does not."""
    try:
        return consumer.poll(worker.options.poll_timeout_s)
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            raise NotAuthorized(f"share group {worker.group_id} (READ)", error) from exc
        if error.code() in AUTHORIZATION_FAILURES:
            raise NotAuthorized(f"one of the topics {sorted(worker.topics)} (READ)", error) from exc
        raise


def _usable(message: Message) -> bool:
    error = message.error()
    if error is None:
        return True
    if error.fatal():
        raise KafkaException(error)
    log.warning("share consumer: %s", error)
    return False


def _process(worker: ConsumingWorker, message: Message) -> AcknowledgeType:
    writer = worker.writer
    assert writer is not None
    try:
        occurrence = Occurrence.from_record(worker.codec.decode("Occurrence", message.value() or b""))
    except DecodeError as error:
        log.error("%s [%d] offset %d is not an Occurrence, rejecting it: %s",
                  message.topic(), message.partition(), message.offset(), error)
        return AcknowledgeType.REJECT
    log.debug("occurrence %s delivery %s", occurrence.occurrence_id, message.delivery_count())
    try:
        outcome = worker.attempt(occurrence)
        if outcome is None:  # an attempt already LOST: the scheduler runs its retry
            return AcknowledgeType.ACCEPT
        writer.write([outcome])
    except NotRecorded as error:
        log.warning("occurrence %s not recorded (%s); releasing it", occurrence.occurrence_id, error)
        return AcknowledgeType.RELEASE
    return acknowledgement(outcome)
