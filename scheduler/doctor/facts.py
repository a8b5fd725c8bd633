"""What `scheduler doctor` asks the cluster, the Connect worker and PostgreSQL: the I/O at the edge, turned
into the plain facts scheduler.doctor.checks decides on."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

from scheduler.connect.rest import ConnectRest, ConnectRestError
from scheduler.doctor.checks import TopicFacts

Grant = tuple[str, str, str]  # resource type, resource name, operation


def broker_configs(admin: AdminClient, broker_id: int, timeout: float) -> dict[str, str]:
    """One broker's effective settings (the group settings must be alike on every broker: one is asked)."""
    resource = ConfigResource(ResourceType.BROKER, str(broker_id))
    entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result()
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


def topic_facts(admin: AdminClient, names: Iterable[str], timeout: float) -> dict[str, TopicFacts]:
    """Partitions, least replicas and min.insync.replicas of those of `names` that exist."""
    metadata = admin.list_topics(timeout=timeout).topics
    present = [name for name in names if name in metadata and metadata[name].error is None]
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in present]
    min_insync: dict[str, int | None] = {name: None for name in present}
    if resources:
        for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
            try:
                min_insync[resource.name] = int(future.result()["min.insync.replicas"].value)
            except (KafkaException, KeyError, ValueError):
                min_insync[resource.name] = None
    return {name: TopicFacts(len(metadata[name].partitions),
                             min(len(p.replicas) for p in metadata[name].partitions.values()), min_insync[name])
            for name in present}


def granted_acls(admin: AdminClient, timeout: float) -> dict[str, set[Grant]] | None:
    """Every ALLOW binding by principal; None when the broker has no authorizer."""
    # The stub types the filter's name, principal and host as str; None is the filter's "any" at run time.
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                                  AclOperation.ANY, AclPermissionType.ALLOW)
    try:
        bindings = admin.describe_acls(everything, request_timeout=timeout).result()
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.SECURITY_DISABLED:
            return None
        raise
    granted: dict[str, set[Grant]] = {}
    for binding in bindings:
        granted.setdefault(binding.principal, set()).add(grant_of(binding))
    return granted


def grant_of(binding: object) -> Grant:
    return (binding.restype.name, binding.name, binding.operation.name)  # type: ignore[attr-defined]


def connector_states(url: str, names: Iterable[str]) -> tuple[dict[str, tuple[str, list[str]]] | None, str | None]:
    """Per existing connector of `names`: its state and its tasks' states; (None, why) when Connect does not answer."""
    rest = ConnectRest(url)
    try:
        existing = set(rest.connectors())
        states = {}
        for name in names:
            if name in existing:
                status = rest.status(name)
                states[name] = (("UNASSIGNED", []) if status is None else  # created, no worker has reported yet
                                (status["connector"]["state"], [task["state"] for task in status.get("tasks", [])]))
        return states, None
    except (ConnectRestError, OSError) as exc:
        return None, str(exc)


def missing_ledger_tables(url: str, schema: str, tables: Iterable[str]) -> tuple[list[str] | None, str | None]:
    """The ledger tables absent from `schema`; (None, why) when the database does not answer."""
    import psycopg  # only when a database is configured

    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            rows = conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                                (schema,)).fetchall()
    except psycopg.Error as exc:
        return None, str(exc).strip()
    found = {row[0] for row in rows}
    return [table for table in tables if table not in found], None


def admin_for(conf: Mapping[str, str]) -> AdminClient:
    return AdminClient({"log_level": 2, **conf})
