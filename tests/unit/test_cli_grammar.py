"""The command line's one grammar, per command (docs/cli.md): durations and instants after every flag, the
deprecated aliases, SCHEDULER_TENANT, and the exit-code table, checked without a broker (a closed port is
unreachable at once) and without a database."""
from __future__ import annotations

import argparse
import json

import pytest

from helpers.closed_ports import closed_address, closed_port
from scheduler.cli import build_parser, main
from scheduler.control import topology_cli
from scheduler.kafka.clients import NotAuthorized
from scheduler.worker import cli as worker_cli

NO_BROKER = closed_address()


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch):
    """The defaults come from the environment at parse time: none of the developer's."""
    for name in ("SCHEDULER_TENANT", "KAFKA_BOOTSTRAP_SERVERS", "AUDIT_DATABASE_URL", "KAFKA_CONNECT_URL"):
        monkeypatch.delenv(name, raising=False)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("argv, dest, value", [
    (("schedules", "create", "--tenant", "t", "--every", "1m", "--max-lateness", "5m"), "max_lateness_ms", 300_000),
    (("schedules", "update", "--tenant", "t", "s", "--lease", "30s"), "lease_ms", 30_000),
    (("schedules", "create", "--tenant", "t", "--cron", "* * * * *", "--flexible-window", "1h30m"),
     "flexible_window_ms", 5_400_000),
    (("schedules", "get", "--tenant", "t", "s", "--timeout", "2m"), "timeout", 120.0),
    (("schedules", "get", "--tenant", "t", "s", "--timeout", "30"), "timeout", 30.0),
    (("run", "--horizon", "5m"), "horizon", 300.0),
    (("run", "--horizon", "120"), "horizon", 120.0),
    (("run", "--input-slice", "250ms"), "input_slice_ms", 250),
    (("worker", "--tenant", "t", "--handler", "os:getcwd", "--session-timeout", "45s"), "session_timeout_ms", 45_000),
    (("worker", "--tenant", "t", "--handler", "os:getcwd", "--max-poll-interval", "10m"), "max_poll_interval_ms",
     600_000),
    (("api", "--forecast", "90m"), "forecast_hours", 1.5),
    (("audit", "ensure", "--wait", "2m"), "wait", 120.0),
    (("topics", "ensure", "--timeout", "500ms"), "timeout", 0.5),
    (("broker", "start", "--timeout", "3m"), "timeout", 180.0),
    (("connect", "stop", "--timeout", "1m"), "timeout", 60.0),
    (("demo", "--duration", "1h"), "duration", 3600.0),
])
def test_every_duration_flag_takes_the_grammar(argv, dest, value):
    assert getattr(parse(*argv), dest) == value


@pytest.mark.parametrize("argv, old, dest, value", [
    (("schedules", "create", "--tenant", "t", "--every", "1m"), ("--max-lateness-ms", "5000"), "max_lateness_ms", 5000),
    (("schedules", "create", "--tenant", "t", "--every", "1m"), ("--lease-ms", "30000"), "lease_ms", 30000),
    (("schedules", "backfill", "--tenant", "t", "s", "--from", "0", "--to", "1"), ("--overlap", "queue_one"),
     "overlap_policy", "QUEUE_ONE"),
    (("run",), ("--input-slice-ms", "250"), "input_slice_ms", 250),
    (("worker", "--tenant", "t", "--handler", "os:getcwd"), ("--session-timeout-ms", "45000"), "session_timeout_ms",
     45000),
    (("api",), ("--forecast-hours", "2"), "forecast_hours", 2.0),
    (("tenants", "register", "t"), ("--trigger-rate-per-s", "50"), "trigger_rate_per_s", 50.0),
    (("tenants", "set-quota", "t"), ("--catch-up-rate-per-s", "5"), "catch_up_rate_per_s", 5.0),
])
def test_an_old_flag_still_works_and_says_once_what_replaces_it(capsys, argv, old, dest, value):
    assert getattr(parse(*argv, *old), dest) == value
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"note: {old[0]} is deprecated") and "docs/cli.md" in err[0]


