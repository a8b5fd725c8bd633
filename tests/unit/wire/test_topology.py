"""The topic layout file and the names rendered from it (no broker needed)."""
from __future__ import annotations

import argparse
import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest

from scheduler.control import topology_cli
from scheduler.wire.topology import (
    MAX_TOPIC_NAME_LENGTH,
    InvalidNameError,
    Topology,
    TopologyError,
    default_topology_file,
)

SEVEN_DAYS_MS = str(7 * 24 * 3600 * 1000)
THIRTY_DAYS_MS = str(30 * 24 * 3600 * 1000)


@pytest.fixture(scope="module")
def topology() -> Topology:
    return Topology.load()


@pytest.fixture
def raw_layout() -> dict[str, Any]:
    with default_topology_file().open("rb") as fh:
        return tomllib.load(fh)


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scheduler")
    topology_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_layout_has_the_documented_topics(topology: Topology) -> None:
    assert set(topology.topics) == {
        "commands", "schedules", "timeline-changelog", "occurrence-status-changelog",
        "command-results", "attempts", "occurrence-events", "tenants", "occurrences", "schedule-view", "dead-letters",
        "admissions", "admission-results", "admission-changelog", "api-keys",
    }
    assert topology.schedule_partitions == 8
    assert topology.priorities == ("high", "normal", "low")


def test_shared_topic_names(topology: Topology) -> None:
    assert topology.topic_name("commands", "sched") == "sched.commands"
    assert topology.topic_name("schedules", "prod") == "prod.schedules"
    assert topology.topic_name("occurrence-status-changelog", "sched") == "sched.occurrence-status-changelog"


def test_per_tenant_topic_names(topology: Topology) -> None:
    assert topology.topic_name("occurrences", "sched", tenant="acme", priority="high") == "sched.occurrences.acme.high"
    assert topology.topic_name("dead-letters", "sched", tenant="acme") == "sched.dead-letters.acme"
    names = [t.name for t in topology.tenant_topics("sched", "acme")]
    assert names == [
        "sched.occurrences.acme.high",
        "sched.occurrences.acme.normal",
        "sched.occurrences.acme.low",
        "sched.schedules.acme",
        "sched.dead-letters.acme",
    ]


def test_rendered_topics_are_shared_plus_per_tenant(topology: Topology) -> None:
    shared = topology.shared_topics("sched")
    both = topology.rendered_topics("sched", ["a", "b"])
    assert len(both) == len(shared) + 2 * len(topology.tenant_topics("sched", "a"))
    assert len({t.name for t in both}) == len(both)


