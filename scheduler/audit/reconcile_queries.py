"""The SQL of a reconcile classified in PostgreSQL (run by scheduler/audit/reconcile_sql.py).

Placeholders: `{dispatches}`, `{attempts}`, `{events}` are the ledger's tables, `{expected}` the bucket's
temporary table of expected occurrences; `%(from)s` / `%(to)s` are the bucket's bounds (the whole range's
for the statements that read it once). The rules are reconcile._classify's, first match wins
(docs/reconcile.md, Classification).
"""
from __future__ import annotations

from scheduler.audit.expected import PAUSED
from scheduler.audit.ledger import FINAL_STEPS
from scheduler.audit.reconcile import ABSENT, DEAD, ENQUEUED, FAILED, RETRIED, RUNNING, SKIPPED_PAUSED

# Tables of the whole range; each bucket adds its rows. The bucket's own tables (rc_expected_<n>, rc_sent,
# rc_candidates) are made and emptied by the reconciler.
RANGE_DDL = """
CREATE TEMP TABLE rc_dead (occurrence_id text, dead_at_ms bigint);
CREATE TEMP TABLE rc_dead_final (occurrence_id text, dead_enc bigint);
CREATE TEMP TABLE rc_ranges (schedule_id text, kind text, range_first_ms bigint, range_last_ms bigint,
    recorded_at_ms bigint);
CREATE TEMP TABLE rc_sent (occurrence_id text, schedule_id text, schedule_version bigint, scheduled_for_ms bigint,
    one_key boolean, deliveries bigint, max_attempt integer);
CREATE TEMP TABLE rc_deliveries (deliveries bigint, ids bigint);
CREATE TEMP TABLE rc_lags (catch_up boolean, lag_ms bigint, dispatches bigint);
CREATE TEMP TABLE rc_classified (seq bigint, occurrence_id text, schedule_id text, schedule_version bigint,
    scheduled_for_ms bigint, available_at_ms bigint, origin text, classification text, deliveries bigint,
    failed_attempts bigint, key_matches boolean);
CREATE TEMP TABLE rc_candidates (occurrence_id text, schedule_id text, schedule_version bigint,
    scheduled_for_ms bigint);
CREATE TEMP TABLE rc_unexpected (occurrence_id text, schedule_id text, schedule_version bigint,
    scheduled_for_ms bigint, deliveries bigint);
CREATE TEMP TABLE rc_duplicates (occurrence_id text, attempt integer, deliveries bigint);
CREATE TEMP TABLE rc_mismatches (occurrence_id text);
"""
RANGE_TABLES = ("rc_dead", "rc_dead_final", "rc_ranges", "rc_sent", "rc_deliveries", "rc_lags", "rc_classified",
                "rc_candidates", "rc_unexpected", "rc_duplicates", "rc_mismatches")
# What each bucket adds to the range's answers, read by the report (streamed_report.py).
ANSWER_TABLES = ("rc_classified", "rc_unexpected", "rc_duplicates", "rc_mismatches", "rc_deliveries", "rc_lags")
EXPECTED_COLUMNS = ("(seq bigint, occurrence_id text, schedule_id text, schedule_version bigint, "
                    "scheduled_for_ms bigint, available_at_ms bigint, origin text)")


def in_range(alias: str = "") -> str:
    """The rows of the tenant (and schedule) scheduled in [from, to): what a bucket reads."""
    a = f"{alias}." if alias else ""
    return (f"{a}tenant = %(tenant)s AND {a}scheduled_for_ms >= %(from)s AND {a}scheduled_for_ms < %(to)s AND "
            f"(%(schedule)s::text IS NULL OR {a}schedule_id = %(schedule)s)")


_ONLY = "(%(schedule)s::text IS NULL OR schedule_id = %(schedule)s)"
_IN_RANGE = in_range()
EVENTS_READ = ("tenant = %(tenant)s AND kind = ANY(%(kinds)s) AND ((scheduled_for_ms >= %(from)s AND "
               "scheduled_for_ms < %(to)s) OR (range_last_ms >= %(from)s AND range_first_ms < %(to)s)) AND " + _ONLY)

# -- once per range -----------------------------------------------------------------------------------

