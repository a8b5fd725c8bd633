"""End to end on the real broker: commands in, occurrences out, in the right tenant topics."""
from __future__ import annotations

import math
import time
from datetime import datetime, timezone

import pytest
from engine_harness import SchedulerProcess, TopicReader, ensure_layout, occurrence_topics, percentile

from scheduler.control.client import SchedulerClient, make_spec
from scheduler.timing.occurrence_id import occurrence_id

BURST = 10_000


def rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


@pytest.fixture
def scheduler_process(kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix)
    process = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "state", "a").start()
    yield process
    if process.alive():
        process.terminate()


def test_ten_thousand_one_shots_due_in_the_same_second_all_arrive(kafka_bootstrap, unique_prefix,
                                                                    scheduler_process, record_property):
    tenants = ["big"] + [f"small{i:02d}" for i in range(30)]
    owners = ["big"] * 7000 + [tenants[1 + i % 30] for i in range(3000)]
    due_ms = (math.ceil(time.time()) + 25) * 1000
    expected: dict[str, tuple[str, str]] = {}
    with SchedulerClient(kafka_bootstrap, unique_prefix, timeout_s=120) as client:
        command_ids = []
        for n, tenant in enumerate(owners):
            sid = f"burst-{n:05d}"
            spec = make_spec("once", rfc3339(due_ms), priority="HIGH" if n % 2 else "NORMAL")
            command_ids.append(client.send("CREATE", sid, tenant, spec=spec))
            expected[occurrence_id(sid, 1, datetime.fromtimestamp(due_ms / 1000, tz=timezone.utc))] = (tenant, sid)
        results = client.wait(command_ids, timeout_s=120)
    assert {r["status"] for r in results.values()} == {"ACCEPTED"}
    assert time.time() * 1000 < due_ms, "creating the schedules took longer than the lead time"

    reader = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, tenants), "Occurrence")
    try:
        received = reader.until(lambda got: {r.record["occurrence_id"] for r in got} >= expected.keys(),
                                timeout=(due_ms / 1000 - time.time()) + 60)
    finally:
        reader.close()
    ids = {r.record["occurrence_id"] for r in received}
    assert ids == set(expected), scheduler_process.log_tail()
    for item in received:
        tenant, sid = expected[item.record["occurrence_id"]]
        priority = item.record["priority"].lower()
        assert item.topic == f"{unique_prefix}.occurrences.{tenant}.{priority}"
        assert item.record["schedule_id"] == sid and item.record["scheduled_for_ms"] == due_ms
    lags = [r.timestamp_ms - r.record["scheduled_for_ms"] for r in received]
    seen = [r.seen_ms - r.record["scheduled_for_ms"] for r in received]
    assert min(lags) >= 0, "an occurrence was enqueued before its scheduled_for"
    span_s = (max(r.timestamp_ms for r in received) - min(r.timestamp_ms for r in received)) / 1000
    summary = {"count": len(received), "p50_ms": percentile(lags, 0.5), "p99_ms": percentile(lags, 0.99),
               "max_ms": max(lags), "seen_p99_ms": percentile(seen, 0.99), "dispatch_span_s": span_s,
               "rate_per_s": round(len(received) / max(span_s, 0.001))}
    record_property("burst_lag", summary)
    print(f"\n10k burst: {summary}")


@pytest.fixture
def rate_limited_process(kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix)
    process = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "state", "a",
                               ("--tenant-rate", "noisy=250")).start()
    yield process
    if process.alive():
        process.terminate()


def test_a_tenant_over_its_trigger_rate_is_delayed_not_dropped_and_does_not_delay_others(
        kafka_bootstrap, unique_prefix, rate_limited_process):
    due_ms = (math.ceil(time.time()) + 12) * 1000
    expected = {}
    with SchedulerClient(kafka_bootstrap, unique_prefix) as client:
        ids = []
        for n in range(1200):
            tenant = "noisy" if n < 1000 else "calm"
            sid = f"r-{n:04d}"
            ids.append(client.send("CREATE", sid, tenant, spec=make_spec("once", rfc3339(due_ms))))
            expected[occurrence_id(sid, 1, datetime.fromtimestamp(due_ms / 1000, tz=timezone.utc))] = tenant
        assert {r["status"] for r in client.wait(ids).values()} == {"ACCEPTED"}
    reader = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, ["noisy", "calm"]), "Occurrence")
    try:
        received = reader.until(lambda got: {r.record["occurrence_id"] for r in got} >= expected.keys(),
                                timeout=due_ms / 1000 - time.time() + 30)
    finally:
        reader.close()
    assert {r.record["occurrence_id"] for r in received} == set(expected), rate_limited_process.log_tail()
    lag = {tenant: [r.timestamp_ms - due_ms for r in received if r.record["tenant"] == tenant]
           for tenant in ("noisy", "calm")}
    assert max(lag["noisy"]) >= 2500, "1000 occurrences at 250/s (burst 250) take at least 3 s"
    assert max(lag["calm"]) < 1000, "the calm tenant waited behind the noisy one"
