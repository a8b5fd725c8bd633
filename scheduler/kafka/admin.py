"""Create or check the layout's topics with the admin client, idempotently.

A topic that exists but differs from the layout is reported and never altered:
changing partition counts or cleanup policies under a running scheduler can lose
state, so an operator decides. Every topic is created with the replication that
`scheduler.kafka.replication` decides from the cluster's metadata, and is checked
against it: a topic below the wanted factor differs, one above it is fine.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ClusterMetadata,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from scheduler.kafka.replication import Replication, min_insync_replicas, replication, wanted_factor
from scheduler.wire.topology import RenderedTopic, Topology

DEFAULT_TIMEOUT_S = 30.0


class TopicEnsureError(RuntimeError):
    """The broker refused to create a topic (e.g. a replication factor above the broker count)."""


@dataclass(frozen=True)
class Difference:
    """One way an existing topic departs from the layout."""

    topic: str
    key: str
    expected: str
    actual: str

    def __str__(self) -> str:
        return f"{self.topic}: {self.key} expected {self.expected!r}, actual {self.actual!r}"


@dataclass(frozen=True)
class EnsureReport:
    created: tuple[str, ...]
    ok: tuple[str, ...]
    differences: tuple[Difference, ...]
    replication_factor: int  # what topics were created with and checked against

    @property
    def differing(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.topic for d in self.differences))

    @property
    def clean(self) -> bool:
        return not self.differences


def expected_config(topic: RenderedTopic, replication_factor: int) -> dict[str, str]:
    """The layout's configs plus the durability setting that follows from the replication factor."""
    return {**topic.config, "min.insync.replicas": str(min_insync_replicas(replication_factor))}


def admin_client(admin_conf_or_bootstrap: str | Mapping[str, str]) -> AdminClient:
    """An admin client; librdkafka's info-level chatter (e.g. purged queues on close) stays out of CLI output."""
    if isinstance(admin_conf_or_bootstrap, str):
        conf: dict[str, str | int | float | bool] = {"bootstrap.servers": admin_conf_or_bootstrap}
    else:
        conf = {**admin_conf_or_bootstrap}
    conf.setdefault("log_level", 5)
    return AdminClient(conf)


