"""Strict tenancy (the default of `scheduler run`): a command for a tenant that is not registered is
rejected with UNKNOWN_TENANT through every door, and nothing of that tenant is created on the broker."""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient
from control_env import cli, control_env, hourly
from fastapi.testclient import TestClient

from scheduler.control.client import NotFound


@pytest.fixture(scope="module")
def env(kafka_bootstrap, tmp_path_factory):
    yield from control_env(kafka_bootstrap, tmp_path_factory.mktemp("tenancy"))


def topics_of(env, tenant: str) -> list[str]:
    names = AdminClient({"bootstrap.servers": env.bootstrap}).list_topics(timeout=10).topics
    return sorted(n for n in names if n.startswith(f"{env.prefix}.") and n.split(".")[2:3] == [tenant])


def test_a_create_for_an_unregistered_tenant_is_rejected_through_the_client_the_cli_and_http(env):
    ghost = f"ghost{uuid.uuid4().hex[:6]}"
    with pytest.raises(NotFound) as rejected:
        env.plane.client.create(ghost, hourly(), schedule_id="s-client")
    assert rejected.value.reason == "UNKNOWN_TENANT" and ghost in rejected.value.message

    code, out = cli(env, "schedules", "create", "--tenant", ghost, "--cron", "0 9 * * *", "--id", "s-cli")
    assert code == 3 and out["code"] == "UNKNOWN_TENANT", out

    with TestClient(env.app()) as http:
        response = http.post(f"/v1/tenants/{ghost}/schedules", headers={"Authorization": f"Bearer {env.keys['admin']}"},
                             json={"schedule_id": "s-http", "spec": {"kind": "CRON", "expression": "0 9 * * *"}})
    assert response.status_code == 404 and response.json()["code"] == "UNKNOWN_TENANT", response.text

    # The engine creates a tenant's topics before it produces the tenant's first record, in the turn that
    # answers the command: with the rejections answered, none of them may exist.
    assert topics_of(env, ghost) == []
    assert env.plane.schedules.wait_caught_up(30)
    assert all(env.plane.schedules.get(ghost, sid) is None for sid in ("s-client", "s-cli", "s-http"))


def test_a_tenant_registered_just_before_its_first_command_is_accepted(env):
    late = f"late{uuid.uuid4().hex[:6]}"
    env.plane.tenants.register(late)
    created = env.plane.client.create(late, hourly(), schedule_id="first")
    assert created["status"] == "ACCEPTED"
    assert topics_of(env, late) != []
