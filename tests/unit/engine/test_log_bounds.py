"""The restore's log bounds survive the errors a cluster gives right after one of its brokers restarts."""
from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from scheduler.engine.restore_reader import log_bounds


class Offsets:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class RestartingCluster:
    """Answers ListOffsets with `errors` first (one per call), as a cluster whose leader epochs moved does."""

    def __init__(self, errors: list[int]) -> None:
        self.errors = list(errors)
        self.calls = 0

    def list_offsets(self, request: dict[Any, Any], **_: Any) -> dict[Any, Future]:
        self.calls += 1
        futures = {}
        for tp in request:
            future: Future = Future()
            if self.errors:
                future.set_exception(KafkaException(KafkaError(self.errors[0])))
            else:
                future.set_result(Offsets(7))
            futures[tp] = future
        if self.errors:
            self.errors.pop(0)
        return futures


def test_a_stale_leader_epoch_is_retried_not_fatal():
    admin = RestartingCluster([KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH])
    bounds = log_bounds(admin, ["p.timeline-changelog"], [0, 1], timeout_s=30)  # type: ignore[arg-type]
    assert bounds == {0: {"p.timeline-changelog": (7, 7)}, 1: {"p.timeline-changelog": (7, 7)}}
    assert admin.calls >= 4


def test_an_admin_client_stuck_on_a_stale_epoch_is_replaced():
    """librdkafka's admin client keeps its stale leader epoch; a new one reads the current metadata."""
    stuck = RestartingCluster([KafkaError.FENCED_LEADER_EPOCH] * 1000)
    fresh = RestartingCluster([])
    bounds = log_bounds(stuck, ["p.schedules"], [3], timeout_s=30, renew=lambda: fresh)  # type: ignore[arg-type]
    assert bounds == {3: {"p.schedules": (7, 7)}}
    assert stuck.calls == 2  # one attempt: its earliest and latest requests
