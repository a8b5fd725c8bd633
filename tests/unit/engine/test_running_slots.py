"""The running-slot quota (max_concurrency) on both sides, over real RocksDB stores and no Kafka.

Messages between the sides are handed over by the test the way the topics would carry them.
"""
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.engine.partition_store import PartitionStore, StoreTransaction
from scheduler.engine.running_slots import RunningSlots, ledger_change, share_out

PARTITIONS = 4


@pytest.mark.parametrize("quota, held, wanted, asking, expected", [
    (10, {}, {0: 3}, 0, {0: 3}),
    (10, {0: 3}, {0: 3, 1: 20}, 1, {0: 3, 1: 4}),          # small wish met in full, the rest to the other
    (5, {}, {0: 10, 1: 10, 2: 10}, 2, {0: 2, 1: 2, 2: 1}),  # split evenly, nobody left out while slots last
    (5, {0: 5}, {1: 4}, 1, {}),                              # all handed out: the wish waits
    (2, {0: 3, 1: 2}, {0: 1}, 0, {0: -3}),                   # quota lowered: the asker gives back the excess
    (2, {0: 1, 1: 4}, {0: 1}, 0, {0: -1}),                   # ... as much as it holds
    (2, {0: 1, 1: 4}, {}, None, {}),                         # a return never triggers a take-back
])
def test_share_out(quota, held, wanted, asking, expected):
    assert share_out(quota, held, wanted, asking) == expected


@given(quota=st.integers(1, 50), held=st.lists(st.integers(0, 20), min_size=4, max_size=4),
       wanted=st.lists(st.integers(0, 30), min_size=4, max_size=4), asking=st.sampled_from([None, 0, 1, 2, 3]))
def test_share_out_never_hands_out_past_the_quota_and_gives_only_what_is_wished(quota, held, wanted, asking):
    held_map, wanted_map = dict(enumerate(held)), dict(enumerate(wanted))
    changes = share_out(quota, held_map, wanted_map, asking)
    after = {p: held_map[p] + changes.get(p, 0) for p in held_map}
    assert all(n >= 0 for n in after.values())
    if sum(held) <= quota:
        assert sum(after.values()) <= quota
        assert all(0 <= changes.get(p, 0) <= wanted_map[p] for p in held_map)
        free = quota - sum(held)
        assert sum(changes.values()) == min(free, sum(wanted)), "free slots are not held back from a wish"
    else:
        assert sum(after.values()) >= quota or asking is None or after[asking] == 0


class Cluster:
    """PARTITIONS schedule partitions and the tenant's ledger, each a store, with its transaction per turn."""

    def __init__(self, tmp_path, quota):
        self.quota = quota
        self.stores = [PartitionStore(tmp_path / f"p{p}") for p in range(PARTITIONS)]
        self.ledger_store = PartitionStore(tmp_path / "ledger")
        self.slots = [RunningSlots(lambda tenant: self.quota if tenant == "acme" else None)
                      for _ in range(PARTITIONS)]
        self.txns = [StoreTransaction(store) for store in self.stores]

    def commit(self, p):
        self.stores[p].write(self.txns[p].changes, {})
        self.txns[p] = StoreTransaction(self.stores[p])
        self.slots[p].new_turn()

    def turn(self, p, due, now_ms, finished=()):
        """One turn of partition p: attempts ended, then dispatch of the occurrence ids `due`; returns those sent."""
        for oid in finished:
            self.slots[p].finished(self.txns[p], "acme", oid)
        self.slots[p].expire(self.txns[p], now_ms)
        admitted = [oid for oid in due if self.slots[p].take(self.txns[p], "acme")]
        for oid in admitted:
            self.slots[p].dispatched(self.txns[p], "acme", oid, now_ms + 60_000)
        messages = self.slots[p].settle(self.txns[p], now_ms)
        self.commit(p)
        for message in messages:
            self.deliver_request(p, message.kind, message.count)
        return admitted

    def deliver_request(self, p, kind, count):
        txn = StoreTransaction(self.ledger_store)
        changes = ledger_change(txn, "acme", kind, p, count, self.quota, PARTITIONS)
        self.ledger_store.write(txn.changes, {})
        for receiver, slots in changes.items():
            self.slots[receiver].granted(self.txns[receiver], "acme", slots)
            self.commit(receiver)

    def running(self):
        return sum(_running(store) for store in self.stores)

    def close(self):
        for store in [*self.stores, self.ledger_store]:
            store.close()