@pytest.mark.parametrize(
    ("key", "kwargs", "message"),
    [
        ("occurrences", {"priority": "high"}, "per tenant"),
        ("occurrences", {"tenant": "acme"}, "needs priority"),
        ("occurrences", {"tenant": "acme", "priority": "urgent"}, "needs priority"),
        ("commands", {"tenant": "acme"}, "shared by all tenants"),
        ("dead-letters", {"tenant": "acme", "priority": "low"}, "no priorities"),
    ],
)
def test_topic_name_rejects_wrong_arguments(
    topology: Topology, key: str, kwargs: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        topology.topic_name(key, "sched", **kwargs)


def test_unknown_topic_key(topology: Topology) -> None:
    with pytest.raises(KeyError, match="no topic 'nope'"):
        topology.topic_name("nope", "sched")


@pytest.mark.parametrize("tenant", ["", ".", "..", "a/b", "a b", "ümlaut", "a:b", "x*"])
def test_illegal_tenant_names_are_rejected(topology: Topology, tenant: str) -> None:
    with pytest.raises(InvalidNameError, match="tenant name"):
        topology.topic_name("dead-letters", "sched", tenant=tenant)


@pytest.mark.parametrize("tenant", ["acme", "ACME-2", "a.b_c-1", "0"])
def test_legal_tenant_names_are_accepted(topology: Topology, tenant: str) -> None:
    assert topology.topic_name("dead-letters", "sched", tenant=tenant).endswith(tenant)


def test_tenant_name_length_is_bounded_by_the_longest_topic(topology: Topology) -> None:
    longest_fixed = len("sched.occurrences..normal")
    fits = "t" * (MAX_TOPIC_NAME_LENGTH - longest_fixed)
    assert len(topology.topic_name("occurrences", "sched", tenant=fits, priority="normal")) == MAX_TOPIC_NAME_LENGTH
    with pytest.raises(InvalidNameError, match="at most 249"):
        topology.tenant_topics("sched", fits + "t")


def test_illegal_prefix_is_rejected(topology: Topology) -> None:
    with pytest.raises(InvalidNameError, match="prefix name"):
        topology.topic_name("commands", "my prefix")


def test_scheduler_task_inputs_and_changelogs_are_co_partitioned(topology: Topology) -> None:
    task = topology.tasks["scheduler"]
    assert task.inputs == ("commands", "attempts", "admissions", "admission-results")
    assert dict(task.stores) == {
        "schedules": "schedules",
        "timeline": "timeline-changelog",
        "occurrence-status": "occurrence-status-changelog",
        "admissions": "admission-changelog",
    }
    for key in (*task.inputs, *task.stores.values()):
        assert topology.topics[key].partitions == topology.schedule_partitions, key
    for key in task.stores.values():
        assert topology.topics[key].compacted, key
    assert task.consumer_group("sched") == "sched.scheduler"


def test_cleanup_and_retention(topology: Topology) -> None:
    config = {key: dict(spec.config) for key, spec in topology.topics.items()}
    assert config["commands"] == {"cleanup.policy": "delete", "retention.ms": SEVEN_DAYS_MS}
    assert config["schedules"]["cleanup.policy"] == "compact"
    assert config["occurrence-status-changelog"]["cleanup.policy"] == "compact,delete"
    assert config["occurrence-status-changelog"]["retention.ms"] == SEVEN_DAYS_MS
    assert config["occurrence-events"]["retention.ms"] == THIRTY_DAYS_MS
    assert config["dead-letters"]["retention.ms"] == THIRTY_DAYS_MS
    for spec in topology.topics.values():
        if spec.compacted:
            assert spec.config["min.compaction.lag.ms"] == "0", spec.key
    assert topology.topics["tenants"].partitions == 1
    assert topology.topics["occurrences"].partitions == 8


def test_schedule_partitions_drives_every_co_partitioned_topic(tmp_path: Path) -> None:
    text = default_topology_file().read_text().replace("schedule_partitions = 8", "schedule_partitions = 12")
    path = tmp_path / "layout.toml"
    path.write_text(text)
    topology = Topology.load(path)
    co_partitioned = [spec for spec in topology.topics.values() if spec.co_partitioned]
    assert co_partitioned and all(spec.partitions == 12 for spec in co_partitioned)
    assert topology.topics["tenants"].partitions == 1


def test_load_follows_the_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "other.toml"
    path.write_text(default_topology_file().read_text().replace("schedule_partitions = 8", "schedule_partitions = 3"))
    monkeypatch.setenv("SCHEDULER_TOPOLOGY_FILE", str(path))
    assert Topology.load().schedule_partitions == 3


def _broken(raw: dict[str, Any], edit: Any) -> dict[str, Any]:
    data = copy.deepcopy(raw)
    edit(data)
    return data


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["topics"]["attempts"].update(co_partitioned=False, partitions=3), "does not use schedule_partitions"),
        (lambda d: d["topics"]["schedules"]["config"].update({"cleanup.policy": "delete"}), "must be compacted"),
        (lambda d: d["tasks"]["scheduler"]["inputs"].append("missing"), "unknown topics"),
        (lambda d: d["topics"]["commands"].update(partitions=8), "either `co_partitioned = true` or `partitions`"),
        (lambda d: d["topics"]["dead-letters"].update(name="{prefix}.dead-letters"), "must use exactly"),
        (lambda d: d["topics"]["commands"]["config"].pop("cleanup.policy"), "cleanup.policy"),
        (lambda d: d.update(schedule_partitions=0), "positive integer"),
        (lambda d: d["tasks"]["scheduler"].update(consumer_group="scheduler"), "consumer_group"),
    ],
)
def test_inconsistent_layouts_fail_at_load(raw_layout: dict[str, Any], edit: Any, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        Topology.from_dict(_broken(raw_layout, edit), source=default_topology_file())


def test_cli_rejects_a_bad_tenant_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli(["topics", "ensure", "--bootstrap", "127.0.0.1:1", "--tenant", "acme/prod"])
    assert code == topology_cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "tenant name 'acme/prod'" in err and "'/'" in err


def test_cli_describe_lists_rendered_topics_and_the_task(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["topics", "describe", "--prefix", "demo", "--tenant", "acme"]) == 0
    out = capsys.readouterr().out
    assert "demo.occurrences.acme.low  partitions=8" in out
    assert "demo.schedules  partitions=8" in out
    assert "task scheduler  group=demo.scheduler" in out
    assert "partitioner=murmur2_random" in out
