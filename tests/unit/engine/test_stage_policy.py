"""Staged bursts: the pure decisions, and a task's part over a real RocksDB store (no Kafka)."""
import pytest
import task_builder

from scheduler.engine import stage_layout, stage_policy, stage_records
from scheduler.engine.burst_count import COUNT_SLICE, BurstCounter
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.stage_policy import (
    LEAD_SLACK_MS,
    MARGIN_MS,
    Stage,
    StagedPartition,
    instant_range,
    lead_ms,
    should_start,
)
from scheduler.engine.task import SchedulerTask
from scheduler.engine.timeline_keys import DISPATCH, LocalEntry, occurrence_key

T = 1_800_000_000_000


def test_the_instant_range_holds_exactly_the_entries_due_then():
    first, end = instant_range(T)
    assert first <= occurrence_key(DISPATCH, T, "a", T) < end
    assert first <= occurrence_key(DISPATCH, T, "zzz", T, rank=2**32 - 1) < end
    assert occurrence_key(DISPATCH, T - 1, "zzz", T - 1, rank=2**32 - 1) < first
    assert occurrence_key(DISPATCH, T + 1, "a", T + 1) >= end


def test_the_lead_grows_with_the_burst_and_is_capped():
    assert lead_ms(30_000, 30_000, 60_000) == 1500 + LEAD_SLACK_MS
    assert lead_ms(300_000, 30_000, 60_000) == 15_000 + LEAD_SLACK_MS
    assert lead_ms(10_000_000, 30_000, 60_000) == 60_000


@pytest.mark.parametrize("until_due_ms, count, expected", [
    (10_000, 39_999, False),      # below the minimum: ordinary dispatch is quick enough
    (10_000, 100_000, False),     # 100,000 at 30,000/s: 3.3 s x 1.5 + 3 s slack = 8 s of lead: not yet
    (8_000, 100_000, True),
    (MARGIN_MS, 1_000_000, False),  # too close to make it: ordinary dispatch
    (MARGIN_MS + 1, 40_000, True),
    (61_000, 10_000_000, False),  # never beyond the longest lead
    (60_000, 10_000_000, True),
])
def test_should_start(until_due_ms, count, expected):
    assert should_start(T, count, T - until_due_ms, 40_000, 30_000, 60_000) is expected


def test_only_plain_occurrences_are_staged():
    assert stage_policy.stageable("ALLOW", concurrency_limited=False)
    assert not stage_policy.stageable("ALLOW", concurrency_limited=True)
    assert not stage_policy.stageable("SKIP_IF_RUNNING", concurrency_limited=False)
    assert not stage_policy.stageable("QUEUE_ONE", concurrency_limited=False)


def test_shares_split_the_budget_over_partitions_still_staging_and_the_rate_is_measured():
    first, end = instant_range(T)
    stage = Stage(T, {n: StagedPartition(first, end) for n in range(4)}, started_ms=T - 10_000,
                  producer_partition=0)
    stage.partitions[1].done = True
    assert stage.shares(20_000) == {0: 6667, 2: 6667, 3: 6667}
    assert stage.rate_per_s() is None
    stage.partitions[0].sent = [b"k%d" % n for n in range(3000)]
    stage.completed_ms = T - 8_500
    assert stage.rate_per_s() == pytest.approx(2000)


def entry(tenant: str, schedule_id: str, overlap: str = "ALLOW") -> bytes:
    return LocalEntry(tenant, schedule_id, f"occ.{tenant}", f"oid-{schedule_id}", b"body", overlap=overlap).pack()


def make_task(tmp_path, entries: dict[bytes, bytes]) -> SchedulerTask:
    task = task_builder.make_task(tmp_path / "p0", horizon_ms=0)
    task.store.write({"timeline": entries}, {})
    return task


def prepare(task: SchedulerTask, part: StagedPartition, share: int, grant: int = 10**9,
            groups: dict | None = None) -> list[bytes]:
    """The task prepares `share` more entries with `grant` tokens for every tenant; returns the schedule ids
    of the records prepared by this call, in order."""
    groups = {} if groups is None else groups
    before = {topic: len(keys) for topic, (_, keys) in groups.items()}
    task.scan.stage(part, share, {}, lambda tenant: grant, groups)
    return [key.decode() for topic, (_, keys) in groups.items() for key in keys[before.get(topic, 0):]]


