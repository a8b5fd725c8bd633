"""Standbys: warm copies of partitions owned elsewhere, handed to the active path on a takeover and taken back.

Proves what scheduler/engine/standbys.py and standby_copies.py promise, with the tailing thread's steps
(`place`, `tail_once`, `report`) driven one at a time on the test's thread instead of by `start()`, against changelogs in
memory (changelog_fakes.py) and a scripted group description: copies follow the group's stable assignment and
are kept of the other members' partitions only; a copy opens at its store's checkpoint and applies the records
from there; `release` hands the open store over and the tailing stops reading it; `adopt` lets it reopen from
the checkpoint the active path left. The stores are real RocksDB stores under tmp_path.
"""
from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from changelog_fakes import ChangelogConsumer, Changelogs
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, Message, TopicPartition
from prometheus_client import CollectorRegistry
from task_builder import CODEC, TOPICS

from scheduler.engine import standbys as standbys_module
from scheduler.engine.metrics import EngineMetrics
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.standbys import Standbys
from scheduler.engine.timeline_keys import WAKE_HEADER

CHANGELOGS = dict(TOPICS.changelogs)
SCHEDULES, ADMISSIONS = CHANGELOGS["schedules"], CHANGELOGS["admissions"]
COMMANDS = TOPICS.commands


@dataclass
class Assignment:
    topic_partitions: list[TopicPartition]


@dataclass
class Member:
    member_id: str
    assignment: Assignment


@dataclass
class Description:
    state: ConsumerGroupState
    members: list[Member]


class GroupAdmin:
    """Describes the group as `owners` says (member -> its commands partitions); `answer=False`: never answers."""

    def __init__(self, owners: dict[str, set[int]], state: ConsumerGroupState = ConsumerGroupState.STABLE,
                 answer: bool = True) -> None:
        self.owners, self.state, self.answer = owners, state, answer
        self.calls = 0

    def describe_consumer_groups(self, group_ids: list[str], **kwargs: Any) -> dict[str, Future[Any]]:
        self.calls += 1
        future: Future[Any] = Future()
        if self.answer:
            future.set_result(Description(self.state, [
                Member(m, Assignment([TopicPartition(t, p) for p in sorted(ps) for t in (COMMANDS, TOPICS.attempts)]))
                for m, ps in self.owners.items()]))
        return {group: future for group in group_ids}


@dataclass
class Rig:
    standbys: Standbys
    consumer: ChangelogConsumer
    logs: Changelogs
    registry: CollectorRegistry
    tmp: Path
    released: list[PartitionStore] = field(default_factory=list)

    def place(self, owners: dict[str, set[int]], **admin: Any) -> bool:
        return self.standbys.place(GroupAdmin(owners, **admin))

    def tail(self) -> None:
        """One round of the tailing thread: reconcile, fetch, apply."""
        self.standbys.tail_once(self.consumer, 0)

    def release(self, partition: int) -> PartitionStore:
        store = self.standbys.release([partition])[partition]
        self.released.append(store)
        return store


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    logs = Changelogs()
    registry = CollectorRegistry()
    standbys = Standbys(tmp_path, {}, CHANGELOGS, "g", COMMANDS, 4, CODEC, 1, lambda: "m-a", EngineMetrics(registry))
    test_rig = Rig(standbys, ChangelogConsumer(logs), logs, registry, tmp_path)
    yield test_rig
    standbys.close()
    for store in test_rig.released:
        store.close()


def checkpointed(path: Path, admissions: int) -> None:
    store = PartitionStore(path)
    store.write({"admissions": {b"old": b"1"}}, {"admissions": admissions})
    store.close()


def test_copies_are_kept_of_the_other_members_partitions_in_a_stable_group(rig: Rig) -> None:
    assert rig.place({"m-a": {0, 1}, "m-b": {2, 3}})
    assert rig.standbys.copies.target == {2, 3}


def test_a_group_mid_rebalance_or_without_this_member_keeps_the_last_placement(rig: Rig) -> None:
    rig.place({"m-a": {0, 1}, "m-b": {2, 3}})
    assert rig.place({"m-a": {0}, "m-b": {1, 2, 3}}, state=ConsumerGroupState.PREPARING_REBALANCING)
    assert rig.place({"m-b": {0, 1}, "m-c": {2, 3}})
    assert rig.standbys.copies.target == {2, 3}


