"""Overlap policies at dispatch: pure decisions over one schedule's due entries.

An occurrence counts as running from its dispatch until its attempt ends, so
the check and the mark happen in the same partition task and transaction: two
occurrences of one schedule can never both see "nothing running".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from scheduler.wire import vocabulary
from scheduler.wire.records import RunningRef

T = TypeVar("T")

ALLOW, SKIP_IF_RUNNING, QUEUE_ONE = vocabulary.known("OverlapPolicy", "ALLOW", "SKIP_IF_RUNNING", "QUEUE_ONE")


@dataclass
class Admission(Generic[T]):
    send: list[T] = field(default_factory=list)
    hold: list[T] = field(default_factory=list)   # QUEUE_ONE: the one occurrence waiting for the running one
    skip: list[T] = field(default_factory=list)   # recorded SKIPPED_OVERLAP


def live_running(running: list[RunningRef], run_timeout_ms: int, now_ms: int) -> list[RunningRef]:
    """Occurrences silent for longer than the run timeout are lost: they no longer block the schedule."""
    return [r for r in running if r["since_ms"] + run_timeout_ms > now_ms]


def admit(policy: str, running: bool, due_in_order: list[T]) -> Admission[T]:
    result: Admission[T] = Admission()
    if policy == ALLOW:
        result.send = list(due_in_order)
        return result
    busy = running
    for item in due_in_order:
        if not busy:
            result.send.append(item)
            busy = True
        elif policy == QUEUE_ONE and not result.hold:
            result.hold.append(item)
        else:
            result.skip.append(item)
    return result
