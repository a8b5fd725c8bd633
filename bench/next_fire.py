"""Benchmark: our next_fire against croniter's get_next (cron) and dateutil's rrule.after (RRULE),
same machine, one run, interleaved.

Run:  .venv/bin/python bench/next_fire.py [--rounds 15] [--calls 300]

For each expression both implementations compute the next fire after the same
series of start instants (spread over 2026, crossing DST changes). Each round
times `calls` calls of ours, then `calls` of croniter (constructing the iterator
is part of croniter's cost, as it is for a scheduler computing one next fire per
schedule); the per-call medians over rounds and their ratio are printed as a
markdown table. Specs are parsed once, as the engine does (parse at create time).

RRULE schedules (DTSTART in 2024, then again in the first week of 2026; starts
spread over 2026; dateutil's cost grows with the distance from DTSTART): ours against one
dateutil `rrule` per schedule, built once with an aware DTSTART in the zone, its
`after(start)` called afresh for each start (dateutil then walks from DTSTART;
its `cache=True` is not used: a scheduler holding thousands of rules would keep
every instance ever produced), and against `rrulestr(...)` parsed per call. The
figure for dateutil does not include applying our DST contract (it returns
non-existent wall times as they are), nor EXDATE handling.

Ours steps from its last answer (a per-spec memo: an `after` before the last fire returned
has that fire next), which the ascending starts here, like a scheduler's cursor, often
hit; the "shuffled" column times the same starts in random order, where it never helps.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from croniter import croniter
from dateutil.rrule import rrulestr

from scheduler.timing.fires import next_fire
from scheduler.timing.spec import parse_spec

# (ours, croniter's spelling of the same expression, zone); croniter writes "last Friday" only as L5.
CASES = [
    ("*/5 * * * *", "*/5 * * * *", "UTC"),
    ("30 2 * * *", "30 2 * * *", "America/New_York"),
    ("0 9 * * MON-FRI", "0 9 * * MON-FRI", "Asia/Tokyo"),
    ("0 0 L * *", "0 0 L * *", "Europe/London"),
    ("0 12 * * FRI#2", "0 12 * * FRI#2", "UTC"),
    ("15 10 * * 5L", "15 10 * * L5", "Australia/Lord_Howe"),
]


# (our expression, zone); dateutil gets the RRULE line with DTSTART as an aware datetime in the zone.
RRULE_CASES = [
    ("DTSTART:20240102T090000 RRULE:FREQ=DAILY", "America/New_York"),
    ("DTSTART:20240109T090000 RRULE:FREQ=MONTHLY;BYDAY=2TU", "Europe/Berlin"),
    ("DTSTART:20240101T080000 RRULE:FREQ=WEEKLY;INTERVAL=3;BYDAY=MO", "Australia/Lord_Howe"),
    ("DTSTART:20240101T170000 RRULE:FREQ=MONTHLY;BYMONTH=3,6,9,12;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
     "America/Havana"),
    ("DTSTART:20240131T120000 RRULE:FREQ=MONTHLY;BYMONTHDAY=28,29,30,31;BYSETPOS=-1", "Pacific/Chatham"),
    ("DTSTART:20240102T093000 RRULE:FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", "Asia/Tokyo"),
]


def _starts(calls: int) -> list[datetime]:
    first = datetime(2026, 1, 1, 0, 0, 7, tzinfo=timezone.utc)
    step = timedelta(days=365) / calls
    return [first + i * step for i in range(calls)]


def _time_ours(spec, starts) -> float:
    began = time.perf_counter()
    for start in starts:
        next_fire(spec, start)
    return (time.perf_counter() - began) / len(starts)


def _time_croniter(expression, zone, starts) -> tuple[float, float]:
    """(new iterator + get_next, get_next alone on prebuilt iterators), per call."""
    local = [s.astimezone(zone) for s in starts]
    began = time.perf_counter()
    for start in local:
        croniter(expression, start).get_next(datetime)
    with_construction = (time.perf_counter() - began) / len(starts)
    iterators = [croniter(expression, start) for start in local]
    began = time.perf_counter()
    for iterator in iterators:
        iterator.get_next(datetime)
    return with_construction, (time.perf_counter() - began) / len(starts)


def _dateutil_rule(expression: str, zone: ZoneInfo):
    dtstart_text, rule_text = expression.split()
    dtstart = datetime.strptime(dtstart_text.split(":", 1)[1], "%Y%m%dT%H%M%S").replace(tzinfo=zone)
    return rule_text.split(":", 1)[1], dtstart


def _time_dateutil(expression, zone, starts) -> tuple[float, float]:
    """(rrule.after afresh on one prebuilt rule, rrulestr parse + after), per call."""
    text, dtstart = _dateutil_rule(expression, zone)
    rule = rrulestr(text, dtstart=dtstart)
    began = time.perf_counter()
    for start in starts:
        rule.after(start)
    after_only = (time.perf_counter() - began) / len(starts)
    began = time.perf_counter()
    for start in starts:
        rrulestr(text, dtstart=dtstart).after(start)
    return after_only, (time.perf_counter() - began) / len(starts)


def _medians(spec, theirs, rounds: int, starts: list[datetime], *extra_orders: list[datetime]) -> list[float]:
    """Per-call medians over rounds, interleaved within each round: ours on `starts`, the two
    timings `theirs(starts)` returns, then ours on each of `extra_orders`."""
    _time_ours(spec, starts)  # warm caches (zone tables, month day sets, rule periods) outside the timing
    samples: list[list[float]] = [[] for _ in range(3 + len(extra_orders))]
    for _ in range(rounds):
        samples[0].append(_time_ours(spec, starts))
        a, b = theirs(starts)
        samples[1].append(a)
        samples[2].append(b)
        for i, order in enumerate(extra_orders):
            samples[3 + i].append(_time_ours(spec, order))
    return [statistics.median(s) for s in samples]


def _rrule_table(rounds: int, starts: list[datetime], dtstart_year: str) -> None:
    print(f"\nDTSTART in {dtstart_year}:\n")
    print("| RRULE | zone | ours (µs) | ours, starts shuffled (µs) | dateutil after, prebuilt rule (µs) "
          "| dateutil rrulestr + after (µs) | speed-up vs after | shuffled vs after | speed-up vs rrulestr + after |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    ratios, shuffled_ratios = [], []
    shuffled = random.Random(7).sample(starts, len(starts))
    for expression, zone_name in RRULE_CASES:
        expression = expression.replace("DTSTART:2024", f"DTSTART:{dtstart_year}")
        spec = parse_spec("rrule", expression, zone_name)
        zone = ZoneInfo(zone_name)
        o, a, p, mixed = _medians(spec, lambda s, expression=expression, zone=zone: _time_dateutil(expression, zone, s), rounds, starts, shuffled)
        ratios.append(a / o)
        shuffled_ratios.append(a / mixed)
        print(f"| `{expression.split()[1]}` | {zone_name} | {o * 1e6:.1f} | {mixed * 1e6:.1f} | {a * 1e6:.1f} "
              f"| {p * 1e6:.1f} | {a / o:.1f}× | {a / mixed:.1f}× | {p / o:.1f}× |")
    print(f"\nmedian speed-up vs dateutil rrule.after (DTSTART {dtstart_year}): {statistics.median(ratios):.1f}× "
          f"(min {min(ratios):.1f}×); starts shuffled: {statistics.median(shuffled_ratios):.1f}× "
          f"(min {min(shuffled_ratios):.1f}×)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    starts = _starts(args.calls)
    print("| expression | zone | ours (µs) | croniter new+get_next (µs) | croniter get_next only (µs) "
          "| speed-up vs new+get_next | speed-up vs get_next only |")
    print("|---|---|---:|---:|---:|---:|---:|")
    strict_ratios = []
    for expression, croniter_expression, zone_name in CASES:
        spec = parse_spec("cron", expression, zone_name)
        zone = ZoneInfo(zone_name)
        o, t, n = _medians(spec, lambda s, cron=croniter_expression, zone=zone: _time_croniter(cron, zone, s), args.rounds, starts)
        strict_ratios.append(n / o)
        print(f"| `{expression}` | {zone_name} | {o * 1e6:.1f} | {t * 1e6:.1f} | {n * 1e6:.1f} "
              f"| {t / o:.1f}× | {n / o:.1f}× |")
    print(f"\nmedian speed-up vs croniter get_next alone: {statistics.median(strict_ratios):.1f}× "
          f"(min {min(strict_ratios):.1f}×)")
    for dtstart_year in ("2024", "2026"):
        _rrule_table(args.rounds, starts, dtstart_year)


if __name__ == "__main__":
    main()
