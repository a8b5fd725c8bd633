"""The contract of the commands issue 33 added (`schedules apply|export`, `occurrences list`, `schedules list
--limit/--after`, `schedules trigger --overlap-policy`): their flags, value forms, `-o` and exit codes by case,
checked without a broker (a closed port is unreachable at once) and without a database."""
from __future__ import annotations

import argparse
import json

import pytest

from helpers.closed_ports import closed_address
from scheduler.cli import build_parser, main
from scheduler.control.apply_cli import plan_json
from scheduler.control.apply_plan import ApplyPlan, Change
from scheduler.control.cli_common import emit

NO_BROKER = closed_address()
OFFLINE = ("--bootstrap", NO_BROKER, "--timeout", "1s")


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch):
    for name in ("SCHEDULER_TENANT", "KAFKA_BOOTSTRAP_SERVERS", "AUDIT_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_apply_flags_and_their_defaults(tmp_path):
    args = parse("schedules", "apply", "-f", "s.yaml")
    assert (args.file, args.format, args.prune, args.dry_run, args.tenant, args.output) == \
        ("s.yaml", None, None, False, None, "table")
    assert parse("schedules", "apply", "--file", "-", "--prune").prune == "cancel"
    assert parse("schedules", "apply", "-f", "x", "--prune", "pause", "--dry-run", "-o", "jsonl").prune == "pause"
    assert parse("schedules", "apply", "-f", "x", "--format", "yaml").format == "yaml"


@pytest.mark.parametrize("argv", [
    ("schedules", "apply"),  # -f is required
    ("schedules", "apply", "-f", "x", "--prune", "delete"),
    ("schedules", "apply", "-f", "x", "--format", "toml"),
    ("schedules", "export", "--format", "csv"),
    ("occurrences", "list", "--tenant", "t"),  # --schedule is required
    ("occurrences", "list", "--tenant", "t", "--schedule", "s", "--status", "SLEEPING"),
    ("occurrences", "list", "--tenant", "t", "--schedule", "s", "--since", "yesterday"),
    ("occurrences", "list", "--tenant", "t", "--schedule", "s", "-o", "xml"),
    ("schedules", "list", "--tenant", "t", "--limit", "0"),
    ("schedules", "list", "--tenant", "t", "--limit", "1001"),
    ("schedules", "trigger", "--tenant", "t", "s", "--overlap-policy", "never"),
])
def test_bad_flags_and_values_are_usage_errors(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == 2


def test_values_take_the_one_grammar(monkeypatch):
    args = parse("occurrences", "list", "--tenant", "t", "--schedule", "s", "--since", "2026-05-04T09:00:00Z",
                 "--status", "dead", "--limit", "5")
    assert (args.since, args.status, args.limit, args.output) == (1_777_885_200_000, "DEAD", 5, "table")
    assert parse("schedules", "trigger", "--tenant", "t", "s", "--overlap-policy", "allow").overlap_policy == "ALLOW"
    assert parse("schedules", "trigger", "--tenant", "t", "s").overlap_policy is None
    assert (parse("schedules", "list", "--tenant", "t", "--limit", "2", "--after", "b").limit) == 2
    monkeypatch.setenv("SCHEDULER_TENANT", "acme")
    monkeypatch.setenv("AUDIT_DATABASE_URL", "postgresql://ledger/db")
    args = parse("occurrences", "list", "--schedule", "s")
    assert (args.tenant, args.database_url) == ("acme", "postgresql://ledger/db")
    assert parse("schedules", "apply", "-f", "x").tenant == "acme" and parse("schedules", "export").tenant == "acme"


def test_a_local_since_needs_tz_and_is_read_in_it(capsys):
    base = ["occurrences", "list", "--tenant", "t", "--schedule", "s", "--since", "2026-03-08T02:30", *OFFLINE]
    assert main(base) == 2  # no --tz: which zone?
    assert main([*base, "--tz", "America/New_York"]) == 2  # a local time the zone skips


def test_apply_exits_2_when_its_file_cannot_be_read_before_any_broker_is_asked(capsys, tmp_path):
    assert main(["schedules", "apply", "-f", str(tmp_path / "missing.jsonl"), *OFFLINE]) == 2
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [")
    assert main(["schedules", "apply", "-f", str(bad), *OFFLINE, "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["code"] == "USAGE"


@pytest.mark.parametrize("argv", [
    ("schedules", "export", "--tenant", "t"),
    ("occurrences", "list", "--tenant", "t", "--schedule", "s"),
])
def test_exit_6_and_one_error_line_when_the_broker_is_unreachable(capsys, argv):
    """(`schedules list --limit` and `trigger --overlap-policy` reach the broker the same way.)"""
    assert main([*argv, *OFFLINE]) == 6
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: UNAVAILABLE")


def test_occurrences_list_without_a_tenant_exits_2_saying_how_to_give_one(capsys):
    assert main(["occurrences", "list", "--schedule", "s", *OFFLINE]) == 2
    assert "SCHEDULER_TENANT" in capsys.readouterr().err


def test_the_apply_summary_in_each_output(capsys):
    plan = ApplyPlan(changes=[Change("update", "acme", "a", 1, 2, {}, {"max_attempts": (3, 5)})], unchanged=1,
                     lines=2)
    for output in ("json", "jsonl"):
        emit(argparse.Namespace(output=output, json=False), plan_json(plan, True), str)
        out = capsys.readouterr().out
        document = json.loads(out)
        assert (document["updated"], document["unchanged"], document["dry_run"]) == (1, 1, True)
        assert document["changes"][0]["diff"] == {"max_attempts": [3, 5]}
        assert (out.count("\n") == 1) == (output == "jsonl")