def staged_task(tmp_path, n: int) -> tuple[SchedulerTask, StagedPartition, list[bytes]]:
    """A task with `n` plain entries due at T, all staged."""
    keys = [occurrence_key(DISPATCH, T, f"s{i:04d}", T) for i in range(n)]
    task = make_task(tmp_path, {key: entry("acme", f"s{i}") for i, key in enumerate(keys)})
    task.committed({})  # as after every turn: the scan's floor moves up to the first live entry
    assert task.scan.floor(DISPATCH) == keys[0]
    part = StagedPartition(*instant_range(T))
    prepare(task, part, n + 1)
    return task, part, keys


def put(task: SchedulerTask, key: bytes, raw: bytes) -> None:
    """A turn writes a timeline entry (as materialization or an update does)."""
    task.ctx.txn.put("timeline", key, raw)
    task.ctx.timeline_changelog[key] = b""


def test_a_task_stages_its_instant_in_shares_and_leaves_the_rest_to_ordinary_dispatch(tmp_path):
    at_t = {occurrence_key(DISPATCH, T, f"s{n:03d}", T): entry("acme", f"s{n:03d}") for n in range(10)}
    guarded = occurrence_key(DISPATCH, T, "s005x", T)
    at_t[guarded] = entry("acme", "s005x", overlap="QUEUE_ONE")
    before = occurrence_key(DISPATCH, T - 1000, "early", T - 1000)
    after = occurrence_key(DISPATCH, T + 1, "later", T + 1)
    task = make_task(tmp_path, {**at_t, before: entry("acme", "early"), after: entry("acme", "later")})
    assert task.scan.next_due_ms(DISPATCH) == T - 1000
    part = StagedPartition(*instant_range(T))
    groups: dict = {}
    first = prepare(task, part, 4, groups=groups)
    assert first == ["s000", "s001", "s002", "s003"] and not part.done
    rest = prepare(task, part, 100, groups=groups)
    assert part.done
    assert sorted(first + rest) == [f"s{n:03d}" for n in range(10)]
    assert groups[b"occ.acme"][0] == [b"body"] * 10, "the record's value is the occurrence, cut out of the entry"
    assert part.first_skipped == guarded

    # The early entry is dispatched the ordinary way meanwhile; then the stage commits at T.
    task.dispatcher.send(before, task.store.get("timeline", before), T - 1000)
    task.committed({})
    task.scan.staged_sent(part)
    left = [key for key, _ in task.scan.due(DISPATCH, T + 5)]
    assert left == [guarded, after], "staged entries are gone, the guarded one and later ones are not"
    task.store.close()


def test_a_change_to_a_staged_entry_contradicts_the_stage_and_a_change_elsewhere_does_not(tmp_path):
    task, part, keys = staged_task(tmp_path, 3)
    assert part.done and len(part.sent) == 3
    added = occurrence_key(DISPATCH, T, "s0000a", T)
    put(task, added, entry("acme", "s0000a"))
    assert not task.scan.contradicts_stage(), "a new entry in the instant is not in the stage"
    task.ctx.txn.delete("timeline", keys[0])  # a cancel: the stage already holds its occurrence
    assert task.scan.contradicts_stage()
    task.reset()
    newer = entry("acme", "s1-v2")
    put(task, keys[1], newer)  # an update's new version on the same key
    assert task.scan.contradicts_stage()
    # The runtime then drops the stage before committing the change: every entry is left to ordinary dispatch.
    task.scan.stage_dropped()
    task.committed({})
    assert [(key, raw) for key, raw in task.scan.due(DISPATCH, T)] == [(keys[0], entry("acme", "s0")),
                                                                   (keys[1], newer), (keys[2], entry("acme", "s2"))]
    task.store.close()


def test_sent_entries_are_deleted_in_turns_with_their_changelog_tombstones(tmp_path):
    task, part, keys = staged_task(tmp_path, 3)
    added = occurrence_key(DISPATCH, T, "s0000a", T)
    put(task, added, entry("acme", "s0000a"))
    task.committed({})
    task.scan.staged_sent(part)
    assert [key for key, _ in task.scan.due(DISPATCH, T)] == [added], "the stage's entries are skipped"
    assert task.store.get("timeline", keys[0]) is not None, "deleted later, a chunk a turn"
    task.scan.delete_staged(2)
    tombstones = task.changelog_records()["timeline"]
    assert [(topic, value) for topic, _, value in tombstones] == [("t", None), ("t", None)]
    task.reset()  # the turn aborted: nothing is forgotten
    assert task.scan.has_staged_to_delete() and task.store.get("timeline", keys[0]) is not None
    task.scan.delete_staged(2)
    task.committed({})
    assert task.scan.has_staged_to_delete()
    task.scan.delete_staged(10)
    task.committed({})
    assert not task.scan.has_staged_to_delete()
    assert all(task.store.get("timeline", key) is None for key in keys)
    assert [key for key, _ in task.scan.due(DISPATCH, T)] == [added]
    task.store.close()


