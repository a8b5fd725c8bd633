"""A Prometheus histogram that takes one value observed many times in one call, for the schedule lag.

The engine observes the lag per loop turn, grouped by due instant (scheduler/engine/metrics.py): a burst of
entries due at one instant is one observation with a count, which prometheus_client's Histogram cannot take.
"""
from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily


class WeightedHistogram:
    """A histogram that takes one value observed `count` times in one call.

    prometheus_client's Histogram only observes one value at a time; a burst of 20,000 entries due
    at the same instant is one call here instead of 20,000.
    """

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(sorted(buckets))
        self._series: dict[tuple[str, ...], list[float]] = {}  # per label set: bucket counts..., +Inf, sum
        self._lock = threading.Lock()
        registry.register(self)

    def observe_many(self, labels: tuple[str, ...], value: float, count: int) -> None:
        index = bisect.bisect_left(self.bounds, value)
        with self._lock:
            series = self._series.get(labels)
            if series is None:
                series = self._series[labels] = [0.0] * (len(self.bounds) + 2)
            series[index] += count
            series[-1] += value * count

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            snapshot = {labels: list(series) for labels, series in self._series.items()}
        for labels, series in snapshot.items():
            cumulative, buckets = 0.0, []
            for bound, n in zip((*self.bounds, float("inf")), series[:-1], strict=True):
                cumulative += n
                buckets.append((_bound_text(bound), cumulative))
            family.add_metric(list(labels), buckets, series[-1])
        yield family

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)


def _bound_text(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))
