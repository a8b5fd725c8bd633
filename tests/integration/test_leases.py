"""Renewable leases with real scheduler and worker processes on the real broker: a heartbeating handler
keeps its attempt however long it runs; a dead (kill -9) or frozen (SIGSTOP) worker loses it, its
occurrence is retried under a new token, and the old token's late result is refused."""
from __future__ import annotations

import signal
import time

import pytest
from engine_harness import soon
from worker_harness import (
    CODEC,
    TOPOLOGY,
    attempt_reader,
    handled,
    kinds_by_occurrence,
    produce,
    scheduler_with_workers,
    status_of,
)

from helpers.waiting import wait_until
from scheduler.control.client import make_spec

TENANT = "leases"
LEASE_MS = 2_000
SESSION_TIMEOUT_MS = 1_500


@pytest.fixture
def system(kafka_bootstrap, unique_prefix, tmp_path):
    with scheduler_with_workers(kafka_bootstrap, unique_prefix, tmp_path, TENANT) as running:
        yield running


def notes(workdir, phase: str, attempt: int | None = None) -> list[dict]:
    return [n for n in handled(workdir) if n["phase"] == phase and attempt in (None, n["attempt"])]


def test_a_handler_running_ten_times_its_lease_keeps_its_attempt_and_finishes_once(
        system, kafka_bootstrap, unique_prefix):
    client, worker, workdir = system
    runner = worker("long_run")
    seconds = 10 * LEASE_MS / 1000
    client.create(TENANT, make_spec("once", soon(4), payload=str(seconds).encode(), lease_ms=LEASE_MS,
                                    retry_backoff_ms=100), schedule_id="long")
    wait_until(lambda: notes(workdir, "ended"), 60 + seconds, "the long handler's end")
    [start], [end] = notes(workdir, "started"), notes(workdir, "ended")
    assert not end["lease_lost"] and not end["cancelled"] and end["progress_reported"], runner.log_tail()
    assert end["at"] - start["at"] >= seconds
    oid = start["occurrence_id"]
    wait_until(lambda: status_of(client, TENANT, oid).get("state") == "SUCCEEDED", 30, "SUCCEEDED")
    status = client.occurrence(TENANT, oid)
    assert status["attempt"] == 1 and status["attempt_token"] == start["token"]
    reader = attempt_reader(kafka_bootstrap, unique_prefix)
    try:
        reader.until(lambda got: any(r.record["kind"] == "SUCCEEDED" for r in got), 20)
    finally:
        reader.close()
    kinds = kinds_by_occurrence(reader)[oid]
    beats = kinds.count("HEARTBEAT")
    assert kinds[0] == "STARTED" and kinds[-1] == "SUCCEEDED" and set(kinds[1:-1]) == {"HEARTBEAT"}, kinds
    # Every lease/3 on its own (~30 in 20 s) plus the handler's one; at least one per lease to keep it.
    assert seconds * 1000 / LEASE_MS <= beats <= 3 * seconds * 1000 / LEASE_MS + 5, beats
    progress = [r.record["progress"] for r in reader.received if r.record["kind"] == "HEARTBEAT"]
    assert "halfway" in progress


