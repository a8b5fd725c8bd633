"""Standby partitions with real processes on the real broker: after a kill -9 the survivor's restore of the
moved partitions replays only the changelogs' tail, the dead owner's open turn is aborted by the survivor,
and nothing due after the kill is lost."""
from __future__ import annotations

import math
import re
import time
from datetime import datetime, timezone

from confluent_kafka import TopicPartition
from engine_harness import (
    TOPOLOGY,
    SchedulerProcess,
    TopicReader,
    ensure_layout,
    occurrence_topics,
    read_until_all,
    rfc3339,
    scrape,
    wait_for_split,
)

from scheduler.broker.ports import free_port
from scheduler.control.client import SchedulerClient, make_spec
from scheduler.timing.occurrence_id import occurrence_id

TENANT = "warm"
IDLE = 4_000
STEADY_PER_S = 40
STEADY_S = 15
RESTORED = re.compile(r"restored (\S+)\[(\d+)\]: (\d+) records, offsets (\d+)\.\.(\d+)")
PLACEMENT_S = 20  # the placement runs every 2 s; an idle process once kept none for 10 minutes


def wait_warm(port: int, partitions: set[int], process: SchedulerProcess, timeout: float = 90) -> None:
    """Until `process` keeps every one of `partitions` warm, has applied the idle load and is nearly at the end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metrics = scrape(port)
        lags = [metrics.get(("scheduler_standby_lag_records", (("partition", str(p)),))) for p in partitions]
        if None not in lags and max(lags) <= 20 and metrics.get(("scheduler_standby_records_total", ()), 0) >= IDLE / 3:
            return
        time.sleep(0.5)
    raise AssertionError(f"standbys never caught up: {scrape(port)}\n{process.log_tail(20)}")


def create(client: SchedulerClient, schedule_id: str, due_ms: int) -> str:
    return client.send("CREATE", schedule_id, TENANT, spec=make_spec("once", rfc3339(due_ms)))


def test_idle_processes_keep_copies_of_each_others_partitions(kafka_bootstrap, unique_prefix, tmp_path):
    """Nothing due, so each main loop polls back to back: the placement must not depend on a gap between polls
    (confluent-kafka 2.16 gates a Consumer to one thread, and the placement once waited for the main loop's)."""
    ensure_layout(kafka_bootstrap, unique_prefix, [TENANT])
    a = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "a", "a").start()
    b = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "b", "b").start()
    try:
        wait_for_split([a, b], TOPOLOGY.schedule_partitions)
        deadline = time.monotonic() + PLACEMENT_S
        while time.monotonic() < deadline:
            if a.standby_partitions() == b.owned_partitions() and b.standby_partitions() == a.owned_partitions():
                break
            time.sleep(0.5)
        assert a.standby_partitions() == b.owned_partitions() and b.standby_partitions() == a.owned_partitions(), (
            f"copies not placed within {PLACEMENT_S} s of the split:\n{a.log_tail(15)}\n{b.log_tail(15)}")
    finally:
        for process in (a, b):
            if process.alive():
                process.terminate()


def test_survivor_restores_only_the_tail_and_loses_nothing(kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, [TENANT])
    port = free_port()
    a = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "a", "a").start()
    b = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "b", "b", ("--metrics-port", str(port))).start()
    reader = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, [TENANT]), "Occurrence")
    try:
        wait_for_split([a, b], TOPOLOGY.schedule_partitions)
        moved = a.owned_partitions()
        expected = {}
        with SchedulerClient(kafka_bootstrap, unique_prefix, timeout_s=300) as client:
            started = time.monotonic()
            far_ms = (math.ceil(time.time()) + 30 * 86_400) * 1000
            ids = [create(client, f"idle-{n:05d}", far_ms) for n in range(IDLE)]
            assert {r["status"] for r in client.wait(ids, timeout_s=300).values()} == {"ACCEPTED"}
            # The steady set's instants follow the rate just measured: a loaded machine gets a longer lead.
            lead_s = STEADY_PER_S * STEADY_S / (IDLE / (time.monotonic() - started)) * 2 + 10
            kill_ms = math.ceil(time.time() + lead_s) * 1000
            ids = []
            for n in range(STEADY_PER_S * STEADY_S):
                due_ms = kill_ms + 500 + n * 1000 // STEADY_PER_S
                ids.append(create(client, f"steady-{n:05d}", due_ms))
                expected[occurrence_id(f"steady-{n:05d}", 1, datetime.fromtimestamp(due_ms / 1000, tz=timezone.utc))] = n
            assert {r["status"] for r in client.wait(ids, timeout_s=300).values()} == {"ACCEPTED"}
        wait_warm(port, moved, b)
        assert time.time() * 1000 < kill_ms, "loading and warming took longer than the lead time"
        time.sleep(max(0.0, kill_ms / 1000 - time.time()))
        logged_before_kill = len(b.log_path.read_text().splitlines())
        a.kill()
        counts = read_until_all(reader, expected, kill_ms + STEADY_S * 1000 + 90_000)
        missing = expected.keys() - counts.keys()
        assert not missing, f"{len(missing)} occurrences due after the kill never arrived:\n{b.log_tail(30)}"
        wait_for_split([b], TOPOLOGY.schedule_partitions)
        after = b.log_path.read_text().splitlines()[logged_before_kill:]
        restores = [m.groups() for m in map(RESTORED.search, after) if m]
        schedules_topic = TOPOLOGY.topic_name("schedules", unique_prefix)
        for partition in moved:
            _, size = reader.consumer.get_watermark_offsets(TopicPartition(schedules_topic, partition), timeout=10)
            assert size >= IDLE / TOPOLOGY.schedule_partitions / 2, "the changelog has a real history to replay"
            applied = sum(int(n) for topic, p, n, _, _ in restores if int(p) == partition)
            assert applied <= size // 10, (
                f"partition {partition}: {applied} records replayed, the schedules changelog alone has {size}")
        # The dead owner's open turn is aborted by the survivor, not left to the broker's transaction timeout.
        assert any("fenced" in line and f"'{unique_prefix}.scheduler.a'" in line for line in after), b.log_tail(30)
        assert b.alive()
    finally:
        reader.close()
        for process in (a, b):
            if process.alive():
                process.terminate()
