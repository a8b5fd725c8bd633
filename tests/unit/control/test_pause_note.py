"""`schedules pause --note` (issue 33): the flag, the client's length check, `schedules get`'s line, and the
HTTP pause route's optional body, all without a broker (fakes stand in for the client and the view)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from scheduler.api.schedule_routes import ScheduleCommands, add_state_routes
from scheduler.cli import build_parser, main
from scheduler.control.client import ValidationError, make_spec
from scheduler.control.command_record import command_record
from scheduler.control.schedule_cli import _schedule_detail
from scheduler.engine.command_policy import admitted, decide
from scheduler.wire.limits import MAX_NOTE_LENGTH

NOW = 1_800_000_000_000


def test_pause_takes_a_note_and_resume_and_cancel_do_not(capsys):
    args = build_parser().parse_args(["schedules", "pause", "--tenant", "t", "s1", "--note", "upstream down"])
    assert (args.schedule_id, args.note, args.expected_version) == ("s1", "upstream down", None)
    assert build_parser().parse_args(["schedules", "pause", "--tenant", "t", "s1"]).note is None
    for verb in ("resume", "cancel"):
        with pytest.raises(SystemExit) as exit_:
            main(["schedules", verb, "--tenant", "t", "s1", "--note", "x"])
        assert exit_.value.code == 2


def test_the_client_refuses_a_note_over_the_limit_before_sending():
    assert command_record("PAUSE", "s1", "t", note="why")["note"] == "why"
    assert command_record("RESUME", "s1", "t")["note"] is None
    command_record("PAUSE", "s1", "t", note="x" * MAX_NOTE_LENGTH)
    with pytest.raises(ValidationError) as error:
        command_record("PAUSE", "s1", "t", note="x" * (MAX_NOTE_LENGTH + 1))
    assert error.value.reason == "INVALID_SPEC" and error.value.message.startswith("note:")


def _state(**fields: Any) -> dict[str, Any]:
    create = {"command_id": "c1", "type": "CREATE", "schedule_id": "s1", "tenant": "t", "issued_at_ms": NOW,
              "spec": make_spec("cron", "0 * * * *")}
    state, _ = admitted(decide(create, None, NOW).state, NOW)
    return {**state, **fields}


def test_schedules_get_shows_the_note_while_paused():
    assert _schedule_detail(_state(state="PAUSED", pause_note="upstream down")).splitlines()[-1] == \
        "  paused: upstream down"
    assert "paused:" not in _schedule_detail(_state())


class FakeClient:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def pause(self, tenant: str, schedule_id: str, expected_version: int | None = None, *,
              note: str | None = None) -> dict[str, Any]:
        self.calls.append((tenant, schedule_id, expected_version, note))
        return {"command_id": "c", "schedule_id": schedule_id, "command_type": "PAUSE", "status": "ACCEPTED",
                "version": 2, "next_fires_ms": [], "processed_at_ms": NOW}


@pytest.fixture()
def api() -> tuple[TestClient, FakeClient]:
    client = FakeClient()
    plane = SimpleNamespace(client=client, schedules=SimpleNamespace(wait_for_version=lambda *_: None))
    app = FastAPI()
    add_state_routes(app, plane, SimpleNamespace(tenant=str), ScheduleCommands(plane))  # type: ignore[arg-type]
    return TestClient(app), client


def test_the_pause_route_takes_an_optional_note(api):
    http, client = api
    assert http.post("/v1/tenants/t/schedules/s1/pause").status_code == 200
    assert http.post("/v1/tenants/t/schedules/s1/pause", json={"note": "why"}, headers={"If-Match": '"1"'}) \
        .status_code == 200
    assert http.post("/v1/tenants/t/schedules/s1/pause", json={}).status_code == 200
    assert client.calls == [("t", "s1", None, None), ("t", "s1", 1, "why"), ("t", "s1", None, None)]
    for bad in ({"note": "x" * (MAX_NOTE_LENGTH + 1)}, {"reason": "why"}):
        assert http.post("/v1/tenants/t/schedules/s1/pause", json=bad).status_code == 422
    assert len(client.calls) == 3


def test_the_console_asks_for_a_note_on_pause_and_shows_it_while_paused():
    from scheduler.console.web import _templates

    templates = _templates()
    confirm = templates.get_template("confirm.html")
    assert 'maxlength="1000"' in confirm.render(what="Pause", note_length=MAX_NOTE_LENGTH)
    assert 'name="note"' not in confirm.render(what="Resume", note_length=None)
    state = _state(state="PAUSED", pause_note="<b>upstream</b> down")
    page = templates.get_template("schedule.html").render(tenant="t", s=state, spec=state["spec"], fires=[])
    assert '<p class="pause-note" id="pause-note">Paused: &lt;b&gt;upstream&lt;/b&gt; down</p>' in page