def test_an_entry_rewritten_after_the_stage_commit_survives_its_local_delete(tmp_path):
    task, part, keys = staged_task(tmp_path, 3)
    task.scan.staged_sent(part)
    assert task.scan.next_due_ms(DISPATCH) is None
    rerun = entry("acme", "s2-rerun")
    put(task, keys[2], rerun)
    task.committed({})
    assert task.scan.next_due_ms(DISPATCH) == T
    task.scan.delete_staged(100)
    task.committed({})
    assert [(key, raw) for key, raw in task.scan.due(DISPATCH, T)] == [(keys[2], rerun)]
    task.store.close()


def test_after_a_stage_commit_the_scan_starts_past_its_tombstones(tmp_path):
    task, part, keys = staged_task(tmp_path, 500)
    task.scan.staged_sent(part)
    assert task.scan.floor(DISPATCH) == keys[-1] + b"\x00"
    assert task.scan.next_due_ms(DISPATCH) is None
    while task.scan.has_staged_to_delete():
        task.scan.delete_staged(100)
        task.committed({})
    assert list(task.store.keys_from("timeline", *instant_range(T))) == []
    task.store.close()


def test_a_dropped_stage_leaves_every_entry_in_the_timeline(tmp_path):
    task, part, keys = staged_task(tmp_path, 5)
    task.scan.stage_dropped()
    assert [key for key, _ in task.scan.due(DISPATCH, T)] == keys
    task.store.close()


def test_the_burst_chosen_is_the_earliest_ready_one_not_merely_the_next_instant():
    now = T - 20_000
    steady = {T - 20_000 + n * 1000: 40 for n in range(1, 60)}  # steady traffic every second
    assert stage_policy.choose(steady, now, 40_000, 30_000, 60_000) is None
    burst = {**steady, T: 500_000}  # lead 25 s + 3 s: ready 20 s ahead
    assert stage_policy.choose(burst, now, 40_000, 30_000, 60_000) == T
    assert stage_policy.choose({**burst, T + 1000: 500_000}, now, 40_000, 30_000, 60_000) == T
    assert stage_policy.choose({T + 30_000: 500_000}, now, 40_000, 30_000, 60_000) is None, "not yet within its lead"


def test_an_entry_rewritten_before_the_stage_reached_it_is_sent_once(tmp_path):
    keys = [occurrence_key(DISPATCH, T, f"s{i:04d}", T) for i in range(3)]
    task = make_task(tmp_path, {key: entry("acme", f"s{i}") for i, key in enumerate(keys)})
    assert task.scan.next_due_ms(DISPATCH) == T
    part = StagedPartition(*instant_range(T))
    assert len(prepare(task, part, 1)) == 1
    newer = entry("acme", "s2-v2")
    put(task, keys[2], newer)  # a turn between two staging chunks
    task.committed({})
    rest = prepare(task, part, 10)
    assert rest == ["s1", "s2-v2"], "the stage read the new version"
    task.scan.staged_sent(part)
    assert list(task.scan.due(DISPATCH, T)) == [], "the new version went with the stage, not again"
    task.store.close()


# -- the produce window (prepare in memory during the lead, produce at its end) -----------------------------


def test_the_produce_window_covers_the_measured_produce_time_and_a_margin_and_is_capped():
    assert stage_policy.produce_lead_ms(0, 250_000) == stage_policy.PRODUCE_MARGIN_MS
    assert stage_policy.produce_lead_ms(500_000, 250_000) == int(2000 * stage_policy.PRODUCE_FACTOR) + stage_policy.PRODUCE_MARGIN_MS
    assert stage_policy.produce_lead_ms(50_000_000, 250_000) == stage_policy.PRODUCE_MAX_MS
    assert stage_policy.produce_lead_ms(10, 0) == stage_policy.PRODUCE_MAX_MS, "no measured rate: the longest window"


