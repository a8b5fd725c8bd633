"""The schedulers' own figures for the console: lag p99, due backlog and throttling, read from their
/metrics endpoints (`scheduler api --metrics-url`, the `scheduler run --metrics-port` servers).

The lag histogram is cumulative since each process started; the console keeps the scrapes of
the last WINDOW_S and reports the p99 of the difference (what Prometheus' rate() would give),
or of everything since start when it has only one scrape. Quantiles interpolate within a
bucket as Prometheus' histogram_quantile does.
"""
from __future__ import annotations

import math
import threading
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

WINDOW_S = 300.0
TIMEOUT_S = 2.0

Snapshot = dict[tuple[str, tuple[tuple[str, str], ...]], float]  # (sample name, labels) -> value


@dataclass(frozen=True)
class EngineFigures:
    sources: int                                  # endpoints that answered
    errors: list[str]
    window_s: float
    lag_p99_s: dict[str, float | None]            # lane -> p99 over the window
    backlog: int                                  # due entries not yet sent, summed over partitions
    oldest_overdue_s: float
    held_back: dict[str, float] = field(default_factory=dict)         # tenant -> by the trigger-rate limit
    concurrency_held: dict[str, float] = field(default_factory=dict)  # tenant -> by max_concurrency


def parse(text: str) -> Snapshot:
    snapshot: Snapshot = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            snapshot[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return snapshot


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """buckets: (upper bound, cumulative count) ascending, ending with +Inf."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower  # as Prometheus: the highest finite bound
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower


def _delta(new: Snapshot, old: Snapshot | None) -> Snapshot:
    """Counters' increase; a process restart (a counter went down) counts from zero."""
    if old is None:
        return new
    return {key: value - old.get(key, 0.0) if value >= old.get(key, 0.0) else value for key, value in new.items()}


def _by_label(snapshot: Snapshot, name: str, label: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for (sample, labels), value in snapshot.items():
        if sample == name:
            key = dict(labels).get(label, "")
            found[key] = found.get(key, 0.0) + value
    return found


def _lane_p99(delta: Snapshot, lane: str) -> float | None:
    buckets: dict[float, float] = {}
    for (sample, labels), value in delta.items():
        tags = dict(labels)
        if sample == "scheduler_schedule_lag_seconds_bucket" and tags.get("lane") == lane:
            bound = float(tags["le"])
            buckets[bound] = buckets.get(bound, 0.0) + value
    return histogram_quantile(0.99, sorted(buckets.items()))


def figures(latest: Snapshot, delta: Snapshot, sources: int, errors: list[str], window_s: float) -> EngineFigures:
    gauges = [(s, v) for (s, _), v in latest.items()]
    return EngineFigures(
        sources, errors, window_s,
        {lane: _lane_p99(delta, lane) for lane in ("strict", "catch_up")},
        int(sum(v for s, v in gauges if s == "scheduler_due_backlog")),
        max((v for s, v in gauges if s == "scheduler_oldest_overdue_seconds"), default=0.0),
        _by_label(delta, "scheduler_tenant_held_back_total", "tenant"),
        _by_label(delta, "scheduler_tenant_concurrency_held_back_total", "tenant"),
    )


class EngineMetrics:
    """Scrapes the endpoints when asked (at most once a second) and remembers the last WINDOW_S."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self._history: dict[str, deque[tuple[float, Snapshot]]] = {url: deque() for url in urls}
        self._lock = threading.Lock()
        self._last: tuple[float, EngineFigures] | None = None

    def read(self) -> EngineFigures | None:
        if not self.urls:
            return None
        with self._lock:
            now = time.monotonic()
            if self._last is not None and now - self._last[0] < 1.0:
                return self._last[1]
            latest: Snapshot = {}
            delta: Snapshot = {}
            errors: list[str] = []
            window = 0.0
            for url in self.urls:
                try:
                    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
                        snapshot = parse(response.read().decode())
                except (OSError, ValueError) as exc:
                    errors.append(f"{url}: {exc}")
                    continue
                history = self._history[url]
                history.append((now, snapshot))
                while len(history) > 1 and now - history[0][0] > WINDOW_S:
                    history.popleft()
                oldest = history[0] if len(history) > 1 else None
                window = max(window, now - oldest[0]) if oldest else window
                for key, value in _delta(snapshot, oldest[1] if oldest else None).items():
                    delta[key] = delta.get(key, 0.0) + value
                for key, value in snapshot.items():
                    latest[key] = latest.get(key, 0.0) + value
            result = figures(latest, delta, len(self.urls) - len(errors), errors, window)
            self._last = (now, result)
            return result
