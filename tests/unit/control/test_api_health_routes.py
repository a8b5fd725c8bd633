"""The API's probes and metrics: no key needed, readiness from its views, requests counted by route template."""
from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler.api.health_routes import add_health_routes


class FakeView:
    def __init__(self, topic: str, caught_up: bool) -> None:
        self.topic = topic
        self.caught_up = caught_up

    def wait_caught_up(self, timeout: float = 30.0) -> bool:
        return self.caught_up


def test_probes_and_metrics_answer_without_a_key_and_stay_out_of_the_openapi() -> None:
    app = FastAPI()
    views = [FakeView("sched.schedules", True), FakeView("sched.tenants", False)]
    add_health_routes(app, lambda: views)

    @app.get("/v1/things/{thing_id}")
    def thing(thing_id: str) -> dict:
        return {"id": thing_id}

    client = TestClient(app)
    assert (client.get("/healthz").status_code, client.get("/healthz").text) == (200, "serving\n")
    not_ready = client.get("/readyz")
    assert (not_ready.status_code, not_ready.text) == (503, "views not caught up: sched.tenants\n")
    views[1].caught_up = True
    assert client.get("/readyz").status_code == 200
    for thing_id in ("a", "b"):
        client.get(f"/v1/things/{thing_id}")
    client.get("/nowhere")
    text = client.get("/metrics").text
    assert 'scheduler_api_requests_total{method="GET",route="/v1/things/{thing_id}",status="200"} 2.0' in text
    assert 'scheduler_api_requests_total{method="GET",route="unmatched",status="404"} 1.0' in text
    assert 'scheduler_api_request_seconds_count{method="GET",route="/readyz"} 2.0' in text
    assert not {"/healthz", "/readyz", "/metrics"} & set(client.get("/openapi.json").json()["paths"])
