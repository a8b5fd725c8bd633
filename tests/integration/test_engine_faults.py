"""Crashes, failover and downtime with real processes killed for real, on the real broker."""
from __future__ import annotations

import math
import shutil
import time
import uuid
from collections import Counter
from datetime import datetime, timezone

import pytest
from engine_harness import TOPOLOGY, SchedulerProcess, TopicReader, ensure_layout, occurrence_topics, wait_for_split

from scheduler.control.client import SchedulerClient, make_spec
from scheduler.timing.occurrence_id import occurrence_id

TENANTS = ["red", "green", "blue"]


def rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def load_spread(client: SchedulerClient, count: int, start_ms: int, spread_ms: int) -> dict[str, str]:
    """`count` one-shots due evenly over [start, start + spread); returns occurrence_id -> tenant."""
    expected = {}
    command_ids = []
    for n in range(count):
        due_ms = start_ms + (n * spread_ms) // count
        tenant = TENANTS[n % len(TENANTS)]
        sid = f"o-{n:05d}"
        command_ids.append(client.send("CREATE", sid, tenant, spec=make_spec("once", rfc3339(due_ms))))
        expected[occurrence_id(sid, 1, datetime.fromtimestamp(due_ms / 1000, tz=timezone.utc))] = tenant
    results = client.wait(command_ids, timeout_s=120)
    assert {r["status"] for r in results.values()} == {"ACCEPTED"}
    return expected


def sleep_until(deadline_s: float) -> None:
    """To a chosen instant (a kill timed against the fires), not a wait for a condition."""
    time.sleep(max(0.0, deadline_s - time.time()))


def assert_all_present_once_or_duplicated(reader: TopicReader, expected: dict[str, str], timeout: float,
                                          *processes: SchedulerProcess) -> Counter:
    received = reader.until(lambda got: {r.record["occurrence_id"] for r in got} >= expected.keys(), timeout)
    counts = Counter(r.record["occurrence_id"] for r in received)
    missing = expected.keys() - counts.keys()
    assert not missing, f"{len(missing)} occurrences lost\n" + "\n".join(p.log_tail(20) for p in processes)
    assert counts.keys() == expected.keys(), "an occurrence id that was never scheduled was delivered"
    for item in received:
        assert item.topic.startswith(f"{reader.topics[0].split('.occurrences.')[0]}.occurrences."
                                     f"{expected[item.record['occurrence_id']]}.")
    return counts


@pytest.mark.parametrize("wipe_state", [False, True], ids=["keep-state", "wipe-state"])
def test_kill_9_mid_burst_then_restart_loses_nothing(kafka_bootstrap, unique_prefix, tmp_path, wipe_state):
    ensure_layout(kafka_bootstrap, unique_prefix, TENANTS)
    state = tmp_path / "state"
    first = SchedulerProcess(kafka_bootstrap, unique_prefix, state, "a").start()
    start_ms = (math.ceil(time.time()) + 30) * 1000
    with SchedulerClient(kafka_bootstrap, unique_prefix, timeout_s=60) as client:
        expected = load_spread(client, 12_000, start_ms, 3_000)
    assert time.time() * 1000 < start_ms, "creating the burst took longer than its lead (a loaded machine)"
    reader = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, TENANTS), "Occurrence")
    sleep_until(start_ms / 1000 + 1.2)
    reader.poll(0.3)
    before_kill = len({r.record["occurrence_id"] for r in reader.received})
    first.kill()
    assert 0 < before_kill < len(expected), "the kill did not land in the middle of the burst"
    if wipe_state:
        shutil.rmtree(state)
    second = SchedulerProcess(kafka_bootstrap, unique_prefix, state, "a").start()
    try:
        counts = assert_all_present_once_or_duplicated(reader, expected, 90, second)
    finally:
        reader.close()
        second.terminate()
    duplicates = sum(n - 1 for n in counts.values())
    print(f"\nkill -9 at {before_kill}/{len(expected)} delivered; duplicates after restart: {duplicates}")


