"""Console pieces without a broker: sessions, the metrics reader's arithmetic, the ledger's names, DST rows."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from scheduler.api.keys import KeyStore, create_key, revoke_key
from scheduler.audit.history import schema_name
from scheduler.console.actions import _edited, _safe_next
from scheduler.console.engine_metrics import _delta, figures, histogram_quantile, parse
from scheduler.console.fire_rows import fire_rows
from scheduler.console.occurrence_stats import OccurrenceStats, p99
from scheduler.console.sessions import Sessions, csrf_ok
from scheduler.console.web import PageError
from scheduler.control.client import make_spec
from scheduler.timing import instants
from scheduler.timing.fires import fires_between, instants_between
from scheduler.timing.spec_record import compile_spec

METRICS = """# TYPE scheduler_schedule_lag_seconds histogram
scheduler_schedule_lag_seconds_bucket{lane="strict",le="0.1"} 90.0
scheduler_schedule_lag_seconds_bucket{lane="strict",le="1.0"} 99.0
scheduler_schedule_lag_seconds_bucket{lane="strict",le="10.0"} 100.0
scheduler_schedule_lag_seconds_bucket{lane="strict",le="+Inf"} 100.0
scheduler_schedule_lag_seconds_count{lane="strict"} 100.0
scheduler_schedule_lag_seconds_sum{lane="strict"} 20.0
# TYPE scheduler_due_backlog gauge
scheduler_due_backlog{partition="0"} 3.0
scheduler_due_backlog{partition="1"} 4.0
# TYPE scheduler_tenant_held_back counter
scheduler_tenant_held_back_total{tenant="slow"} 12.0
"""


def test_sessions_follow_the_key_store(tmp_path):
    path = tmp_path / "keys.json"
    key = create_key(path, "acme")
    sessions = Sessions(KeyStore(path), ttl_s=60)
    assert sessions.login("sk_bad_key") is None
    session = sessions.login(key, now=1000.0)
    assert session is not None and session.key == key
    found = sessions.find(session.token, now=1001.0)
    assert found is not None and found[1].tenant == "acme"
    assert sessions.find(session.token, now=1061.0) is None  # expired
    assert csrf_ok(session, session.csrf) and not csrf_ok(session, "x") and not csrf_ok(session, None)
    fresh = sessions.login(key)
    assert fresh is not None and sessions.find(fresh.token) is not None
    revoke_key(path, found[1].key_id)
    assert sessions.find(fresh.token) is None  # a revoked key ends its sessions
    assert sessions.find(None) is None and sessions.find("nope") is None


def test_histogram_quantile_interpolates_as_prometheus_does():
    buckets = [(0.1, 90.0), (1.0, 99.0), (10.0, 100.0), (float("inf"), 100.0)]
    assert histogram_quantile(0.99, buckets) == pytest.approx(1.0)
    assert abs(histogram_quantile(0.5, buckets) - 0.1 * 50 / 90) < 1e-9
    assert histogram_quantile(0.99, [(1.0, 0.0), (float("inf"), 0.0)]) is None
    assert histogram_quantile(0.99, [(1.0, 1.0), (float("inf"), 100.0)]) == 1.0  # in +Inf: the last bound


def test_engine_figures_from_scrapes():
    first = parse(METRICS)
    later = parse(METRICS.replace('le="10.0"} 100.0', 'le="10.0"} 200.0').replace('le="+Inf"} 100.0', 'le="+Inf"} 200.0')
                  .replace('"slow"} 12.0', '"slow"} 20.0'))
    whole = figures(first, first, 1, [], 0.0)
    assert whole.lag_p99_s["strict"] == pytest.approx(1.0) and whole.backlog == 7 and whole.held_back == {"slow": 12.0}
    windowed = figures(later, _delta(later, first), 1, [], 30.0)
    # Between the scrapes 100 more entries, all between 1 s and 10 s late.
    assert 9.0 < windowed.lag_p99_s["strict"] <= 10.0 and windowed.held_back == {"slow": 8.0}
    assert windowed.lag_p99_s["catch_up"] is None


def test_ledger_schema_name_follows_the_prefix():
    assert schema_name("sched") == "sched" and schema_name("Prod-EU.1") == "prod_eu_1"


def test_occurrence_stats_count_states_and_first_start_lag():
    stats = OccurrenceStats()
    base = {"occurrence_id": "o1", "schedule_id": "s", "tenant": "acme", "scheduled_for_ms": 10_000,
            "state": "ENQUEUED", "attempt": 1, "attempts": []}
    stats.apply("o1", base)
    assert stats.figures("acme").backlog == 1 and stats.figures("acme").samples == 0
    started = {**base, "state": "RUNNING", "attempts": [{"attempt": 1, "kind": "STARTED", "at_ms": 12_500}]}
    stats.apply("o1", started)
    stats.apply("o1", {**started, "state": "SUCCEEDED"})  # the same first start is sampled once
    got = stats.figures("acme")
    assert got.backlog == 0 and got.by_state["SUCCEEDED"] == 1 and got.samples == 1 and got.start_lag_p99_s == 2.5
    stats.apply("o1", None)
    assert stats.figures("acme").by_state["SUCCEEDED"] == 0 and stats.figures("globex").samples == 0
    assert p99([float(i) for i in range(1, 101)]) == 99.0 and p99([]) is None


def test_instants_between_agrees_with_fires_between():
    after = datetime(2026, 3, 28, tzinfo=timezone.utc)
    until = datetime(2026, 3, 30, tzinfo=timezone.utc)
    for spec in (make_spec("cron", "*/30 1-3 * * *", "Europe/Paris", dst_gap="SHIFT"),
                 make_spec("cron", "0 * * * *", "UTC", max_fires=5), make_spec("rate", "every 7m", "UTC", anchor_at_ms=0)):
        compiled = compile_spec(spec)
        expected = [instants.to_ms(f.scheduled_for) * 1000 for f in fires_between(compiled, after, until, None, 2)]
        got = instants_between(compiled, instants.to_ms(after) * 1000, instants.to_ms(until) * 1000, 2)
        assert got == expected


def test_fire_rows_flag_the_spring_forward_fire():
    now = int(datetime(2026, 3, 27, tzinfo=timezone.utc).timestamp() * 1000)
    rows = fire_rows(make_spec("cron", "30 2 * * *", "Europe/Paris", dst_gap="SHIFT"), 0, now, 4)
    flagged = [r for r in rows if r.dst_affected]
    assert [r.local.strftime("%d %H:%M") for r in rows] == ["27 02:30", "28 02:30", "29 03:00", "30 02:30"]
    assert [r.dst_rule for r in flagged] == ["gap_shifted"] and flagged[0].offset == "UTC+02:00"


def test_log_in_redirects_stay_in_the_console_and_update_fields_are_checked():
    assert _safe_next("/ui/tenants/acme") == "/ui/tenants/acme"
    for elsewhere in ("https://evil.example/", "//evil.example/ui/", "/v1/tenants", ""):
        assert _safe_next(elsewhere) == "/ui/tenants"
    spec = make_spec("cron", "0 * * * *", "UTC")
    edited = _edited(spec, {"expression": " 30 * * * * ", "time_zone": "", "flexible_window_ms": "60000"})
    assert edited["expression"] == "30 * * * *" and edited["time_zone"] == "UTC" and edited["flexible_window_ms"] == 60_000
    with pytest.raises(PageError):
        _edited(spec, {"flexible_window_ms": "-5"})


def test_the_schedule_page_shows_spec_durations_and_instants_the_human_way():
    from scheduler.console.web import _templates, spec_field_text

    assert spec_field_text(300_000, "max_lateness_ms") == "5m (300000 ms)"
    assert spec_field_text(0, "flexible_window_ms") == "0s (0 ms)"
    assert spec_field_text(1_767_225_600_000, "start_at_ms") == "2026-01-01 00:00:00.000Z"
    assert spec_field_text(None, "end_at_ms") == "—" and spec_field_text("SKIP", "dst_gap") == "SKIP"
    assert _templates().filters["spec_field"] is spec_field_text
