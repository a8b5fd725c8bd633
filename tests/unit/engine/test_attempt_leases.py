"""Leases in the attempt policy: renewal, expiry (LOST), take-over and fencing of the old token."""
from __future__ import annotations

from pathlib import Path

from scheduler.engine import leases
from scheduler.engine.attempt_policy import apply_attempt
from scheduler.engine.partition_store import PartitionStore, StoreTransaction

NOW = 1_767_225_600_000
SCHEDULE = {"schedule_id": "s", "tenant": "acme", "version": 1, "state": "ACTIVE",
            "spec": {"max_attempts": 3, "retry_backoff_ms": 100, "occurrence_deadline_ms": 86_400_000,
                     "lease_ms": 2_000}}


def event(kind: str, token: str = "t1", attempt: int = 1, **extra: object) -> dict:
    return {"occurrence_id": "s/v1/0", "schedule_id": "s", "tenant": "acme", "schedule_version": 1,
            "scheduled_for_ms": NOW, "attempt": attempt, "attempt_token": token, "kind": kind,
            "retryable": False, "error_class": None, "error_message": None, "worker_id": "w1", "at_ms": 0,
            "progress": None, **extra}


def started(token: str = "t1", at: int = NOW) -> dict:
    outcome = apply_attempt(event("STARTED", token), None, SCHEDULE, at, True)
    assert outcome.status is not None
    return outcome.status


def test_started_takes_a_lease_of_the_schedule_and_a_heartbeat_renews_it_with_its_progress():
    status = started()
    assert status["state"] == "RUNNING" and status["lease_expires_at_ms"] == NOW + 2_000
    renewed = apply_attempt(event("HEARTBEAT", progress="40%"), status, SCHEDULE, NOW + 1_500, True).status
    assert renewed is not None
    assert renewed["lease_expires_at_ms"] == NOW + 3_500 and renewed["progress"] == "40%"
    assert len(renewed["attempts"]) == 1, "heartbeats do not fill the attempt history"


def test_a_lost_attempt_is_retried_and_its_late_results_and_heartbeats_are_refused():
    status = started()
    lost = apply_attempt(leases.lost_event(status, NOW + 2_000, 2_000), status, SCHEDULE, NOW + 2_000, True)
    assert lost.status is not None and lost.status["state"] == "RETRY_WAIT"
    assert lost.retry_at_ms is not None and lost.finished
    assert lost.lost == {"occurrence_id": "s/v1/0", "attempt": 1, "attempt_token": "t1"}
    assert lost.status["lease_expires_at_ms"] is None
    assert lost.status["attempts"][-1]["kind"] == "LOST"
    after = lost.status
    for late in (event("SUCCEEDED"), event("HEARTBEAT"), event("STARTED"), event("FAILED", retryable=True)):
        assert apply_attempt(late, after, SCHEDULE, NOW + 2_500, True).status is None, late["kind"]
    retry = apply_attempt(event("STARTED", "t2", attempt=2), after, SCHEDULE, NOW + 3_000, True).status
    assert retry is not None and retry["attempt_token"] == "t2" and retry["state"] == "RUNNING"
    assert apply_attempt(event("SUCCEEDED"), retry, SCHEDULE, NOW + 3_100, True).status is None
    done = apply_attempt(event("SUCCEEDED", "t2", attempt=2), retry, SCHEDULE, NOW + 3_100, True).status
    assert done is not None and done["state"] == "SUCCEEDED"


def test_the_last_attempt_lost_is_dead_and_a_lost_without_the_lease_changes_nothing():
    last = {**SCHEDULE, "spec": {**SCHEDULE["spec"], "max_attempts": 1}}
    status = started()
    dead = apply_attempt(leases.lost_event(status, NOW + 2_000, 2_000), status, last, NOW + 2_000, True)
    assert dead.status is not None and dead.status["state"] == "DEAD" and dead.dead_reason is not None
    assert apply_attempt(event("LOST", "other"), status, SCHEDULE, NOW + 2_000, True).status is None


def test_a_newer_started_of_the_same_attempt_takes_the_lease_over_and_names_the_old_token():
    status = started("t1")
    taken = apply_attempt(event("STARTED", "t2"), status, SCHEDULE, NOW + 500, True)
    assert taken.status is not None and taken.status["attempt_token"] == "t2"
    assert taken.lost == {"occurrence_id": "s/v1/0", "attempt": 1, "attempt_token": "t1"}
    assert apply_attempt(event("HEARTBEAT", "t1"), taken.status, SCHEDULE, NOW + 600, True).status is None


def test_a_heartbeat_after_the_result_does_not_revive_the_attempt():
    status = started()
    done = apply_attempt(event("SUCCEEDED"), status, SCHEDULE, NOW + 100, True).status
    assert done is not None and done["lease_expires_at_ms"] is None
    assert apply_attempt(event("HEARTBEAT"), done, SCHEDULE, NOW + 200, True).status is None


def test_the_expiry_index_finds_expired_leases_in_order_and_follows_their_moves(tmp_path: Path):
    store = PartitionStore(tmp_path / "p0")
    try:
        txn = StoreTransaction(store)
        leases.move(txn, "a", None, NOW + 10)
        leases.move(txn, "b", None, NOW + 5)
        leases.move(txn, "c", None, NOW + 50)
        store.write(txn.changes, {})
        txn = StoreTransaction(store)
        assert leases.expired(txn, NOW + 10, 10) == [(NOW + 5, "b"), (NOW + 10, "a")]
        leases.move(txn, "b", NOW + 5, NOW + 100)
        leases.move(txn, "a", NOW + 10, None)
        assert leases.expired(txn, NOW + 10, 10) == []
        assert not leases.has_expired(txn, NOW + 49) and leases.has_expired(txn, NOW + 50)
    finally:
        store.close()
