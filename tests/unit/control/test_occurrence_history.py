"""`scheduler occurrences list` without a broker: history rows from the view, filters, the table people read."""
from __future__ import annotations

from scheduler.control.cli_common import table_text
from scheduler.control.occurrence_cli import _rows_text
from scheduler.control.occurrence_history import ledger_row, select, view_row


def status(oid: str, at: int, state: str = "SUCCEEDED", started: int | None = None, attempt: int = 1) -> dict:
    attempts = [] if started is None else [{"kind": "HEARTBEAT", "at_ms": started + 9}, {"kind": "STARTED",
                                                                                          "at_ms": started}]
    return {"occurrence_id": oid, "scheduled_for_ms": at, "state": state, "attempt": attempt, "attempts": attempts}


def test_a_view_row_takes_the_lag_from_the_first_start_and_none_before_it():
    assert view_row(status("o1", 1_000, started=1_250, attempt=2)) == {
        "occurrence_id": "o1", "scheduled_for_ms": 1_000, "status": "SUCCEEDED", "attempts": 2, "lag_ms": 250}
    assert view_row(status("o2", 1_000, "ENQUEUED"))["lag_ms"] is None
    assert view_row(status("o3", 1_000, started=900))["lag_ms"] == 0  # a worker's clock behind the scheduler's


def test_a_ledger_row_keeps_only_the_fields_a_view_row_has():
    row = {"occurrence_id": "o1", "scheduled_for_ms": 1, "status": "DEAD", "attempts": 3, "lag_ms": 5,
           "dispatches": 3, "last_kind": "FAILED", "dead": True, "available_at_ms": 1, "enqueued_at_ms": 6}
    assert ledger_row(row) == {"occurrence_id": "o1", "scheduled_for_ms": 1, "status": "DEAD", "attempts": 3,
                               "lag_ms": 5}


def test_select_filters_by_since_and_status_newest_first_up_to_the_limit():
    rows = [view_row(status(f"o{i}", i * 1_000, "DEAD" if i % 2 else "SUCCEEDED")) for i in range(10)]
    assert [r["occurrence_id"] for r in select(rows, None, None, 3)] == ["o9", "o8", "o7"]
    assert [r["occurrence_id"] for r in select(rows, 6_000, None, 50)] == ["o9", "o8", "o7", "o6"]
    assert [r["occurrence_id"] for r in select(rows, 4_000, "DEAD", 2)] == ["o9", "o7"]
    assert select(rows, 99_000, None, 50) == []


def test_the_table_aligns_its_columns_and_shows_durations_and_instants_the_human_way():
    rows = [{**view_row(status("o-long-id", 0, started=90_000)), "source": "views"},
            {**view_row(status("o2", 60_000, "ENQUEUED")), "source": "views"}]
    lines = _rows_text(rows).splitlines()
    assert lines[0].split() == ["OCCURRENCE", "SCHEDULED", "FOR", "STATUS", "ATTEMPTS", "LAG", "SOURCE"]
    assert lines[1].split() == ["o-long-id", "1970-01-01T00:00:00Z", "SUCCEEDED", "1", "1m30s", "views"]
    assert lines[2].split() == ["o2", "1970-01-01T00:01:00Z", "ENQUEUED", "1", "-", "views"]
    assert len({line.index(line.split()[1]) for line in lines[1:]}) == 1  # aligned
    assert _rows_text([]) == "(no occurrences)" and table_text(("A",), [], "none") == "none"
