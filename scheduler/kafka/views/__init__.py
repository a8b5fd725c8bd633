"""Materialized views of the compacted topics the control plane reads from.

A view follows a compacted topic (read_committed, every partition from the
beginning, in a background thread) into an in-memory dict, so reads (HTTP GETs,
`scheduler schedules get`) never scan a topic per request. Every entry of the
topic is held in memory: for the schedules topic that is one ScheduleState per
schedule (a few hundred bytes plus the spec's payload), so around a million
schedules fit in 1-2 GiB; the occurrence-status view is bounded by the changelog's
7-day retention. Beyond that a view must be sharded (per tenant topic) or moved
to a local store.

One module per view kind: `compacted` (the following itself), `schedules`, `occurrences`,
`tenants`, `api_keys`; their names are importable from here. `writer` (ViewWriter) is the base of an
owner that writes the topic its view follows.
"""
from scheduler.kafka.views.api_keys import ApiKeyView
from scheduler.kafka.views.compacted import CompactedView, Record, ViewUnavailable, watermarks
from scheduler.kafka.views.occurrences import OccurrenceView
from scheduler.kafka.views.schedules import HIDDEN_STATES, LIVE_STATES, ScheduleView
from scheduler.kafka.views.tenants import TenantView

__all__ = [
    "HIDDEN_STATES", "LIVE_STATES", "ApiKeyView", "CompactedView", "OccurrenceView", "Record", "ScheduleView",
    "TenantView", "ViewUnavailable", "watermarks",
]
