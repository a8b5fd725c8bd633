"""`scheduler schedules|tenants|occurrences|api keys` as a script sees them: JSON output and exit codes."""
from __future__ import annotations

import uuid

import pytest

from control_env import cli, control_env
from scheduler.api.keys import KeyStore
from scheduler.cli_support import DeprecatedAlias


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