def test_a_killed_workers_occurrence_is_retried_by_another_under_a_new_token_and_its_late_result_refused(
        system, kafka_bootstrap, unique_prefix):
    """Consumer-group mode, with the workers' session timeout below the lease (docs/workers.md): the
    survivor owns the dead worker's partitions by the time the lease expires."""
    client, worker, workdir = system
    fast = ("--session-timeout-ms", str(SESSION_TIMEOUT_MS))
    pool = {w.proc.pid: w for w in (worker("long_run", *fast), worker("long_run", *fast))}
    client.create(TENANT, make_spec("once", soon(6), payload=b"8", lease_ms=LEASE_MS, retry_backoff_ms=100,
                                    max_attempts=3), schedule_id="victim")
    wait_until(lambda: notes(workdir, "started"), 90, "the first attempt")
    [first] = notes(workdir, "started")
    time.sleep(1)  # mid-run: heartbeats written
    pool[first["pid"]].kill()
    killed_at = time.time()
    wait_until(lambda: len(notes(workdir, "started")) >= 2, 60, "the retry")
    death_to_retry = notes(workdir, "started")[1]["at"] - killed_at
    print(f"worker death to retry: {death_to_retry:.2f} s (lease {LEASE_MS} ms, session {SESSION_TIMEOUT_MS} ms)")
    assert death_to_retry < LEASE_MS / 1000 + 10, "lease + one turn (+ backoff, + a loaded machine's slack)"

    oid = first["occurrence_id"]

    def holder() -> dict | None:
        """The later start whose token the engine holds. The survivor's redelivery of attempt 1 may reach the
        engine before the lease expires (it takes the lease over) or after (it is refused, and attempt 2,
        run once the survivor is free, is the retry); a worker notes its start before the engine reads it."""
        later = {n["token"]: n for n in notes(workdir, "started")[1:]}
        return later.get(status_of(client, TENANT, oid).get("attempt_token"))

    wait_until(lambda: holder() is not None, 60, "a retry holding the lease")
    retry = holder()
    assert retry is not None and retry["pid"] != first["pid"] and retry["token"] != first["token"]
    late = {"occurrence_id": oid, "schedule_id": "victim", "tenant": TENANT, "schedule_version": 1,
            "scheduled_for_ms": client.occurrence(TENANT, oid)["scheduled_for_ms"], "attempt": first["attempt"],
            "attempt_token": first["token"], "kind": "SUCCEEDED", "retryable": False, "error_class": None,
            "error_message": None, "worker_id": "the-killed-one", "at_ms": int(time.time() * 1000)}
    produce(kafka_bootstrap, [(TOPOLOGY.topic_name("attempts", unique_prefix), "victim",
                               CODEC.encode("AttemptEvent", late))])
    status = client.occurrence(TENANT, oid)
    assert status["attempt_token"] == retry["token"] and status["state"] == "RUNNING", status
    # The replay sits before the retry's own result in the schedule's partition: once that result is in,
    # the replay was processed, and the history says what it did.
    wait_until(lambda: status_of(client, TENANT, oid).get("state") == "SUCCEEDED", 60, "the retry's success")
    status = client.occurrence(TENANT, oid)
    assert status["attempt_token"] == retry["token"] and status["attempt"] == retry["attempt"]
    results = [(e["kind"], e["attempt_token"]) for e in status["attempts"] if e["kind"] != "STARTED"]
    # Either the lease expired first (LOST, then attempt 2) or the survivor's redelivery of attempt 1
    # took the lease over; the killed worker's token never succeeds.
    assert results in ([("LOST", first["token"]), ("SUCCEEDED", retry["token"])],
                       [("SUCCEEDED", retry["token"])]), status["attempts"]
    assert retry["attempt"] == (2 if results[0][0] == "LOST" else 1)


def test_a_frozen_worker_learns_through_ctx_cancelled_that_its_lease_was_lost(system, kafka_bootstrap,
                                                                                unique_prefix):
    client, worker, workdir = system
    frozen = worker("long_run")
    client.create(TENANT, make_spec("once", soon(4), payload=b"6", lease_ms=LEASE_MS, retry_backoff_ms=100),
                  schedule_id="frozen")
    wait_until(lambda: notes(workdir, "started", 1), 90, "the first attempt")
    oid = notes(workdir, "started", 1)[0]["occurrence_id"]
    assert frozen.proc is not None
    frozen.proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: any(e["kind"] == "LOST" for e in status_of(client, TENANT, oid).get("attempts", [])), 30,
                 "the lease to be lost")
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: notes(workdir, "ended", 1), 30, "the frozen attempt to stop")
    [end] = notes(workdir, "ended", 1)
    assert end["lease_lost"] and end["cancelled"], frozen.log_tail()
    wait_until(lambda: status_of(client, TENANT, oid).get("state") == "SUCCEEDED", 60, "the retry's success")
    status = client.occurrence(TENANT, oid)
    assert status["attempt"] == 2 and [e["kind"] for e in status["attempts"]].count("SUCCEEDED") == 1
