"""The broker ACLs a tenant's workers need, derived from the topic layout, and granting them.

A worker reads every per-tenant topic of its tenant (occurrences, schedule view, dead letters),
writes attempts, joins its tenant's consumer or share group, and writes in transactions under its
tenant's transactional-id prefix. Topics are granted by LITERAL name, never by prefix: a tenant
name may contain '.', so a prefix `sched.occurrences.acme.` would also match the topics of a
tenant `acme.x`. DESCRIBE is not granted on its own: Kafka implies it from READ and WRITE.
"""
from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from scheduler.kafka.admin import DEFAULT_TIMEOUT_S, admin_client
from scheduler.kafka.clients import SCRAM_MECHANISM
from scheduler.wire.topology import Topology, default_group_id, transactional_id_prefix

# Kafka's minimum for SCRAM-SHA-512; a worker authenticates once per connection.
SCRAM_ITERATIONS = 8192


def scram_client_config(bootstrap: str, user: str, password: str) -> dict[str, str]:
    """Client settings for a SCRAM user on a SASL_PLAINTEXT listener (SASL_SSL outside a laptop:
    SCRAM authenticates but does not encrypt)."""
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": SCRAM_MECHANISM,
        "sasl.username": user,
        "sasl.password": password,
    }


def worker_acls(topology: Topology, prefix: str, tenant: str, user: str) -> list[AclBinding]:
    """What `User:<user>` needs to run workers of `tenant`, in consumer-group or share-group mode."""
    principal = f"User:{user}"

    def allow(kind: ResourceType, name: str, operation: AclOperation,
              pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
        return AclBinding(kind, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)

    topics, groups = ResourceType.TOPIC, ResourceType.GROUP
    share_group = default_group_id(prefix, tenant, share=True)
    return [
        *(allow(topics, topic.name, AclOperation.READ) for topic in topology.tenant_topics(prefix, tenant)),
        allow(topics, topology.topic_name("attempts", prefix), AclOperation.WRITE),
        allow(groups, default_group_id(prefix, tenant, share=False), AclOperation.READ),
        allow(groups, share_group, AclOperation.READ),
        # A share-mode worker sets its group's start offset and isolation level (scheduler.worker.share).
        allow(groups, share_group, AclOperation.ALTER_CONFIGS),
        allow(ResourceType.TRANSACTIONAL_ID, transactional_id_prefix(prefix, tenant), AclOperation.WRITE,
              ResourcePatternType.PREFIXED),
    ]


def grant_worker(
    admin_conf_or_bootstrap: str | Mapping[str, str],
    topology: Topology,
    prefix: str,
    tenant: str,
    user: str,
    password: str,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> list[AclBinding]:
    """Create SCRAM user `user` (or set its password) and allow it what a worker of `tenant` needs.

    Idempotent: granting again changes nothing but the password. Raises KafkaException if the
    broker refuses (e.g. SECURITY_DISABLED when it has no authorizer)."""
    if not user or not password:
        raise ValueError("a worker user needs a non-empty name and password")
    admin = admin_client(admin_conf_or_bootstrap)
    credential = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    upsert = UserScramCredentialUpsertion(user, credential, password.encode())
    for future in admin.alter_user_scram_credentials([upsert], request_timeout=timeout).values():
        future.result()
    bindings = worker_acls(topology, prefix, tenant, user)
    for future in admin.create_acls(bindings, request_timeout=timeout).values():
        future.result()
    return bindings
