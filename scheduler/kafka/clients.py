"""What the project's Kafka clients share: the caller's own client settings (SASL credentials, TLS)
and the broker's authorization refusals.

librdkafka reports most refusals (a topic or group the principal has no ACL for) as ordinary,
non-fatal errors and keeps trying, so a client missing an ACL would wait forever; the clients
raise `NotAuthorized`, naming what was refused, instead.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message, Producer

log = logging.getLogger(__name__)

# Every producer of the project: a record is acknowledged once all in-sync replicas hold it (at least the topic's
# min.insync.replicas, scheduler.kafka.replication), and retries neither duplicate nor reorder it. Transactional
# producers imply both; they are spelled out so no producer's durability rests on a library default.
DURABLE_PRODUCER = {"acks": "all", "enable.idempotence": True}

SCRAM_MECHANISM = "SCRAM-SHA-512"  # the SASL mechanism of the brokers we start and the clients we make

AUTHORIZATION_FAILURES = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
})


class NotAuthorized(RuntimeError):
    """The broker's ACLs refuse the client's principal something it needs; retrying cannot help."""

    def __init__(self, resource: str, error: KafkaError) -> None:
        super().__init__(f"not authorized for {resource} ({error.name()}: {error.str()}); the client's principal "
                         "needs an ACL for it (docs/control-plane.md, `scheduler tenants grant-worker`)")
        self.resource = resource
        self.code = error.code()


@contextmanager
def refused_as(resource: str) -> Iterator[None]:
    """A KafkaException the broker's ACLs caused becomes NotAuthorized naming `resource`; others pass."""
    try:
        yield
    except KafkaException as exc:
        if exc.args[0].code() in AUTHORIZATION_FAILURES:
            raise NotAuthorized(resource, exc.args[0]) from exc
        raise


def delivered_or_why(producer: Producer, topic: str, key: bytes, value: bytes | None, timeout_s: float) -> str | None:
    """Produce one record and wait for it; None once delivered, else why not (for the caller's error)."""
    failures: list[str] = []
    producer.produce(topic, value, key, on_delivery=lambda err, _msg: failures.append(str(err)) if err else None)
    if producer.flush(timeout_s) or failures:
        return f"could not write to {topic}: {failures or 'timeout'}"
    return None


def connection(bootstrap: str, client_config: Mapping[str, str] | None) -> dict[str, str]:
    """`bootstrap` plus the caller's settings; a different `bootstrap.servers` among them is a mistake,
    not a choice between two clusters."""
    conf = {"bootstrap.servers": bootstrap, **(client_config or {})}
    if conf["bootstrap.servers"] != bootstrap:
        raise ValueError(f"client settings name bootstrap.servers={conf['bootstrap.servers']!r}, "
                         f"but the bootstrap address is {bootstrap!r}")
    return conf


def client_settings(client_config: Mapping[str, str], own: Mapping[str, object]) -> dict[str, object]:
    """A client's `own` settings (what its guarantees rest on) over the caller's; a caller's setting
    they would silently replace is refused. librdkafka's notice-level chatter stays out of the logs
    unless the caller sets `log_level`."""
    clash = sorted(client_config.keys() & own.keys())
    if clash:
        raise ValueError(f"client settings {clash} are set by the scheduler itself and cannot be given")
    return {"log_level": 4, **client_config, **own}


class _Connects(Protocol):
    def list_topics(self, topic: str | None = None, *, timeout: float) -> object: ...


C = TypeVar("C", bound=_Connects)

UNWRITTEN_TOPIC = "__consumer_offsets"  # always there, never produced to by a client


def settled(client: C, timeout_s: float = 10.0, topic: str | None = None) -> C:
    """`client` once it has its cluster connection. librdkafka (2.16) drops its bootstrap connection at the first
    metadata answer; a request issued meanwhile waited 0.05-3 s for the next connection (a takeover's first
    ListOffsets took 3.0 s, a fresh transactional producer's init 0.5 s, in about one try of three). Metadata is
    asked twice: the first answer comes over the bootstrap connection, the second over the broker's own, so
    once both are in the client is connected (a fresh transactional producer's init then took 3-8 ms, from
    0.05-0.5 s). The answers fill the client's metadata cache, for all topics or for `topic` only: a producer
    then refuses a record for a partition of a cached topic that does not exist at `produce` instead of failing
    its delivery, which a transactional producer's callers rely on, so those settle on `UNWRITTEN_TOPIC`."""
    for _ in range(2):
        client.list_topics(topic, timeout=timeout_s)
    return client


def is_noise(msg: Message) -> bool:
    """A consumed message that is no record: an end of partition, or a transient error (logged; librdkafka
    recovers on its own). A fatal error raises: the client can do nothing more."""
    error = msg.error()
    if error is None:
        return False
    if error.code() == KafkaError._PARTITION_EOF:
        return True
    if error.fatal():
        raise KafkaException(error)
    log.warning("consumer error: %s", error)
    return True
