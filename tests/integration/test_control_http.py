"""The HTTP API against a running scheduler on the real broker: operations, errors and tenant isolation."""
from __future__ import annotations

import time
import uuid

import pytest
from control_env import control_env
from fastapi.testclient import TestClient

SPEC = {"kind": "CRON", "expression": "0 * * * *", "time_zone": "Europe/Paris", "payload": "{}"}


@pytest.fixture(scope="module")
def env(kafka_bootstrap, tmp_path_factory):
    yield from control_env(kafka_bootstrap, tmp_path_factory.mktemp("http"))


@pytest.fixture(scope="module")
def http(env):
    with TestClient(env.app()) as client:
        yield client


def auth(env, who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {env.keys[who]}"}


def create(http, env, tenant: str = "acme", **body) -> dict:
    schedule_id = f"h-{uuid.uuid4().hex[:8]}"
    response = http.post(f"/v1/tenants/{tenant}/schedules", headers=auth(env, tenant),
                         json={"schedule_id": schedule_id, "spec": SPEC, **body})
    assert response.status_code == 201, response.text
    return response.json()


def test_schedule_lifecycle_over_http(http, env):
    a = auth(env, "acme")
    created = create(http, env)
    sid = created["schedule"]["schedule_id"]
    assert created["result"]["version"] == 1 and created["schedule"]["spec"]["payload"] == "{}"
    got = http.get(f"/v1/tenants/acme/schedules/{sid}", headers=a)
    assert got.status_code == 200 and got.headers["ETag"] == '"1"'
    listed = http.get("/v1/tenants/acme/schedules", headers=a, params={"state": "ACTIVE", "limit": 1000}).json()
    assert sid in [s["schedule_id"] for s in listed["schedules"]]

    dry = http.patch(f"/v1/tenants/acme/schedules/{sid}", headers=a, params={"dry_run": "true", "count": 3},
                     json={"spec": {"expression": "30 * * * *"}})
    assert dry.status_code == 200 and len(dry.json()["before_ms"]) == 3
    assert dry.json()["before_ms"] != dry.json()["after_ms"]
    assert http.get(f"/v1/tenants/acme/schedules/{sid}", headers=a).json()["version"] == 1

    patched = http.patch(f"/v1/tenants/acme/schedules/{sid}", headers={**a, "If-Match": '"1"'},
                         json={"spec": {"expression": "30 * * * *"}})
    assert patched.status_code == 200 and patched.json()["schedule"]["spec"]["expression"] == "30 * * * *"
    stale = http.put(f"/v1/tenants/acme/schedules/{sid}", headers={**a, "If-Match": '"1"'}, json={"spec": SPEC})
    assert stale.status_code == 412 and stale.json()["code"] == "VERSION_CONFLICT"
    assert http.post(f"/v1/tenants/acme/schedules/{sid}/pause", headers=a).json()["schedule"]["state"] == "PAUSED"
    assert http.post(f"/v1/tenants/acme/schedules/{sid}/resume", headers=a).json()["schedule"]["state"] == "ACTIVE"
    preview = http.get(f"/v1/tenants/acme/schedules/{sid}/preview", headers=a, params={"count": 4}).json()
    assert len(preview["next_fires_ms"]) == 4 and all(ms % 3_600_000 == 1_800_000 for ms in preview["next_fires_ms"])
    trigger = http.post(f"/v1/tenants/acme/schedules/{sid}/trigger", headers=a)
    assert trigger.status_code == 200 and len(trigger.json()["result"]["next_fires_ms"]) == 1
    now = int(time.time() * 1000)
    backfill = http.post(f"/v1/tenants/acme/schedules/{sid}/backfill", headers=a,
                         json={"from_ms": now - 3 * 3_600_000, "to_ms": now})
    assert backfill.status_code == 200 and len(backfill.json()["result"]["next_fires_ms"]) == 3
    canceled = http.delete(f"/v1/tenants/acme/schedules/{sid}", headers=a)
    assert canceled.status_code == 200 and canceled.json()["schedule"]["state"] == "CANCELED"
    again = http.post(f"/v1/tenants/acme/schedules/{sid}/resume", headers=a)
    assert again.status_code == 409 and again.json()["code"] == "INVALID_STATE"


def test_idempotency_key_header_makes_a_repeated_create_a_no_op(http, env):
    headers = {**auth(env, "acme"), "Idempotency-Key": f"k-{uuid.uuid4()}"}
    first = http.post("/v1/tenants/acme/schedules", headers=headers, json={"spec": SPEC})
    second = http.post("/v1/tenants/acme/schedules", headers=headers, json={"spec": SPEC})
    assert first.status_code == second.status_code == 201
    assert first.json()["schedule"]["schedule_id"] == second.json()["schedule"]["schedule_id"]
    assert second.json()["schedule"]["version"] == 1


@pytest.mark.parametrize("body, status, code", [
    ({"spec": {**SPEC, "expression": "61 * * * *"}}, 422, "INVALID_SPEC"),
    ({"spec": {**SPEC, "time_zone": "Mars/Olympus"}}, 422, "UNKNOWN_ZONE"),
    ({"spec": {**SPEC, "kind": "WEEKLY"}}, 422, "INVALID_REQUEST"),
    ({"spec": {**SPEC, "max_attempts": 2**40}}, 422, "INVALID_REQUEST"),
    ({"spec": SPEC, "surprise": 1}, 422, "INVALID_REQUEST"),
    ({"spec": {**SPEC, "payload_base64": "!!"}}, 422, "INVALID_SPEC"),
])
def test_bad_input_is_a_4xx_with_a_json_code(http, env, body, status, code):
    response = http.post("/v1/tenants/acme/schedules", headers=auth(env, "acme"), json=body)
    assert (response.status_code, response.json()["code"]) == (status, code)
    assert response.json()["message"]


def test_errors_are_json_with_code_and_message(http, env):
    a = auth(env, "acme")
    assert http.get("/v1/tenants/acme/schedules/nope", headers=a).json()["code"] == "UNKNOWN_SCHEDULE"
    assert http.get("/v1/tenants/acme/schedules", headers={"Authorization": "Bearer sk_x_y"}).status_code == 401
    assert http.get("/v1/tenants/acme/schedules").json()["code"] == "UNAUTHENTICATED"
    assert http.get("/v1/tenants/acme/occurrences/" + "0" * 32, headers=a).status_code == 404
    assert http.post("/v1/tenants/acme/occurrences/" + "0" * 32 + "/rerun", headers=a).status_code == 404
    dup = http.post("/v1/tenants/acme/schedules", headers=a, json={"schedule_id": create(http, env)["schedule"]
                                                                   ["schedule_id"], "spec": SPEC})
    assert (dup.status_code, dup.json()["code"]) == (409, "ALREADY_EXISTS")
    assert http.post("/v1/tenants", headers=a, json={"tenant": "x"}).status_code == 403
    assert http.put("/v1/tenants/acme/schedules/nope", headers={**a, "If-Match": "abc"},
                    json={"spec": SPEC}).status_code == 422
    too_many = http.post("/v1/tenants/acme/preview", headers=a, json={"spec": SPEC, "count": 5000})
    assert too_many.status_code == 422
    assert len(http.post("/v1/tenants/acme/preview", headers=a, json={"spec": SPEC, "count": 2}).json()
               ["next_fires_ms"]) == 2


def test_tenant_admin_register_list_quota_delete(http, env):
    admin = auth(env, "admin")
    name = f"t{uuid.uuid4().hex[:6]}"
    registered = http.post("/v1/tenants", headers=admin, json={"tenant": name, "max_active_schedules": 3})
    assert registered.status_code == 201 and registered.json()["max_active_schedules"] == 3
    assert http.post("/v1/tenants", headers=admin, json={"tenant": name}).status_code == 409
    assert name in [t["tenant"] for t in http.get("/v1/tenants", headers=admin).json()["tenants"]]
    assert [t["tenant"] for t in http.get("/v1/tenants", headers=auth(env, "acme")).json()["tenants"]] == ["acme"]
    assert http.patch(f"/v1/tenants/{name}", headers=admin, json={"trigger_rate_per_s": 5}).json()[
        "trigger_rate_per_s"] == 5.0
    assert http.post("/v1/tenants", headers=admin, json={"tenant": "bad/name"}).status_code == 422
    sid = http.post(f"/v1/tenants/{name}/schedules", headers=admin, json={"spec": SPEC}).json()["schedule"][
        "schedule_id"]
    refused = http.delete(f"/v1/tenants/{name}", headers=admin)
    assert (refused.status_code, refused.json()["code"]) == (409, "TENANT_HAS_SCHEDULES")
    http.delete(f"/v1/tenants/{name}/schedules/{sid}", headers=admin)
    assert http.delete(f"/v1/tenants/{name}", headers=admin).status_code == 204
    assert http.get(f"/v1/tenants/{name}", headers=admin).status_code == 404
    unregistered = http.post(f"/v1/tenants/{name}/schedules", headers=admin, json={"spec": SPEC})
    assert unregistered.status_code == 404


def test_another_tenants_key_gets_404_everywhere_and_changes_nothing(http, env):
    created = create(http, env, "acme")
    sid = created["schedule"]["schedule_id"]
    before = http.get(f"/v1/tenants/acme/schedules/{sid}", headers=auth(env, "acme")).json()
    now = int(time.time() * 1000)
    g = auth(env, "globex")
    calls = []
    for tenant in ("acme", "globex"):  # acme's path with globex's key, and globex's own path with acme's id
        base = f"/v1/tenants/{tenant}/schedules/{sid}"
        calls += [
            ("GET", base, None), ("PUT", base, {"spec": SPEC}), ("PATCH", base, {"spec": {"payload": "x"}}),
            ("PUT", base + "?dry_run=true", {"spec": SPEC}), ("DELETE", base, None),
            ("POST", base + "/pause", None), ("POST", base + "/resume", None), ("POST", base + "/trigger", None),
            ("POST", base + "/backfill", {"from_ms": now - 7_200_000, "to_ms": now}),
            ("GET", base + "/preview", None),
        ]
    calls += [("GET", "/v1/tenants/acme/schedules", None), ("POST", "/v1/tenants/acme/schedules", {"spec": SPEC}),
              ("GET", "/v1/tenants/acme", None), ("PATCH", "/v1/tenants/acme", {"max_concurrency": 1}),
              ("DELETE", "/v1/tenants/acme", None), ("POST", "/v1/tenants/acme/preview", {"spec": SPEC}),
              ("GET", "/v1/tenants/acme/occurrences/" + "0" * 32, None),
              ("POST", "/v1/tenants/acme/occurrences/" + "0" * 32 + "/rerun", None)]
    for method, path, body in calls:
        response = http.request(method, path, headers=g, json=body)
        assert response.status_code == 404, (method, path, response.status_code, response.text)
    after = http.get(f"/v1/tenants/acme/schedules/{sid}", headers=auth(env, "acme")).json()
    assert after == before
    assert sid not in [s["schedule_id"] for s in
                       http.get("/v1/tenants/globex/schedules", headers=g, params={"limit": 1000}).json()["schedules"]]
    assert env.plane.tenants.get("acme")["max_concurrency"] != 1


def test_openapi_document_is_served(http):
    doc = http.get("/openapi.json").json()
    assert "/v1/tenants/{tenant}/schedules/{schedule_id}/backfill" in doc["paths"]
    assert "HTTPBearer" in doc["components"]["securitySchemes"]


def test_http_preview_accepts_rrule_and_month_end(http, env):
    a = auth(env, "acme")
    spec = {"kind": "RRULE", "time_zone": "Europe/Paris", "month_end": "CLAMP",
            "expression": "DTSTART:20260131T090000 RRULE:FREQ=MONTHLY EXDATE:20260331"}
    after_ms = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    got = http.post("/v1/tenants/acme/preview", headers=a, json={"spec": spec, "count": 3, "after_ms": after_ms})
    assert got.status_code == 200, got.text
    # Jan 31, Feb 28 (clamped), Mar 31 excluded, Apr 30 (clamped): 09:00 Paris.
    assert got.json()["next_fires_ms"] == [1_769_846_400_000, 1_772_265_600_000, 1_777_532_400_000]
    bad = http.post("/v1/tenants/acme/preview", headers=a,
                    json={"spec": {**spec, "expression": "DTSTART:20260131T090000 RRULE:FREQ=MONTHLY;BYSETPOS=9"}})
    assert bad.status_code == 422 and "BYSETPOS" in bad.json()["message"]
