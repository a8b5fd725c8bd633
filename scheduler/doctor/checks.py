"""`scheduler doctor`'s decisions: plain functions from gathered facts (scheduler.doctor.facts) to findings,
one line each, so each rule is tested without a broker and the gathering stays at the edge.

A finding is OK, WARN (works, but not as a production deployment should: slow failover, weaker durability)
or FAIL (something the scheduler needs is missing or broken), with the fix to apply."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

OK, WARN, FAIL = "OK", "WARN", "FAIL"
FAILOVER_WARN_S = 10.0
# Kafka's defaults, which apply when the broker does not say otherwise (KIP-848 consumer groups).
DEFAULT_SESSION_MS = 45_000
DEFAULT_HEARTBEAT_MS = 5_000


@dataclass(frozen=True)
class Finding:
    level: str
    name: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        fix = f" (fix: {self.fix})" if self.fix and self.level != OK else ""
        return f"{self.level} {self.name}: {self.detail}{fix}"


@dataclass(frozen=True)
class TopicFacts:
    """What the cluster says of one topic: partitions, replicas of its least replicated partition and its
    `min.insync.replicas` (None when the config could not be read)."""

    partitions: int
    replicas: int
    min_insync: int | None


@dataclass(frozen=True)
class WantedTopic:
    name: str
    partitions: int


def failover_bound_s(configs: Mapping[str, str]) -> float:
    """How long a dead scheduler's partitions may go undispatched before a survivor takes them: the group
    session (`group.consumer.session.timeout.ms`) plus one heartbeat, after which the survivor hears of them."""
    session = int(configs.get("group.consumer.session.timeout.ms") or DEFAULT_SESSION_MS)
    heartbeat = int(configs.get("group.consumer.heartbeat.interval.ms") or DEFAULT_HEARTBEAT_MS)
    return (session + heartbeat) / 1000


def check_reachable(bootstrap: str, brokers: int, error: str | None) -> Finding:
    if error is not None or brokers == 0:
        return Finding(FAIL, "broker", f"{bootstrap} does not answer: {error or 'no brokers in its metadata'}",
                       "start it (`scheduler broker start`), or set KAFKA_BOOTSTRAP_SERVERS / --client-config")
    return Finding(OK, "broker", f"{bootstrap} answers, {brokers} broker{'s' if brokers != 1 else ''}")


def check_version(configs: Mapping[str, str]) -> Finding:
    """The scheduler's group uses the KIP-848 consumer protocol (Kafka 4.0 and later); workers may use share
    groups (4.1+), which need `share.coordinator.*` settings the broker then reports."""
    protocols = configs.get("group.coordinator.rebalance.protocols")
    if protocols is None or "consumer" not in protocols.split(","):
        return Finding(FAIL, "broker version", "the broker does not offer the consumer group protocol (KIP-848)",
                       "run Apache Kafka 4.0 or later with group.coordinator.rebalance.protocols including consumer")
    share = "share groups available" if "share" in protocols.split(",") or any(
        key.startswith("share.coordinator.") for key in configs) else "no share groups"
    return Finding(OK, "broker version", f"consumer group protocol offered ({protocols}); {share}")


def check_group_settings(configs: Mapping[str, str]) -> Finding:
    bound = failover_bound_s(configs)
    settings = (f"group.consumer.session.timeout.ms={configs.get('group.consumer.session.timeout.ms', 'default')}, "
                f"heartbeat {configs.get('group.consumer.heartbeat.interval.ms', 'default')}")
    if bound > FAILOVER_WARN_S:
        return Finding(WARN, "failover", f"a dead scheduler's partitions wait up to {bound:.1f} s ({settings})",
                       "set group.consumer.session.timeout.ms=6000, group.consumer.heartbeat.interval.ms=500 and "
                       "their minimums (group.consumer.min.*) on every broker (docs/operations.md)")
    return Finding(OK, "failover", f"a dead scheduler's partitions are taken over within {bound:.1f} s ({settings})")


def check_topics(what: str, wanted: Iterable[WantedTopic], found: Mapping[str, TopicFacts], fix: str) -> Finding:
    """Every topic of the layout exists with its partitions (fewer or more break key-to-partition routing)."""
    wanted = list(wanted)
    missing = [topic.name for topic in wanted if topic.name not in found]
    if missing:
        return Finding(FAIL, what, f"{len(missing)} of {len(wanted)} topics missing: {', '.join(missing)}", fix)
    wrong = [f"{topic.name} has {found[topic.name].partitions} partitions, not {topic.partitions}"
             for topic in wanted if found[topic.name].partitions != topic.partitions]
    if wrong:
        return Finding(FAIL, what, "; ".join(wrong), "recreate those topics with the layout's partition count "
                       "(`scheduler topics describe` shows it); adding partitions moves keys")
    return Finding(OK, what, f"{len(wanted)} topics present")


def check_replication(what: str, names: Iterable[str], found: Mapping[str, TopicFacts], factor: int,
                      min_insync: int) -> Finding:
    """Topics below the factor lose records with a broker (FAIL); a lower min.insync.replicas acknowledges
    writes fewer brokers hold (WARN)."""
    present = [name for name in names if name in found]
    if not present:
        return Finding(OK, what, "no topics to check")
    below = [f"{name} ({found[name].replicas})" for name in present if found[name].replicas < factor]
    if below:
        return Finding(FAIL, what, f"below replication factor {factor}: {', '.join(below)}",
                       "raise their replicas with kafka-reassign-partitions.sh (or recreate them empty); "
                       "`scheduler topics ensure` reports them as DIFFERS")
    weak = [f"{name} ({found[name].min_insync})" for name in present
            if (found_min := found[name].min_insync) is not None and found_min < min_insync]
    if weak:
        return Finding(WARN, what, f"min.insync.replicas below {min_insync}: {', '.join(weak)}",
                       f"kafka-configs.sh --alter --entity-type topics --add-config min.insync.replicas={min_insync}")
    return Finding(OK, what, f"{len(present)} topics at replication >= {factor}, min.insync.replicas >= {min_insync}")


def check_acls(tenant: str, needed: set[tuple[str, str, str]], granted: Mapping[str, set[tuple[str, str, str]]] | None,
               ) -> Finding:
    """`needed` and `granted` hold (resource type, name, operation); `granted` by principal, None when the
    broker has no authorizer (every client may do everything: fine on a trusted network only)."""
    name = f"tenant {tenant} ACLs"
    if granted is None:
        return Finding(OK, name, "the broker enforces no ACLs")
    holders = sorted(principal for principal, allowed in granted.items() if needed <= allowed)
    if holders:
        return Finding(OK, name, f"{', '.join(holders)} may run the tenant's workers")
    closest = max(granted.items(), key=lambda item: len(needed & item[1]), default=None)
    short = "no principal holds any of them" if closest is None or not needed & closest[1] else \
        f"{closest[0]} lacks {len(needed - closest[1])} of {len(needed)}"
    return Finding(FAIL, name, f"no principal holds all {len(needed)} ACLs a worker needs ({short})",
                   f"scheduler tenants grant-worker {tenant} --user USER")


def check_connectors(expected: Iterable[str], states: Mapping[str, tuple[str, list[str]]] | None,
                     error: str | None) -> Finding:
    """`states`: per connector, its state and its tasks' states (None with `error` when Connect did not answer)."""
    if states is None:
        return Finding(FAIL, "connect", f"the Connect worker does not answer: {error}",
                       "start it (`scheduler connect start`) or set KAFKA_CONNECT_URL")
    expected = list(expected)
    missing = [name for name in expected if name not in states]
    if missing:
        return Finding(FAIL, "connect", f"connectors missing: {', '.join(missing)}", "scheduler audit ensure")
    broken = [f"{name} {state}/{','.join(tasks) or 'no tasks'}" for name, (state, tasks) in states.items()
              if name in expected and (state != "RUNNING" or not tasks or any(t != "RUNNING" for t in tasks))]
    if broken:
        return Finding(FAIL, "connect", f"not running: {'; '.join(broken)}",
                       "read the task's trace (GET /connectors/NAME/status), fix it, then restart the task")
    return Finding(OK, "connect", f"{len(expected)} ledger connectors running")


def check_ledger(missing_tables: list[str] | None, error: str | None) -> Finding:
    if missing_tables is None:
        return Finding(FAIL, "postgresql", f"the database does not answer: {error}",
                       "start it (`scheduler audit postgres start`) or fix AUDIT_DATABASE_URL")
    if missing_tables:
        return Finding(FAIL, "ledger", f"tables missing: {', '.join(missing_tables)}", "scheduler audit ensure")
    return Finding(OK, "ledger", "every ledger table exists")


def not_configured(name: str, how: str) -> Finding:
    return Finding(OK, name, f"not configured ({how}): not checked")


def exit_code(findings: Iterable[Finding]) -> int:
    """0 with no FAIL, 1 otherwise (an unreachable broker is 6, decided where it is found)."""
    return 1 if any(finding.level == FAIL for finding in findings) else 0
