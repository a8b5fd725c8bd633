"""`scheduler topics ensure` and `scheduler topics describe`."""
from __future__ import annotations

import argparse
import sys

from confluent_kafka import KafkaException

from scheduler.cli_support import EXIT_BAD_INPUT, EXIT_FINDING, kafka_exit_code, print_ensure_rows
from scheduler.config import Settings
from scheduler.kafka.admin import DEFAULT_TIMEOUT_S, TopicEnsureError, ensure_topics
from scheduler.kafka.client_config import add_client_config, client_config_of
from scheduler.kafka.clients import connection
from scheduler.kafka.replication import REPLICATION_ENV
from scheduler.timing.cli_values import duration_type
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF
from scheduler.wire.topology import Topology

EXIT_DIFFERS = EXIT_FINDING
EXIT_ERROR = EXIT_BAD_INPUT


def register(subparsers: argparse._SubParsersAction) -> None:
    topics = subparsers.add_parser("topics", help="create, check or describe the topic layout")
    commands = topics.add_subparsers(dest="topics_command", required=True)

    ensure = commands.add_parser(
        "ensure",
        help="create missing topics; report (never alter) topics that differ from the layout",
        description="Exit status: 0 all topics match, 1 some topic differs, 2 a bad argument or layout, "
                    "5 not authorized, 6 the cluster unreachable (docs/cli.md).",
    )
    _add_layout_arguments(ensure)
    ensure.add_argument("--bootstrap", help="bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS)")
    add_client_config(ensure)
    ensure.add_argument(
        "--replication-factor",
        type=int,
        default=None,
        help=f"replicas per partition of the topics created, and the least existing ones must have "
             f"(default: ${REPLICATION_ENV}, else min(3, brokers in the cluster))",
    )
    ensure.add_argument(
        "--timeout", type=duration_type("s", bare_unit="s"), default=DEFAULT_TIMEOUT_S, metavar="DURATION",
        help="how long to wait for the cluster: a duration, or seconds",
    )
    ensure.set_defaults(handler=run_ensure)

    describe = commands.add_parser("describe", help="print the layout: topics, partitions, configs, tasks")
    _add_layout_arguments(describe)
    describe.set_defaults(handler=run_describe)


def _add_layout_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix", help="topic name prefix (default: $SCHEDULER_TOPIC_PREFIX or 'sched')")
    parser.add_argument(
        "--tenant", action="append", default=[], dest="tenants", metavar="T",
        help="also include this tenant's topics (repeatable)",
    )
    parser.add_argument("--topology", help="layout file (default: topologies/scheduler.toml)")


def run_ensure(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    bootstrap = args.bootstrap or settings.bootstrap_servers
    prefix = args.prefix or settings.topic_prefix
    try:
        topology = Topology.load(args.topology)
        report = ensure_topics(
            connection(bootstrap, client_config_of(args)),
            topology,
            prefix,
            args.tenants,
            replication_factor=args.replication_factor,
            timeout=args.timeout,
        )
    except (ValueError, TopicEnsureError, OSError) as exc:  # bad names, layout or factor, refused creation
        print(f"scheduler topics ensure: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KafkaException as exc:
        print(f"scheduler topics ensure: Kafka at {bootstrap} failed: {exc}", file=sys.stderr)
        return kafka_exit_code(exc)
    print_ensure_rows(report.created, report.ok, report.differences)
    print(
        f"{len(report.created)} created, {len(report.ok)} ok, {len(report.differing)} differing "
        f"(bootstrap {bootstrap}, prefix {prefix!r})"
    )
    if not report.clean:
        print(
            "Topics that differ were left unchanged; fix them by hand or recreate them.",
            file=sys.stderr,
        )
        return EXIT_DIFFERS
    return 0


def run_describe(args: argparse.Namespace) -> int:
    prefix = args.prefix or Settings.from_env().topic_prefix
    try:
        topology = Topology.load(args.topology)
        print(describe(topology, prefix, args.tenants))
    except (ValueError, OSError) as exc:  # bad names or layout
        print(f"scheduler topics describe: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def describe(topology: Topology, prefix: str, tenants: list[str]) -> str:
    """Human-readable layout; per-tenant topics appear as templates unless tenants are given."""
    partitioner = ", ".join(f"{k}={v}" for k, v in PRODUCER_PARTITIONER_CONF.items())
    lines = [
        f"layout {topology.source}",
        f"schedule_partitions {topology.schedule_partitions} "
        f"(co-partitioned topics; producers set {partitioner})",
        f"priorities {', '.join(topology.priorities)}",
        f"replication: --replication-factor, else ${REPLICATION_ENV}, else min(3, brokers); "
        "min.insync.replicas follows it (1 -> 1, 2 -> 1, 3 or more -> 2)",
        "",
        "topics:",
    ]
    for spec in topology.topics.values():
        configs = " ".join(f"{k}={v}" for k, v in spec.config.items())
        for name in _names(topology, spec.key, prefix, tenants):
            lines.append(f"  {name}  partitions={spec.partitions}  key={spec.message_key}  {configs}")
        lines.append(f"      {spec.description}")
    for task in topology.tasks.values():
        rule = (
            f"inputs and changelogs co-partitioned ({topology.schedule_partitions})"
            if task.co_partitioned
            else "no co-partitioning rule"
        )
        lines += [
            "",
            f"task {task.name}  group={task.consumer_group(prefix)}  {rule}",
            f"  {task.description}",
            f"  inputs:  {_joined(topology, task.inputs, prefix)}",
            "  stores:  "
            + ", ".join(
                f"{store} -> {_names(topology, topic, prefix, [])[0]}" for store, topic in task.stores.items()
            ),
            f"  outputs: {_joined(topology, task.outputs, prefix)}",
        ]
    return "\n".join(lines)


def _names(topology: Topology, key: str, prefix: str, tenants: list[str]) -> list[str]:
    spec = topology.topics[key]
    if not spec.per_tenant:
        return [topology.topic_name(key, prefix)]
    if not tenants:
        return [spec.name_template.format(prefix=prefix, tenant="{tenant}", priority="{priority}")]
    priorities = topology.priorities if spec.per_priority else (None,)
    return [
        topology.topic_name(key, prefix, tenant=tenant, priority=priority)
        for tenant in tenants
        for priority in priorities
    ]


def _joined(topology: Topology, keys: tuple[str, ...], prefix: str) -> str:
    return ", ".join(name for key in keys for name in _names(topology, key, prefix, []))
