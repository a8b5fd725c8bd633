"""API keys shared by every API server (the compacted <prefix>.api-keys topic): two real `scheduler api`
processes, a key created through one works on the other, and a revocation through one is refused by both."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from api_harness import ApiServer
from engine_harness import REPO, ensure_layout

from helpers.waiting import wait_until


def admin_key(bootstrap: str, prefix: str) -> str:
    made = subprocess.run([sys.executable, "-m", "scheduler", "api", "keys", "create", "--admin", "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "SCHEDULER_TOPIC_PREFIX": prefix})
    assert made.returncode == 0, made.stderr
    return json.loads(made.stdout)["key"]


@pytest.fixture
def servers(kafka_bootstrap, unique_prefix, tmp_path) -> Iterator[tuple[ApiServer, ApiServer]]:
    ensure_layout(kafka_bootstrap, unique_prefix)
    pair = (ApiServer(kafka_bootstrap, unique_prefix, tmp_path / "api1.log"),
            ApiServer(kafka_bootstrap, unique_prefix, tmp_path / "api2.log"))
    try:
        for server in pair:
            server.wait_ready()
        yield pair
    finally:
        for server in pair:
            server.stop()


def status(server: ApiServer, key: str) -> int:
    return httpx.get(server.url() + "/v1/tenants", headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code


def test_a_key_created_through_one_server_works_on_the_other_and_a_revocation_reaches_both(
        servers, kafka_bootstrap, unique_prefix):
    one, two = servers
    admin = {"Authorization": f"Bearer {admin_key(kafka_bootstrap, unique_prefix)}"}
    wait_until(lambda: status(one, admin["Authorization"][7:]) == 200, 10, "the CLI's admin key on server one")
    made = httpx.post(one.url() + "/v1/api-keys", headers=admin, json={"tenant": "acme"}, timeout=30)
    assert made.status_code == 201, made.text
    key = made.json()["key"]
    assert status(one, key) == 200
    wait_until(lambda: status(two, key) == 200, 5, "the new key on server two")

    listed = httpx.get(two.url() + "/v1/api-keys", headers=admin, timeout=30).json()["keys"]
    mine = [k for k in listed if k["key_id"] == made.json()["key_id"]]
    assert mine and mine[0]["tenant"] == "acme" and set(mine[0]) == {"key_id", "tenant", "admin", "created_at_ms"}
    assert key.split("_", 2)[2] not in json.dumps(listed)
    tenant_key = {"Authorization": f"Bearer {key}"}
    assert httpx.get(two.url() + "/v1/api-keys", headers=tenant_key, timeout=30).status_code == 403

    revoked = httpx.delete(one.url() + f"/v1/api-keys/{made.json()['key_id']}", headers=admin, timeout=30)
    assert revoked.status_code == 204, revoked.text
    started = time.monotonic()
    wait_until(lambda: status(one, key) == 401 and status(two, key) == 401, 5, "both servers to refuse the key")
    print(f"revocation refused by both servers after {time.monotonic() - started:.2f} s")
    assert status(two, admin["Authorization"][7:]) == 200, "other keys are untouched"


def test_the_cli_creates_lists_and_revokes_shared_keys(kafka_bootstrap, unique_prefix):
    ensure_layout(kafka_bootstrap, unique_prefix)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "SCHEDULER_TOPIC_PREFIX": unique_prefix}

    def cli(*args: str) -> tuple[int, object]:
        run = subprocess.run([sys.executable, "-m", "scheduler", "api", "keys", *args, "--json"], cwd=REPO,
                             capture_output=True, text=True, timeout=120, env=env)
        return run.returncode, json.loads(run.stdout) if run.stdout.strip() else None

    code, made = cli("create", "--tenant", "acme")
    assert code == 0 and made["key"].startswith("sk_")
    key_id = made["key"].split("_")[1]
    code, listed = cli("list")
    assert code == 0 and listed == [{"key_id": key_id, "tenant": "acme", "admin": False,
                                     "created_at_ms": listed[0]["created_at_ms"]}]
    assert cli("revoke", key_id)[0] == 0
    assert cli("list") == (0, [])
    assert cli("revoke", key_id)[0] == 3, "an unknown key id is not found"
