"""`scheduler schedules|tenants|occurrences|api keys` as a script sees them: JSON output and exit codes."""
from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from control_env import cli, cli_text, control_env
from engine_harness import FakeWorker
from ledger_sink import sink_topics

from scheduler.api.keys import KeyStore
from scheduler.audit.tables import ensure_tables, schema_name
from scheduler.cli_support import DeprecatedAlias
from scheduler.control.client import make_spec


@pytest.fixture(scope="module")
def env(kafka_bootstrap, tmp_path_factory):
    yield from control_env(kafka_bootstrap, tmp_path_factory.mktemp("cli"))


def test_schedule_commands_and_their_exit_codes(env):
    sid = f"cli-{uuid.uuid4().hex[:6]}"
    code, created = cli(env, "schedules", "create", "--tenant", "acme", "--cron", "0 9 * * MON-FRI",
                        "--tz", "Asia/Tokyo", "--id", sid, "--payload", "{}")
    assert code == 0 and created["status"] == "ACCEPTED" and created["version"] == 1
    code, got = cli(env, "schedules", "get", "--tenant", "acme", sid)
    assert code == 0 and got["spec"]["expression"] == "0 9 * * MON-FRI" and got["spec"]["payload"] == "{}"
    code, listed = cli(env, "schedules", "list", "--tenant", "acme")
    assert code == 0 and sid in [s["schedule_id"] for s in listed]
    code, diff = cli(env, "schedules", "update", "--tenant", "acme", sid, "--cron", "0 10 * * MON-FRI", "--dry-run")
    assert code == 0 and diff["before_ms"] != diff["after_ms"]
    code, updated = cli(env, "schedules", "update", "--tenant", "acme", sid, "--cron", "0 10 * * MON-FRI")
    assert code == 0 and updated["version"] == 2
    assert cli(env, "schedules", "update", "--tenant", "acme", sid, "--max-attempts", "5",
               "--expected-version", "1")[0] == 4
    assert cli(env, "schedules", "pause", "--tenant", "acme", sid)[0] == 0
    assert cli(env, "schedules", "resume", "--tenant", "acme", sid)[0] == 0
    code, fired = cli(env, "schedules", "trigger", "--tenant", "acme", sid)
    assert code == 0 and len(fired["next_fires_ms"]) == 1
    code, back = cli(env, "schedules", "backfill", "--tenant", "acme", sid, "--from", "2026-01-05T00:00:00Z",
                     "--to", "2026-01-09T23:59:59Z")
    assert code == 0 and len(back["next_fires_ms"]) == 5
    code, fires = cli(env, "schedules", "preview", "--tenant", "acme", sid, "--count", "3")
    assert code == 0 and len(fires) == 3
    assert cli(env, "schedules", "get", "--tenant", "globex", sid)[0] == 3
    assert cli(env, "schedules", "cancel", "--tenant", "acme", sid)[0] == 0
    code, error = cli(env, "schedules", "resume", "--tenant", "acme", sid)
    assert code == 4 and error["code"] == "INVALID_STATE"
    code, error = cli(env, "schedules", "create", "--tenant", "acme", "--cron", "0 9 * *")
    assert code == 2 and error["code"] == "INVALID_SPEC"
    assert cli(env, "occurrences", "get", "--tenant", "acme", "0" * 32)[0] == 3
    assert cli(env, "occurrences", "rerun", "--tenant", "acme", "0" * 32)[0] == 3
    assert cli(env, "schedules", "get", "--tenant", "acme", sid, prefix="missing-prefix")[0] == 6


def test_tenant_commands_quota_and_delete(env):
    name = f"cli{uuid.uuid4().hex[:6]}"
    code, tenant = cli(env, "tenants", "register", name, "--max-active-schedules", "1")
    assert code == 0 and tenant["max_active_schedules"] == 1
    assert cli(env, "tenants", "register", name)[0] == 4
    assert cli(env, "tenants", "register", "bad/name")[0] == 2
    assert name in [t["tenant"] for t in cli(env, "tenants", "list")[1]]
    assert cli(env, "tenants", "get", name)[1]["max_active_schedules"] == 1
    assert cli(env, "schedules", "create", "--tenant", name, "--every", "1h", "--id", f"{name}-1")[0] == 0
    code, error = cli(env, "schedules", "create", "--tenant", name, "--every", "1h", "--id", f"{name}-2")
    assert code == 5 and error["code"] == "QUOTA"
    assert cli(env, "tenants", "set-quota", name, "--max-active-schedules", "2")[1]["max_active_schedules"] == 2
    code, error = cli(env, "tenants", "delete", name)
    assert code == 4 and error["code"] == "TENANT_HAS_SCHEDULES"
    assert cli(env, "tenants", "delete", name, "--force")[0] == 0
    assert cli(env, "tenants", "get", name)[0] == 3


