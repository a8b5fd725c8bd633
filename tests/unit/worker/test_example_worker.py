"""examples/idempotent_worker.py charges once per occurrence_id, and classifies bad payloads."""
from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path

import pytest

from scheduler.worker import AttemptContext, Occurrence, PermanentError

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "idempotent_worker.py"


@pytest.fixture
def example(tmp_path, monkeypatch):
    monkeypatch.setenv("BILLING_DB", str(tmp_path / "billing.db"))
    spec = importlib.util.spec_from_file_location("idempotent_worker", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def occurrence(payload: bytes, occurrence_id: str = "s/v1/0") -> Occurrence:
    return Occurrence.from_record({"occurrence_id": occurrence_id, "schedule_id": "s", "tenant": "billing",
                                   "schedule_version": 1, "scheduled_for_ms": 0, "available_at_ms": 0,
                                   "priority": "NORMAL", "payload": payload})


def test_a_redelivered_occurrence_charges_once(example, tmp_path):
    order = b'{"customer": "c1", "cents": 500}'
    for _ in range(3):
        example.charge(occurrence(order), AttemptContext.fresh())
    example.charge(occurrence(order, "s/v1/60000"), AttemptContext.fresh())
    rows = sqlite3.connect(tmp_path / "billing.db").execute("SELECT occurrence_id, cents FROM charges").fetchall()
    assert sorted(rows) == [("s/v1/0", 500), ("s/v1/60000", 500)]


def test_a_bad_payload_is_a_permanent_error(example):
    with pytest.raises(PermanentError):
        example.charge(occurrence(b"not json"), AttemptContext.fresh())