@pytest.mark.parametrize("until_due_ms, produced", [
    (10_000, False),  # preparing: nothing is produced, nothing held back
    (3_001, False),
    (3_000, True),    # 500,000 at 250,000/s: 2 s x 1.25 + 0.5 s
    (0, True),
    (-5_000, True),   # past the instant and not produced: produce now, committed late
])
def test_a_stage_produces_only_within_its_window(until_due_ms, produced):
    assert stage_policy.should_produce(T, 500_000, T - until_due_ms, 250_000) is produced


def test_the_lead_now_includes_the_produce_window():
    window = stage_policy.produce_lead_ms(300_000, 300_000)
    assert lead_ms(300_000, 30_000, 60_000, window) == 15_000 + LEAD_SLACK_MS + window
    assert should_start(T, 300_000, T - (15_000 + LEAD_SLACK_MS + window), 40_000, 30_000, 60_000, 300_000)
    assert not should_start(T, 300_000, T - (15_000 + LEAD_SLACK_MS + window) - 1, 40_000, 30_000, 60_000, 300_000)


def test_the_window_is_sized_by_what_was_expected_until_preparation_ends():
    first, end = instant_range(T)
    stage = Stage(T, {0: StagedPartition(first, end)}, started_ms=T - 10_000, producer_partition=0, expected=1000)
    stage.partitions[0].sent = [b"k"] * 10
    assert stage.window_count() == 1000
    stage.partitions[0].done = True
    assert stage.window_count() == 10
    stage.produce_s = 0.5
    assert stage.produce_rate_per_s() == pytest.approx(20)


def test_a_stage_cut_short_by_its_window_leaves_the_rest_to_ordinary_dispatch(tmp_path):
    keys = [occurrence_key(DISPATCH, T, f"s{i:04d}", T) for i in range(6)]
    task = make_task(tmp_path, {key: entry("acme", f"s{i}") for i, key in enumerate(keys)})
    task.committed({})
    stage = Stage(T, {0: StagedPartition(*instant_range(T))}, started_ms=T - 5000, producer_partition=0)
    part = stage.partitions[0]
    assert prepare(task, part, 2) == ["s0", "s1"]
    stage.cut_short()
    assert stage.scanned and part.first_skipped == keys[1] + b"\x00"
    task.committed({})
    task.scan.staged_sent(part)
    assert [key for key, _ in task.scan.due(DISPATCH, T)] == keys[2:], "what the stage missed goes the ordinary way"
    task.store.close()


def test_tokens_are_taken_a_block_at_a_time_and_a_tenant_without_any_is_left_to_dispatch(tmp_path):
    keys = {occurrence_key(DISPATCH, T, f"s{i:04d}", T): entry("acme" if i % 2 else "tiny", f"s{i}")
            for i in range(10)}
    task = make_task(tmp_path, keys)
    asked: list[bytes] = []

    def refill(tenant: bytes) -> int:
        asked.append(tenant)
        return 2 if tenant == b"acme" and asked.count(b"acme") <= 2 else stage_records.NEVER

    part = StagedPartition(*instant_range(T))
    groups: dict = {}
    left: dict = {}
    task.scan.stage(part, 100, left, refill, groups)
    assert [k.decode() for k in groups[b"occ.acme"][1]] == ["s1", "s3", "s5", "s7"], "two blocks of two tokens"
    assert b"occ.tiny" not in groups and asked.count(b"tiny") == 1, "NEVER is asked once per tenant"
    assert asked.count(b"acme") == 3 and left == {b"acme": stage_records.NEVER, b"tiny": stage_records.NEVER}
    assert part.first_skipped == sorted(keys)[0]
    assert stage_policy.give_back({b"acme": 3, b"tiny": stage_records.NEVER, b"x": 0}) == {"acme": 3}
    task.store.close()


