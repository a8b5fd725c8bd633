"""Process settings from the environment, so every entry point agrees on them."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_PREFIX = "sched"
TENANT_ENV = "SCHEDULER_TENANT"  # the tenant of the commands that take --tenant, when it is not given


def cache_dir() -> Path:
    """Downloads (Kafka jars) live outside the repository and survive clones."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafka-job-scheduler"


def state_home() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "kafka-job-scheduler"


@dataclass(frozen=True)
class Settings:
    bootstrap_servers: str
    topic_prefix: str
    state_dir: Path
    schema_registry_url: str | None

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP),
            topic_prefix=os.environ.get("SCHEDULER_TOPIC_PREFIX", DEFAULT_PREFIX),
            state_dir=Path(os.environ.get("SCHEDULER_STATE_DIR", str(state_home() / "state"))),
            schema_registry_url=os.environ.get("SCHEMA_REGISTRY_URL") or None,
        )
