"""Share-group mode (`scheduler worker --share`) on the real broker: records are delivered through
the share group and acknowledged after their attempt events are written."""
from __future__ import annotations

import pytest
from worker_harness import (
    WorkerProcess,
    attempt_reader,
    create_layout,
    enqueue,
    handled,
    kinds_by_occurrence,
    occurrence,
    publish_states,
    schedule_state,
)

pytestmark = pytest.mark.integration
TENANT = "acme"


def test_share_group_worker_records_attempts_and_leaves_retries_to_the_scheduler(kafka_bootstrap, unique_prefix,
                                                                                 tmp_path):
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
        reader.until(lambda got: sum(r.record["kind"] in ("FAILED", "SUCCEEDED", "SKIPPED_STALE") for r in got) >= 4,
                     timeout=40)
        reader.poll(3)  # a retryable failure is ACCEPTed: the broker must not deliver it again
        assert worker.terminate() == 0, worker.log_tail()
    finally:
        worker.stop_quietly()
        reader.close()

    kinds = kinds_by_occurrence(reader)
    assert kinds[ok["occurrence_id"]] == ["STARTED", "SUCCEEDED"], worker.log_tail()
    assert kinds[permanent["occurrence_id"]] == ["STARTED", "FAILED"]
    assert kinds[stale["occurrence_id"]] == ["SKIPPED_STALE"]
    assert kinds[retryable["occurrence_id"]] == ["STARTED", "FAILED"]
    calls = [h["occurrence_id"] for h in handled(tmp_path)]
    assert calls.count(ok["occurrence_id"]) == 1 and calls.count(permanent["occurrence_id"]) == 1
    assert calls.count(retryable["occurrence_id"]) == 1
    assert stale["occurrence_id"] not in calls
