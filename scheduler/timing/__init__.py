"""Time semantics, pure: schedule specs -> exact UTC fire instants (no clock reads, no Kafka).

Contract and recipes: docs/time-semantics.md.
"""
from scheduler.timing.fires import Fire, next_fire, next_fires
from scheduler.timing.jitter import available_at
from scheduler.timing.misfire import MisfireDecision, resolve_misfire
from scheduler.timing.occurrence_id import occurrence_id
from scheduler.timing.spec import ScheduleSpec, SpecError, parse_spec

__all__ = [
    "Fire",
    "MisfireDecision",
    "ScheduleSpec",
    "SpecError",
    "available_at",
    "next_fire",
    "next_fires",
    "occurrence_id",
    "parse_spec",
    "resolve_misfire",
]
