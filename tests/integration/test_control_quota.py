"""The max-active-schedules quota is exact under concurrent CREATEs spread over every partition."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from control_env import control_env, hourly

from scheduler.control.client import QuotaExceeded


@pytest.fixture(scope="module")
def env(kafka_bootstrap, tmp_path_factory):
    yield from control_env(kafka_bootstrap, tmp_path_factory.mktemp("quota"))


def test_200_concurrent_creates_with_a_quota_of_100_accept_exactly_100(env):
    env.plane.tenants.register("capped", max_active_schedules=100)
    client = env.plane.client

    def create(n: int) -> str:
        try:
            client.create("capped", hourly(), schedule_id=f"capped-{n}")
            return "ACCEPTED"
        except QuotaExceeded:
            return "QUOTA"

    with ThreadPoolExecutor(max_workers=50) as pool:
        outcomes = list(pool.map(create, range(200)))
    assert outcomes.count("ACCEPTED") == 100 and outcomes.count("QUOTA") == 100
    assert len(client.list("capped", state="ACTIVE")) == 100
    accepted = [n for n, outcome in enumerate(outcomes) if outcome == "ACCEPTED"]

    client.cancel("capped", f"capped-{accepted[0]}")  # a canceled schedule gives its slot back
    rejected = outcomes.index("QUOTA")
    client.create("capped", hourly(), schedule_id=f"capped-again-{rejected}")
    with pytest.raises(QuotaExceeded):
        client.create("capped", hourly(), schedule_id="capped-one-too-many")
