"""An RRULE schedule end to end on the real broker: today's fire is dispatched on time, tomorrow's
EXDATE is skipped (never planned) and recorded as an EXCLUDED occurrence event right away."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from engine_harness import TOPOLOGY, SchedulerProcess, TopicReader, ensure_layout, occurrence_topics

from scheduler.control.client import SchedulerClient, make_spec
from scheduler.timing.occurrence_id import occurrence_id

TENANT = "cal"
ZONE = ZoneInfo("Europe/Berlin")
DAY_S = 86_400


def _ms(local: datetime) -> int:
    return int(local.replace(tzinfo=ZONE).timestamp() * 1000)


def test_an_rrule_schedule_fires_and_its_exdate_is_skipped_and_recorded(kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, [TENANT])
    # Horizon of three days: the EXDATE (tomorrow) lies inside it, so it is decided, and recorded, at creation.
    process = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "state", "a",
                               ("--horizon", str(3 * DAY_S))).start()
    client = SchedulerClient(kafka_bootstrap, unique_prefix, timeout_s=60)
    occurrences = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, [TENANT]), "Occurrence")
    events = TopicReader(kafka_bootstrap, [TOPOLOGY.topic_name("occurrence-events", unique_prefix)],
                         "OccurrenceEvent")
    try:
        today = (datetime.now(timezone.utc) + timedelta(seconds=20)).astimezone(ZONE).replace(
            tzinfo=None, microsecond=0)
        tomorrow, after = today + timedelta(days=1), today + timedelta(days=2)
        expression = f"DTSTART:{today:%Y%m%dT%H%M%S} RRULE:FREQ=DAILY EXDATE:{tomorrow:%Y%m%d}"
        client.create(TENANT, make_spec("rrule", expression, "Europe/Berlin"), schedule_id="rr")
        excluded_id = occurrence_id("rr", 1, tomorrow.replace(tzinfo=ZONE).astimezone(timezone.utc))

        got = events.until(lambda rs: any(r.record["kind"] == "EXCLUDED" for r in rs), timeout=60)
        recorded = [r.record for r in got if r.record["schedule_id"] == "rr" and r.record["kind"] == "EXCLUDED"]
        assert [(e["occurrence_id"], e["scheduled_for_ms"]) for e in recorded] == [(excluded_id, _ms(tomorrow))], \
            process.log_tail()
        assert recorded[0]["recorded_at_ms"] < _ms(tomorrow) and "EXDATE" in recorded[0]["reason"]
        assert client.occurrence(TENANT, excluded_id)["state"] == "CANCELED"

        fired = occurrences.until(lambda rs: any(r.record["schedule_id"] == "rr" for r in rs), timeout=90)
        mine = [r for r in fired if r.record["schedule_id"] == "rr"]
        assert [r.record["scheduled_for_ms"] for r in mine] == [_ms(today)], process.log_tail()
        assert mine[0].seen_ms >= _ms(today) - 1000 and not mine[0].record["catch_up"]

        state = client.get(TENANT, "rr")
        pending = {ref["scheduled_for_ms"] for ref in state["pending"]}
        assert _ms(after) in pending and _ms(tomorrow) not in pending, state
        # The pass after today's dispatch planned one more day (the horizon moved on); nothing recorded twice.
        assert state["next_fire_ms"] in (_ms(today + timedelta(days=3)), _ms(today + timedelta(days=4)))
        events.poll(2)
        again = [r for r in events.received if r.record["schedule_id"] == "rr" and r.record["kind"] == "EXCLUDED"]
        assert len(again) == 1
    finally:
        for closeable in (client, occurrences, events):
            closeable.close()
        if process.alive():
            process.terminate()
