"""Consumer-group mode: the consumed offset is committed in the transaction of the outcome event."""
from __future__ import annotations

import logging
import time

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from scheduler.kafka.clients import (
    AUTHORIZATION_FAILURES,
    NotAuthorized,
    client_settings,
)
from scheduler.wire.codec import DecodeError
from scheduler.worker.consuming import ConsumingWorker, position
from scheduler.worker.occurrence import Occurrence
from scheduler.worker.priority import PriorityBuffers
from scheduler.worker.writer import NotRecorded

log = logging.getLogger(__name__)
SETTLE_POLL_S = 0.05
LAG_EVERY_S = 5.0  # how often the lag gauges are refreshed: local figures, but one call per partition


def run_group(worker: ConsumingWorker) -> None:
    consumer = Consumer(client_settings(worker.client_config, {
        "group.id": worker.group_id,
        "client.id": worker.worker_id,
        "enable.auto.commit": False,
        # The scheduler writes occurrences in transactions; aborted ones must never run.
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "session.timeout.ms": worker.options.session_timeout_ms,
        "heartbeat.interval.ms": max(1000, worker.options.session_timeout_ms // 5),
        "max.poll.interval.ms": worker.options.max_poll_interval_ms,
        "enable.partition.eof": True,  # tells when a new assignment's backlog is all fetched (GroupLoop._settling)
    }))
    GroupLoop(worker, consumer).run()


class GroupLoop:
    def __init__(self, worker: ConsumingWorker, consumer: Consumer) -> None:
        self.worker = worker
        self.consumer = consumer
        self.buffers: PriorityBuffers[Message] = PriorityBuffers(worker.priorities, worker.options.buffer_capacity)
        self.paused: set[str] = set()
        self.unsettled: set[tuple[str, int]] = set()  # assigned, neither a record nor their end fetched yet
        self.settle_until = 0.0
        self.lag_at = 0.0  # when the lag and assignment figures are next refreshed (0: at once)

    def run(self) -> None:
        self.consumer.subscribe(list(self.worker.topics), on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_revoke)
        try:
            while not self.worker.stopping():
                self.worker.metrics.heartbeat.beat()
                self._report()
                self._fill()
                self._pause_full()
                if self._settling():
                    continue
                taken = self.buffers.pop_next()
                if taken is not None:
                    self._handle(taken[1])
        finally:
            self.consumer.close()

    def _report(self) -> None:
        """The assignment and each partition's lag, for /readyz and the lag gauges: the high watermark the
        last fetch brought (no request) less the position; a partition not fetched yet has neither."""
        now = time.monotonic()
        if now < self.lag_at:
            return
        self.lag_at = now + LAG_EVERY_S
        assignment = self.consumer.assignment()
        self.worker.metrics.partitions(assignment)
        lags = {}
        for tp in self.consumer.position(assignment) if assignment else []:
            if tp.offset < 0:
                continue
            _low, high = self.consumer.get_watermark_offsets(tp, cached=True)
            if high >= 0:
                lags[(tp.topic, tp.partition)] = max(0, high - tp.offset)
        self.worker.metrics.lag(lags)

    def _fill(self) -> None:
        """Block for work only when nothing is buffered; then take whatever is already fetched."""
        if not self.buffers.pending():
            first = self.consumer.poll(self.worker.options.poll_timeout_s)
            if first is None:
                return
            self._buffer(first)
        wait = SETTLE_POLL_S if self._settling() else 0
        for message in self.consumer.consume(self.worker.options.buffer_capacity, timeout=wait):
            self._buffer(message)

    def _settling(self) -> bool:
        """After an assignment, work waits until every new partition has shown a record or its end (or the
        settle time is up): partitions' first fetches return at different moments, and a high-priority
        backlog fetched a little later must not lose its turn to the low-priority records fetched first."""
        return bool(self.unsettled) and time.monotonic() < self.settle_until

    def _buffer(self, message: Message) -> None:
        self.unsettled.discard((message.topic(), message.partition()))
        error = message.error()
        if error is not None:
            if error.fatal():
                raise KafkaException(error)
            if error.code() in AUTHORIZATION_FAILURES:  # the client would only log it and wait
                refused = f"topic {message.topic()}" if message.topic() else f"group {self.worker.group_id}"
                raise NotAuthorized(f"{refused} (READ)", error)
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer: %s", error)
            return
        self.buffers.add(self.worker.topics[position(message)[0]], message)

    def _pause_full(self) -> None:
        wanted = self.buffers.full()
        if wanted == self.paused:
            return
        assignment = self.consumer.assignment()
        for priorities, action in ((wanted - self.paused, self.consumer.pause),
                                   (self.paused - wanted, self.consumer.resume)):
            parts = [tp for tp in assignment if self.worker.topics.get(tp.topic) in priorities]
            if parts:
                action(parts)
        self.paused = wanted

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("assigned %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "no partitions")
        self.paused = set()
        self.unsettled |= {(tp.topic, tp.partition) for tp in partitions}
        self.settle_until = time.monotonic() + self.worker.options.assignment_settle_s
        self.lag_at = 0.0

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.buffers.drop_partitions((tp.topic, tp.partition) for tp in partitions)
        self.unsettled -= {(tp.topic, tp.partition) for tp in partitions}
        self.lag_at = 0.0

    def _handle(self, message: Message) -> None:
        writer = self.worker.writer
        assert writer is not None
        topic, partition, offset = position(message)
        next_offset = [TopicPartition(topic, partition, offset + 1)]
        try:
            try:
                occurrence = Occurrence.from_record(self.worker.codec.decode("Occurrence", message.value() or b""))
            except DecodeError as error:
                log.error("%s [%d] offset %d is not an Occurrence, skipping it: %s",
                          message.topic(), message.partition(), message.offset(), error)
                writer.write([], next_offset, self.consumer.consumer_group_metadata())
                return
            outcome = self.worker.attempt(occurrence)
            writer.write([] if outcome is None else [outcome], next_offset, self.consumer.consumer_group_metadata())
        except NotRecorded as error:
            log.warning("occurrence at %s [%d] offset %d not recorded (%s); it will be read again",
                        message.topic(), message.partition(), message.offset(), error)
            self._rewind(message)

    def _rewind(self, message: Message) -> None:
        """Read `message` again: its outcome and offset were not committed."""
        topic, partition, offset = position(message)
        self.buffers.drop_partitions([(topic, partition)])
        try:
            self.consumer.seek(TopicPartition(topic, partition, offset))
        except KafkaException as error:  # no longer ours after a rebalance: the new owner reads it
            log.info("not rewinding %s [%d]: %s", topic, partition, error)
