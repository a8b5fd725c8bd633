"""Durable attempt records: a transactional producer, one transaction per recorded step.

In consumer-group mode the outcome event and the consumed offset share a transaction, so the
offset is committed only if the outcome is durably written: a crash before the commit means
redelivery (at-least-once), never a lost occurrence (at-most-once).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from scheduler.kafka.clients import (
    AUTHORIZATION_FAILURES,
    NotAuthorized,
    client_settings,
    refused_as,
)
from scheduler.kafka.transactional import TransactionalProducer
from scheduler.wire.codec import RecordCodec
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF

log = logging.getLogger(__name__)

TIMEOUT_S = 30.0
# Transactions hold only a few records; a short timeout limits how long a crashed worker's open
# transaction holds back read_committed readers of the attempts topic (the scheduler).
TRANSACTION_TIMEOUT_MS = 10_000
COMMIT_DEADLINE_S = 60.0  # retriable commit failures are retried this long, then the step is not recorded


class NotRecorded(RuntimeError):
    """The transaction was aborted: neither the events nor the offsets were written."""


class AttemptWriter:
    def __init__(self, client_config: Mapping[str, str], topic: str, transactional_id: str,
                 codec: RecordCodec) -> None:
        """`client_config`: bootstrap.servers and the caller's librdkafka settings (e.g. SASL credentials)."""
        self.topic = topic
        self.codec = codec
        with refused_as(f"transactional id {transactional_id} (WRITE)"):
            self.txn = TransactionalProducer(client_settings(client_config, {
                **PRODUCER_PARTITIONER_CONF,
                "transactional.id": transactional_id,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "linger.ms": 0,
            }), TIMEOUT_S)
        self._lock = threading.Lock()  # heartbeats are written from their own thread

    def write(
        self,
        events: Sequence[dict[str, Any]],
        offsets: Sequence[TopicPartition] = (),
        group_metadata: Any = None,
    ) -> None:
        """Write `events` (and commit `offsets` for the group) atomically, or raise NotRecorded.

        Fatal errors (this producer was fenced by a newer worker with the same transactional id)
        propagate as KafkaException, and a refused write to the topic as NotAuthorized: the worker
        must stop, as writing again would only be refused again.
        """
        with self._lock:
            self._write(events, offsets, group_metadata)

    def _write(self, events: Sequence[dict[str, Any]], offsets: Sequence[TopicPartition],
               group_metadata: Any) -> None:
        refused: list[KafkaError] = []

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is not None and error.code() in AUTHORIZATION_FAILURES:
                refused.append(error)

        self.txn.begin()
        try:
            for event in events:
                self.txn.raw.produce(self.topic, self.codec.encode("AttemptEvent", event),
                                     key=event["schedule_id"].encode(), on_delivery=delivered)
            if offsets:
                self.txn.send_offsets(list(offsets), group_metadata, TIMEOUT_S)
            self.txn.commit(TIMEOUT_S, COMMIT_DEADLINE_S)
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal() or not error.txn_requires_abort():
                raise
            log.warning("aborting attempt transaction: %s", error)
            self.txn.abort(TIMEOUT_S)
            if refused:
                raise NotAuthorized(f"topic {self.topic} (WRITE)", refused[0]) from exc
            raise NotRecorded(str(error)) from exc

    def close(self) -> None:
        self.txn.raw.flush(TIMEOUT_S)
