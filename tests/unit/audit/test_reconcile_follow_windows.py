"""The online reconciler's window arithmetic (scheduler/audit/reconcile_follow.py): which window comes
first and when each may be reconciled."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from scheduler.audit.reconcile_follow import ReconcileMetrics, due_in_ms, first_window

M = 60_000
T0 = 1_777_852_800_000  # a whole minute


def test_the_first_window_is_the_last_one_closed_for_the_settle_time():
    now = T0 + 10 * M + 30_000
    start = first_window(now, M, 2 * M)
    assert start == T0 + 7 * M  # [7m, 8m) closed at 8m, settled at 10m <= 10m30s; [8m, 9m) settles at 11m
    assert due_in_ms(start, now, M, 2 * M) <= 0 < due_in_ms(start + M, now, M, 2 * M)


def test_a_from_instant_starts_at_its_window_and_catches_up():
    start = first_window(T0 + 10 * M, M, 0, from_ms=T0 + 90_000)
    assert start == T0 + M
    assert [due_in_ms(start + k * M, T0 + 10 * M, M, 0) <= 0 for k in range(10)] == [True] * 9 + [False]


def test_a_window_is_due_settle_after_its_end():
    assert due_in_ms(T0, T0 + M + 5_000, M, 10_000) == 5_000
    assert due_in_ms(T0, T0 + M + 10_000, M, 10_000) == 0


def test_the_counters_exist_at_zero_for_every_classification_from_the_start():
    metrics = ReconcileMetrics(CollectorRegistry())
    metrics.prime("acme")
    text = generate_latest(metrics.registry).decode()
    assert 'scheduler_reconcile_absent_total{tenant="acme"} 0.0' in text
    assert 'scheduler_reconcile_expected_total{classification="ABSENT",tenant="acme"} 0.0' in text