def test_two_processes_one_killed_the_other_takes_over(kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, TENANTS)
    a = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "a", "a").start()
    b = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "b", "b").start()
    try:
        wait_for_split([a, b], TOPOLOGY.schedule_partitions)
        start_ms = (math.ceil(time.time()) + 15) * 1000
        with SchedulerClient(kafka_bootstrap, unique_prefix, timeout_s=60) as client:
            expected = load_spread(client, 4_000, start_ms, 8_000)
        reader = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, TENANTS), "Occurrence")
        sleep_until(start_ms / 1000 + 2)
        a.kill()
        try:
            assert_all_present_once_or_duplicated(reader, expected, 60, b)
        finally:
            reader.close()
        assert b.alive()
    finally:
        for process in (a, b):
            if process.alive():
                process.terminate()


@pytest.fixture(scope="module")
def downtime_run(kafka_bootstrap, tmp_path_factory):
    """Three every-second schedules, one per misfire policy, through 8 s of scheduler downtime."""
    unique_prefix = f"t{uuid.uuid4().hex[:8]}"
    ensure_layout(kafka_bootstrap, unique_prefix, ["ops"])
    state = tmp_path_factory.mktemp("downtime") / "state"
    args = ("--horizon", "2")
    process = SchedulerProcess(kafka_bootstrap, unique_prefix, state, "a", args).start()
    anchor_ms = math.floor(time.time()) * 1000
    policies = {"SKIP": {}, "FIRE_ONCE": {}, "CATCH_UP": {"catch_up_limit": 3}}
    occurrences = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, ["ops"]), "Occurrence")
    events = TopicReader(kafka_bootstrap, [TOPOLOGY.topic_name("occurrence-events", unique_prefix)],
                         "OccurrenceEvent")
    with SchedulerClient(kafka_bootstrap, unique_prefix, timeout_s=60) as client:
        for policy, extra in policies.items():
            spec = make_spec("rate", "every 1s", anchor_at_ms=anchor_ms, misfire_policy=policy,
                             max_lateness_ms=1500, **extra)
            client.create("ops", spec, schedule_id=policy.lower())
    occurrences.until(lambda got: len(got) >= 6, timeout=30)
    assert process.terminate() == 0, "SIGTERM must end the scheduler with status 0"
    stopped_ms = int(time.time() * 1000)
    time.sleep(8)
    restarted = SchedulerProcess(kafka_bootstrap, unique_prefix, state, "a", args).start()
    restarted_ms = int(time.time() * 1000)

    # Catch-ups and MISSED records come before the fires due after the restart: once every schedule has had
    # on-time fires 3 s past it, whatever the downtime left is in (and an absent catch-up is absent for good).
    def resumed(got) -> bool:
        return all(sum(r.record["schedule_id"] == policy.lower() and not r.record["catch_up"]
                       and r.record["scheduled_for_ms"] >= restarted_ms + 3000 for r in got) >= 2
                   for policy in policies)

    occurrences.until(resumed, timeout=60)
    assert resumed(occurrences.received), "the schedules did not resume after the restart:\n" + restarted.log_tail()
    events.until(lambda got: {e.record["schedule_id"] for e in got if e.record["kind"] == "MISSED"}
                 >= {policy.lower() for policy in policies}, timeout=15)
    yield occurrences.received, events.received, stopped_ms
    restarted.terminate()
    occurrences.close()
    events.close()


@pytest.mark.parametrize("policy, caught_up", [("SKIP", 0), ("FIRE_ONCE", 1), ("CATCH_UP", 3)])
def test_downtime_follows_the_misfire_policy(downtime_run, policy, caught_up):
    occurrences, events, stopped_ms = downtime_run
    mine = [r.record for r in occurrences if r.record["schedule_id"] == policy.lower()]
    late = [r for r in mine if r["catch_up"]]
    assert len(late) == caught_up
    missed = [e.record for e in events if e.record["schedule_id"] == policy.lower() and e.record["kind"] == "MISSED"]
    assert missed, "fires during the downtime must be recorded as MISSED"
    dispatched = Counter(r["scheduled_for_ms"] for r in mine)
    for instant in range(min(dispatched), max(dispatched) + 1, 1000):
        recorded = any(e["scheduled_for_ms"] == instant
                       or (e["range_first_ms"] is not None and e["range_first_ms"] <= instant <= e["range_last_ms"])
                       for e in missed)
        assert (instant in dispatched) != recorded, f"fire {instant}: dispatched={instant in dispatched}, " \
                                                    f"missed={recorded}"
    assert max(dispatched) > stopped_ms + 8000, "the schedule did not resume after the restart"
