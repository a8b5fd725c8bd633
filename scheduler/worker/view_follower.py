"""Keeps a ScheduleView up to date from the tenant's compacted `<prefix>.schedules.<tenant>` topic.

A plain assigned consumer (no group, no commits): every worker reads the whole small view from
the beginning, first up to the end before it takes work, then in a background thread.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from scheduler.codec import DecodeError, RecordCodec
from scheduler.worker.view import DELETED, ScheduleView, ViewEntry

log = logging.getLogger(__name__)


class ViewFollower:
    def __init__(self, bootstrap: str, topic: str, view: ScheduleView, codec: RecordCodec) -> None:
        self.topic = topic
        self.view = view
        self.codec = codec
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": f"view-{uuid.uuid4()}",  # required by the client; never joined nor committed
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "log_level": 4,
        })
        partitions = self.consumer.list_topics(topic, timeout=30).topics[topic].partitions
        if not partitions:
            raise RuntimeError(f"schedule view topic {topic} does not exist (run `scheduler topics ensure`)")
        self.partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(partitions)]
        self.consumer.assign(self.partitions)

    def catch_up(self, timeout: float) -> bool:
        """Read up to the end offsets seen now; False when `timeout` passed first (the view lags)."""
        ends = {tp.partition: self.consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in self.partitions}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            positions = {tp.partition: tp.offset for tp in self.consumer.position(self.partitions)}
            if all(end == 0 or positions[p] >= end for p, end in ends.items()):
                return True
            self._consume(0.2)
        log.warning("schedule view %s not read to its end within %.1fs; continuing with a lagging view",
                    self.topic, timeout)
        return False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._follow, name=f"view:{self.topic}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.consumer.close()

    def _follow(self) -> None:
        while not self._stop.is_set():
            self._consume(0.5)

    def _consume(self, timeout: float) -> None:
        for message in self.consumer.consume(1000, timeout=timeout):
            self._apply(message)

    def _apply(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("schedule view %s: %s", self.topic, error)
            return
        key = message.key()
        if key is None:
            return
        schedule_id = key.decode()
        value = message.value()
        if value is None:
            self.view.apply(schedule_id, ViewEntry(None, DELETED))
            return
        try:
            state = self.codec.decode("ScheduleState", value)
        except DecodeError as error:
            log.warning("schedule view %s offset %d: ignoring undecodable record: %s",
                        self.topic, message.offset(), error)
            return
        self.view.apply(schedule_id, ViewEntry(state["version"], state["state"]))
