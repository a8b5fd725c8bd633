"""`scheduler doctor [--tenant T]`: checks a deployment the way an operator would before trusting it, and
prints one line per check, `OK|WARN|FAIL name: detail (fix: ...)`.

Exit 0 with no FAIL, 1 with one, 6 when the broker does not answer (nothing else can be checked then),
2 for unusable client settings. The decisions are scheduler.doctor.checks; the questions scheduler.doctor.facts."""
from __future__ import annotations

import argparse
import os
import sys

from confluent_kafka import KafkaException

from scheduler.cli_support import EXIT_BAD_INPUT, EXIT_UNAVAILABLE
from scheduler.config import TENANT_ENV, Settings
from scheduler.doctor import checks, facts
from scheduler.doctor.checks import Finding, WantedTopic
from scheduler.kafka.client_config import add_client_config, client_config_of
from scheduler.kafka.clients import connection
from scheduler.kafka.replication import ReplicationError, min_insync_replicas, wanted_factor
from scheduler.timing.cli_values import duration_type
from scheduler.wire.topology import Topology


def register(subparsers: argparse._SubParsersAction) -> None:
    doctor = subparsers.add_parser(
        "doctor", help="check the broker, topics, a tenant's ACLs, Connect and PostgreSQL; one line per check",
        description="Prints `OK|WARN|FAIL name: detail (fix: ...)` per check. Exit status: 0 no FAIL, 1 some FAIL, "
                    "2 unusable client settings, 6 the broker unreachable (docs/operations.md, \"scheduler doctor\").")
    doctor.add_argument("--tenant", default=os.environ.get(TENANT_ENV) or None,
                        help=f"also check this tenant's topics and worker ACLs (default ${TENANT_ENV})")
    doctor.add_argument("--bootstrap", help="bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS)")
    doctor.add_argument("--timeout", type=duration_type("s", bare_unit="s"), default=10.0, metavar="DURATION",
                        help="how long each question may take (default 10s)")
    add_client_config(doctor)
    doctor.set_defaults(handler=run_doctor)


def run_doctor(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    bootstrap = args.bootstrap or settings.bootstrap_servers
    try:
        conf = connection(bootstrap, client_config_of(args))
    except (ValueError, OSError) as exc:
        print(f"scheduler doctor: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    admin = facts.admin_for(conf)
    try:
        brokers = admin.list_topics(timeout=args.timeout).brokers
    except KafkaException as exc:
        _print([checks.check_reachable(bootstrap, 0, str(exc.args[0]))])
        return EXIT_UNAVAILABLE
    findings = [checks.check_reachable(bootstrap, len(brokers), None)]
    try:
        findings += kafka_findings(admin, settings.topic_prefix, len(brokers), min(brokers), args)
    except KafkaException as exc:
        findings.append(Finding(checks.FAIL, "broker", f"stopped answering: {exc.args[0]}", "see the broker's log"))
    findings += ledger_findings(settings.topic_prefix)
    _print(findings)
    return checks.exit_code(findings)


def kafka_findings(admin: facts.AdminClient, prefix: str, brokers: int, broker_id: int,
                   args: argparse.Namespace) -> list[Finding]:
    topology = Topology.load()
    configs = facts.broker_configs(admin, broker_id, args.timeout)
    findings = [checks.check_version(configs), checks.check_group_settings(configs)]
    try:
        factor = wanted_factor(brokers)
    except ReplicationError as exc:
        return [*findings, Finding(checks.FAIL, "replication", str(exc), "fix SCHEDULER_REPLICATION_FACTOR")]
    groups = [("topics", "replication", topology.shared_topics(prefix), "scheduler topics ensure")]
    if args.tenant:
        groups.append((f"tenant {args.tenant} topics", f"tenant {args.tenant} replication",
                       topology.tenant_topics(prefix, args.tenant), f"scheduler tenants register {args.tenant}"))
    for what, replication, rendered, fix in groups:
        found = facts.topic_facts(admin, [topic.name for topic in rendered], args.timeout)
        findings.append(checks.check_topics(what, [WantedTopic(t.name, t.partitions) for t in rendered], found, fix))
        findings.append(checks.check_replication(replication, [t.name for t in rendered], found, factor,
                                                 min_insync_replicas(factor)))
    if args.tenant:
        from scheduler.control.acls import worker_acls

        needed = {facts.grant_of(binding) for binding in worker_acls(topology, prefix, args.tenant, "any")}
        # A broker without an authorizer answers DescribeAcls with no bindings: its config tells the two apart.
        granted = facts.granted_acls(admin, args.timeout) if configs.get("authorizer.class.name") else None
        findings.append(checks.check_acls(args.tenant, needed, granted))
    return findings


def ledger_findings(prefix: str) -> list[Finding]:
    """Connect and PostgreSQL, where configured (their variables, or the local services running)."""
    from scheduler.audit.cli import connect_url
    from scheduler.audit.connectors import ConnectorError, connector_name
    from scheduler.audit.postgres import PostgresError, database_url
    from scheduler.audit.tables import TABLES, schema_name

    findings = []
    try:
        url = connect_url()
    except ConnectorError:
        findings.append(checks.not_configured("connect", "KAFKA_CONNECT_URL unset, no local worker"))
    else:
        names = [connector_name(prefix, table) for table in TABLES]
        findings.append(checks.check_connectors(names, *facts.connector_states(url, names)))
    try:
        database = database_url()
    except PostgresError:
        findings.append(checks.not_configured("postgresql", "AUDIT_DATABASE_URL unset, no local server"))
    else:
        findings.append(checks.check_ledger(*facts.missing_ledger_tables(
            database, schema_name(prefix), [table.name for table in TABLES])))
    return findings


def _print(findings: list[Finding]) -> None:
    for finding in findings:
        print(finding.line(), flush=True)
