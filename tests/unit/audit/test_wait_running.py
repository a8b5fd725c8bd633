"""`wait_running`'s reading of the Connect REST answers, scripted (the real worker: tests/fixtures_audit.py)."""
from __future__ import annotations

from typing import Any

import pytest

from scheduler.audit.connectors import ConnectorError, wait_running
from scheduler.connect.rest import ConnectRest, ConnectRestError

RUNNING = {"connector": {"state": "RUNNING"}, "tasks": [{"id": 0, "state": "RUNNING"}]}


class ScriptedRest(ConnectRest):
    """Answers the HTTP calls from a script, one answer per call; the last answer repeats."""

    def __init__(self, answers: list[dict[str, Any] | ConnectRestError]) -> None:
        super().__init__("http://127.0.0.1:1")
        self.answers = answers
        self.calls = 0

    def call(self, method: str, path: str, body: Any = None) -> Any:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(answer, ConnectRestError):
            raise answer
        return answer


def not_reported(name: str) -> ConnectRestError:
    return ConnectRestError(f"GET /connectors/{name}/status: HTTP 404: No status found for connector {name}", 404)


def test_a_connector_whose_status_is_not_reported_yet_is_waited_for_not_failed() -> None:
    rest = ScriptedRest([not_reported("c"), not_reported("c"), RUNNING])
    wait_running(rest, ["c"], timeout=10)
    assert rest.calls == 3


def test_a_connector_that_never_reports_a_status_fails_at_the_deadline_saying_so() -> None:
    rest = ScriptedRest([not_reported("c")])
    with pytest.raises(ConnectorError, match="not RUNNING after 1s: no status reported"):
        wait_running(rest, ["c"], timeout=1)
    assert rest.calls > 1


def test_a_failed_task_raises_with_its_trace() -> None:
    failed = {"connector": {"state": "RUNNING"}, "tasks": [{"id": 0, "state": "FAILED", "trace": "boom\nat x"}]}
    with pytest.raises(ConnectorError, match="FAILED:\nboom\nat x"):
        wait_running(ScriptedRest([failed]), ["c"], timeout=10)


def test_an_error_other_than_not_found_is_not_swallowed() -> None:
    with pytest.raises(ConnectRestError, match="HTTP 401"):
        wait_running(ScriptedRest([ConnectRestError("HTTP 401: unauthorized", 401)]), ["c"], timeout=10)
