"""A running `scheduler run --metrics-port` serves Prometheus metrics that follow what it does."""
from __future__ import annotations

import math
import time
from datetime import datetime, timezone

from engine_harness import SchedulerProcess, TopicReader, ensure_layout, occurrence_topics, scrape

from scheduler.broker.local import free_port
from scheduler.control.client import SchedulerClient, make_spec


def test_metrics_endpoint_reports_ownership_dispatch_lag_and_commits(kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, ["acme"])
    port = free_port()
    process = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "state", "m",
                               extra_args=("--metrics-port", str(port))).start()
    try:
        deadline = time.monotonic() + 60
        samples: dict = {}
        while time.monotonic() < deadline:
            try:
                samples = scrape(port)
                if samples.get(("scheduler_owned_partitions", ())) == 8:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert samples.get(("scheduler_owned_partitions", ())) == 8, process.log_tail()
        assert samples[("scheduler_partition_ownership_changes_total", (("change", "assigned"),))] == 8

        due_ms = (math.ceil(time.time()) + 4) * 1000
        due = datetime.fromtimestamp(due_ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")
        with SchedulerClient(kafka_bootstrap, unique_prefix) as client:
            ids = [client.send("CREATE", f"m-{n}", "acme", spec=make_spec("once", due, priority="HIGH"))
                   for n in range(5)]
            assert {r["status"] for r in client.wait(ids).values()} == {"ACCEPTED"}
        reader = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, ["acme"]), "Occurrence")
        try:
            reader.until(lambda got: len(got) >= 5, timeout=60)
        finally:
            reader.close()

        strict = (("lane", "strict"),)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            samples = scrape(port)
            if samples.get(("scheduler_occurrences_dispatched_total", strict)) == 5:
                break
            time.sleep(0.2)
        assert samples[("scheduler_occurrences_dispatched_total", strict)] == 5
        assert samples[("scheduler_schedule_lag_seconds_count", strict)] == 5
        assert samples[("scheduler_schedule_lag_seconds_bucket", (("lane", "strict"), ("le", "5.0")))] == 5
        assert samples[("scheduler_transactions_total", (("outcome", "committed"),))] >= 2
        assert samples[("scheduler_transaction_commit_seconds_count", ())] >= 2
        backlog = [v for (name, _), v in samples.items() if name == "scheduler_due_backlog"]
        assert backlog and max(backlog) == 0
        overdue = [v for (name, _), v in samples.items() if name == "scheduler_oldest_overdue_seconds"]
        assert len(overdue) == 8 and max(overdue) == 0
        assert samples[("scheduler_restore_seconds_count", ())] == 8
        assert samples[("process_resident_memory_bytes", ())] > 0
    finally:
        process.terminate()
