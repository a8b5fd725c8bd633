"""The forecast index against brute force: the counters equal the fires of the ACTIVE schedules in the window,
through changes and a sliding window, across a DST change."""
from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timezone

from scheduler.console.forecast import FLEXIBLE, STRICT, ForecastIndex, read, share_of, window_start
from scheduler.control.client import make_spec
from scheduler.timing import instants
from scheduler.timing.fires import fires_between

HOUR = 3_600_000
# 2026-03-29 00:30 UTC: Europe/Paris springs forward at 01:00 UTC, inside the window.
NOW = int(datetime(2026, 3, 29, 0, 30, 7, 250_000, tzinfo=timezone.utc).timestamp() * 1000)


def state(sid: str, tenant: str, spec: dict, status: str = "ACTIVE", fired: int = 0) -> dict:
    return {"schedule_id": sid, "tenant": tenant, "state": status, "spec": spec, "fired_count": fired, "version": 1}


def brute(states: dict[str, dict], since: dict[str, int], index: ForecastIndex) -> Counter:
    """Per (second, tenant, lane): every fire of every ACTIVE schedule in the window, expanded. A max_fires
    cap counts the fires since the state was seen (those the window has passed were made meanwhile)."""
    expected: Counter = Counter()
    for sid, s in states.items():
        share = share_of(s)
        if share is None:
            continue
        after = instants.to_datetime(since[sid])
        for fire in fires_between(share.spec, after, instants.to_datetime(index.end_ms), None, share.fired_before):
            ms = instants.to_ms(fire.scheduled_for)
            if ms > index.start_ms:
                expected[(ms // 1000, share.tenant, share.lane)] += 1
    return expected


def counted(index: ForecastIndex) -> Counter:
    return Counter({(second, *slot): n for second, slots in index.seconds.items() for slot, n in slots.items() if n})


def minute_sums(index: ForecastIndex) -> Counter:
    return Counter({(minute, *slot): n for minute, slots in index.minutes.items() for slot, n in slots.items() if n})


def specs(rng: random.Random) -> dict:
    choice = rng.randrange(6)
    if choice == 0:
        return make_spec("cron", "0 * * * *", "Europe/Paris")
    if choice == 1:
        return make_spec("cron", f"*/{rng.choice([5, 7, 15])} * * * *", "UTC", flexible_window_ms=60_000)
    if choice == 2:
        return make_spec("cron", "30 2 * * *", "Europe/Paris", dst_gap="SHIFT")
    if choice == 3:
        return make_spec("rate", f"every {rng.choice([13, 90, 600])}s", "UTC", anchor_at_ms=NOW - rng.randrange(10**6))
    if choice == 4:
        return make_spec("cron", "*/10 * * * *", "UTC", max_fires=rng.randrange(1, 8))
    return make_spec("once", "2026-03-29T02:15:00", "Europe/Paris")


def test_counters_equal_brute_force_through_changes_and_slides():
    rng = random.Random(20)
    index = ForecastIndex(3 * HOUR, NOW)
    states: dict[str, dict] = {}
    since: dict[str, int] = {}
    now = NOW
    for step in range(40):
        for _ in range(8):
            sid = f"s{rng.randrange(30)}"
            if sid in states and rng.random() < 0.3:
                new = None
            else:
                new = state(sid, rng.choice(["acme", "globex"]), specs(rng),
                            rng.choice(["ACTIVE", "ACTIVE", "PAUSED"]), rng.randrange(3))
            if new is None:
                states.pop(sid, None)
            else:
                if share_of(new) != share_of(states.get(sid)):
                    since[sid] = index.start_ms
                states[sid] = new
            index.apply(sid, new)
        now += rng.choice([0, 999, 1000, 61_000, 17 * 60_000])
        index.advance(now)
        assert counted(index) == brute(states, since, index), f"step {step}"
    minutes = Counter()
    for (second, tenant, lane), n in counted(index).items():
        minutes[(second - second % 60, tenant, lane)] += n
    assert minute_sums(index) == minutes


def test_republished_state_of_a_fire_changes_nothing_and_a_pause_takes_the_fires_back():
    index = ForecastIndex(2 * HOUR, NOW)
    hourly = state("h", "acme", make_spec("cron", "0 * * * *", "UTC"))
    index.apply("h", hourly)
    before = counted(index)
    assert sum(before.values()) == 2
    index.apply("h", {**hourly, "fired_count": 5, "version": 1})
    assert counted(index) == before
    index.apply("h", {**hourly, "state": "PAUSED", "version": 2})
    assert counted(index) == Counter() and index.minutes == {}
    index.apply("h", {**hourly, "version": 3})
    assert counted(index) == before


def test_read_gives_per_minute_counts_per_tenant_and_lane_and_peaks_by_second():
    index = ForecastIndex(2 * HOUR, NOW)
    for i in range(4):
        index.apply(f"a{i}", state(f"a{i}", "acme", make_spec("cron", "0 * * * *", "UTC")))
    index.apply("f", state("f", "acme", make_spec("cron", "0 * * * *", "UTC", flexible_window_ms=300_000)))
    index.apply("g", state("g", "globex", make_spec("cron", "15 * * * *", "UTC")))
    top = (NOW // HOUR + 1) * HOUR // 1000
    forecast = read(index, None)
    at = forecast.minutes.index(top)
    assert forecast.per_tenant["acme"][STRICT][at] == 4 and forecast.per_tenant["acme"][FLEXIBLE][at] == 1
    assert sum(forecast.per_tenant["globex"][STRICT]) == 2
    assert forecast.peaks[0].minute_s == top and forecast.peaks[0].total == 5
    second, slots = forecast.peaks[0].seconds[0]
    assert second == top and slots[("acme", STRICT)] == 4
    mine = read(index, frozenset({"globex"}))
    assert list(mine.per_tenant) == ["globex"] and all(p.total == 1 for p in mine.peaks)


def test_window_starts_at_a_whole_second():
    assert window_start(NOW) % 1000 == 999 and window_start(NOW) < NOW < window_start(NOW) + 1001
