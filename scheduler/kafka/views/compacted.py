"""What every materialized view shares: following one compacted topic into memory, and telling
waiters and listeners what it holds (the package's __init__ says why views, and what they cost)."""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Generic, Self, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from scheduler.kafka.clients import AUTHORIZATION_FAILURES, NotAuthorized, client_settings, connection
from scheduler.wire.codec import Codec, DecodeError, RecordCodec

log = logging.getLogger(__name__)

Record = dict[str, Any]
R = TypeVar("R", bound=Mapping[str, Any])  # the record type of a view's topic (scheduler.wire.records)


def watermarks(consumer: Consumer, topic: str, partitions: list[int],
               timeout: float = 15.0) -> dict[int, tuple[int, int]]:
    """(low, high) per partition, retried while a new topic's leaders are still being elected."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)
                    for p in partitions}
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class ViewUnavailable(RuntimeError):
    """The view's topic does not exist (run `scheduler topics ensure`)."""


class CompactedView(Generic[R]):
    """Latest decoded value per key of one compacted topic; subclasses index it."""

    schema = ""

    def __init__(self, bootstrap: str, topic: str, codec: RecordCodec | None = None,
                 client_config: Mapping[str, str] | None = None) -> None:
        """`client_config`: the caller's librdkafka settings (e.g. SASL credentials) for both consumers."""
        self.topic = topic
        self.codec = codec or Codec.default()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._applied: dict[int, int] = {}
        self._listeners: list[Callable[[str, R | None], None]] = []
        conf = client_settings(connection(bootstrap, client_config), {
            "group.id": f"view-{uuid.uuid4()}",  # required by the client; never joined nor committed
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        })
        self.consumer = Consumer(conf)
        # Watermark queries on the consumer the follower thread polls block behind the poll:
        # waiters ask their own handle.
        self._offsets = Consumer(conf)
        self._offsets_lock = threading.Lock()
        metadata = self.consumer.list_topics(topic, timeout=30).topics[topic]
        if not metadata.partitions:
            self.consumer.close()
            self._offsets.close()
            # The broker answers so for a missing topic too: it tells a principal without access nothing.
            if metadata.error is not None and metadata.error.code() in AUTHORIZATION_FAILURES:
                raise NotAuthorized(f"topic {topic} (READ; or it does not exist)", metadata.error)
            raise ViewUnavailable(f"topic {topic} does not exist: run `scheduler topics ensure` first")
        self.partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(metadata.partitions)]
        self.consumer.assign(self.partitions)
        self._thread = threading.Thread(target=self._follow, name=f"view:{topic}", daemon=True)
        self._thread.start()

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()
        self._offsets.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_caught_up(self, timeout: float = 30.0) -> bool:
        """Block until everything committed to the topic before this call is applied; False on timeout.

        Read-your-writes: the engine commits a schedule's changelog record in the
        transaction that carries the command's result, so after an ACCEPTED result
        a caught-up view holds the new state.
        """
        with self._offsets_lock:
            marks = watermarks(self._offsets, self.topic, [tp.partition for tp in self.partitions])
        ends = {p: high for p, (low, high) in marks.items() if high > low}
        deadline = time.monotonic() + timeout
        with self._cond:
            while not all(self._applied.get(p, -1) >= end for p, end in ends.items()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    # -- following ------------------------------------------------------------------

    def _follow(self) -> None:
        while not self._stop.is_set():
            first = self.consumer.poll(0.1)
            messages = [] if first is None else [first, *self.consumer.consume(1000, timeout=0)]
            with self._cond:
                for message in messages:
                    self._apply_message(message)
                # The consumer's position passes transaction markers too; taken after the batch is
                # applied, it tells waiters exactly what the dict holds.
                self._applied = {tp.partition: tp.offset for tp in self.consumer.position(self.partitions)}
                self._cond.notify_all()

    def _apply_message(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            # The client looks up the coordinator of its group although the view never joins it; a
            # principal with no ACL for that group is refused the lookup, which the view does not need.
            if error.code() not in (KafkaError._PARTITION_EOF, KafkaError.GROUP_AUTHORIZATION_FAILED):
                log.warning("view %s: %s", self.topic, error)
            return
        key = message.key()
        if key is None:
            return
        value = message.value()
        if value is None:
            self._delete(key.decode(errors="replace"))
            return
        try:
            record = self.codec.decode(self.schema, value)
        except DecodeError as exc:
            log.warning("view %s offset %d: ignoring undecodable record: %s", self.topic, message.offset(), exc)
            return
        self._put(key.decode(errors="replace"), record)

    def _put(self, key: str, record: R) -> None:
        raise NotImplementedError

    def _delete(self, key: str) -> None:
        raise NotImplementedError

    def _entries(self) -> Mapping[str, R]:
        raise NotImplementedError

    def subscribe(self, listener: Callable[[str, R | None], None]) -> None:
        """Call `listener(key, record)` for every entry held now, then for every change (None: deleted).

        Derived indexes (the console's forecast and tenant figures) follow the view this way
        instead of scanning it per request. Listeners run on the follower thread under the view's
        lock: they must be quick (queue the work, do it elsewhere)."""
        with self._cond:
            for key, record in self._entries().items():
                listener(key, record)
            self._listeners.append(listener)

    def _changed(self, key: str, record: R | None) -> None:
        for listener in self._listeners:
            listener(key, record)
