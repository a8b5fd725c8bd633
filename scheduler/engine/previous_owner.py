"""Abort a dead previous owner's open turn at once, instead of waiting out its transaction timeout.

A process killed mid-turn leaves its transaction open over the changelogs of every partition it owned,
and a `read_committed` restore cannot pass it: the new owner would wait for the broker to abort it,
`transaction.timeout.ms` after it began plus up to the broker's cleanup interval (10 s + 10 s by
default), far past the failover budget (session timeout + 2 s). The turns' producer is named per
process (`<prefix>.scheduler.<instance id>`), so the new owner cannot derive it from the partition:
every turn tags the input offsets it commits with its transactional id and group member id
(`owner_tag`), and the new owner reads the tags of a newly assigned partition's inputs. A tagged
process that is no longer in the group (the group removed it: the partitions moved because of that)
is fenced: initialising a producer with its transactional id bumps the epoch and aborts what it left
open, as its own restart would. A process still in the group (a join moved the partition from a live
member) is never touched: its turn commits or aborts on its own within a turn.

A member the group removed while alive (stalled past the session timeout) finds its producer fenced
and ends, as with any fenced error; it could not commit for those partitions any more anyway.

The tags are read by a consumer of the group's id that never joins it (the group's own member is gated
to the main loop's thread by confluent-kafka 2.16, so a call from the fencing thread would wait for a gap
between polls), and the group is described only when a tag names another process: librdkafka 2.16's
coordinator-targeted admin requests (DescribeConsumerGroups, ListConsumerGroupOffsets) abort the whole
process when their connection drops mid-request (`rd_kafka_enq_once_del_source_return: Assertion
'eonce->refcnt > 0'`, librdkafka PR #5397), and a lone process taking its own partitions back after a
broker restart would otherwise ask exactly then.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from scheduler.kafka.clients import DURABLE_PRODUCER, settled

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
_SEP = " "


def owner_tag(transactional_id: str, member_id: str) -> str:
    """The committed-offset metadata of a turn: who committed it."""
    return f"{transactional_id}{_SEP}{member_id}"


def parse_tag(metadata: str | None) -> tuple[str, str] | None:
    if not metadata or _SEP not in metadata:
        return None
    transactional_id, member_id = metadata.rsplit(_SEP, 1)
    return transactional_id, member_id


def other_owners(tags: Iterable[str | None], own_id: str) -> set[str]:
    """The transactional ids other than ours that the tags name: only these make the group worth asking."""
    parsed = (parse_tag(tag) for tag in tags)
    return {p[0] for p in parsed if p is not None and p[0] != own_id}


def dead_owners(tags: Iterable[str | None], members: set[str], clients: set[str], own_id: str) -> set[str]:
    """The transactional ids to fence: tagged by a member the group no longer has, and held by no member
    (a restart under the same instance id already aborted its own predecessor's turn)."""
    found = set()
    for tag in tags:
        parsed = parse_tag(tag)
        if parsed is None:
            continue
        transactional_id, member_id = parsed
        if transactional_id != own_id and member_id not in members and transactional_id not in clients:
            found.add(transactional_id)
    return found


class PreviousOwners:
    """The group's side of the takeover: read the tags, tell who is gone, fence them."""

    def __init__(self, common: dict[str, Any], admin: AdminClient, group: str, inputs: list[str],
                 own_id: str) -> None:
        self.common, self.admin, self.group, self.inputs, self.own_id = common, admin, group, inputs, own_id
        self.offsets = Consumer({**common, "group.id": group, "enable.auto.commit": False,
                                 "client.id": f"{own_id}.offsets"})

    def close(self) -> None:
        self.offsets.close()

    def fence(self, partitions: list[int]) -> set[str]:
        """Fence the dead previous owners of `partitions`; returns their transactional ids. Best effort: a
        failure is logged and the restore waits for the broker's own abort, as it would without this."""
        try:
            inputs = [TopicPartition(topic, p) for topic in self.inputs for p in partitions]
            tags = [tp.metadata for tp in self.offsets.committed(inputs, timeout=TIMEOUT_S)]
            if not other_owners(tags, self.own_id):
                return set()
            group = self.admin.describe_consumer_groups([self.group], request_timeout=TIMEOUT_S)[self.group]
            description = group.result(timeout=TIMEOUT_S * 2)
            members = {m.member_id for m in description.members}
            clients = {m.client_id for m in description.members}
            dead = dead_owners(tags, members, clients, self.own_id)
            for transactional_id in sorted(dead):
                _abort_open_turn(self.common, transactional_id)
            if dead:
                log.info("fenced %s, previous owners of partitions %s no longer in the group: their open turns "
                         "are aborted", sorted(dead), partitions)
            return dead
        except (KafkaException, TimeoutError) as exc:
            log.warning("previous owners of partitions %s not fenced (%s); restores wait for the broker to abort "
                        "their open turns", partitions, exc)
            return set()


def _abort_open_turn(common: dict[str, Any], transactional_id: str) -> None:
    """The coordinator answers CONCURRENT_TRANSACTIONS until the abort is written: retry soon, not at 100 ms+."""
    producer = settled(Producer({**common, **DURABLE_PRODUCER, "transactional.id": transactional_id,
                                 "retry.backoff.ms": 10, "retry.backoff.max.ms": 50}), TIMEOUT_S)
    producer.init_transactions(TIMEOUT_S)
    producer.flush(0)