def test_records_are_produced_in_runs_the_largest_first():
    prepared = {0: {b"big.p": ([b"v"] * 5, [b"k"] * 5), b"s1.p": ([b"v"], [b"k"])},
                1: {b"s2.p": ([b"v"] * 2, [b"k"] * 2), b"big.p": ([b"w"] * 3, [b"j"] * 3)}}
    merged = stage_records.by_topic(prepared)
    assert merged["big.p"] == ([b"v"] * 5 + [b"w"] * 3, [b"k"] * 5 + [b"j"] * 3)
    layouts = {"big.p": stage_layout.TopicLayout(8, (2, 3), (0, 1)), "s2.p": stage_layout.TopicLayout(8, (1,), (0,))}
    order = stage_records.produce_order(merged, layouts)
    assert [(topic, p, len(values)) for topic, p, values, _ in order] == [
        ("big.p", 2, 4), ("big.p", 3, 4), ("s2.p", 1, 2), ("s1.p", None, 1)], "no layout: the key's partition"
    produced: list[tuple] = []
    full = [3]  # the local queue refuses the fourth record once

    def produce(topic, value, key, partition, _callback, _on_delivery, timestamp):
        if len(produced) == full[0]:
            full[0] = -1
            raise BufferError
        produced.append((topic, partition, timestamp))

    polls: list[float] = []
    stage_records.produce_some(produce, polls.append, stage_records.Pending(order), T, float("inf"), lambda: 0.0)
    assert [(t, p) for t, p, _ in produced] == [("big.p", 2)] * 4 + [("big.p", 3)] * 4 + [("s2.p", 1)] * 2 + [
        ("s1.p", stage_records.KEYS_PARTITION)], "none lost, none twice"
    assert {ts for _, _, ts in produced} == {T} and 0.05 in polls


def test_a_stage_is_produced_in_slices_that_resume_where_they_stopped():
    n = stage_records.SLICE_RECORDS * 2 + 5
    runs = [("a", 0, [b"v%d" % i for i in range(n)], [b"k"] * n), ("b", None, [b"w"], [b"k"])]
    pending = stage_records.Pending(runs)
    produced: list[tuple] = []
    now = [0.0]

    def produce(topic, value, key, partition, _callback, _on_delivery, timestamp):
        produced.append((topic, value))
        now[0] += 1.0  # every record takes a second of this clock: each slice stops at its first look

    slices = 0
    while not pending.done:
        slices += 1
        stage_records.produce_some(produce, lambda _: None, pending, T, now[0] + 0.5, lambda: now[0])
    assert slices == 4, "three slices of run a (two full, one of 5), then b"
    assert [v for t, v in produced if t == "a"] == runs[0][2] and [t for t, _ in produced][-1] == "b"


def test_bursts_are_counted_a_slice_at_a_time_and_published_when_the_sweep_is_through(tmp_path):
    now = T - 30_000
    stores = []
    for n, (due, count) in enumerate([(T, COUNT_SLICE + 10), (T + 1000, 5), (now + 120_000, 7)]):
        store = PartitionStore(tmp_path / str(n))
        store.write({"timeline": {occurrence_key(DISPATCH, due, f"s{i:06d}", due): b"x" for i in range(count)}}, {})
        stores.append(store)
    counter = BurstCounter()
    counter.step(stores, now, 60_000)
    assert counter.sweeping and counter.counts == {}, "the first slice publishes nothing"
    counter.step(stores, now, 60_000)
    assert not counter.sweeping and counter.counts == {T: COUNT_SLICE + 10, T + 1000: 5}, "beyond the lead: not counted"
    counter.step(stores, now + 1000, 60_000)
    assert not counter.sweeping, "the next sweep waits COUNT_EVERY_MS"
    counter.step(stores, now + stage_policy.COUNT_EVERY_MS, 60_000)
    assert counter.sweeping
    counter.reset()
    assert not counter.sweeping and counter.counts == {T: COUNT_SLICE + 10, T + 1000: 5}
    for store in stores:
        store.close()


def test_a_sweep_publishes_only_the_instants_big_enough_to_stage(tmp_path):
    """At the daily average nearly every millisecond of the lead has an entry: the stager must not look through
    them all every turn, so the counter keeps only the instants with at least the stage minimum."""
    now = T - 30_000
    store = PartitionStore(tmp_path / "p0")
    entries = {occurrence_key(DISPATCH, T, f"b{i:06d}", T): b"x" for i in range(50)}
    entries.update({occurrence_key(DISPATCH, T - 20_000 + i, f"s{i:06d}", T - 20_000 + i): b"x" for i in range(500)})
    store.write({"timeline": entries}, {})
    counter = BurstCounter(minimum=50)
    counter.step([store], now, 60_000)
    assert counter.counts == {T: 50}
    store.close()
