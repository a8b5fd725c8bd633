"""The steady state on the real broker (issue 27): a few thousand rate schedules firing continuously for a
minute never let the oldest due occurrence grow old, every one arrives, and the backlog gauge tells the truth
whenever something is overdue."""
from __future__ import annotations

import math
import time

from engine_harness import SchedulerProcess, TopicReader, ensure_layout, occurrence_topics, scrape

from scheduler.broker.local import free_port
from scheduler.control.bulk import CreateRequest
from scheduler.control.client import SchedulerClient, make_spec

SCHEDULES = 7_000
PERIOD_S = 3  # 2,333 occurrences a second: the seed's daily average
RUN_S = 60
TENANTS = ["steady-a", "steady-b", "steady-c"]
# The objective is 5 s from the instant to the queue; before issue 27 this load ran 10 s late within a minute
# (planning fell behind its horizon) while the backlog gauge read 0.
OVERDUE_BOUND_S = 5.0


def gauge_max(samples: dict, name: str) -> float:
    values = [v for (metric, _), v in samples.items() if metric == name]
    return max(values) if values else 0.0


def test_rate_schedules_firing_for_a_minute_stay_on_time_and_the_backlog_gauge_tells_the_truth(
        kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, TENANTS)
    port = free_port()
    process = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "state", "steady",
                               extra_args=("--metrics-port", str(port))).start()
    reader = None
    try:
        start_ms = (math.ceil(time.time()) + 20) * 1000
        end_ms = start_ms + RUN_S * 1000
        with SchedulerClient(kafka_bootstrap, unique_prefix, timeout_s=120) as client:
            requests = [CreateRequest(TENANTS[n % len(TENANTS)], make_spec(
                "rate", f"every {PERIOD_S}s", anchor_at_ms=start_ms + n * PERIOD_S * 1000 // SCHEDULES,
                start_at_ms=start_ms, priority="NORMAL"), schedule_id=f"steady-{n:05d}") for n in range(SCHEDULES)]
            results = client.create_many(requests)
        assert {r["status"] for r in results} == {"ACCEPTED"}, process.log_tail()
        assert time.time() * 1000 < start_ms, "loading overran the start: the test measures nothing"
        reader = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, TENANTS), "Occurrence")

        worst_overdue, checks, samples = 0.0, 0, {}
        while time.time() * 1000 < end_ms:
            reader.poll(0.5)
            samples = scrape(port)
            overdue = gauge_max(samples, "scheduler_oldest_overdue_seconds")
            backlog = sum(v for (metric, _), v in samples.items() if metric == "scheduler_due_backlog")
            worst_overdue = max(worst_overdue, overdue)
            assert overdue <= OVERDUE_BOUND_S, f"{overdue:.1f} s overdue at +{time.time() - start_ms / 1000:.0f} s"
            if overdue > 1.0:
                assert backlog > 0, f"{overdue:.1f} s overdue while the backlog gauge reads 0"
            checks += 1
        assert checks >= RUN_S, "the metrics were read too seldom to show anything"

        due = {(f"steady-{n:05d}", fire) for n in range(SCHEDULES)
               for fire in range(start_ms + n * PERIOD_S * 1000 // SCHEDULES, end_ms - 5_000, PERIOD_S * 1000)}
        reader.until(lambda got: {(r.record["schedule_id"], r.record["scheduled_for_ms"]) for r in got} >= due,
                     timeout=20)
        seen = {(r.record["schedule_id"], r.record["scheduled_for_ms"]) for r in reader.received}
        assert not due - seen, f"{len(due - seen)} of {len(due)} occurrences due before the end never arrived"
        lags = sorted(r.timestamp_ms - r.record["scheduled_for_ms"] for r in reader.received
                      if (r.record["schedule_id"], r.record["scheduled_for_ms"]) in due)
        assert lags[int(0.99 * len(lags))] <= OVERDUE_BOUND_S * 1000, f"enqueue lag p99 {lags[int(0.99 * len(lags))]} ms"
    finally:
        if reader is not None:
            reader.close()
        process.terminate()