def _running(store):
    return sum(1 for _ in store.keys_from("admissions", b"\x04", b"\x05"))


@pytest.fixture
def cluster(tmp_path):
    made = []

    def make(quota):
        made.append(Cluster(tmp_path, quota))
        return made[-1]
    yield make
    for c in made:
        c.close()


def test_a_partition_waits_for_slots_then_sends_within_them(cluster):
    c = cluster(3)
    assert c.turn(0, ["a", "b", "c", "d", "e"], 0) == [], "no slots held yet: ask first"
    assert c.turn(0, ["a", "b", "c", "d", "e"], 10) == ["a", "b", "c"]
    assert c.turn(0, ["d", "e"], 20) == []
    assert c.turn(0, ["d", "e"], 30, finished=["a"]) == ["d"], "a finished occurrence frees its slot for the next"


def test_the_tenant_never_runs_more_than_its_quota_across_partitions(cluster):
    c = cluster(5)
    queues = {p: [f"{p}-{n}" for n in range(6)] for p in range(PARTITIONS)}
    sent = {p: [] for p in range(PARTITIONS)}
    ending = None
    for now in range(0, 4000, 10):
        for p in range(PARTITIONS):
            done = [ending[1]] if ending is not None and ending[0] == p else []
            if done:
                ending = None
            for oid in c.turn(p, [o for o in queues[p] if o not in sent[p]], now, finished=done):
                sent[p].append(oid)
            assert c.running() <= 5
        running = [(p, o) for p in range(PARTITIONS) for o in sent[p]
                   if c.txns[p].get("admissions", b"\x04acme\x00" + o.encode())]
        if running and ending is None and now % 30 == 0:
            ending = running[0]
    assert all(len(sent[p]) == 6 for p in range(PARTITIONS)), "every occurrence eventually ran"


def test_idle_slots_go_back_and_reach_the_partition_that_waits(cluster):
    c = cluster(2)
    c.turn(0, ["a", "b"], 0)
    assert c.turn(0, ["a", "b"], 10) == ["a", "b"]
    assert c.turn(1, ["x"], 20) == [] and c.turn(1, ["x"], 30) == []
    c.turn(0, [], 40, finished=["a"])  # nothing due on partition 0: its free slot goes back and on to partition 1
    assert c.turn(1, ["x"], 50) == ["x"]


def test_a_silent_occurrence_frees_its_slot_after_its_run_timeout(cluster):
    c = cluster(1)
    c.turn(0, ["a"], 0)
    assert c.turn(0, ["a"], 10) == ["a"]
    assert c.turn(0, ["b"], 20_000) == []
    assert c.turn(0, ["b"], 60_010) == ["b"], "a's expiry (dispatch + 60 s) passed"


def test_a_lowered_quota_takes_slots_back_from_a_partition_that_asks_for_more(cluster):
    c = cluster(4)
    c.turn(0, ["a", "b", "c", "d"], 0)
    assert c.turn(0, ["a", "b", "c", "d"], 10) == ["a", "b", "c", "d"]
    c.quota = 2
    c.turn(0, ["e", "f"], 20, finished=["a", "b", "c"])
    assert c.turn(0, ["e", "f"], 2000) == ["e"], "running d plus one more is the new quota of 2"


def test_unlimited_tenants_are_not_counted(cluster):
    c = cluster(1)
    slots, txn = c.slots[0], c.txns[0]
    assert all(slots.take(txn, "other") for _ in range(100))
    assert slots.settle(txn, 0) == []


def test_repeated_wishes_are_not_sent_every_turn(cluster):
    c = cluster(1)
    slots = c.slots[0]
    kinds = []
    for now in itertools.chain(range(0, 500, 50), [1500]):
        slots.take(c.txns[0], "acme")
        kinds.extend(m.kind for m in slots.settle(c.txns[0], now))
        c.commit(0)
    assert kinds == ["WANT_RUNNING", "WANT_RUNNING"], "once, then again after REPEAT_WISH_MS"