def test_api_keys_create_prints_the_key_once_and_stores_its_hash(env, tmp_path):
    key_file = tmp_path / "keys.json"
    code, made = cli(env, "api", "keys", "create", "--tenant", "acme", "--keys", str(key_file))
    assert code == 0 and made["key"].startswith("sk_")
    assert made["key"].split("_", 2)[2] not in key_file.read_text()
    principal = KeyStore(key_file).verify(made["key"])
    assert principal is not None and principal.tenant == "acme"
    assert KeyStore(key_file).verify(made["key"] + "x") is None
    assert cli(env, "api", "keys", "create", "--keys", str(key_file))[0] == 2


# A value for every option of `schedules create` that is not one of the spec's numbers or choices; an option
# added without a value here fails the test below, so the CLI never offers a field nobody has tried.
CREATE_VALUES = {"tenant": "acme", "every": "90m", "time_zone": "Europe/Berlin", "payload": "every-option",
                 "start": "2030-01-01T00:00:00Z", "end": "2031-01-01T00:00:00Z", "anchor": "2030-01-01T00:00:00Z",
                 "idempotency_key": "every-option-key", "max_fires": "7", "max_attempts": "4"}
NOT_SPEC_FIELDS = {"help", "bootstrap", "prefix", "timeout", "json", "verbose", "client_config", "tenant", "id", "idempotency_key",
                   "cron", "at", "rrule"}


def test_create_with_every_option_the_cli_offers(env):
    from scheduler.cli import build_parser

    create = build_parser()._subparsers._group_actions[0].choices["schedules"]._subparsers._group_actions[0] \
        .choices["create"]
    sid = f"every-{uuid.uuid4().hex[:6]}"
    argv, given = ["schedules", "create", "--id", sid], {}
    for action in create._actions:
        if action.dest in NOT_SPEC_FIELDS or not action.option_strings or isinstance(action, DeprecatedAlias):
            if action.dest == "tenant":
                argv += ["--tenant", "acme"]
            continue  # a deprecated alias is given its new name (the aliases: tests/unit/test_cli_grammar.py)
        expected = None
        if action.choices:
            value = str(list(action.choices)[-1])
        elif action.dest in CREATE_VALUES:
            value = CREATE_VALUES[action.dest]
        elif action.metavar == "DURATION":  # `--lease 2m`: the spec's *_ms field holds 120000
            value, expected = "2m", "120000"
        else:
            assert action.type is int, f"give {action.option_strings[0]} a value in CREATE_VALUES"
            value = "120000"
        argv += [action.option_strings[0], value]
        given[action.dest] = expected or value
    code, created = cli(env, *argv)
    assert code == 0 and created["status"] == "ACCEPTED", created
    code, got = cli(env, "schedules", "get", "--tenant", "acme", sid)
    assert code == 0
    spec = got["spec"]
    for dest, value in given.items():
        if dest in ("start", "end", "anchor"):
            assert spec[f"{dest}_at_ms"] is not None, dest
        elif dest == "every":  # the one kind that takes every other option, --anchor included
            assert spec["kind"] == "RATE" and spec["expression"] == f"every {value}"
        else:
            assert str(spec[dest]) == value, (dest, spec[dest], value)