def test_the_new_names_of_renamed_flags_are_silent(capsys):
    args = parse("schedules", "backfill", "--tenant", "t", "s", "--from", "0", "--to", "1",
                 "--overlap-policy", "skip_if_running")
    tenants = parse("tenants", "register", "t", "--trigger-rate", "50", "--catch-up-rate", "5")
    assert args.overlap_policy == "SKIP_IF_RUNNING"
    assert (tenants.trigger_rate_per_s, tenants.catch_up_rate_per_s, tenants.max_concurrency) == (50.0, 5.0, None)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv", [
    ("schedules", "create", "--tenant", "t", "--every", "1m", "--max-lateness", "5"),
    ("schedules", "create", "--tenant", "t", "--every", "1m", "--max-lateness", "5m", "--max-lateness-ms", "5"),
    ("schedules", "create", "--tenant", "t", "--every", "1m", "--start", "yesterday"),
    ("schedules", "get", "--tenant", "t", "s", "--timeout", "soon"),
    ("schedules", "backfill", "--tenant", "t", "s", "--from", "0", "--to", "1", "--overlap-policy", "never"),
    ("run", "--horizon", "-5m"),
    ("worker", "--tenant", "t", "--handler", "os:getcwd", "--session-timeout", "45"),
    ("api", "--forecast", "6"),
    ("audit", "ensure", "--wait", "1w"),
    ("topics", "ensure", "--timeout", "x"),
    ("worker", "--handler", "os:getcwd"),
    ("reconcile", "--from", "0", "--to", "1"),
    ("reconcile", "--tenant", "t", "--from", "0", "--to", "1", "--jobs", "0"),
])
def test_a_bad_value_or_a_missing_tenant_is_a_usage_error(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_scheduler_tenant_is_the_default_tenant(monkeypatch):
    monkeypatch.setenv("SCHEDULER_TENANT", "acme")
    assert parse("schedules", "get", "s").tenant == "acme"
    assert parse("schedules", "get", "--tenant", "globex", "s").tenant == "globex"
    assert parse("worker", "--handler", "os:getcwd").tenant == "acme"
    assert parse("reconcile", "--from", "0", "--to", "1").tenant == "acme"
    assert parse("schedules", "preview", "s").tenant == "acme"


@pytest.mark.parametrize("verb", [("schedules", "get", "s"), ("schedules", "list"), ("occurrences", "get", "o"),
                                  ("schedules", "trigger", "s")])
def test_a_control_command_without_a_tenant_exits_2_saying_how_to_give_one(capsys, verb):
    assert main([*verb, "--bootstrap", NO_BROKER, "--timeout", "1s"]) == 2
    assert capsys.readouterr().err.strip() == "error: USAGE: no tenant: give --tenant T or set SCHEDULER_TENANT"


def test_local_instants_are_read_in_tz_and_refused_in_a_dst_gap_with_exit_2(capsys):
    gap = ["schedules", "backfill", "--tenant", "t", "s", "--from", "2026-03-08T02:30", "--to", "2026-03-09T00:00",
           "--tz", "America/New_York", "--bootstrap", NO_BROKER, "--timeout", "1s"]
    assert main(gap) == 2
    assert "does not exist in America/New_York" in capsys.readouterr().err
    assert main(gap[:6] + ["2026-03-08T01:30"] + gap[7:9]) == 2  # no --tz: which zone?
    assert "no offset" in capsys.readouterr().err


def test_control_commands_exit_6_when_the_broker_is_unreachable(capsys):
    """One command for all of them (they share `guarded`): the client waits about 10 s for the cluster
    whatever --timeout says, so the others are left to the integration tests."""
    argv = ("schedules", "create", "--tenant", "t", "--every", "1m", "--max-lateness", "1m")
    assert main([*argv, "--bootstrap", NO_BROKER, "--timeout", "1s"]) == 6
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: ")


def test_topics_ensure_exits_6_when_the_broker_is_unreachable(capsys):
    assert main(["topics", "ensure", "--bootstrap", NO_BROKER, "--prefix", "nobroker", "--timeout", "1s"]) == 6
    assert NO_BROKER in capsys.readouterr().err


def test_reconcile_exits_6_when_the_database_is_unreachable_and_2_without_one(capsys, monkeypatch):
    window = ["reconcile", "--tenant", "t", "--from", "2026-05-04T00:00:00Z", "--to", "1777939200000"]
    assert main([*window, "--database-url", f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres"]) == 6
    assert capsys.readouterr().err.startswith("error: cannot reach the audit database")
    assert main(window) == 2
    assert "no audit database" in capsys.readouterr().err


def test_audit_ensure_exits_6_when_the_database_is_unreachable(capsys, monkeypatch):
    monkeypatch.setenv("AUDIT_DATABASE_URL", f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres")
    monkeypatch.setenv("KAFKA_CONNECT_URL", f"http://127.0.0.1:{closed_port()}")
    assert main(["audit", "ensure", "--wait", "0"]) == 6
    assert capsys.readouterr().err.startswith("scheduler audit ensure: ")


def test_the_worker_exits_5_when_the_acls_refuse_it(capsys, monkeypatch):
    class Refused:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def run(self) -> None:
            from confluent_kafka import KafkaError
            raise NotAuthorized("topic sched.schedules.t", KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    monkeypatch.setattr(worker_cli, "Worker", Refused)
    assert main(["worker", "--tenant", "t", "--handler", "os:getcwd"]) == 5
    assert "not authorized for topic sched.schedules.t" in capsys.readouterr().err


def test_ctrl_c_exits_130(monkeypatch):
    def interrupted(_args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(topology_cli, "run_describe", interrupted)  # registered when the parser is built
    assert main(["topics", "describe"]) == 130


def test_listing_output_is_a_table_json_or_json_lines(capsys, tmp_path):
    keys = str(tmp_path / "keys.json")
    for tenant in ("acme", "globex"):
        assert main(["api", "keys", "create", "--tenant", tenant, "--keys", keys, "--json"]) == 0
    capsys.readouterr()
    assert main(["api", "keys", "list", "--keys", keys, "-o", "jsonl"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(json.loads(line)["tenant"] for line in lines) == ["acme", "globex"]
    assert main(["api", "keys", "list", "--keys", keys, "--json"]) == 0
    assert sorted(k["tenant"] for k in json.loads(capsys.readouterr().out)) == ["acme", "globex"]
    assert main(["api", "keys", "list", "--keys", keys, "-o", "table"]) == 0
    assert sorted(line.split()[1] for line in capsys.readouterr().out.splitlines()) == ["acme", "globex"]
    assert main(["api", "keys", "revoke", "nope", "--keys", keys, "--json"]) == 3  # not found
    assert json.loads(capsys.readouterr().out)["code"] == "UNKNOWN_KEY"
    with pytest.raises(SystemExit) as exit_:
        main(["api", "keys", "list", "--keys", keys, "-o", "yaml"])
    assert exit_.value.code == 2