def ensure_topics(
    admin_conf_or_bootstrap: str | Mapping[str, str],
    topology: Topology,
    prefix: str,
    tenants: Iterable[str] = (),
    replication_factor: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> EnsureReport:
    """Create missing shared topics (and those of `tenants`); report existing ones that differ.
    `replication_factor` None: the environment's or the cluster's default (scheduler.kafka.replication)."""
    topics = topology.rendered_topics(prefix, tenants)
    return ensure_rendered_topics(admin_conf_or_bootstrap, topics, replication_factor, timeout)


def ensure_tenant_topics(
    bootstrap: str | Mapping[str, str],
    topology: Topology,
    prefix: str,
    tenant: str,
    replication_factor: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> EnsureReport:
    """Create or check one tenant's topics, e.g. when a tenant is registered."""
    return ensure_tenants_topics(bootstrap, topology, prefix, [tenant], replication_factor, timeout)


def ensure_tenants_topics(
    bootstrap: str | Mapping[str, str],
    topology: Topology,
    prefix: str,
    tenants: Iterable[str],
    replication_factor: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> EnsureReport:
    """Several tenants' topics in one admin round trip (a burst of new tenants does not pay one each)."""
    topics = [topic for tenant in tenants for topic in topology.tenant_topics(prefix, tenant)]
    return ensure_rendered_topics(bootstrap, topics, replication_factor, timeout)


def ensure_rendered_topics(
    admin_conf_or_bootstrap: str | Mapping[str, str],
    topics: Sequence[RenderedTopic],
    replication_factor: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> EnsureReport:
    """Create or check `topics`, also those outside the layout (the ledger's reject topic)."""
    return _ensure(admin_client(admin_conf_or_bootstrap), topics, replication_factor, timeout)


def cluster_replication(admin_conf_or_bootstrap: str | Mapping[str, str], replication_factor: int | None = None,
                        timeout: float = DEFAULT_TIMEOUT_S) -> Replication:
    """The replication topics created now get, for creators that are not this module (the Connect worker)."""
    brokers = len(admin_client(admin_conf_or_bootstrap).list_topics(timeout=timeout).brokers)
    return replication(brokers, replication_factor)


def delete_prefixed_topics(admin_conf_or_bootstrap: str | Mapping[str, str], prefix: str,
                           timeout: float = DEFAULT_TIMEOUT_S) -> list[str]:
    """Delete every topic of one deployment prefix (a test's or a benchmark's); returns their names.

    A single broker holds a few thousand partitions per prefix with many tenants: left behind, runs
    add up until it runs out of file descriptors or heap."""
    admin = admin_client(admin_conf_or_bootstrap)
    names = sorted(name for name in admin.list_topics(timeout=timeout).topics if name.startswith(f"{prefix}."))
    if names:
        for future in admin.delete_topics(names, operation_timeout=timeout).values():
            future.result()
    return names


def _ensure(
    admin: AdminClient, topics: Sequence[RenderedTopic], configured: int | None, timeout: float
) -> EnsureReport:
    """Topics that exist are only compared with the wanted factor, so a broker down does not stop a process
    whose topics are all there; only creating refuses a factor above the live brokers."""
    metadata = admin.list_topics(timeout=timeout)
    brokers = len(metadata.brokers)
    factor = wanted_factor(brokers, configured)
    missing = [t for t in topics if not _visible(metadata, t.name)]
    created = _create(admin, missing, replication(brokers, configured), timeout) if missing else []
    if missing:
        metadata = _await_metadata(admin, [t.name for t in topics], timeout)
    to_check = [t for t in topics if t.name not in created]
    differences = _compare(admin, metadata, to_check, factor, timeout)
    differing = {d.topic for d in differences}
    ok = tuple(t.name for t in to_check if t.name not in differing)
    return EnsureReport(tuple(created), ok, tuple(differences), factor)


def _visible(metadata: ClusterMetadata, name: str) -> bool:
    topic = metadata.topics.get(name)
    return topic is not None and topic.error is None and bool(topic.partitions)


def _await_metadata(admin: AdminClient, names: Sequence[str], timeout: float) -> ClusterMetadata:
    """The controller commits a new topic before brokers learn of it; wait so callers can use it at once."""
    deadline = time.monotonic() + timeout
    while True:
        metadata = admin.list_topics(timeout=timeout)
        absent = [name for name in names if not _visible(metadata, name)]
        if not absent:
            return metadata
        if time.monotonic() >= deadline:
            raise TopicEnsureError(f"topics not visible in cluster metadata after {timeout:g}s: {absent}")
        time.sleep(0.1)


def _create(admin: AdminClient, topics: Sequence[RenderedTopic], chosen: Replication, timeout: float) -> list[str]:
    """Create `topics`; one that appeared meanwhile (another ensure racing us) is left to the check."""
    new_topics = [
        NewTopic(
            t.name,
            num_partitions=t.partitions,
            replication_factor=chosen.factor,
            config=expected_config(t, chosen.factor),
        )
        for t in topics
    ]
    futures = admin.create_topics(new_topics, operation_timeout=timeout, request_timeout=timeout)
    created = []
    for name, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise TopicEnsureError(f"cannot create topic {name}: {error.str()}") from exc
        created.append(name)
    return created


def _compare(
    admin: AdminClient,
    metadata: ClusterMetadata,
    topics: Sequence[RenderedTopic],
    replication_factor: int,
    timeout: float,
) -> list[Difference]:
    if not topics:
        return []
    resources = {t.name: ConfigResource(ResourceType.TOPIC, t.name) for t in topics}
    futures = admin.describe_configs(list(resources.values()), request_timeout=timeout)
    differences = []
    for topic in topics:
        md = metadata.topics[topic.name]
        actual_partitions = len(md.partitions)
        if actual_partitions != topic.partitions:
            differences.append(
                Difference(topic.name, "partitions", str(topic.partitions), str(actual_partitions))
            )
        actual_rf = min(len(p.replicas) for p in md.partitions.values())
        if actual_rf < replication_factor:
            differences.append(
                Difference(topic.name, "replication.factor", str(replication_factor), str(actual_rf))
            )
        entries = futures[resources[topic.name]].result()
        # A topic above the wanted factor is fine; its min.insync.replicas follows its own factor.
        for key, expected in expected_config(topic, max(actual_rf, replication_factor)).items():
            entry = entries.get(key)
            actual = entry.value if entry is not None and entry.value is not None else ""
            if _normalise(key, actual) != _normalise(key, expected):
                differences.append(Difference(topic.name, key, expected, actual))
    return differences


def _normalise(key: str, value: str) -> str:
    """cleanup.policy is a list; "delete,compact" and "compact,delete" are the same policy."""
    if key == "cleanup.policy":
        return ",".join(sorted(part.strip() for part in value.split(",") if part.strip()))
    return value
