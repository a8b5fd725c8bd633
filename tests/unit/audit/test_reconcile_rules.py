"""Reconciliation over hand-built ledgers: versions, pauses, cancels, limits, DST, misfires, duplicates."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from scheduler.audit.expected import BACKFILL, PAUSED, SCHEDULE, TRIGGER, expected_occurrences
from scheduler.audit.ledger import (
    AttemptRow,
    AttemptSummary,
    DeadLetterRow,
    DispatchRow,
    EventRow,
    Ledger,
    ResultRow,
    VersionRow,
    summarize,
)
from scheduler.audit.reconcile import CLASSIFICATIONS, lag_stats, reconcile
from scheduler.audit.vocabulary import enum_symbols
from scheduler.control.client import make_spec
from scheduler.timing.instants import to_datetime, to_ms
from scheduler.timing.jitter import available_at
from scheduler.timing.occurrence_id import occurrence_id

M = 60_000
H = 60 * M
T0 = to_ms(datetime(2026, 5, 4, tzinfo=timezone.utc))  # a Monday, far from any DST change


def oid(version: int, at_ms: int, sid: str = "s") -> str:
    return occurrence_id(sid, version, to_datetime(at_ms))


def cron(expression: str, zone: str = "UTC", **fields) -> dict:
    return make_spec("cron", expression, zone, **fields)


def rate(period: str, anchor_ms: int, **fields) -> dict:
    return make_spec("rate", period, anchor_at_ms=anchor_ms, **fields)


def sent(version: int, at_ms: int, *, sid: str = "s", attempt: int = 1, lag: int = 5, available: int | None = None,
         catch_up: bool = False) -> DispatchRow:
    start = at_ms if available is None else available
    return DispatchRow(oid(version, at_ms, sid), sid, version, at_ms, start, start + lag, attempt, catch_up, "acme")


def ok(version: int, at_ms: int, *, attempt: int = 1, sid: str = "s") -> AttemptRow:
    return AttemptRow(oid(version, at_ms, sid), attempt, "SUCCEEDED", at_ms + 100 * attempt)


def event(kind: str, version: int, at_ms: int, recorded_ms: int, sid: str = "s") -> EventRow:
    return EventRow(sid, version, kind, recorded_ms, oid(version, at_ms, sid), at_ms)


def classes(report) -> dict[int, str]:
    return {c.expected.scheduled_for_ms: c.classification for c in report.occurrences}


def hourly_ledger() -> Ledger:
    """An hourly cron created at T0, every fire in [T0, T0+6h) dispatched and succeeded."""
    fires = [T0 + k * H for k in range(1, 6)]
    return Ledger([VersionRow("s", "acme", 1, "ACTIVE", cron("0 * * * *"), 5)], [ResultRow("s", "CREATE", 1, T0)],
                  [sent(1, t) for t in fires], [], summarize(ok(1, t) for t in fires))


def test_vocabulary_comes_from_the_schemas():
    kinds = enum_symbols("OccurrenceEvent", "OccurrenceEventKind")
    assert {"MISSED", "SKIPPED_PAUSED", "INVALIDATED", "SKIPPED_OVERLAP", "CANCELED"} <= set(kinds)
    assert set(kinds) - {"REJECTED_INPUT", "UNKNOWN"} <= set(CLASSIFICATIONS)
    assert "REJECTED_INPUT" not in CLASSIFICATIONS and "ABSENT" in CLASSIFICATIONS


def test_every_fire_dispatched_and_succeeded_is_clean():
    report = reconcile(hourly_ledger(), T0, T0 + 6 * H)
    assert classes(report) == {T0 + k * H: "SUCCEEDED" for k in range(1, 6)}  # T0 itself: created then, fires after
    assert report.ok and not report.unexpected and report.deliveries == {1: 5}


def test_a_missing_dispatch_is_absent_and_named():
    ledger = hourly_ledger()
    gone = ledger.dispatches.pop(2)  # its SUCCEEDED attempt stays: a report is no proof of a lost dispatch
    ledger.dead_letters.append(DeadLetterRow(gone.occurrence_id, gone.scheduled_for_ms + 9))
    report = reconcile(ledger, T0, T0 + 6 * H)
    assert [c.expected.occurrence_id for c in report.absent()] == [gone.occurrence_id]
    assert not report.ok


def test_the_window_is_half_open_on_scheduled_for():
    report = reconcile(hourly_ledger(), T0 + 2 * H, T0 + 4 * H)
    assert sorted(classes(report)) == [T0 + 2 * H, T0 + 3 * H]
    assert report.ok  # rows outside the window are simply not in it


def test_a_dispatch_nobody_expected_is_unexpected():
    ledger = hourly_ledger()
    stray = sent(1, T0 + 90 * M)  # no fire at half past
    ledger.dispatches.append(stray)
    report = reconcile(ledger, T0, T0 + 6 * H)
    assert [u.occurrence_id for u in report.unexpected] == [stray.occurrence_id]
    assert not report.ok


def test_duplicates_keep_their_id_and_are_counted_not_failed():
    ledger = hourly_ledger()
    ledger.dispatches.append(ledger.dispatches[0])
    report = reconcile(ledger, T0, T0 + 6 * H)
    assert report.ok and report.deliveries == {1: 4, 2: 1}
    assert report.duplicates == [(ledger.dispatches[0].occurrence_id, 1, 2)]


def test_a_dispatched_id_that_is_not_the_recipe_is_reported():
    ledger = hourly_ledger()
    forged = DispatchRow("0" * 32, "s", 1, T0 + H, T0 + H, T0 + H, 1, False, "acme")
    ledger.dispatches.append(forged)
    report = reconcile(ledger, T0, T0 + 6 * H)
    assert report.id_mismatches == [forged] and [u.occurrence_id for u in report.unexpected] == ["0" * 32]


def test_attempt_outcomes_retry_failure_dead_running_stale():
    fires = [T0 + k * H for k in range(1, 8)]
    f = fires
    attempts = [
        AttemptRow(oid(1, f[0]), 1, "FAILED", f[0] + 10), ok(1, f[0], attempt=2),                 # retried, then ok
        AttemptRow(oid(1, f[1]), 1, "FAILED", f[1] + 10),                                         # retry dispatched
        AttemptRow(oid(1, f[2]), 1, "FAILED", f[2] + 10),                                         # retry not yet sent
        AttemptRow(oid(1, f[3]), 1, "FAILED", f[3] + 10),                                         # dead
        AttemptRow(oid(1, f[4]), 1, "STARTED", f[4] + 10),                                        # running
        AttemptRow(oid(1, f[5]), 1, "SKIPPED_STALE", f[5] + 10),
    ]
    dispatches = [sent(1, t) for t in fires] + [sent(1, f[0], attempt=2), sent(1, f[1], attempt=2)]
    ledger = Ledger([VersionRow("s", "acme", 1, "ACTIVE", cron("0 * * * *"), 7)], [ResultRow("s", "CREATE", 1, T0)],
                    dispatches, [], summarize(attempts), [DeadLetterRow(oid(1, f[3]), f[3] + 20)])
    report = reconcile(ledger, T0, T0 + 8 * H)
    assert [classes(report)[t] for t in fires] == ["SUCCEEDED", "RETRIED", "FAILED", "DEAD", "RUNNING",
                                                   "SKIPPED_STALE", "ENQUEUED"]
    assert report.occurrences[0].attempts_failed == 1 and report.ok
    assert report.deliveries == {1: 5, 2: 2} and report.duplicates == []  # retries are not duplicates


def test_a_rerun_after_dead_that_succeeds_is_succeeded():
    t = T0 + H
    ledger = Ledger([VersionRow("s", "acme", 1, "ACTIVE", cron("0 * * * *"), 1)], [ResultRow("s", "CREATE", 1, T0),
                     ResultRow("s", "RERUN", 1, t + 5000, (t + 5000,))],
                    [sent(1, t), sent(1, t, attempt=4, available=t + 5000)], [],
                    summarize([AttemptRow(oid(1, t), 3, "FAILED", t + 50),
                               AttemptRow(oid(1, t), 4, "SUCCEEDED", t + 6000)]),
                    [DeadLetterRow(oid(1, t), t + 60)])
    report = reconcile(ledger, T0, T0 + 90 * M)
    assert classes(report) == {t: "SUCCEEDED"}
    assert report.lag["acme"].max_ms == 5  # the rerun's lag counts from its own available_at


def update_ledger(invalidated: bool) -> tuple[Ledger, int]:
    """v1 every 10 min from T0; at T0+35m an UPDATE to every 15 min (v2). v1's 10:30 fire is due before the
    update but was never dispatched (grey zone); its 10:40 one was materialized and invalidated."""
    a2 = T0 + 35 * M
    v1 = VersionRow("s", "acme", 1, "ACTIVE", cron("*/10 * * * *"), 4,
                    pending=({"due_ms": T0 + 30 * M, "scheduled_for_ms": T0 + 30 * M, "rank": 0},
                             {"due_ms": T0 + 40 * M, "scheduled_for_ms": T0 + 40 * M, "rank": 0}))
    v2 = VersionRow("s", "acme", 2, "ACTIVE", cron("*/15 * * * *"), 7)
    results = [ResultRow("s", "CREATE", 1, T0), ResultRow("s", "UPDATE", 2, a2)]
    dispatches = [sent(1, T0 + 10 * M), sent(1, T0 + 20 * M), sent(2, T0 + 45 * M), sent(2, T0 + 60 * M)]
    events = [event("INVALIDATED", 1, T0 + 40 * M, a2)]
    if invalidated:
        events.append(event("INVALIDATED", 1, T0 + 30 * M, a2))
    return Ledger([v1, v2], results, dispatches, events), a2


def test_update_splits_at_the_accepted_instant_and_the_grey_zone_is_explained_by_events():
    ledger, a2 = update_ledger(invalidated=True)
    report = reconcile(ledger, T0, T0 + 61 * M)
    assert classes(report) == {T0 + 10 * M: "ENQUEUED", T0 + 20 * M: "ENQUEUED", T0 + 30 * M: "INVALIDATED",
                               T0 + 45 * M: "ENQUEUED", T0 + 60 * M: "ENQUEUED"}
    assert {c.expected.schedule_version for c in report.occurrences if c.expected.scheduled_for_ms > a2} == {2}
    assert report.ok  # v1's 10:40 is after the update: not expected, its INVALIDATED event explains nothing


def test_an_unexplained_grey_zone_fire_is_absent():
    ledger, _ = update_ledger(invalidated=False)
    report = reconcile(ledger, T0, T0 + 61 * M)
    assert [c.expected.occurrence_id for c in report.absent()] == [oid(1, T0 + 30 * M)]


def test_an_old_version_dispatched_after_the_update_is_unexpected():
    ledger, _ = update_ledger(invalidated=True)
    ledger.dispatches.append(sent(1, T0 + 40 * M))
    report = reconcile(ledger, T0, T0 + 61 * M)
    assert [u.occurrence_id for u in report.unexpected] == [oid(1, T0 + 40 * M)]


def test_a_fire_at_the_exact_update_instant_belongs_to_the_old_version():
    a2 = T0 + 30 * M
    versions = [VersionRow("s", "acme", 1, "ACTIVE", cron("*/10 * * * *"), 3), VersionRow("s", "acme", 2, "ACTIVE",
                cron("*/10 * * * *"), 5)]
    expected, _, _ = expected_occurrences(versions, [ResultRow("s", "CREATE", 1, T0), ResultRow("s", "UPDATE", 2, a2)],
                                          T0, T0 + 41 * M)
    assert [(e.schedule_version, e.scheduled_for_ms) for e in expected] == [
        (1, T0 + 10 * M), (1, T0 + 20 * M), (1, T0 + 30 * M), (2, T0 + 40 * M)]


def pause_ledger(resumed: bool) -> Ledger:
    """Every 10 min; paused at T0+25m with 10:30 materialized; resumed at T0+55m (v3) when `resumed`."""
    a2, a3 = T0 + 25 * M, T0 + 55 * M
    v1 = VersionRow("s", "acme", 1, "ACTIVE", cron("*/10 * * * *"), 3,
                    pending=({"due_ms": T0 + 30 * M, "scheduled_for_ms": T0 + 30 * M, "rank": 0},),
                    next_fire_ms=T0 + 40 * M)
    v2 = VersionRow("s", "acme", 2, "PAUSED", cron("*/10 * * * *"), 3, next_fire_ms=T0 + 40 * M)
    versions = [v1, v2]
    results = [ResultRow("s", "CREATE", 1, T0), ResultRow("s", "PAUSE", 2, a2)]
    events = [event("SKIPPED_PAUSED", 1, T0 + 30 * M, a2)]
    dispatches = [sent(1, T0 + 10 * M), sent(1, T0 + 20 * M)]
    if resumed:
        versions.append(VersionRow("s", "acme", 3, "ACTIVE", cron("*/10 * * * *"), 4))
        results.append(ResultRow("s", "RESUME", 3, a3))
        events += [event("SKIPPED_PAUSED", 3, T0 + 40 * M, a3), event("SKIPPED_PAUSED", 3, T0 + 50 * M, a3)]
        dispatches.append(sent(3, T0 + 60 * M))
    return Ledger(versions, results, dispatches, events)


def test_pause_and_resume_fires_are_skipped_paused_with_the_ids_the_engine_gave_them():
    report = reconcile(pause_ledger(resumed=True), T0, T0 + 61 * M)
    got = {c.expected.scheduled_for_ms: (c.classification, c.expected.occurrence_id) for c in report.occurrences}
    assert got == {T0 + 10 * M: ("ENQUEUED", oid(1, T0 + 10 * M)), T0 + 20 * M: ("ENQUEUED", oid(1, T0 + 20 * M)),
                   T0 + 30 * M: ("SKIPPED_PAUSED", oid(1, T0 + 30 * M)),
                   T0 + 40 * M: ("SKIPPED_PAUSED", oid(3, T0 + 40 * M)),
                   T0 + 50 * M: ("SKIPPED_PAUSED", oid(3, T0 + 50 * M)), T0 + 60 * M: ("ENQUEUED", oid(3, T0 + 60 * M))}
    assert report.ok


def test_a_pause_never_resumed_is_skipped_not_absent_and_a_dispatch_while_paused_is_unexpected():
    ledger = pause_ledger(resumed=False)
    report = reconcile(ledger, T0, T0 + 2 * H)
    paused = [c for c in report.occurrences if c.expected.origin == PAUSED]
    assert {c.classification for c in paused} == {"SKIPPED_PAUSED"} and len(paused) == 9  # 10:30 .. 11:50
    assert report.ok
    ledger.dispatches.append(sent(2, T0 + 70 * M))
    assert [u.scheduled_for_ms for u in reconcile(ledger, T0, T0 + 2 * H).unexpected] == [T0 + 70 * M]


def test_cancel_ends_the_expected_set_and_explains_the_pending_fire_due_before_it():
    a2 = T0 + 31 * M
    versions = [VersionRow("s", "acme", 1, "ACTIVE", cron("*/10 * * * *"), 4),
                VersionRow("s", "acme", 2, "CANCELED", cron("*/10 * * * *"), 4)]
    ledger = Ledger(versions, [ResultRow("s", "CREATE", 1, T0), ResultRow("s", "CANCEL", 2, a2),
                               ResultRow("s", "CANCEL", 2, a2 + M)],  # a repeated cancel changes nothing
                    [sent(1, T0 + 10 * M), sent(1, T0 + 20 * M)],
                    [event("CANCELED", 1, T0 + 30 * M, a2), event("CANCELED", 1, T0 + 40 * M, a2)])
    report = reconcile(ledger, T0, T0 + 3 * H)
    assert classes(report) == {T0 + 10 * M: "ENQUEUED", T0 + 20 * M: "ENQUEUED", T0 + 30 * M: "CANCELED"}
    assert report.ok


def test_max_fires_counts_across_versions_and_before_the_window():
    # every hour from T0 (anchor fires too), max 5: T0..T0+4h. v2 (UPDATE at T0+2.5h) inherits fired_count 4
    # (three dispatched + the 3h one materialized and invalidated), so it has one fire left.
    a2 = T0 + 150 * M
    v1 = VersionRow("s", "acme", 1, "ACTIVE", rate("every 1h", T0, max_fires=5), 4)
    v2 = VersionRow("s", "acme", 2, "COMPLETED", rate("every 1h", T0 + 10 * M, max_fires=5), 5)
    results = [ResultRow("s", "CREATE", 1, T0 - 1), ResultRow("s", "UPDATE", 2, a2)]
    expected, _, _ = expected_occurrences([v1, v2], results, T0, T0 + 10 * H)
    assert [(e.schedule_version, e.scheduled_for_ms) for e in expected] == [
        (1, T0), (1, T0 + H), (1, T0 + 2 * H), (2, T0 + 190 * M)]
    later, _, _ = expected_occurrences([v1], results[:1], T0 + 3 * H, T0 + 10 * H)  # 3 fires counted, not listed
    assert [e.scheduled_for_ms for e in later] == [T0 + 3 * H, T0 + 4 * H]


def test_end_at_and_start_at_bound_the_fires():
    spec = cron("0 * * * *", start_at_ms=T0 + 2 * H, end_at_ms=T0 + 4 * H)
    expected, _, _ = expected_occurrences([VersionRow("s", "acme", 1, "COMPLETED", spec, 3)],
                                          [ResultRow("s", "CREATE", 1, T0)], T0, T0 + 10 * H)
    assert [e.scheduled_for_ms for e in expected] == [T0 + 2 * H, T0 + 3 * H, T0 + 4 * H]


def instant(text: str) -> int:
    """An ISO instant in epoch ms; the expected UTC instants below are worked out by hand."""
    return to_ms(datetime.fromisoformat(text))


@pytest.mark.parametrize("gap, fires", [
    ("SKIP", ["2026-03-07T07:30:00+00:00", "2026-03-09T06:30:00+00:00"]),
    ("SHIFT", ["2026-03-07T07:30:00+00:00", "2026-03-08T07:00:00+00:00", "2026-03-09T06:30:00+00:00"]),
])
def test_spring_forward_gap_follows_dst_gap(gap, fires):
    spec = cron("30 2 * * *", "America/New_York", dst_gap=gap)
    created = instant("2026-03-06T12:00:00+00:00")
    expected, _, _ = expected_occurrences([VersionRow("s", "acme", 1, "ACTIVE", spec, 0)],
                                          [ResultRow("s", "CREATE", 1, created)], created,
                                          instant("2026-03-10T00:00:00+00:00"))
    assert [e.scheduled_for_ms for e in expected] == [instant(f) for f in fires]


@pytest.mark.parametrize("overlap, fires", [
    ("FIRST", ["2026-11-01T05:30:00+00:00"]),
    ("LAST", ["2026-11-01T06:30:00+00:00"]),
    ("BOTH", ["2026-11-01T05:30:00+00:00", "2026-11-01T06:30:00+00:00"]),
])
def test_fall_back_overlap_follows_dst_overlap_and_both_fires_are_distinct_occurrences(overlap, fires):
    spec = cron("30 1 * * *", "America/New_York", dst_overlap=overlap)
    created = instant("2026-10-31T12:00:00+00:00")
    versions = [VersionRow("s", "acme", 1, "ACTIVE", spec, 0)]
    results = [ResultRow("s", "CREATE", 1, created)]
    window = (instant("2026-11-01T00:00:00+00:00"), instant("2026-11-02T00:00:00+00:00"))
    expected, _, _ = expected_occurrences(versions, results, *window)
    assert [e.scheduled_for_ms for e in expected] == [instant(f) for f in fires]
    dispatched = [sent(1, instant(f)) for f in fires]
    report = reconcile(Ledger(versions, results, dispatched[:1]), *window)
    assert len(report.absent()) == len(fires) - 1  # with BOTH, the second one is its own expected occurrence


def test_lord_howe_half_hour_shift_and_a_day_that_never_existed():
    # Apia skipped 2011-12-30 entirely: a daily noon schedule has no fire that local day.
    spec = cron("0 12 * * *", "Pacific/Apia")
    created = to_ms(datetime(2011, 12, 27, tzinfo=timezone.utc))
    expected, _, _ = expected_occurrences([VersionRow("s", "acme", 1, "ACTIVE", spec, 0)],
                                          [ResultRow("s", "CREATE", 1, created)], created, created + 6 * 24 * H)
    local_days = [to_datetime(e.scheduled_for_ms).astimezone(ZoneInfo("Pacific/Apia")).day for e in expected]
    assert 30 not in local_days and 29 in local_days and 31 in local_days
    lord_howe = cron("0 2 * * *", "Australia/Lord_Howe", dst_gap="SHIFT")  # 02:00 -> 02:30 on 2026-10-04
    start = to_ms(datetime(2026, 10, 3, tzinfo=timezone.utc))
    expected, _, _ = expected_occurrences([VersionRow("s", "acme", 1, "ACTIVE", lord_howe, 0)],
                                          [ResultRow("s", "CREATE", 1, start)], start, start + 2 * 24 * H)
    assert any(to_datetime(e.scheduled_for_ms).minute == 30 for e in expected)


def test_misfire_events_by_id_and_by_range_and_catch_up_lag_apart():
    fires = [T0 + k * M for k in range(1, 11)]
    # Down from T0 to T0+10.5m with FIRE_ONCE: the first 6 missed one by one, 3 in one summarised range,
    # the latest replayed late in the catch-up lane.
    events = [event("MISSED", 1, t, T0 + 630_000) for t in fires[:6]]
    events.append(EventRow("s", 1, "MISSED", T0 + 630_000, None, None, fires[6], fires[8], 3))
    dispatches = [sent(1, fires[9], lag=30_000, catch_up=True)]
    ledger = Ledger([VersionRow("s", "acme", 1, "ACTIVE", cron("* * * * *"), 10)], [ResultRow("s", "CREATE", 1, T0)],
                    dispatches, events)
    report = reconcile(ledger, T0, T0 + 10 * M + 1)
    assert [classes(report)[t] for t in fires] == ["MISSED"] * 9 + ["ENQUEUED"]
    assert report.catch_up_lag["acme"].max_ms == 30_000 and "acme" not in report.lag


def test_flexible_jobs_expect_the_jitter_slot_and_lag_counts_from_it():
    spec = cron("0 * * * *", flexible_window_ms=600_000)
    t = T0 + H
    slot = to_ms(available_at(oid(1, t), to_datetime(t), timedelta(minutes=10)))
    versions = [VersionRow("s", "acme", 1, "ACTIVE", spec, 1)]
    results = [ResultRow("s", "CREATE", 1, T0)]
    expected, _, _ = expected_occurrences(versions, results, T0, T0 + 90 * M)
    assert [(e.scheduled_for_ms, e.available_at_ms) for e in expected] == [(t, slot)] and slot != t
    report = reconcile(Ledger(versions, results, [sent(1, t, available=slot, lag=7)]), T0, T0 + 90 * M)
    assert report.lag["acme"].p50_ms == 7


def test_trigger_and_backfill_results_are_expected_occurrences():
    trig, bf = T0 + 17 * M + 123, [T0 - 2 * H, T0 - H]
    versions = [VersionRow("s", "acme", 1, "ACTIVE", cron("0 * * * *"), 0)]
    results = [ResultRow("s", "CREATE", 1, T0), ResultRow("s", "TRIGGER", 1, trig, (trig,)),
               ResultRow("s", "BACKFILL", 1, T0 + 20 * M, tuple(bf))]
    expected, _, _ = expected_occurrences(versions, results, T0 - 3 * H, T0 + 30 * M)
    assert {(e.origin, e.scheduled_for_ms) for e in expected} == {(TRIGGER, trig), (BACKFILL, bf[0]), (BACKFILL, bf[1])}
    dispatched = [sent(1, trig), sent(1, bf[0], catch_up=True)]
    report = reconcile(Ledger(versions, results, dispatched), T0 - 3 * H, T0 + 30 * M)
    assert [c.expected.occurrence_id for c in report.absent()] == [oid(1, bf[1])]


def test_a_one_shot_created_just_after_its_instant_still_fires_but_not_one_long_past():
    at = T0 + 10 * M
    spec = make_spec("once", "2026-05-04T00:10:00Z")
    versions = [VersionRow("s", "acme", 1, "COMPLETED", spec, 1)]
    late, _, _ = expected_occurrences(versions, [ResultRow("s", "CREATE", 1, at + 200_000)], T0, T0 + H)
    assert [e.scheduled_for_ms for e in late] == [at]  # within max_lateness (300 s)
    too_late, _, _ = expected_occurrences(versions, [ResultRow("s", "CREATE", 1, at + 400_000)], T0, T0 + H)
    assert too_late == []


def test_overlap_skips_are_classified_and_quota_refused_schedules_expect_nothing():
    versions = [VersionRow("s", "acme", 1, "ACTIVE", cron("0 * * * *"), 2),
                VersionRow("q", "acme", 1, "PENDING", cron("0 * * * *"), 0)]
    ledger = Ledger(versions, [ResultRow("s", "CREATE", 1, T0)], [sent(1, T0 + H)],
                    [event("SKIPPED_OVERLAP", 1, T0 + 2 * H, T0 + 2 * H)])
    report = reconcile(ledger, T0, T0 + 150 * M)
    assert classes(report) == {T0 + H: "ENQUEUED", T0 + 2 * H: "SKIPPED_OVERLAP"}
    assert report.counts()["SKIPPED_OVERLAP"] == 1 and report.ok


def test_a_version_without_a_row_is_a_warning_and_its_dispatches_unexpected():
    versions = [VersionRow("s", "acme", 1, "ACTIVE", cron("0 * * * *"), 1)]
    results = [ResultRow("s", "CREATE", 1, T0), ResultRow("s", "UPDATE", 2, T0 + 90 * M)]
    report = reconcile(Ledger(versions, results, [sent(1, T0 + H), sent(2, T0 + 2 * H)]), T0, T0 + 3 * H)
    assert any("v2" in w and "no schedule_versions row" in w for w in report.warnings)
    assert [u.schedule_version for u in report.unexpected] == [2]


def test_paused_max_fires_ignores_the_pending_fires_dropped_by_the_pause():
    # max 3, every 10 min: 10:10 dispatched, 10:20 and 10:30 materialized when paused at 10:15 (fired_count 3).
    a2 = T0 + 15 * M
    spec = cron("*/10 * * * *", max_fires=3)
    v1 = VersionRow("s", "acme", 1, "ACTIVE", spec, 3, pending=(
        {"due_ms": T0 + 20 * M, "scheduled_for_ms": T0 + 20 * M, "rank": 0},
        {"due_ms": T0 + 30 * M, "scheduled_for_ms": T0 + 30 * M, "rank": 0}))
    v2 = VersionRow("s", "acme", 2, "PAUSED", spec, 3)
    expected, _, _ = expected_occurrences([v1, v2], [ResultRow("s", "CREATE", 1, T0), ResultRow("s", "PAUSE", 2, a2)],
                                          T0, T0 + 2 * H)
    assert [(e.origin, e.scheduled_for_ms) for e in expected] == [(SCHEDULE, T0 + 10 * M), (PAUSED, T0 + 20 * M),
                                                                  (PAUSED, T0 + 30 * M)]


def test_lag_percentiles_are_nearest_rank():
    stats = lag_stats(list(range(1, 101)))
    assert (stats.count, stats.p50_ms, stats.p99_ms, stats.max_ms) == (100, 50, 99, 100)
    assert lag_stats([]) is None and lag_stats([7]).p99_ms == 7


def test_attempt_steps_are_summarized_per_occurrence():
    steps = [AttemptRow("a", 1, "STARTED", 1), AttemptRow("a", 1, "FAILED", 2), AttemptRow("a", 2, "STARTED", 3),
             AttemptRow("a", 2, "HEARTBEAT", 4), AttemptRow("a", 2, "SUCCEEDED", 5), AttemptRow("b", 1, "STARTED", 1)]
    assert summarize(steps) == [AttemptSummary("a", "SUCCEEDED", 5, 1, 1, True),
                                AttemptSummary("b", None, None, 0, None, True)]
