"""`scheduler doctor`'s decisions, one rule at a time, from facts alone (no broker)."""
from __future__ import annotations

from scheduler.doctor.checks import (
    FAIL,
    OK,
    WARN,
    Finding,
    TopicFacts,
    WantedTopic,
    check_acls,
    check_connectors,
    check_group_settings,
    check_ledger,
    check_reachable,
    check_replication,
    check_topics,
    check_version,
    exit_code,
    failover_bound_s,
)

FAST = {"group.consumer.session.timeout.ms": "6000", "group.consumer.heartbeat.interval.ms": "500"}


def test_a_line_names_the_fix_only_when_something_is_wrong():
    assert Finding(OK, "x", "fine", "do y").line() == "OK x: fine"
    assert Finding(WARN, "x", "slow", "do y").line() == "WARN x: slow (fix: do y)"


def test_unreachable_broker_fails_with_its_address():
    finding = check_reachable("h:9", 0, "transport failure")
    assert finding.level == FAIL and "h:9" in finding.detail
    assert check_reachable("h:9", 3, None).level == OK


def test_the_failover_bound_is_session_plus_one_heartbeat_and_kafkas_defaults_warn():
    assert failover_bound_s(FAST) == 6.5
    assert failover_bound_s({}) == 50.0
    assert check_group_settings(FAST).level == OK
    slow = check_group_settings({})
    assert slow.level == WARN and "50.0 s" in slow.detail and "group.consumer.session.timeout.ms" in slow.fix
    assert check_group_settings({**FAST, "group.consumer.session.timeout.ms": "10000"}).level == WARN


def test_a_broker_without_the_consumer_protocol_fails():
    assert check_version({"group.coordinator.rebalance.protocols": "classic"}).level == FAIL
    assert check_version({}).level == FAIL
    assert check_version({"group.coordinator.rebalance.protocols": "classic,consumer"}).level == OK


def test_missing_topics_and_wrong_partition_counts_fail_with_the_fix():
    wanted = [WantedTopic("p.commands", 8), WantedTopic("p.schedules", 8)]
    missing = check_topics("topics", wanted, {"p.commands": TopicFacts(8, 3, 2)}, "scheduler topics ensure")
    assert missing.level == FAIL and "p.schedules" in missing.detail and missing.fix == "scheduler topics ensure"
    wrong = check_topics("topics", wanted, {"p.commands": TopicFacts(8, 3, 2), "p.schedules": TopicFacts(4, 3, 2)}, "")
    assert wrong.level == FAIL and "4 partitions, not 8" in wrong.detail
    assert check_topics("topics", wanted, {n.name: TopicFacts(8, 3, 2) for n in wanted}, "").level == OK


def test_topics_below_the_factor_fail_and_a_low_min_insync_warns():
    found = {"a": TopicFacts(8, 1, 1), "b": TopicFacts(8, 3, 2)}
    below = check_replication("replication", ["a", "b"], found, 3, 2)
    assert below.level == FAIL and "a (1)" in below.detail and "b" not in below.detail.split(": ", 1)[1]
    weak = check_replication("replication", ["b"], {"b": TopicFacts(8, 3, 1)}, 3, 2)
    assert weak.level == WARN and "min.insync.replicas=2" in weak.fix
    assert check_replication("replication", ["b"], found, 3, 2).level == OK
    assert check_replication("replication", ["gone"], found, 3, 2).level == OK  # missing: check_topics says so


def test_acls_need_one_principal_holding_every_grant():
    needed = {("TOPIC", "t1", "READ"), ("GROUP", "g", "READ")}
    assert check_acls("acme", needed, None).detail == "the broker enforces no ACLs"
    assert check_acls("acme", needed, {"User:w": set(needed) | {("TOPIC", "x", "READ")}}).level == OK
    partial = check_acls("acme", needed, {"User:w": {("TOPIC", "t1", "READ")}, "User:v": set()})
    assert partial.level == FAIL and "User:w lacks 1 of 2" in partial.detail
    assert "grant-worker acme" in partial.fix
    assert check_acls("acme", needed, {}).level == FAIL


def test_connectors_missing_failed_or_unreachable_fail():
    names = ["a", "b"]
    assert check_connectors(names, None, "refused").level == FAIL
    assert "b" in check_connectors(names, {"a": ("RUNNING", ["RUNNING"])}, None).detail
    failed = check_connectors(names, {"a": ("RUNNING", ["RUNNING"]), "b": ("RUNNING", ["FAILED"])}, None)
    assert failed.level == FAIL and "b RUNNING/FAILED" in failed.detail
    assert check_connectors(names, {n: ("RUNNING", ["RUNNING"]) for n in names}, None).level == OK


def test_ledger_unreachable_or_missing_tables_fail():
    assert check_ledger(None, "refused").name == "postgresql"
    assert check_ledger(["attempts"], None).level == FAIL
    assert check_ledger([], None).level == OK


def test_exit_code_is_one_with_any_fail():
    assert exit_code([Finding(OK, "a", ""), Finding(WARN, "b", "")]) == 0
    assert exit_code([Finding(OK, "a", ""), Finding(FAIL, "b", "")]) == 1
