"""The owner of a compacted topic that both writes it and follows it (the tenant registry, the shared API
keys): its view and its durable producer are opened together and must be closed together."""
from __future__ import annotations

from typing import Any, Generic, Self, TypeVar

from confluent_kafka import Producer

from scheduler.kafka.views.compacted import CompactedView

V = TypeVar("V", bound=CompactedView[Any])


class ViewWriter(Generic[V]):
    """Subclasses set `view` and `producer` when they open."""

    view: V
    producer: Producer

    def close(self) -> None:
        """Also drops the producer: its librdkafka threads would otherwise outlive the broker, logging every
        failed reconnection (after a test session's summary, for one) until the object is collected."""
        if not hasattr(self, "producer"):
            return
        self.producer.flush(10)
        del self.producer
        self.view.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
