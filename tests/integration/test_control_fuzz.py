"""Fuzzing the served OpenAPI document with schemathesis: no input makes the API answer 500.

Nothing is stubbed: the app's commands go to a running scheduler on the real broker and its reads come
from the real views. Calls use an admin key with the path's tenant set to a registered one, so the
generated bodies reach the command path instead of stopping at the tenant check. Bounded: a few
examples per operation (under a minute in all).
"""
from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from control_env import control_env


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
