"""Fuzzing the served OpenAPI document with schemathesis: no input makes the API answer 500.

Nothing is stubbed: the app's commands go to a running scheduler on the real broker and its reads come
from the real views. Calls use an admin key with the path's tenant set to a registered one, so the
generated bodies reach the command path instead of stopping at the tenant check. Bounded: a few
examples per operation (under a minute in all). Specs on DST spring-forward days, which never fire when
every wall time is in the gap, are drawn on purpose (tests/pathological_specs.py).
"""
from __future__ import annotations

import time

import pytest
import schemathesis
from control_env import control_env
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from pathological_specs import never_fires, spring_forward_specs


@pytest.fixture(scope="module")
def env(kafka_bootstrap, tmp_path_factory):
    yield from control_env(kafka_bootstrap, tmp_path_factory.mktemp("fuzz"))


def test_no_input_makes_the_api_answer_500(env):
    schema = schemathesis.openapi.from_asgi("/openapi.json", env.app())
    headers = {"Authorization": f"Bearer {env.keys['admin']}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 18

    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def fuzz(case: schemathesis.Case) -> None:
            if "tenant" in (case.path_parameters or {}) and case.method != "DELETE":
                case.path_parameters["tenant"] = "acme"
            case.call_and_validate(headers=headers, checks=[not_a_server_error])

        fuzz()


def test_fuzz_spring_forward_specs_over_http_are_refused_exactly_when_they_never_fire(env):
    """Specs schemathesis would hardly draw: every fire in a DST gap is refused (INVALID_SPEC) within a
    second, by create and preview alike, instead of stalling the engine; the others are created."""
    headers = {"Authorization": f"Bearer {env.keys['admin']}"}
    with TestClient(env.app()) as http:
        @given(spec=spring_forward_specs())
        @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def fuzz(spec: dict) -> None:
            body = {"spec": {name: spec[name] for name in ("kind", "expression", "time_zone", "dst_gap")}}
            started = time.monotonic()
            preview = http.post("/v1/tenants/acme/preview", headers=headers, json={**body, "count": 3})
            created = http.post("/v1/tenants/acme/schedules", headers=headers, json=body)
            assert preview.status_code == 200, preview.text
            if never_fires(spec):
                assert time.monotonic() - started < 1.0
                assert preview.json()["next_fires_ms"] == []
                assert created.status_code == 422 and created.json()["code"] == "INVALID_SPEC", created.text
                assert created.json()["message"].startswith("expression: no fire")
            else:
                assert created.status_code == 201, created.text

        fuzz()
