"""The topic layout, loaded from `topologies/scheduler.toml`, and topic names rendered from it.

The layout is data so that the engine, `scheduler topics ensure` and the docs all read
the same partition counts, cleanup policies and task wiring.
"""
from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.wire.data_files import data_dir

TOPOLOGY_ENV = "SCHEDULER_TOPOLOGY_FILE"

# Kafka's own limits (org.apache.kafka.common.internals.Topic): legal characters and length.
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"[A-Za-z0-9._-]+")


def default_topology_file() -> Path:
    """`topologies/scheduler.toml`: the repository's beside the package, else the copy a regular install
    ships under `<prefix>/share/kafka-job-scheduler` (found as `schemas.schema_dir` finds the schemas)."""
    return data_dir("topologies") / "scheduler.toml"


class TopologyError(ValueError):
    """The layout file is inconsistent; raised at load so a bad layout never reaches a broker."""


class InvalidNameError(ValueError):
    """A prefix, tenant or priority cannot be part of a Kafka topic name."""


def validate_name_part(kind: str, value: str) -> str:
    """Reject name parts Kafka would refuse, with a message that says which rule failed."""
    if not value:
        raise InvalidNameError(f"{kind} name must not be empty")
    if value in (".", ".."):
        raise InvalidNameError(f"{kind} name {value!r} is not allowed: Kafka reserves '.' and '..'")
    if not _LEGAL_NAME.fullmatch(value):
        bad = "".join(sorted({c for c in value if not _LEGAL_NAME.fullmatch(c)}))
        raise InvalidNameError(
            f"{kind} name {value!r} contains {bad!r}: only ASCII letters, digits, '.', '_' and '-' "
            "may appear in Kafka topic names"
        )
    return value


@dataclass(frozen=True)
class TopicSpec:
    """One topic (or family of per-tenant topics) of the layout."""

    key: str
    name_template: str
    description: str
    message_key: str
    partitions: int
    co_partitioned: bool
    per_tenant: bool
    per_priority: bool
    config: Mapping[str, str]

    @property
    def compacted(self) -> bool:
        return "compact" in self.config.get("cleanup.policy", "").split(",")


@dataclass(frozen=True)
class TaskSpec:
    """A stream task: the topics it reads and writes, and the topic backing each store."""

    name: str
    description: str
    consumer_group_template: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    stores: Mapping[str, str]
    co_partitioned: bool

    def consumer_group(self, prefix: str) -> str:
        return self.consumer_group_template.format(prefix=validate_name_part("prefix", prefix))


@dataclass(frozen=True)
class RenderedTopic:
    """A concrete topic: what `ensure` creates or checks."""

    key: str
    name: str
    partitions: int
    config: Mapping[str, str]


@dataclass(frozen=True)
class Topology:
    schedule_partitions: int
    priorities: tuple[str, ...]
    topics: Mapping[str, TopicSpec]
    tasks: Mapping[str, TaskSpec]
    source: Path

    @classmethod
    def load(cls, path: str | Path | None = None) -> Topology:
        """Read the layout; `path`, else $SCHEDULER_TOPOLOGY_FILE, else `default_topology_file()`."""
        resolved = Path(path or os.environ.get(TOPOLOGY_ENV) or default_topology_file())
        with resolved.open("rb") as fh:
            data = tomllib.load(fh)
        return cls.from_dict(data, source=resolved)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: Path) -> Topology:
        schedule_partitions = _positive_int(data, "schedule_partitions", "layout")
        priorities = tuple(data.get("priorities", ()))
        if not priorities:
            raise TopologyError("layout needs a non-empty `priorities` list")
        for priority in priorities:
            validate_name_part("priority", priority)
        topics = {
            key: _topic_spec(key, raw, schedule_partitions)
            for key, raw in data.get("topics", {}).items()
        }
        tasks = {name: _task_spec(name, raw) for name, raw in data.get("tasks", {}).items()}
        topology = cls(schedule_partitions, priorities, topics, tasks, source)
        topology._check_tasks()
        return topology

    def topic_name(
        self, key: str, prefix: str, tenant: str | None = None, priority: str | None = None
    ) -> str:
        """The concrete name of topic `key`; per-tenant topics need `tenant` (and `priority`)."""
        spec = self._spec(key)
        fields = {"prefix": validate_name_part("prefix", prefix)}
        if spec.per_tenant:
            if tenant is None:
                raise ValueError(f"topic {key!r} is per tenant: pass tenant=")
            fields["tenant"] = validate_name_part("tenant", tenant)
        elif tenant is not None:
            raise ValueError(f"topic {key!r} is shared by all tenants: do not pass tenant=")
        if spec.per_priority:
            if priority not in self.priorities:
                raise ValueError(
                    f"topic {key!r} needs priority= one of {list(self.priorities)}, got {priority!r}"
                )
            fields["priority"] = priority
        elif priority is not None:
            raise ValueError(f"topic {key!r} has no priorities: do not pass priority=")
        name = spec.name_template.format(**fields)
        if len(name) > MAX_TOPIC_NAME_LENGTH:
            raise InvalidNameError(
                f"topic name {name!r} is {len(name)} characters; Kafka allows at most "
                f"{MAX_TOPIC_NAME_LENGTH} (shorten the prefix or tenant name)"
            )
        return name

    def shared_topics(self, prefix: str) -> list[RenderedTopic]:
        """Topics every deployment has, whatever its tenants."""
        return [
            RenderedTopic(spec.key, self.topic_name(spec.key, prefix), spec.partitions, spec.config)
            for spec in self.topics.values()
            if not spec.per_tenant
        ]

    def tenant_topics(self, prefix: str, tenant: str) -> list[RenderedTopic]:
        """Topics that exist once per tenant (and per priority where the layout says so)."""
        rendered = []
        for spec in self.topics.values():
            if not spec.per_tenant:
                continue
            for priority in self.priorities if spec.per_priority else (None,):
                name = self.topic_name(spec.key, prefix, tenant=tenant, priority=priority)
                rendered.append(RenderedTopic(spec.key, name, spec.partitions, spec.config))
        return rendered

    def rendered_topics(self, prefix: str, tenants: Iterable[str] = ()) -> list[RenderedTopic]:
        topics = self.shared_topics(prefix)
        for tenant in tenants:
            topics.extend(self.tenant_topics(prefix, tenant))
        return topics

    def _spec(self, key: str) -> TopicSpec:
        try:
            return self.topics[key]
        except KeyError:
            raise KeyError(f"no topic {key!r} in layout {self.source}; known: {sorted(self.topics)}") from None

    def _check_tasks(self) -> None:
        for task in self.tasks.values():
            referenced = (*task.inputs, *task.outputs, *task.stores.values())
            unknown = sorted(set(referenced) - set(self.topics))
            if unknown:
                raise TopologyError(f"task {task.name!r} refers to unknown topics {unknown}")
            for store, topic in task.stores.items():
                if not self.topics[topic].compacted:
                    raise TopologyError(
                        f"task {task.name!r}: changelog {topic!r} of store {store!r} must be compacted"
                    )
            if task.co_partitioned:
                for topic in (*task.inputs, *task.stores.values()):
                    if not self.topics[topic].co_partitioned:
                        raise TopologyError(
                            f"task {task.name!r} is co-partitioned but {topic!r} does not use "
                            "schedule_partitions (set co_partitioned = true on it)"
                        )