def test_export_apply_round_trip_update_with_its_diff_and_prune(env, tmp_path: Path):
    """export -> apply sends nothing; an edited entry is an UPDATE whose dry run shows the diff; a new entry is
    created; --prune cancels what the file no longer lists; the file exported after it applies as a no-op."""
    tenant = f"apply{uuid.uuid4().hex[:6]}"
    env.plane.tenants.register(tenant)
    for sid, spec in (("a", make_spec("CRON", "0 9 * * *", "Asia/Tokyo")), ("b", make_spec("RATE", "every 90m")),
                      ("c", make_spec("CRON", "0 1 * * *", payload=b"{}", max_lateness_ms=600_000))):
        env.plane.client.create(tenant, spec, schedule_id=sid)  # setup: `schedules create` is tested above
    exported = cli_text(env, "schedules", "export", "--tenant", tenant)
    assert exported.returncode == 0 and len(exported.stdout.splitlines()) == 3
    everyone = cli_text(env, "schedules", "export").stdout.splitlines()  # no --tenant: every tenant's
    assert set(exported.stdout.splitlines()) <= set(everyone)  # every tenant's, this one's among them
    first = tmp_path / "schedules.jsonl"
    first.write_text(exported.stdout)
    sent_before = env.commands_end()
    code, summary = cli(env, "schedules", "apply", "-f", str(first), "--prune")
    assert code == 0 and (summary["unchanged"], summary["changes"]) == (3, []), summary
    assert env.commands_end() == sent_before  # nothing was sent

    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    lines[0]["spec"]["expression"] = "30 9 * * *"
    edited = [lines[0], lines[1], {"schedule_id": "d", "spec": {"kind": "RATE", "expression": "every 5m"}}]
    second = tmp_path / "edited.jsonl"
    second.write_text("".join(json.dumps(line) + "\n" for line in edited))
    dry = cli_text(env, "schedules", "apply", "-f", str(second), "--tenant", tenant, "--prune", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"update   {tenant}/a v1 (line 1)" in dry.stdout
    assert "    expression: '0 9 * * *' -> '30 9 * * *'" in dry.stdout
    assert f"create   {tenant}/d (line 3)" in dry.stdout and f"cancel   {tenant}/c v1 (not in the file)" in dry.stdout
    assert env.commands_end() == sent_before

    code, summary = cli(env, "schedules", "apply", "-f", str(second), "--tenant", tenant, "--prune")
    assert code == 0 and (summary["created"], summary["updated"], summary["canceled"], summary["unchanged"]) == \
        (1, 1, 1, 1), summary
    assert cli(env, "schedules", "get", "--tenant", tenant, "a")[1]["spec"]["expression"] == "30 9 * * *"
    assert cli(env, "schedules", "get", "--tenant", tenant, "c")[1]["state"] == "CANCELED"
    assert cli(env, "schedules", "get", "--tenant", tenant, "d")[1]["state"] == "ACTIVE"

    again = cli_text(env, "schedules", "export", "--tenant", tenant, "--format", "yaml")
    third = tmp_path / "again.yaml"
    third.write_text(again.stdout)
    done = cli_text(env, "schedules", "apply", "-f", str(third), "--prune")
    assert done.returncode == 0 and done.stdout.strip() == "3 entries: nothing to do (3 unchanged)", done.stdout

    third.write_text(again.stdout + f"- {{tenant: {tenant}, schedule_id: e, spec: {{kind: CRON, expression: '0 9 * *'}}}}\n")
    code, summary = cli(env, "schedules", "apply", "-f", str(third))
    assert code == 1 and summary["rejections"][0]["reason"] == "INVALID_SPEC" and summary["rejections"][0]["line"] == 4
    assert cli(env, "schedules", "apply", "-f", str(tmp_path / "missing.jsonl"))[0] == 2


def test_occurrences_list_from_the_view_and_from_the_ledger(env, audit_postgres):
    """A schedule's run history: the view's rows, its filters, a ledger that does not answer (the view, said on
    stderr), then the same occurrences from a ledger written from the topics as the sink writes them."""
    sid = f"runs-{uuid.uuid4().hex[:6]}"
    client = env.plane.client  # setup in process: create and trigger through the CLI are tested above
    client.create("acme", make_spec("CRON", "0 0 1 1 *", max_attempts=1), schedule_id=sid)
    reader = env.occurrences(("acme",))
    try:
        for _ in range(2):
            client.trigger_now("acme", sid)
        found = reader.until(lambda rs: sum(r.record["schedule_id"] == sid for r in rs) >= 2, timeout=20)
    finally:
        reader.close()
    first, second = sorted((r.record for r in found if r.record["schedule_id"] == sid),
                           key=lambda o: o["scheduled_for_ms"])
    worker = FakeWorker(env.bootstrap, env.prefix)
    worker.run(first, "SUCCEEDED")
    worker.run(second, "FAILED", error_message="boom")
    deadline = time.monotonic() + 30
    while {s["state"] for s in client.occurrences_of("acme", sid)} != {"SUCCEEDED", "DEAD"}:
        assert time.monotonic() < deadline, "the status view never showed both outcomes"
        time.sleep(0.2)
    listing = ["occurrences", "list", "--tenant", "acme", "--schedule", sid]
    rows = cli(env, *listing)[1]
    assert [r["occurrence_id"] for r in rows] == [second["occurrence_id"], first["occurrence_id"]]  # newest first
    assert [r["source"] for r in rows] == ["views", "views"] and all(r["attempts"] == 1 for r in rows)
    assert all(r["lag_ms"] is not None for r in rows)
    assert [r["occurrence_id"] for r in cli(env, *listing, "--status", "succeeded")[1]] == [first["occurrence_id"]]
    assert [r["occurrence_id"] for r in cli(env, *listing, "--since", str(second["scheduled_for_ms"]))[1]] == \
        [second["occurrence_id"]]
    assert cli(env, "occurrences", "list", "--tenant", "globex", "--schedule", sid)[0] == 3
    table = cli_text(env, *listing, "--database-url", "postgresql://127.0.0.1:1/none")
    assert table.returncode == 0 and table.stdout.splitlines()[0].split()[:2] == ["OCCURRENCE", "SCHEDULED"]
    assert len(table.stdout.splitlines()) == 3 and "the audit ledger did not answer" in table.stderr

    with psycopg.connect(audit_postgres, autocommit=True) as conn:
        ensure_tables(conn, env.prefix)
        sink_topics(env.bootstrap, env.prefix, ["acme"], conn, schema_name(env.prefix), idle_s=1.0)
    code, ledger_rows = cli(env, *listing, "--database-url", audit_postgres)
    assert code == 0 and [r["source"] for r in ledger_rows] == ["ledger", "ledger"], ledger_rows
    assert [(r["occurrence_id"], r["status"]) for r in ledger_rows] == [(second["occurrence_id"], "DEAD"),
                                                                        (first["occurrence_id"], "SUCCEEDED")]
    assert all(r["attempts"] == 1 and r["lag_ms"] is not None for r in ledger_rows)
    code, dead = cli(env, *listing, "--database-url", audit_postgres, "--status", "DEAD")
    assert [r["occurrence_id"] for r in dead] == [second["occurrence_id"]]


def test_list_pages_as_the_http_api_does_and_get_shows_durations_the_human_way(env):
    tenant = f"page{uuid.uuid4().hex[:6]}"
    env.plane.tenants.register(tenant)
    for sid in ("p1", "p2", "p3"):
        env.plane.client.create(tenant, make_spec("CRON", "0 9 * * *", max_lateness_ms=600_000), schedule_id=sid)
    code, page = cli(env, "schedules", "list", "--tenant", tenant, "--limit", "2")
    assert code == 0 and [s["schedule_id"] for s in page["schedules"]] == ["p1", "p2"] and page["next_after"] == "p2"
    code, page = cli(env, "schedules", "list", "--tenant", tenant, "--limit", "2", "--after", "p2")
    assert [s["schedule_id"] for s in page["schedules"]] == ["p3"] and page["next_after"] is None
    assert len(cli(env, "schedules", "list", "--tenant", tenant)[1]) == 3  # without --limit: every one, a list
    table = cli_text(env, "schedules", "list", "--tenant", tenant, "--limit", "1")
    assert table.stdout.startswith("p1  ACTIVE") and table.stderr.strip() == "next page: --after p1"
    lines = cli_text(env, "schedules", "list", "--tenant", tenant, "--limit", "2", "-o", "jsonl").stdout.splitlines()
    assert [json.loads(line)["schedule_id"] for line in lines] == ["p1", "p2"]
    assert cli_text(env, "schedules", "list", "--tenant", tenant, "--limit", "0").returncode == 2
    shown = cli_text(env, "schedules", "get", "--tenant", tenant, "p1").stdout
    assert "  max_lateness_ms: 10m" in shown and "  lease_ms: 30s" in shown


def test_trigger_overlap_policy_runs_one_now_although_one_still_runs(env):
    """SKIP_IF_RUNNING skips a trigger while an occurrence runs; `--overlap-policy ALLOW` sends it anyway. The
    occurrences of one schedule share a partition, in order: the second one read is the ALLOW one, so the
    skipped trigger never went out."""
    sid = f"overlap-{uuid.uuid4().hex[:6]}"
    assert cli(env, "schedules", "create", "--tenant", "acme", "--id", sid, "--cron", "0 0 1 1 *",
               "--overlap-policy", "skip_if_running")[0] == 0
    reader = env.occurrences(("acme",))
    try:
        assert cli(env, "schedules", "trigger", "--tenant", "acme", sid)[0] == 0
        first = next(r.record for r in reader.until(lambda rs: any(r.record["schedule_id"] == sid for r in rs),
                                                    timeout=20) if r.record["schedule_id"] == sid)
        FakeWorker(env.bootstrap, env.prefix).send(first, "STARTED", str(uuid.uuid4()))
        deadline = time.monotonic() + 20
        while cli(env, "occurrences", "get", "--tenant", "acme", first["occurrence_id"])[1].get("state") != "RUNNING":
            assert time.monotonic() < deadline, "the occurrence never ran"
            time.sleep(0.2)
        assert cli(env, "schedules", "trigger", "--tenant", "acme", sid)[0] == 0  # skipped: one runs
        code, forced = cli(env, "schedules", "trigger", "--tenant", "acme", sid, "--overlap-policy", "allow")
        assert code == 0
        found = reader.until(lambda rs: sum(r.record["schedule_id"] == sid for r in rs) >= 2, timeout=20)
    finally:
        reader.close()
    mine = [r.record for r in found if r.record["schedule_id"] == sid]
    assert mine[1]["scheduled_for_ms"] == forced["next_fires_ms"][0]
