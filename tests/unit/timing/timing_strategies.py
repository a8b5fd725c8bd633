"""Hypothesis strategies the property tests of the time core share: DST-heavy zones, instants near
their offset changes, and the gap and overlap options."""
from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import strategies as st
from timing_reference import UTC, transitions

ZONES = (
    "America/New_York",
    "Europe/London",
    "Europe/Dublin",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Havana",
    "Africa/Casablanca",
    "Antarctica/Troll",
    "Pacific/Apia",
    "America/Sao_Paulo",
    "Asia/Tehran",
    "Asia/Tokyo",
)
# What the spec offers for wall times that do not exist (gap) or happen twice (overlap).
gaps = st.sampled_from(["skip", "shift"])
overlaps = st.sampled_from(["first", "last", "both"])


@st.composite
def near_transition(draw) -> tuple[str, datetime]:
    zone = draw(st.sampled_from(ZONES))
    found = transitions(zone)
    if not found or draw(st.integers(0, 4)) == 0:
        year = draw(st.integers(2000, 2037))
        base = datetime(year, 1, 1, tzinfo=UTC) + timedelta(days=draw(st.integers(0, 364)))
    else:
        base = draw(st.sampled_from(found))
    return zone, base + timedelta(seconds=draw(st.integers(-36 * 3600, 36 * 3600)))