RANGES = ("INSERT INTO rc_ranges SELECT schedule_id, kind, range_first_ms, range_last_ms, recorded_at_ms "
          "FROM {events} WHERE occurrence_id IS NULL AND range_first_ms IS NOT NULL "
          f"AND range_last_ms IS NOT NULL AND {EVENTS_READ}")
# A final report is the latest by time, ties to the greater kind (the in-memory max over (time, kind)):
# encoded as time * len + rank of the kind in sorted order, so max() picks it.
FINALS = tuple(sorted((*FINAL_STEPS, DEAD)))
DEAD_FINAL = (f"INSERT INTO rc_dead_final SELECT occurrence_id, max(dead_at_ms) * {len(FINALS)} + "
              f"{FINALS.index(DEAD)} FROM rc_dead GROUP BY occurrence_id")

# -- per bucket ---------------------------------------------------------------------------------------

# A paused fire carries the id the engine gave it in its SKIPPED_PAUSED event (old or resumed version).
PAUSED_IDS = (
    "UPDATE {expected} e SET occurrence_id = p.occurrence_id, schedule_version = p.schedule_version "
    "FROM (SELECT DISTINCT ON (schedule_id, scheduled_for_ms) schedule_id, scheduled_for_ms, occurrence_id, "
    "schedule_version FROM {events} WHERE kind = %(paused)s AND occurrence_id IS NOT NULL AND "
    f"scheduled_for_ms IS NOT NULL AND {EVENTS_READ} ORDER BY schedule_id, scheduled_for_ms, "
    "recorded_at_ms DESC) p WHERE e.origin = 'PAUSED' AND p.schedule_id = e.schedule_id "
    "AND p.scheduled_for_ms = e.scheduled_for_ms")
# Dispatches per id: one pass; `one_key` says whether every row of the id names the same
# (schedule, version, instant), which the recipe check relies on.
SENT = ("INSERT INTO rc_sent SELECT occurrence_id, min(schedule_id), min(schedule_version), min(scheduled_for_ms), "
        "min(schedule_id) = max(schedule_id) AND min(schedule_version) = max(schedule_version) AND "
        "min(scheduled_for_ms) = max(scheduled_for_ms), count(*), max(coalesce(attempt, 1)) "
        f"FROM {{dispatches}} WHERE {_IN_RANGE} GROUP BY occurrence_id")
DELIVERIES = "INSERT INTO rc_deliveries SELECT deliveries, count(*) FROM rc_sent GROUP BY 1"
# Enqueue lag as counts per value: they add up over buckets, and the range's percentiles are read from them
# (streamed_report.py) without sorting the range's dispatches.
LAGS = ("INSERT INTO rc_lags SELECT coalesce(catch_up, false), (extract(epoch from kafka_timestamp) * 1000)::bigint "
        f"- available_at_ms, count(*) FROM {{dispatches}} WHERE {_IN_RANGE} GROUP BY 1, 2")

_FINAL = "greatest(st.final_enc, d.dead_enc)"
_RANGE_KIND = ("(SELECT r.kind FROM rc_ranges r WHERE r.schedule_id = e.schedule_id AND e.scheduled_for_ms "
               "BETWEEN r.range_first_ms AND r.range_last_ms ORDER BY r.recorded_at_ms DESC LIMIT 1)")
_RANKS = " ".join(f"WHEN '{kind}' THEN at_ms * {len(FINALS)} + {n}" for n, kind in enumerate(FINALS)
                  if kind in FINAL_STEPS)
