"""Materialized views of the compacted topics the control plane reads from.

A view follows a compacted topic (read_committed, every partition from the
beginning, in a background thread) into an in-memory dict, so reads (HTTP GETs,
`scheduler schedules get`) never scan a topic per request. Every entry of the
topic is held in memory: for the schedules topic that is one ScheduleState per
schedule (a few hundred bytes plus the spec's payload), so around a million
schedules fit in 1-2 GiB; the occurrence-status view is bounded by the changelog's
7-day retention. Beyond that a view must be sharded (per tenant topic) or moved
to a local store.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from scheduler.wire.codec import Codec, DecodeError, RecordCodec
from scheduler.kafka.clients import AUTHORIZATION_FAILURES, NotAuthorized, client_settings, connection
from scheduler.wire.topology import Topology

log = logging.getLogger(__name__)

Record = dict[str, Any]

# Schedules in these states hold (or are asking for) a slot of the tenant's quota and can still fire.
LIVE_STATES = frozenset({"ACTIVE", "PAUSED", "PENDING"})
# A PENDING schedule waits for the quota check of its CREATE: it does not exist yet for readers.
HIDDEN_STATES = frozenset({"PENDING"})


def watermarks(consumer: Consumer, topic: str, partitions: list[int], timeout: float = 15.0) -> dict[int, tuple[int, int]]:
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


class CompactedView:
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
        self._listeners: list[Callable[[str, Record | None], None]] = []
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

    def __enter__(self) -> "CompactedView":
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

    def _put(self, key: str, record: Record) -> None:
        raise NotImplementedError

    def _delete(self, key: str) -> None:
        raise NotImplementedError

    def _entries(self) -> Mapping[str, Record]:
        raise NotImplementedError

    def subscribe(self, listener: Callable[[str, Record | None], None]) -> None:
        """Call `listener(key, record)` for every entry held now, then for every change (None: deleted).

        Derived indexes (the console's forecast and tenant figures) follow the view this way
        instead of scanning it per request. Listeners run on the follower thread under the view's
        lock: they must be quick (queue the work, do it elsewhere)."""
        with self._cond:
            for key, record in self._entries().items():
                listener(key, record)
            self._listeners.append(listener)

    def _changed(self, key: str, record: Record | None) -> None:
        for listener in self._listeners:
            listener(key, record)


class ScheduleView(CompactedView):
    """schedule_id -> ScheduleState from `<prefix>.schedules`, indexed by tenant."""

    schema = "ScheduleState"

    def __init__(self, bootstrap: str, prefix: str, codec: RecordCodec | None = None,
                 client_config: Mapping[str, str] | None = None) -> None:
        self._by_id: dict[str, Record] = {}
        self._by_tenant: dict[str, dict[str, Record]] = {}
        super().__init__(bootstrap, Topology.load().topic_name("schedules", prefix), codec, client_config)

    def _put(self, key: str, record: Record) -> None:
        current = self._by_id.get(key)
        # A re-published older version (an engine restore) must not undo a newer one.
        if current is not None and current["version"] > record["version"]:
            return
        if current is not None and current["tenant"] != record["tenant"]:
            self._by_tenant.get(current["tenant"], {}).pop(key, None)
        self._by_id[key] = record
        self._by_tenant.setdefault(record["tenant"], {})[key] = record
        self._changed(key, record)

    def _delete(self, key: str) -> None:
        current = self._by_id.pop(key, None)
        if current is not None:
            self._by_tenant.get(current["tenant"], {}).pop(key, None)
            self._changed(key, None)

    def _entries(self) -> Mapping[str, Record]:
        return self._by_id

    def get(self, tenant: str, schedule_id: str) -> Record | None:
        """The schedule, or None when it does not exist or belongs to another tenant."""
        with self._cond:
            state = self._by_tenant.get(tenant, {}).get(schedule_id)
        return None if state is None or state["state"] in HIDDEN_STATES else state

    def list(self, tenant: str, state: str | None = None, after: str | None = None,
             limit: int | None = None) -> list[Record]:
        """The tenant's schedules ordered by schedule_id, from the one after `after` (a page cursor)."""
        with self._cond:
            mine = list(self._by_tenant.get(tenant, {}).values())
        selected = sorted((s for s in mine if s["state"] not in HIDDEN_STATES
                           and (state is None or s["state"] == state)
                           and (after is None or s["schedule_id"] > after)), key=lambda s: s["schedule_id"])
        return selected if limit is None else selected[:limit]

    def count_live(self, tenant: str) -> int:
        with self._cond:
            return sum(1 for s in self._by_tenant.get(tenant, {}).values() if s["state"] in LIVE_STATES)

    def wait_for_version(self, schedule_id: str, version: int, timeout: float) -> Record | None:
        """The schedule once the view holds `version` or newer; None if it did not arrive in time."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                current = self._by_id.get(schedule_id)
                if current is not None and current["version"] >= version and current["state"] not in HIDDEN_STATES:
                    return current
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)


class OccurrenceView(CompactedView):
    """occurrence_id -> OccurrenceStatus from `<prefix>.occurrence-status-changelog`."""

    schema = "OccurrenceStatus"

    def __init__(self, bootstrap: str, prefix: str, codec: RecordCodec | None = None,
                 client_config: Mapping[str, str] | None = None) -> None:
        self._by_id: dict[str, Record] = {}
        self._by_schedule: dict[str, dict[str, Record]] = {}
        super().__init__(bootstrap, Topology.load().topic_name("occurrence-status-changelog", prefix), codec, client_config)

    def _put(self, key: str, record: Record) -> None:
        self._by_id[key] = record
        self._by_schedule.setdefault(record["schedule_id"], {})[key] = record
        self._changed(key, record)

    def _delete(self, key: str) -> None:
        current = self._by_id.pop(key, None)
        if current is not None:
            self._by_schedule.get(current["schedule_id"], {}).pop(key, None)
            self._changed(key, None)

    def _entries(self) -> Mapping[str, Record]:
        return self._by_id

    def for_schedule(self, tenant: str, schedule_id: str, limit: int = 50) -> list[Record]:
        """The schedule's most recent occurrences (by scheduled_for, newest first) the changelog still holds."""
        with self._cond:
            mine = [s for s in self._by_schedule.get(schedule_id, {}).values() if s["tenant"] == tenant]
        return sorted(mine, key=lambda s: (s["scheduled_for_ms"], s["occurrence_id"]), reverse=True)[:limit]

    def get(self, tenant: str, occurrence_id: str) -> Record | None:
        """The occurrence's status, or None when unknown or another tenant's."""
        with self._cond:
            status = self._by_id.get(occurrence_id)
        return status if status is not None and status["tenant"] == tenant else None


class TenantView(CompactedView):
    """tenant -> Tenant record from the single-partition `<prefix>.tenants` topic."""

    schema = "Tenant"

    def __init__(self, bootstrap: str, prefix: str, codec: RecordCodec | None = None,
                 client_config: Mapping[str, str] | None = None) -> None:
        self._by_name: dict[str, Record] = {}
        super().__init__(bootstrap, Topology.load().topic_name("tenants", prefix), codec, client_config)

    def _put(self, key: str, record: Record) -> None:
        self._by_name[key] = record
        self._changed(key, record)

    def _delete(self, key: str) -> None:
        if self._by_name.pop(key, None) is not None:
            self._changed(key, None)

    def _entries(self) -> Mapping[str, Record]:
        return self._by_name

    def get(self, tenant: str) -> Record | None:
        with self._cond:
            return self._by_name.get(tenant)

    def list(self) -> list[Record]:
        with self._cond:
            return [self._by_name[name] for name in sorted(self._by_name)]


class ApiKeyView(CompactedView):
    """key_id -> ApiKey from `<prefix>.api-keys`: what every API server checks presented keys against."""

    schema = "ApiKey"

    def __init__(self, bootstrap: str, prefix: str, codec: RecordCodec | None = None,
                 client_config: Mapping[str, str] | None = None) -> None:
        self._keys: dict[str, Record] = {}
        super().__init__(bootstrap, Topology.load().topic_name("api-keys", prefix), codec, client_config)

    def _put(self, key: str, record: Record) -> None:
        self._keys[key] = record

    def _delete(self, key: str) -> None:
        self._keys.pop(key, None)

    def get(self, key_id: str) -> Record | None:
        with self._cond:
            return self._keys.get(key_id)

    def list(self) -> list[Record]:
        with self._cond:
            return sorted(self._keys.values(), key=lambda r: r["key_id"])
