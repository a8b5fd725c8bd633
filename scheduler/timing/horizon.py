"""The search horizon: how far the time core walks the calendar looking for a schedule's next fire.

Cron and RRULE fires are found by walking matching local days. A spec whose every matching day
loses its wall times to DST gaps (`30 1 * 3 0L` in Europe/Dublin with dst_gap=skip) would have
that walk go on to year 9998, tens of seconds of CPU. Every walk therefore stops after
SEARCH_HORIZON_YEARS years without a fire, counted from where the search starts or from the
last fire it found: a schedule whose next fire lies further away has no more fires, and a spec
with no fire within the horizon at all is rejected at validation (`INVALID_SPEC`).

Why 50 years: the sparsest day a cron expression can name is a February 29 that falls on a
given weekday (`0 0 * 2 MON#5`), and two of those can be 40 years apart (2072 and 2112: 2100
is not a leap year); an RRULE every 4 years (`FREQ=YEARLY;INTERVAL=4`) on February 29 waits 8.
50 years keeps those with a margin, while walking 50 fire-less years stays cheap: at most about
50 per-year transition tables of the zone (a few milliseconds each, built once per zone and
year and cached) and the few matching days of each year.
"""
from __future__ import annotations

SEARCH_HORIZON_YEARS = 50
# In seconds, by the mean Gregorian year (365.2425 days): 50 calendar years from any instant.
SEARCH_HORIZON_S = SEARCH_HORIZON_YEARS * 31_556_952