CLASSIFY = f"""
INSERT INTO rc_classified
SELECT e.seq, e.occurrence_id, e.schedule_id, e.schedule_version, e.scheduled_for_ms, e.available_at_ms, e.origin,
  CASE
    WHEN e.origin = '{PAUSED}' THEN coalesce(ev.kind, {_RANGE_KIND}, '{SKIPPED_PAUSED}')
    WHEN s.deliveries IS NULL THEN coalesce(ev.kind, {_RANGE_KIND}, '{ABSENT}')
    WHEN {_FINAL} IS NOT NULL THEN (ARRAY[{", ".join(f"'{k}'" for k in FINALS)}])[mod({_FINAL}, {len(FINALS)}) + 1]
    WHEN ev.kind IS NOT NULL THEN ev.kind
    WHEN st.max_failed IS NOT NULL THEN CASE WHEN s.max_attempt > st.max_failed THEN '{RETRIED}' ELSE '{FAILED}' END
    WHEN st.started THEN '{RUNNING}'
    ELSE '{ENQUEUED}'
  END,
  coalesce(s.deliveries, 0),
  CASE WHEN e.origin <> '{PAUSED}' AND s.deliveries IS NOT NULL
        AND ({_FINAL} IS NOT NULL OR ev.kind IS NOT NULL OR st.max_failed IS NOT NULL)
       THEN coalesce(st.failed, 0) ELSE 0 END,
  s.one_key AND s.schedule_id = e.schedule_id AND s.schedule_version = e.schedule_version
    AND s.scheduled_for_ms = e.scheduled_for_ms
FROM {{expected}} e
LEFT JOIN rc_sent s USING (occurrence_id)
LEFT JOIN (SELECT occurrence_id, max(CASE kind {_RANKS} END) AS final_enc,
                  count(*) FILTER (WHERE kind = %(failed)s) AS failed,
                  max(attempt) FILTER (WHERE kind = %(failed)s) AS max_failed,
                  coalesce(bool_or(kind = ANY(%(live)s)), false) AS started
           FROM {{attempts}} WHERE {_IN_RANGE} GROUP BY occurrence_id) st USING (occurrence_id)
LEFT JOIN (SELECT DISTINCT ON (occurrence_id) occurrence_id, kind FROM {{events}}
           WHERE occurrence_id IS NOT NULL AND {EVENTS_READ}
           ORDER BY occurrence_id, recorded_at_ms DESC) ev USING (occurrence_id)
LEFT JOIN rc_dead_final d USING (occurrence_id)
"""
# A dispatched id no recurrence or manual command expects (or a paused fire's) is UNEXPECTED, named by its
# first (instant, version) key. Such ids, and expected ids dispatched under another key, are the candidates
# for the recipe check.
UNEXPECTED_CANDIDATES = (
    "INSERT INTO rc_candidates SELECT s.occurrence_id, NULL, NULL, NULL FROM rc_sent s WHERE NOT EXISTS "
    f"(SELECT 1 FROM {{expected}} e WHERE e.occurrence_id = s.occurrence_id AND e.origin <> '{PAUSED}')")
UNEXPECTED = f"""
INSERT INTO rc_unexpected
SELECT DISTINCT ON (d.occurrence_id) d.occurrence_id, d.schedule_id, d.schedule_version, d.scheduled_for_ms,
       s.deliveries
FROM rc_candidates c JOIN rc_sent s USING (occurrence_id) JOIN {{dispatches}} d USING (occurrence_id)
WHERE {in_range("d")}
ORDER BY d.occurrence_id, d.scheduled_for_ms, d.schedule_version"""
OTHER_KEY_CANDIDATES = (
    "INSERT INTO rc_candidates SELECT e.occurrence_id, e.schedule_id, e.schedule_version, e.scheduled_for_ms "
    "FROM {expected} e JOIN rc_sent s USING (occurrence_id) WHERE NOT (s.one_key AND s.schedule_id = e.schedule_id "
    "AND s.schedule_version = e.schedule_version AND s.scheduled_for_ms = e.scheduled_for_ms)")
# One id and attempt delivered more than once: only ids delivered more than once can be one.
DUPLICATES = f"""
INSERT INTO rc_duplicates
SELECT d.occurrence_id, coalesce(d.attempt, 1), count(*)
FROM {{dispatches}} d JOIN rc_sent s ON s.occurrence_id = d.occurrence_id AND s.deliveries > 1
WHERE {in_range("d")}
GROUP BY 1, 2 HAVING count(*) > 1"""
# Only a dispatch whose (schedule, version, instant) is not its expected id's needs the recipe: PostgreSQL
# finds those few, the time core recomputes their ids.
MISMATCH_CANDIDATES = (
    "SELECT DISTINCT d.occurrence_id, d.schedule_id, d.schedule_version, d.scheduled_for_ms "
    f"FROM {{dispatches}} d JOIN rc_candidates c USING (occurrence_id) WHERE {in_range('d')} "
    "AND (c.schedule_id IS NULL OR "
    "(d.schedule_id, d.schedule_version, d.scheduled_for_ms) IS DISTINCT FROM "
    "(c.schedule_id, c.schedule_version, c.scheduled_for_ms))")
