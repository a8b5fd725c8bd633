"""A real faust worker (faust-streaming on aiokafka) consuming occurrences through the adapter."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from worker_harness import (
    HERE,
    REPO,
    TOPOLOGY,
    attempt_partitions,
    attempt_reader,
    create_layout,
    enqueue,
    handled,
    kinds_by_occurrence,
    occurrence,
    publish_states,
    schedule_state,
)

from scheduler.wire.partitioning import partition_for

pytestmark = pytest.mark.integration
TENANT = "acme"


def test_faust_agent_checks_the_view_and_writes_the_same_attempt_events(kafka_bootstrap, unique_prefix, tmp_path):
    create_layout(kafka_bootstrap, unique_prefix, TENANT)
    ok = occurrence("ok", TENANT, priority="HIGH")
    failing = occurrence("bad", TENANT, payload=b"permanent")
    retry = occurrence("flaky", TENANT, payload=b"retryable", priority="LOW", attempt=3)
    stale = occurrence("old", TENANT)
    enqueue(kafka_bootstrap, unique_prefix, [ok, failing, retry, stale])
    publish_states(kafka_bootstrap, unique_prefix, [schedule_state("old", TENANT, 1, "CANCELED")])
    reader = attempt_reader(kafka_bootstrap, unique_prefix)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "SCHEDULER_TOPIC_PREFIX": unique_prefix,
           "FAUST_APP_ID": f"{unique_prefix}-faust", "WORKER_TEST_TENANT": TENANT,
           "WORKER_TEST_HANDLER": "by_payload", "WORKER_TEST_DIR": str(tmp_path),
           "FAUST_DATADIR": str(tmp_path / "faust-data"),
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    log_path = tmp_path / "faust.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, str(HERE / "faust_worker_app.py"), "worker", "-l", "warn"],
                                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        reader.until(lambda got: proc.poll() is not None or sum(
            r.record["kind"] in ("SUCCEEDED", "FAILED", "SKIPPED_STALE") for r in got) >= 4, timeout=60)
        reader.poll(1.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        reader.close()
    logs = log_path.read_text(errors="replace")[-3000:]
    assert kinds_by_occurrence(reader) == {
        ok["occurrence_id"]: ["STARTED", "SUCCEEDED"],
        failing["occurrence_id"]: ["STARTED", "FAILED"],
        retry["occurrence_id"]: ["STARTED", "FAILED"],
        stale["occurrence_id"]: ["SKIPPED_STALE"],
    }, logs
    events = {(r.record["occurrence_id"], r.record["kind"]): r.record for r in reader.received}
    assert events[(failing["occurrence_id"], "FAILED")]["retryable"] is False
    assert events[(retry["occurrence_id"], "FAILED")]["retryable"] is True
    assert events[(retry["occurrence_id"], "FAILED")]["attempt"] == 3
    assert events[(stale["occurrence_id"], "SKIPPED_STALE")]["error_message"].endswith("CANCELED")
    assert {r.record["worker_id"] for r in reader.received} == {"faust-test"}
    assert sorted(h["occurrence_id"] for h in handled(tmp_path)) == sorted(
        o["occurrence_id"] for o in (ok, failing, retry))
    assert all(item.record["attempt_token"] for item in reader.received)
    placed = attempt_partitions(kafka_bootstrap, unique_prefix, expected=len(reader.received))
    assert len(placed) == len(reader.received)
    for key, partition in placed:
        assert partition == partition_for(key.encode(), TOPOLOGY.schedule_partitions)