def test_an_unanswered_description_keeps_the_placement_and_asks_for_a_new_admin_client(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(standbys_module, "DESCRIBE_TIMEOUT_S", 0.01)  # the bounded wait on the future
    rig.place({"m-a": {0, 1}, "m-b": {2, 3}})
    assert rig.place({"m-a": {0}, "m-b": {1, 2, 3}}, answer=False) is False
    assert rig.standbys.copies.target == {2, 3}


def test_a_member_owning_every_partition_keeps_no_copies_and_asks_nothing(rig: Rig) -> None:
    rig.place({"m-a": {0, 1}, "m-b": {2, 3}})
    rig.standbys.release([0, 1, 2, 3])
    admin = GroupAdmin({"m-a": {0, 1}, "m-b": {2, 3}})
    assert rig.standbys.place(admin)
    assert rig.standbys.copies.target == set() and admin.calls == 0


def test_a_copy_opens_at_its_checkpoint_and_applies_the_changelogs_from_there(rig: Rig) -> None:
    checkpointed(rig.tmp / "p2", admissions=1)
    for n in range(3):
        rig.logs[(ADMISSIONS, 2)].append(b"a%d" % n, b"new")
    rig.logs[(SCHEDULES, 2)].append(b"s1", b"state", [(WAKE_HEADER, b"wake-s1")], marker=True)
    rig.place({"m-a": {0, 1}, "m-b": {2, 3}})
    rig.standbys.copies.place({2})  # one copy is enough to follow
    rig.tail()
    assert sorted(rig.consumer.assigns[0]) == sorted((t, 2, 1 if t == ADMISSIONS else 0) for t in CHANGELOGS.values())
    assert rig.standbys.copies.caught_up(2)
    store = rig.release(2)
    assert store.get("admissions", b"a0") is None and store.get("admissions", b"a2") == b"new"
    assert store.get("schedules", b"s1") == b"state" and store.get("timeline", b"wake-s1") == b""
    assert store.changelog_offset("admissions") == 3 and store.changelog_offset("schedules") == 2
    assert rig.registry.get_sample_value("scheduler_standby_records_total") == 3


def test_a_released_copy_is_no_longer_read_and_an_adopted_one_resumes_from_the_active_checkpoint(rig: Rig) -> None:
    rig.logs[(ADMISSIONS, 3)].append(b"a0", b"v0")
    rig.standbys.copies.place({3})
    rig.tail()
    store = rig.release(3)
    rig.logs[(ADMISSIONS, 3)].append(b"a1", b"v1")
    rig.tail()
    assert rig.consumer.unassigns == [[(t, 3) for t in CHANGELOGS.values()]]
    assert 3 not in rig.standbys.copies.kept and store.get("admissions", b"a1") is None
    store.write({"admissions": {b"a1": b"active"}}, {"admissions": 2})  # the active path's own turn
    rig.released.remove(store)
    store.close()
    rig.standbys.adopt(3)
    rig.logs[(ADMISSIONS, 3)].append(b"a2", b"v2")
    rig.tail()
    assert (ADMISSIONS, 3, 2) in rig.consumer.assigns[-1]
    again = rig.release(3)
    assert again.get("admissions", b"a1") == b"active" and again.get("admissions", b"a2") == b"v2"


def copies_metric(rig: Rig) -> dict[str, float | None]:
    return {p: rig.registry.get_sample_value("scheduler_standby_copy", {"partition": p}) for p in "0123"} | {
        "count": rig.registry.get_sample_value("scheduler_standby_partitions")}


def test_a_copy_no_longer_placed_here_is_closed_and_unassigned(rig: Rig) -> None:
    rig.standbys.copies.place({1, 2})
    rig.tail()
    assert copies_metric(rig) == {"0": None, "1": 1, "2": 1, "3": None, "count": 2}
    rig.standbys.copies.place({2})
    rig.tail()
    assert rig.standbys.copies.kept == {2} and rig.consumer.unassigns == [[(t, 1) for t in CHANGELOGS.values()]]
    assert copies_metric(rig) == {"0": None, "1": None, "2": 1, "3": None, "count": 1}
    rig.release(2)
    assert copies_metric(rig) == {"0": None, "1": None, "2": None, "3": None, "count": 0}
    PartitionStore(rig.tmp / "p1").close()  # its RocksDB handle was closed


def test_records_before_the_next_offset_or_of_no_copy_are_skipped_and_a_fetch_error_stops_the_tailing(
        rig: Rig) -> None:
    checkpointed(rig.tmp / "p0", admissions=5)
    rig.standbys.copies.place({0})
    rig.tail()
    copies = rig.standbys.copies
    copies.apply([Message(topic=ADMISSIONS, partition=0, offset=4, key=b"stale", value=b"x", error=None),
                  Message(topic=ADMISSIONS, partition=1, offset=9, key=b"other", value=b"x", error=None)])
    with pytest.raises(KafkaException):
        copies.apply([Message(topic=ADMISSIONS, partition=0, offset=5, error=KafkaError(KafkaError._TRANSPORT))])
    store = rig.release(0)
    assert store.get("admissions", b"stale") is None and store.changelog_offset("admissions") == 5


def test_the_report_gives_each_copys_lag_and_checkpoints_positions_past_markers(rig: Rig) -> None:
    log = rig.logs[(ADMISSIONS, 2)]
    log.append(b"a0", b"v")
    log.open_at = log.append(b"open", b"v")  # read up to 1; the log ends at 2
    rig.standbys.copies.place({2})
    rig.tail()
    assert rig.standbys.report(rig.consumer) == 1
    assert rig.registry.get_sample_value("scheduler_standby_lag_records", {"partition": "2"}) == 1
    log.open_at, log.high = None, 4  # aborted: the record and its marker are skipped, no record handed out
    rig.consumer.positions[(ADMISSIONS, 2)] = 4
    assert rig.standbys.report(rig.consumer) == 0
    assert rig.release(2).changelog_offset("admissions") == 4
    assert rig.registry.get_sample_value("scheduler_standby_lag_records", {"partition": "2"}) is None


def test_a_copy_released_and_adopted_back_between_two_rounds_is_pointed_at_the_new_checkpoint(rig: Rig) -> None:
    rig.logs[(ADMISSIONS, 3)].append(b"a0", b"v0")
    rig.standbys.copies.place({3})
    rig.tail()
    store = rig.release(3)
    store.write({}, {"admissions": 7})  # the active path went on to offset 7, then lost the partition again
    rig.released.remove(store)
    store.close()
    rig.standbys.adopt(3)
    rig.tail()
    assert rig.consumer.unassigns == [[(t, 3) for t in CHANGELOGS.values()]]
    assert (ADMISSIONS, 3, 7) in rig.consumer.assigns[-1]