def _positive_int(raw: Mapping[str, Any], field: str, where: str) -> int:
    value = raw.get(field)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TopologyError(f"{where}: `{field}` must be a positive integer, got {value!r}")
    return value


def _topic_spec(key: str, raw: Mapping[str, Any], schedule_partitions: int) -> TopicSpec:
    co_partitioned = bool(raw.get("co_partitioned", False))
    per_tenant = bool(raw.get("per_tenant", False))
    per_priority = bool(raw.get("per_priority", False))
    if co_partitioned == ("partitions" in raw):
        raise TopologyError(f"topic {key!r}: give either `co_partitioned = true` or `partitions`")
    if co_partitioned and per_tenant:
        raise TopologyError(f"topic {key!r}: per-tenant topics are not co-partitioned with the task")
    if per_priority and not per_tenant:
        raise TopologyError(f"topic {key!r}: per_priority needs per_tenant")
    partitions = schedule_partitions if co_partitioned else _positive_int(raw, "partitions", f"topic {key!r}")
    name = raw.get("name", "")
    placeholders = set(re.findall(r"{(\w+)}", name))
    wanted = {"prefix"} | ({"tenant"} if per_tenant else set()) | ({"priority"} if per_priority else set())
    if placeholders != wanted:
        raise TopologyError(f"topic {key!r}: name {name!r} must use exactly {sorted(wanted)}")
    config = raw.get("config", {})
    if "cleanup.policy" not in config:
        raise TopologyError(f"topic {key!r}: config must set cleanup.policy")
    return TopicSpec(
        key=key,
        name_template=name,
        description=raw.get("description", ""),
        message_key=raw.get("key", ""),
        partitions=partitions,
        co_partitioned=co_partitioned,
        per_tenant=per_tenant,
        per_priority=per_priority,
        config={name: _config_value(value) for name, value in config.items()},
    )


def _config_value(value: Any) -> str:
    """Kafka configs are strings; TOML booleans must become Kafka's lower-case spelling."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _task_spec(name: str, raw: Mapping[str, Any]) -> TaskSpec:
    group = raw.get("consumer_group", "")
    if "{prefix}" not in group:
        raise TopologyError(f"task {name!r}: consumer_group must contain {{prefix}}")
    return TaskSpec(
        name=name,
        description=raw.get("description", ""),
        consumer_group_template=group,
        inputs=tuple(raw.get("inputs", ())),
        outputs=tuple(raw.get("outputs", ())),
        stores=dict(raw.get("stores", {})),
        co_partitioned=bool(raw.get("co_partitioned", False)),
    )


# Names of the Kafka resources a tenant's workers use, so one ACL covers them all.
def default_group_id(prefix: str, tenant: str, share: bool) -> str:
    return f"{prefix}.{'share-workers' if share else 'workers'}.{tenant}"


def transactional_id_prefix(prefix: str, tenant: str) -> str:
    """Every worker of a tenant writes attempts under this prefix, so one ACL covers them all."""
    return f"{prefix}.worker.{tenant}."
