"""How many replicas a topic the project creates gets, and the `min.insync.replicas` that follows.

Decided here once, so no creator can disagree: `topics ensure`, tenant registration (client, CLI,
HTTP), the engine's own tenant topics, the Connect worker's internal topics and the ledger's reject
topic. A topic left at the broker's default (1 on most clusters) loses a tenant's occurrences with
one broker; one at factor 3 with `min.insync.replicas=1` acknowledges writes only one broker holds.

The factor is `--replication-factor` where a command has the flag, else `SCHEDULER_REPLICATION_FACTOR`,
else `min(3, brokers in the cluster's metadata)`: 1 on the single-node dev broker, 3 on a real cluster.
Producers write with `acks=all`, so `min.insync.replicas` is what an acknowledged record survives:
factor - 1 (one broker may be down without refusing writes), at most 2, at least 1.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

REPLICATION_ENV = "SCHEDULER_REPLICATION_FACTOR"
DEFAULT_MAX_FACTOR = 3   # the default on a cluster of 3 brokers or more
MAX_MIN_INSYNC = 2       # more would refuse writes while two of five replicas are down, for little gain


class ReplicationError(ValueError):
    """A factor that is not a positive number, or one the cluster cannot hold: creating topics with it fails."""


@dataclass(frozen=True)
class Replication:
    """What a topic is created with: `factor` replicas, and the `min.insync.replicas` config set explicitly."""

    factor: int
    min_insync: int

    @property
    def topic_config(self) -> dict[str, str]:
        return {"min.insync.replicas": str(self.min_insync)}


def min_insync_replicas(factor: int) -> int:
    """factor 1 -> 1, 2 -> 1, 3 -> 2, 5 -> 2: one replica may be down without refusing acks=all writes."""
    return max(1, min(MAX_MIN_INSYNC, factor - 1))


def configured_factor(configured: int | None = None, environ: Mapping[str, str] | None = None) -> int | None:
    """The factor the operator asked for (`configured`, a command's flag, over the environment); None: not asked."""
    if configured is None:
        text = (os.environ if environ is None else environ).get(REPLICATION_ENV, "").strip()
        if not text:
            return None
        try:
            configured = int(text)
        except ValueError:
            raise ReplicationError(f"{REPLICATION_ENV}={text!r} is not a number of replicas") from None
    if configured < 1:
        raise ReplicationError(f"replication factor must be at least 1, got {configured}")
    return configured


def wanted_factor(brokers: int, configured: int | None = None, environ: Mapping[str, str] | None = None) -> int:
    """The factor topics should have: the configured one, else min(3, brokers). Not checked against
    `brokers`, so an existing topic can still be compared with it while a broker is down."""
    asked = configured_factor(configured, environ)
    return asked if asked is not None else max(1, min(DEFAULT_MAX_FACTOR, brokers))


def replication(brokers: int, configured: int | None = None, environ: Mapping[str, str] | None = None) -> Replication:
    """What topics about to be created get; a factor above the live brokers is refused before Kafka refuses
    it topic by topic, naming the setting to change."""
    factor = wanted_factor(brokers, configured, environ)
    if factor > brokers:
        raise ReplicationError(
            f"cannot create topics with replication factor {factor}: the cluster has {brokers} live "
            f"broker{'s' if brokers != 1 else ''} (set --replication-factor or {REPLICATION_ENV} "
            f"to at most {brokers}, or leave it unset for min(3, brokers))")
    return Replication(factor, min_insync_replicas(factor))
