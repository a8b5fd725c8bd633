"""The console's due-load forecast with 500,000 schedules: index build, window slide, and page render.

The schedules are ScheduleState records fed to the console's index through the same listener the
schedule view calls (no broker: what is measured is the index and the page, not Kafka). The page
is fetched over the real ASGI app (log-in cookie, route, index read, Jinja template), for an
admin (every tenant) and for one tenant's key. Side by side in the same run: what the naive
design would cost per request, expanding every schedule's fires over the window.

    .venv/bin/python bench/forecast.py [--schedules 500000] [--tenants 20] [--hours 6] [--renders 15]
"""
from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.api.keys import KeyStore, create_key  # noqa: E402
from scheduler.console.follower import ConsoleIndexes  # noqa: E402
from scheduler.console.forecast import _fires_ms, share_of  # noqa: E402
from scheduler.console.web import mount  # noqa: E402
from scheduler.control.client import make_spec  # noqa: E402

ZONES = ("UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo", "Europe/London")


class RecordSource:
    """Stands where the ScheduleView stands: `subscribe` replays what it holds, then follows."""

    def __init__(self, records: dict[str, dict[str, Any]]) -> None:
        self.records = records

    def subscribe(self, listener: Any) -> None:
        for key, record in self.records.items():
            listener(key, record)


def spec_mix(rng: random.Random, now_ms: int) -> dict[str, Any]:
    roll = rng.random()
    zone = rng.choice(ZONES)
    if roll < 0.40:
        return make_spec("cron", "0 * * * *", zone)
    if roll < 0.55:
        return make_spec("cron", "*/15 * * * *", zone)
    if roll < 0.65:
        return make_spec("cron", "*/5 * * * *", zone, flexible_window_ms=60_000)
    if roll < 0.75:
        return make_spec("cron", "0 9 * * MON-FRI", zone)
    if roll < 0.90:  # distinct anchors: every one is its own spec
        return make_spec("rate", f"every {rng.choice([10, 20, 30, 60])}m", "UTC",
                         anchor_at_ms=now_ms - rng.randrange(3_600_000) // 1000 * 1000)
    return make_spec("cron", "30 * * * *", zone, flexible_window_ms=300_000)


def states(n: int, tenants: int, now_ms: int, seed: int = 20) -> dict[str, dict[str, Any]]:
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(tenants)]  # a few big tenants, a long tail
    names = [f"tenant-{i:02d}" for i in range(tenants)]
    out = {}
    for i in range(n):
        sid = f"s{i:07d}"
        out[sid] = {"schedule_id": sid, "tenant": rng.choices(names, weights)[0], "state": "ACTIVE",
                    "spec": spec_mix(rng, now_ms), "fired_count": 0, "version": 1}
    return out


def median_ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1000:.1f} ms (min {min(samples) * 1000:.1f}, max {max(samples) * 1000:.1f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedules", type=int, default=500_000)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--renders", type=int, default=15)
    args = parser.parse_args()
    now_ms = int(time.time() * 1000)
    records = states(args.schedules, args.tenants, now_ms)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    started, cpu = time.perf_counter(), time.process_time()
    indexes = ConsoleIndexes(RecordSource(records), RecordSource({}), int(args.hours * 3_600_000))  # type: ignore[arg-type]
    assert indexes.wait_applied(3600)
    build_s, build_cpu = time.perf_counter() - started, time.process_time() - cpu
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fires = sum(n for slots in indexes.forecast.seconds.values() for n in slots.values())
    print(f"index: {args.schedules} schedules, {args.tenants} tenants, {fires} fires in {args.hours:g} h, "
          f"built in {build_s:.1f} s ({build_cpu:.1f} s of CPU); max RSS +{(rss_after - rss_before) / 1024:.0f} MiB")

    home = Path(tempfile.mkdtemp())
    admin = create_key(home / "keys.json", None)
    tenant_key = create_key(home / "keys.json", "tenant-00")
    app = FastAPI()
    # The forecast page reads the index only (no view): no control plane is needed to serve it.
    mount(app, None, KeyStore(home / "keys.json"), indexes)  # type: ignore[arg-type]
    medians = {}
    for who, key in (("admin, every tenant", admin), ("tenant-00's key", tenant_key)):
        with TestClient(app) as http:
            assert http.post("/ui/login", data={"key": key}, follow_redirects=False).status_code == 303
            samples, size = [], 0
            http.get(f"/ui/forecast?hours={args.hours:g}")  # warm-up (template compilation), not counted
            for _ in range(args.renders):
                t0 = time.perf_counter()
                page = http.get(f"/ui/forecast?hours={args.hours:g}")
                samples.append(time.perf_counter() - t0)
                assert page.status_code == 200
                size = len(page.content)
            medians[who] = statistics.median(samples)
            print(f"GET /ui/forecast ({who}): {median_ms(samples)}, {size / 1024:.0f} KiB of HTML")

    slides = []
    for _ in range(5):  # ahead of the clock, so the index's own thread has nothing to slide meanwhile
        with indexes._lock:
            t0 = time.perf_counter()
            indexes.forecast.advance(indexes.forecast.start_ms + 1 + 60_000)
            slides.append(time.perf_counter() - t0)
    print(f"window slide by one minute: {median_ms(slides)}")

    sample = list(records.values())[:50_000]
    t0 = time.perf_counter()
    start, end = indexes.forecast.start_ms, indexes.forecast.end_ms
    for record in sample:
        share = share_of(record)
        if share is not None:
            _fires_ms(share, start, end)
    naive = (time.perf_counter() - t0) * args.schedules / len(sample)
    print(f"naive (expand every schedule per request, timed on 50,000 and scaled): {naive:.1f} s per request; "
          f"ratio to the indexed admin page: {naive / medians['admin, every tenant']:.0f}x")
    indexes.close()


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    main()
