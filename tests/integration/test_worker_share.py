"""Share-group mode (`scheduler worker --share`) on the real broker: records are delivered through
the share group and acknowledged after their attempt events are written."""
from __future__ import annotations

import pytest

from worker_harness import (
    WorkerProcess, attempt_reader, create_layout, enqueue, handled, kinds_by_occurrence, occurrence,
    publish_states, schedule_state,
)

pytestmark = pytest.mark.integration
TENANT = "acme"


def test_share_group_worker_records_attempts_and_releases_retryable_failures(kafka_bootstrap, unique_prefix, tmp_path):
    create_layout(kafka_bootstrap, unique_prefix, TENANT)
    ok = occurrence("ok", TENANT, priority="HIGH")
    permanent = occurrence("bad", TENANT, payload=b"permanent")
    retryable = occurrence("flaky", TENANT, payload=b"retryable", priority="LOW")
    stale = occurrence("old", TENANT)
    # Enqueued before any worker of the group exists: the group must start from the earliest offset.
    enqueue(kafka_bootstrap, unique_prefix, [ok, permanent, retryable, stale])
    publish_states(kafka_bootstrap, unique_prefix, [schedule_state("old", TENANT, 3, "ACTIVE")])
    reader = attempt_reader(kafka_bootstrap, unique_prefix)
    worker = WorkerProcess(kafka_bootstrap, unique_prefix, TENANT, "worker_handlers:by_payload", tmp_path,
                           extra_args=("--share",)).start()
    try:
        # RELEASE makes the broker deliver the retryable record again (a new STARTED each time).
        reader.until(lambda got: sum(r.record["kind"] == "FAILED" and r.record["schedule_id"] == "flaky"
                                     for r in got) >= 2
                     and any(r.record["kind"] == "SUCCEEDED" for r in got), timeout=40)
        assert worker.terminate() == 0, worker.log_tail()
    finally:
        worker.stop_quietly()
        reader.close()

    kinds = kinds_by_occurrence(reader)
    assert kinds[ok["occurrence_id"]] == ["STARTED", "SUCCEEDED"], worker.log_tail()
    assert kinds[permanent["occurrence_id"]] == ["STARTED", "FAILED"]
    assert kinds[stale["occurrence_id"]] == ["SKIPPED_STALE"]
    flaky = kinds[retryable["occurrence_id"]]
    assert flaky[:4] == ["STARTED", "FAILED", "STARTED", "FAILED"]
    tokens = {r.record["attempt_token"] for r in reader.received if r.record["schedule_id"] == "flaky"}
    assert len(tokens) == flaky.count("STARTED")
    calls = [h["occurrence_id"] for h in handled(tmp_path)]
    assert calls.count(ok["occurrence_id"]) == 1 and calls.count(permanent["occurrence_id"]) == 1
    assert stale["occurrence_id"] not in calls
