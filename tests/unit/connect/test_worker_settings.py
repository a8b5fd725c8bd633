"""The Connect worker's internal topics are replicated by the project's rule, not the broker's defaults."""
from __future__ import annotations

from pathlib import Path

from scheduler.connect.local import internal_topics, worker_settings
from scheduler.kafka.replication import Replication


def test_every_internal_topic_gets_the_decided_factor_and_min_insync() -> None:
    settings = worker_settings("kafka:9092", "sched", 8083, [Path("/plugins")], Replication(3, 2))
    for kind in ("config", "offset", "status"):
        assert settings[f"{kind}.storage.replication.factor"] == "3"
        assert settings[f"{kind}.storage.min.insync.replicas"] == "2"
        assert settings[f"{kind}.storage.topic"] == internal_topics("sched")[f"{kind}.storage.topic"]
